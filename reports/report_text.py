"""The report's plain-text tables: what ``./run.sh report`` prints, per data set and curve.

Rows are model groups, columns label settings; each cell is the mean ± std of test NDCG@k (or
Outlier-NDCG@k) with its Welch p and the paired margin against the validation-best GBDT
(`reports.stats`), then the crossover sentence of each curve, the tuned models' chosen variants
the choice study (`reports.choice_summary`) and where the deep rankers win or lose against the tree
(`reports.where`). The dashboard shows the same numbers as HTML.
"""

from __future__ import annotations

import math

from scarce_ltr.reports import choice_summary, where
from scarce_ltr.reports.number_text import fmt_p, mean_pm_std, paired_text


def text_tables(report: dict) -> str:
    """The verdict lines, then the group tables as plain text: per data set and curve, rows =
    groups, columns = settings."""
    k, lines = report["k"], verdict_lines(report)
    for section in report["sections"]:
        settings = section["settings"]
        for metric, label in (("test", f"NDCG@{k}"), ("outlier", f"Outlier-NDCG@{k}")):
            if metric == "outlier" and section.get("outlier_note"):
                note = section["outlier_note"]
                lines.append(f"\n{section['dataset']} · Outlier-NDCG@{k}: {note}")
                continue
            lines.append(
                f"\n{section['dataset']} · {section['series']} · test {label} (mean ± std over "
                f"{report.get('units', 'seeds')}; p: one-sided Welch vs validation-best GBDT; "
                "Δ: paired margin against it, mean ± std of the per-unit differences, with its "
                "one-sided paired p and n pairs)"
            )
            header = [""] + settings
            table = [header]
            for group in dict.fromkeys(g["group"] for g in section["groups"]):
                cells = {g["setting"]: g for g in section["groups"] if g["group"] == group}
                table.append([group] + [_text_cell(cells.get(s), metric) for s in settings])
            widths = [max(len(row[i]) for row in table) for i in range(len(header))]
            for row in table:
                lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        lines.append(section["crossover_text"])
        if section["pretraining_text"]:  # empty without both DL groups
            lines.append(section["pretraining_text"])
    lines += _tuned_lines(report["summary"].get("tuned", []), k)
    lines += choice_summary.text_lines(report.get("choice", {}).get("settings") or [])
    lines += where.text_lines(report.get("where") or [], alpha=report["alpha"])
    return "\n".join(lines).lstrip("\n")


def _tuned_lines(tuned: list[dict], k: int) -> list[str]:
    """Each tuned model's validation-best variant per setting (paper A.2.3)."""
    if not tuned:
        return []
    lines = [f"\ntuned variants (chosen on vali NDCG; test NDCG@{k} of the chosen one)"]
    for entry in tuned:
        lines.append(
            f"  {entry['dataset']} {entry['setting']} {entry['model']}: {entry['member']} of "
            f"{entry['n_candidates']} (vali {entry['vali_mean']:.4f}, "
            f"test {_text_cell(entry, 'test')})"
        )
    return lines


def _text_cell(entry: dict | None, metric: str) -> str:
    if entry is None:
        return "-"
    text = mean_pm_std(entry, metric)
    p = entry.get(f"p_{metric}", math.nan)
    notes = [f"p={fmt_p(p)}"] if math.isfinite(p) else []
    paired = paired_text(entry, metric)
    notes += [paired] if paired else []
    return text + (f" ({'; '.join(notes)})" if notes else "")


