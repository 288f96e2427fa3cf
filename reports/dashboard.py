"""The dashboard: ONE self-contained HTML file that opens offline.

plotly.js (the copy that ships with plotly, put in once), the style sheet and the scripts are
inline, the few images (t-SNE, Figure 5) base64 PNG ``data:`` URIs; there is no external
resource. Every string that comes from a run, a config or a manifest is HTML-escaped (and
`dashboard_plots.plotly_text`-escaped where plotly.js draws it). At the top, titled by the
sweep's name, the verdict per data set and label setting (`curve_stats.verdicts`: a win only at a
paired p below alpha). Per data set and curve (label fractions, or binary tau):
the group table (paper Figure 1 / Table 2: mean ± std over seeds, one-sided Welch p-value
against the validation-best GBDT), the crossover, the group curves (plotly:
`reports.dashboard_plots`), every model's table and
curves (Table 1 / Figure 3), and which member stood for each group; then, when the sweep has
variants, the tuned table (paper A.2.3: the validation-best variant of each model); t-SNE plots
(Figure 4) and the cells that failed or did not finish.
"""

from __future__ import annotations

import base64
import math
from html import escape

from scarce_ltr.core.extras import require
from scarce_ltr.core.metrics import compared_metrics
from scarce_ltr.reports import choice_summary, interactive, where
from scarce_ltr.reports.number_text import fmt, fmt_p, mean_pm_std, paired_text
from scarce_ltr.reports.report_text import curve_name, verdict_text
from scarce_ltr.reports.stats import best_in_column

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;
max-width:1400px}
h1{font-size:1.5em}h2{border-bottom:2px solid #ccc;padding-bottom:4px;margin-top:2em}
h3{margin-top:1.4em}
table{border-collapse:collapse;margin:8px 0 16px;font-size:0.9em}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right;vertical-align:top}
th{background:#f0f0f0}td.name,th.name{text-align:left}
small{color:#666}.sig{color:#b00}.note{color:#444;font-size:0.9em;max-width:70em}
img{max-width:100%;border:1px solid #ddd;margin:6px 0}
.err{font-family:monospace;font-size:0.85em;text-align:left;white-space:pre-wrap}
#verdicts{background:#f7f7f2;border:1px solid #ccc;padding:6px 14px;margin:10px 0}
#verdicts li{margin:2px 0}.win{color:#060;font-weight:bold}
.ltr-plot{margin:8px 0 18px}
"""


def render(report: dict) -> str:
    """The whole page; ``report`` is what `reports.report.build` assembles."""
    k, alpha = report["k"], report["alpha"]
    parts = [_header(report), _notes(report.get("notes") or [])]
    for i, section in enumerate(report["sections"]):
        parts.append(_section(section, i, k=k, select_k=report["select_k"], alpha=alpha))
    tuned = report["summary"].get("tuned") or []
    parts.append(_tuned(tuned, k=k, select_k=report["select_k"], alpha=alpha))
    parts.append(choice_summary.html(report.get("choice", {}).get("settings") or []))
    parts.append(where.html(report.get("where") or []))
    if report.get("tsne_png") or report.get("tsne_errors"):
        parts.append("<h2>t-SNE of item embeddings (test QGs)</h2>")
        if report.get("tsne_png"):
            parts.append(_img(report["tsne_png"], "t-SNE of item embeddings"))
        parts += [f"<p class='err'>{escape(e)}</p>" for e in report.get("tsne_errors", [])]
    for figure in report.get("outlier_figures", []):  # paper Figure 5
        parts.append(f"<h2>Outlier QGs of {escape(figure['dataset'])}: the histogram rule</h2>")
        if figure["png"]:
            parts.append(_img(figure["png"], f"outlier histogram {figure['dataset']}"))
        if figure.get("note"):
            parts.append(f"<p class='note'>{escape(figure['note'])}</p>")
    parts.append(_problems(report["problems"]))
    empty = {"runs": [], "colours": {}, "k": k}
    parts.append(interactive.render(report.get("interactive") or empty))
    body = "\n".join(parts)
    title = escape(report["title"])
    return (
        f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{CSS}</style>\n<script>{_plotly_js()}</script></head><body>\n{body}\n"
        "</body></html>\n"
    )


def _plotly_js() -> str:
    """The minified plotly.js of the installed plotly, for one ``<script>`` element."""
    source = require("plotly.offline", "the report's dashboard").get_plotlyjs()
    if "</script" in source.lower():  # it would end the element early
        raise RuntimeError("plotly.js contains '</script'; it cannot be inlined")
    return source


def _header(report: dict) -> str:
    counts = ", ".join(f"{n} {status}" for status, n in report["status_counts"].items())
    k, sk = report["k"], report["select_k"]
    units = escape(report.get("units", "seeds"))
    return f"""<h1>{escape(report["title"])}</h1>
{_verdicts(report)}
<p>Source: <code>{escape(report["source"])}</code> &middot; generated {escape(report["generated"])}
&middot; cells: {escape(counts)} &middot; validation labels: {escape(report["val_labels"])}
&middot; empty-QG policy: {escape(report["policy"])}</p>
<p class="note">Numbers are test NDCG@{k} and Outlier-NDCG@{k} (NDCG over the test QGs flagged
as outliers): mean &plusmn; sample standard deviation over {units} (n). MRR and MAP
(relevant: label &gt; 0) and ERR@{k} (graded) follow for the same members and seeds; they choose
nothing and carry no p-value. A group (GBDT, no
pretrain DL, pretrained DL, hybrid) is represented per data set and label setting by its
<b>validation-best member</b>: the member model with the highest validation NDCG@{sk} averaged
over its seeds (ties: more seeds, then name); test numbers never take part in the choice, and the
member is the same for every seed of that setting. <i>p</i> is the one-sided Welch t-test
(scipy <code>ttest_ind(equal_var=False, alternative="greater")</code>) of the row against the
validation-best GBDT of the same setting; &Delta; is the <b>paired</b> margin against that GBDT:
the mean &plusmn; std of the per-unit differences over the {units} both ran (same fold,
same label draw), with its one-sided paired t-test (scipy <code>ttest_rel(alternative="greater")
</code>) and the number of pairs n; <span class="sig">red *</span> marks
p &lt; {report["alpha"]:g}. <b>Bold</b>: best mean in the column; <u>underlined</u>: within the
margin of error of the best (mean &plusmn; std intervals overlap). The curves (plotly: drag to
zoom, double-click to reset, hover a point, click a legend entry to hide a curve) show the mean
with a band of one std; a star marks a clear win by the verdict rule above.</p>"""


def _verdicts(report: dict) -> str:
    """One line per data set, curve and label setting (`curve_stats.verdicts`)."""
    k, alpha = report["k"], report["alpha"]
    items = []
    for section in report["sections"]:
        curve = curve_name(section)
        for verdict in section.get("verdicts", []):
            text = verdict_text(verdict, k, alpha=alpha)
            css = " class='win'" if verdict["status"] == "win" else ""
            items.append(f"<li><span{css}>{escape(curve)}, {escape(text)}</span></li>")
    if not items:
        return ""
    return (
        f"<div id='verdicts'><b>Verdict</b> (test NDCG@{k} of each group's validation-best "
        f"member; a group wins a setting only where its one-sided paired t-test against every "
        f"other group gives p &lt; {alpha:g}, else: no clear winner)<ul>{''.join(items)}</ul></div>"
    )


def _section(section: dict, index: int, *, k: int, select_k: int, alpha: float) -> str:
    head = f"{escape(section['dataset'])} &middot; {escape(section['series'])}"
    settings = section["settings"]
    parts = [f"<h2>{head}</h2>", "<h3>Groups (validation-best member of each)</h3>"]
    note = section.get("outlier_note")
    for metric, label in _metrics(k, note):
        parts.append(_table(section["groups"], settings, "group", metric, label, alpha))
    if note:  # in place of an Outlier-NDCG table and chart of n=0 everywhere
        parts.append(f"<p class='note'><b>Outlier-NDCG@{k}</b>: {escape(note)}.</p>")
    parts.append(f"<p>{escape(section['crossover_text'])}</p>")
    if section["pretraining_text"]:
        parts.append(f"<p>{escape(section['pretraining_text'])}</p>")
    div = f"groups-{index}"
    figure = _plots().group_figure(section, k=k, alpha=alpha, div_id=div)
    parts.append(f"<div class='ltr-plot'>{figure}</div>")
    parts.append("<h3>Every model</h3>")
    for metric, label in _metrics(k, note):
        parts.append(_table(section["models"], settings, "model", metric, label, alpha))
    figure = _plots().model_figure(section, k=k, div_id=f"models-{index}")
    parts.append(f"<div class='ltr-plot'>{figure}</div>")
    parts.append("<h3>Which member stood for each group</h3>")
    parts.append(_selection(section["groups"], section["models"], select_k))
    return "\n".join(parts)


def _metrics(k: int, outlier_note: str | None) -> list[tuple[str, str]]:
    metrics = [("test", f"NDCG@{k}"), ("outlier", f"Outlier-NDCG@{k}")]
    metrics = metrics[:1] if outlier_note else metrics
    # The metrics users compare with (same member, same seeds; NDCG@k alone chooses and tests).
    return [*metrics, *_compared(k)]


def _compared(k: int) -> list[tuple[str, str]]:
    return [(m.name, m.title(k)) for m in compared_metrics()]


def _table(
    entries: list[dict], settings: list[str], key: str, metric: str, label: str, alpha: float
) -> str:
    names = list(dict.fromkeys(e[key] for e in entries))
    cell = {(e[key], e["setting"]): e for e in entries}
    marks: dict[tuple[str, str], str] = {}
    for setting in settings:
        column = [cell.get((n, setting)) for n in names]
        means = [e[f"{metric}_mean"] if e else math.nan for e in column]
        stds = [e[f"{metric}_std"] if e else math.nan for e in column]
        best, close = best_in_column(means, stds)
        for i, name in enumerate(names):
            marks[(name, setting)] = "b" if i == best else ("u" if close[i] else "")
    header = "".join(f"<th>{escape(s)}</th>" for s in settings)
    rows = []
    for name in names:
        tds = "".join(
            _cell(cell.get((name, s)), metric, marks[(name, s)], alpha, key == "group")
            for s in settings
        )
        rows.append(f"<tr><td class='name'>{escape(name)}</td>{tds}</tr>")
    return (
        f"<table><caption>test {escape(label)}</caption><tr><th class='name'>{escape(key)}</th>"
        f"{header}</tr>{''.join(rows)}</table>"
    )


def _cell(entry: dict | None, metric: str, mark: str, alpha: float, show_member: bool) -> str:
    if entry is None:
        return "<td>&ndash;</td>"
    text = escape(mean_pm_std(entry, metric))
    if mark:
        text = f"<{mark}>{text}</{mark}>"
    p = entry.get(f"p_{metric}", math.nan)
    extra = [f"n={entry['n_outlier_seeds'] if metric == 'outlier' else entry['n_seeds']}"]
    if math.isfinite(p):
        star = "<span class='sig'>*</span>" if p < alpha else ""
        extra.append(f"p={escape(fmt_p(p))}{star}")
    paired = paired_text(entry, metric)
    if paired:
        p_paired = entry[f"p_paired_{metric}"]
        star = "<span class='sig'>*</span>" if math.isfinite(p_paired) and p_paired < alpha else ""
        extra.append(f"{escape(paired)}{star}")
    if show_member:
        extra.append(escape(entry["member"]))
    return f"<td>{text}<br><small>{' &middot; '.join(extra)}</small></td>"


def _selection(groups: list[dict], models: list[dict], select_k: int) -> str:
    rows = []
    for g in groups:
        candidates = sorted(
            (m for m in models
             if (m["setting"], m["group"]) == (g["setting"], g["group"])),
            key=lambda m: -m["vali_mean"] if math.isfinite(m["vali_mean"]) else math.inf,
        )  # fmt: skip
        listing = ", ".join(f"{escape(m['model'])} {fmt(m['vali_mean'])}" for m in candidates)
        rows.append(
            f"<tr><td class='name'>{escape(g['setting'])}</td>"
            f"<td class='name'>{escape(g['group'])}</td>"
            f"<td class='name'><b>{escape(g['member'])}</b></td><td>{fmt(g['vali_mean'])}</td>"
            f"<td class='name'><small>{listing}</small></td></tr>"
        )
    return (
        "<table><tr><th class='name'>setting</th><th class='name'>group</th>"
        f"<th class='name'>chosen member</th><th>mean vali NDCG@{select_k}</th>"
        f"<th class='name'>candidates (mean vali NDCG@{select_k})</th></tr>{''.join(rows)}</table>"
    )


def _tuned(tuned: list[dict], *, k: int, select_k: int, alpha: float) -> str:
    """Each model with variants: its validation-best variant per data set and label setting and
    that variant's numbers (``kind=tuned`` in summary.csv); nothing when the sweep has none."""
    if not tuned:
        return ""
    metrics = [("test", f"NDCG@{k}"), ("outlier", f"Outlier-NDCG@{k}"), *_compared(k)]
    header = "".join(
        f"<th class='name'>{n}</th>" for n in ("data set", "setting", "model", "chosen variant")
    )
    header += f"<th>mean vali NDCG@{select_k}</th>"
    header += "".join(f"<th>test {escape(label)}</th>" for _, label in metrics)
    header += "<th class='name'>candidates</th>"
    rows = []
    for entry in tuned:
        names = (entry["dataset"], entry["setting"], entry["model"], entry["member"])
        tds = "".join(f"<td class='name'>{escape(str(n))}</td>" for n in names)
        tds += f"<td>{fmt(entry['vali_mean'])}</td>"
        tds += "".join(_cell(entry, metric, "", alpha, False) for metric, _ in metrics)
        listing = escape(", ".join(entry["candidates"]))
        rows.append(f"<tr>{tds}<td class='name'><small>{listing}</small></td></tr>")
    return (
        "<h2 id='tuned'>Tuned variants (paper A.2.3)</h2><p class='note'>For each model with "
        "variants (<code>&lt;method&gt;@&lt;variant&gt;+&lt;strategy&gt;</code>), per data set "
        f"and label setting, the variant with the highest mean validation NDCG@{select_k} (the "
        "group rule; test never read) stands for the model; its test numbers as in the model "
        "tables, p against the validation-best GBDT.</p>"
        f"<table id='tuned-table'><tr>{header}</tr>{''.join(rows)}</table>"
    )


def _notes(notes: list[str]) -> str:
    """Runs left out because another run of the same cell was kept (report without a sweep)."""
    if not notes:
        return ""
    items = "".join(f"<li>{escape(note)}</li>" for note in notes)
    return f"<h2>Runs that competed for one cell</h2><ul class='note'>{items}</ul>"


def _problems(rows: list[dict]) -> str:
    if not rows:
        return "<h2>Failed cells</h2><p>None: every cell finished.</p>"
    body = "".join(
        f"<tr><td class='name'>{escape(str(r.get('id')))}</td><td class='name'>"
        f"{escape(str(r.get('status')))}</td><td class='err'>{escape(str(r.get('error') or ''))}"
        f"</td><td class='name'><small>{escape(str(r.get('run_dir') or ''))}</small></td></tr>"
        for r in rows
    )
    return (
        f"<h2>Failed cells</h2><p>{len(rows)} cell(s) did not finish; they are left out of "
        "every table and plot above.</p><table><tr><th class='name'>cell</th>"
        "<th class='name'>status</th><th class='name'>error</th><th class='name'>run dir</th>"
        f"</tr>{body}</table>"
    )


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f"<div><img alt='{escape(alt)}' src='data:image/png;base64,{data}'></div>"


def _plots():
    """`dashboard_plots`, imported where a figure is drawn: it needs plotly (the ``report``
    extra), which importing this module does not; a missing plotly is named (`require`) there."""
    require("plotly", "the report's dashboard")
    from scarce_ltr.reports import dashboard_plots

    return dashboard_plots