def crossover_text(crossovers: dict, k: int, *, alpha: float = 0.05) -> str:
    """Per metric, on which side of the best other group the pretrained DL's paired margin lies
    at each measured fraction, and at which fractions that is clear (paired p < ``alpha``): a
    positive margin alone is a lead, not a win."""
    names = {"test": f"NDCG@{k}", "outlier": f"Outlier-NDCG@{k}"}
    texts = []
    for metric, info in crossovers.items():
        status = info["status"]
        if status == "crossover":
            what = (
                f"pretrained DL leads the best other group up to {info['last_win']:g}% labeled "
                f"QGs and trails it from {info['first_loss']:g}%"
            )
        elif status == "always":
            what = "pretrained DL leads the best other group at every label fraction"
        elif status == "never":
            what = f"pretrained DL trails the best other group already at {info['first_loss']:g}%"
        else:
            what = "no crossover (pretrained DL or the other groups are missing)"
        # A curve may cross back: name every fraction on each side, not the first switch alone.
        won = [x for x, w in info.get("wins", []) if w]
        lost = [x for x, w in info.get("wins", []) if not w]
        if status in ("crossover", "never") and won and max(won) > min(lost):
            what = (
                f"pretrained DL leads the best other group at {_percents(won)} labeled QGs and "
                f"trails it at {_percents(lost)}"
            )
        if status != "n/a":
            what += _clear_steps(info, alpha)
        texts.append(f"{names[metric]}: {what}{_paired_steps(info)}.")
    head = (
        "Crossover (paired margin of pretrained DL against the best other group of each "
        "fraction, over the (fold, seed) units both have; p: one-sided paired t-test in the "
        "margin's direction). "
    )
    return head + " ".join(texts) if texts else ""


def _clear_steps(info: dict, alpha: float) -> str:
    """``; clear at p < 0.05: a win at 2%, a loss at 50%`` or that no fraction is clear."""
    steps = info.get("paired", [])
    clear = [s for s in steps if s["n"] >= 2 and math.isfinite(s["p"]) and s["p"] < alpha]
    if not clear:
        return f"; no fraction is clear at p < {alpha:g} (no clear winner)"
    wins = [s["x"] for s in clear if s["margin"] > 0]
    losses = [s["x"] for s in clear if s["margin"] < 0]
    parts = ([f"a win at {_percents(wins)}"] if wins else []) + (
        [f"a loss at {_percents(losses)}"] if losses else []
    )
    rest = "" if len(clear) == len(steps) else ", no clear winner elsewhere"
    return f"; clear at p < {alpha:g}: {', '.join(parts)}{rest}"


GROUP_NAMES = {
    "gbdt": "GBDT",
    "no-pretrain-dl": "no-pretrain DL",
    "pretrained-dl": "pretrained DL",
    "hybrid": "hybrid",
}


def curve_name(section: dict) -> str:
    """A section's data set, with its series unless that is the label-budget curve."""
    series = section["series"]
    return section["dataset"] + ("" if series.startswith("% labeled") else f" · {series}")


def verdict_lines(report: dict) -> list[str]:
    """The report's verdict, one line per data set, curve and label setting (as the dashboard's
    top): a win only where the paired test says so."""
    k, alpha = report["k"], report["alpha"]
    lines = [
        f"{curve_name(section)}, {verdict_text(verdict, k, alpha=alpha)}"
        for section in report["sections"]
        for verdict in section.get("verdicts", [])
    ]
    if not lines:
        return []
    head = (
        f"Verdict (test NDCG@{k} of each group's validation-best member; a group wins a setting "
        f"only where its one-sided paired t-test against every other group gives p < {alpha:g}):"
    )
    return [head, *(f"  {line}" for line in lines)]


def verdict_text(verdict: dict, k: int, *, alpha: float) -> str:
    """One `curve_stats.verdicts` entry as a sentence: a win only where the paired p is below
    alpha."""

    def name(group: str | None) -> str:
        return GROUP_NAMES.get(group or "", group or "")

    where = _where(verdict)
    if verdict["status"] == "alone":
        return f"{where}: only {name(verdict['leader'])} ran; nothing to compare"
    step = f"Δ {verdict['margin']:+.4f} NDCG@{k}{_p_and_n(verdict)}"
    if verdict["status"] == "win":
        return (
            f"{where}: {name(verdict['leader'])} wins (paired p < {alpha:g} against every other "
            f"group; the closest, {name(verdict['against'])}: {step})"
        )
    # The higher mean may still trail where the units pair (a negative paired margin).
    verb = "leads" if verdict["margin"] > 0 else "has the higher mean but trails"
    return (
        f"{where}: no clear winner ({name(verdict['leader'])} {verb} "
        f"{name(verdict['against'])}: {step}; a win needs paired p < {alpha:g})"
    )


def _where(entry: dict) -> str:
    """``2% labeled`` on a curve of label fractions, the setting (``tau=4.5``) otherwise."""
    setting = entry["setting"]
    return f"{entry['x']:g}% labeled" if setting.startswith("frac=") else setting


def pretraining_text(gains: dict, k: int) -> str:
    """What pretraining adds, per label setting: the pretrained DL's member against the same
    networks from scratch (`curve_stats.pretraining_gain`); empty without both DL groups."""
    names = {"test": f"NDCG@{k}", "outlier": f"Outlier-NDCG@{k}"}
    texts = []
    for metric, steps in gains.items():
        parts = []
        for step in steps:
            where = f"{step['x']:g}%" if step["setting"].startswith("frac=") else step["setting"]
            pair = f"{step['member']} - {step['against']}"
            parts.append(f"{where}: {pair} {step['margin']:+.4f}{_p_and_n(step)}")
        if parts:
            texts.append(f"{names[metric]}: {'; '.join(parts)}.")
    head = (
        "What pretraining adds (paired margin of the pretrained DL's vali-chosen member over "
        "the no-pretrain DL's, the networks from scratch, over the (fold, seed) units both "
        "have; p: one-sided paired t-test in the margin's direction). "
    )
    return head + " ".join(texts) if texts else ""


def _paired_steps(info: dict) -> str:
    """Per fraction: the pretrained DL's paired margin against the best other group."""
    steps = [
        f"{step['x']:g}%: {step['margin']:+.4f} vs {step['against']}{_p_and_n(step)}"
        for step in info.get("paired", [])
    ]
    return f" [{'; '.join(steps)}]" if steps else ""


def _p_and_n(step: dict) -> str:
    """``, p=0.012, n=15`` of a paired step; `` (means)`` where the groups share no unit."""
    if step["n"] == 0:
        return " (means)"
    p = step["p"]
    return (f", p={fmt_p(p)}" if math.isfinite(p) else "") + f", n={step['n']}"


def _percents(xs: list[float]) -> str:
    return ", ".join(f"{x:g}%" for x in xs)


def cost_text(rows: list[dict]) -> str:
    """What a unit costs: CPU seconds (each run's own process, `core.runs.Run.finish`) per
    model, as the mean of its done cells, and per (fold, seed) unit of each data set and setting
    (the unit the report pairs over), all its done cells together, so a user can plan a
    comparison's budget. "" when no done cell reports them (reports older than
    ``cpu_seconds``)."""
    done = [r for r in rows if r.get("status") == "done" and _finite(r.get("cpu_seconds"))]
    if not done:
        return ""
    by_model: dict[str, list[dict]] = {}
    for row in done:
        by_model.setdefault(str(row.get("model")), []).append(row)
    width = max(len("model"), *(len(m) for m in by_model))
    lines = [
        "What a unit costs (CPU seconds of each run's own process; wall seconds as the sweep "
        "timed its job):",
        f"  {'model':<{width}}  cells  CPU s / cell  wall s / cell",
    ]
    for model in sorted(by_model):
        cells = by_model[model]
        cpu = sum(r["cpu_seconds"] for r in cells) / len(cells)
        walls = [r["seconds"] for r in cells if _finite(r.get("seconds"))]
        wall = f"{sum(walls) / len(walls):13.1f}" if walls else f"{'-':>13}"
        lines.append(f"  {model:<{width}}  {len(cells):5d}  {cpu:12.1f}  {wall}")
    # A unit is what the report pairs over: one (fold, seed) of one data set and setting, so a
    # sweep over several label fractions prints a line for each (their sum is not a unit).
    units: dict[tuple, dict[tuple, float]] = {}
    for row in done:
        setting = (row.get("dataset"), row.get("setting"))
        unit = (row.get("fold"), row.get("seed"))
        of_setting = units.setdefault(setting, {})
        of_setting[unit] = of_setting.get(unit, 0.0) + row["cpu_seconds"]
    for (dataset, setting), of_setting in sorted(units.items(), key=lambda kv: str(kv[0])):
        totals = sorted(of_setting.values())
        where = " ".join(str(part) for part in (dataset, setting) if part is not None)
        lines.append(
            f"  per (fold, seed) unit of {where}, every done cell of it: {len(totals)} unit(s), "
            f"CPU s mean {sum(totals) / len(totals):.1f} (min {totals[0]:.1f}, "
            f"max {totals[-1]:.1f}); all units {sum(totals):.1f}"
        )
    return "\n".join(lines)


def _finite(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)
