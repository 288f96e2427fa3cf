"""``./run.sh report [<sweep>] [key=value ...]``: tables, plots, t-tests and one HTML dashboard.

With a sweep name (or a sweep folder), the cells of ``runs/sweeps/<sweep>/manifest.json``;
without, every finished run under ``runs/``. Writes ``results.csv`` (one row per cell),
``summary.csv`` (per model and per group: mean, std, Welch p-value, and the paired margin and
p-value over (fold, seed) units against the validation-best GBDT: `sweeps.stats`), the PNGs
and ``dashboard.html`` into ``runs/sweeps/<sweep>/report/`` (``runs/report/`` without a sweep,
or ``out=<folder>``), prints the group tables and ends with the dashboard's path. t-SNE plots
are opt-in and slow: ``tsne=[<run dir or cell id>,...]`` (pretraining runs show their encoder,
finetuning runs their scoring head's input).
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import atomic_write_bytes, atomic_write_text
from scarce_ltr.core.runs import read_config, read_report
from scarce_ltr.core.runs import runs_root as default_runs_root
from scarce_ltr.data.info import NO_OUTLIERS_HINT
from scarce_ltr.sweeps import choice, dashboard, interactive, plots, results, stats

SUMMARY_FIELDS = [
    "kind", "dataset", "series", "setting", "x", "name", "group", "member", "n_seeds",
    "vali_mean", "test_mean", "test_std", "outlier_mean", "outlier_std", "n_outlier_seeds",
    "p_test", "p_outlier", "reference", "seeds",
    "margin_test", "margin_test_std", "n_pairs", "p_paired_test",
    "margin_outlier", "margin_outlier_std", "n_pairs_outlier", "p_paired_outlier", "units",
    *(f"{metric}_{moment}" for metric in stats.EXTRA_METRICS for moment in ("mean", "std")),
]  # fmt: skip


@dataclass(frozen=True)
class ReportConfig:
    sweep: str | None = None  # a sweep name under runs/sweeps/, or a sweep folder; None: scan
    runs_root: str | None = None  # default: $LTR_RUNS_DIR or ./runs
    out: str | None = None  # default: <sweep folder>/report or <runs_root>/report
    ks: list[int] = field(default_factory=lambda: [1, 3, 5, 10])  # NDCG cutoffs in results.csv
    k: int = 5  # the cutoff of the tables and plots
    select_k: int = 5  # validation NDCG cutoff that picks each group's member
    alpha: float = 0.05  # significance level marked in the tables
    tsne: list[str] = field(default_factory=list)  # run dirs or cell ids to embed (slow)
    tsne_items: int = 1000  # test items per t-SNE panel
    tsne_perplexity: float = 30.0
    seed: int = 0  # of the t-SNE item draw and layout
    # Figure 5: the LETOR feature number (1-based) whose histogram shows the outlier cut; null:
    # the feature whose cut flags the most test QGs
    outlier_feature: int | None = None
    outlier_figure: bool = True  # draw Figure 5 (reads each data set's vali and test once)

    def __post_init__(self) -> None:
        if not self.ks or min(self.ks) < 1:
            raise ValueError("ks must be a non-empty list of positive integers")
        if self.k < 1 or self.select_k < 1:
            raise ValueError("k and select_k must be >= 1")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.tsne_items < 10:
            raise ValueError("tsne_items must be >= 10")
        if self.tsne_perplexity <= 0:
            raise ValueError("tsne_perplexity must be positive")
        if self.outlier_feature is not None and self.outlier_feature < 1:
            raise ValueError("outlier_feature is a LETOR feature number: >= 1")

    @property
    def cutoffs(self) -> list[int]:
        return sorted({*self.ks, self.k, self.select_k})


def main(cfg: ReportConfig, out_dir: Path | None = None) -> dict:
    """Gather, summarize, plot and write; returns the assembled report (tables, PNG bytes)."""
    root = runs_root(cfg)
    notes: list[str] = []  # runs left out when two compete for one cell, and why
    if cfg.sweep:
        manifest = results.manifest_path(cfg.sweep, root)
        rows = results.rows_from_manifest(manifest, cfg.cutoffs)
        source, default_out = str(manifest), manifest.parent / "report"
    else:
        if not root.is_dir():
            raise UserError(f"no runs folder {root}; run a stage or a sweep first")
        rows = results.rows_from_scan(root, cfg.cutoffs, notes)
        source, default_out, manifest = str(root), root / "report", None
        if not rows:
            raise UserError(f"no finished ranking run (report.json with test metrics) under {root}")
    folder = Path(cfg.out) if cfg.out else default_out
    tsne_dirs = resolve_tsne(cfg.tsne, rows, [p for p in (manifest, root) if p is not None])
    report = build(cfg, rows, source=source, tsne_dirs=tsne_dirs)
    report["notes"] = notes
    write(report, rows, folder, cfg)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(text_tables(report) or "no finished cell to tabulate")
    if report["problems"]:
        print(f"{len(report['problems'])} cell(s) failed or did not finish; see the dashboard")
    print(f"dashboard: {folder / 'dashboard.html'}")
    return report


def runs_root(cfg: ReportConfig) -> Path:
    if cfg.runs_root:
        return Path(cfg.runs_root)
    return default_runs_root()


def build(cfg: ReportConfig, rows: list[dict], *, source: str, tsne_dirs: list[Path]) -> dict:
    """Everything the dashboard shows: tables, PNG bytes, problems."""
    summary = stats.summarize(rows, k=cfg.k, select_k=cfg.select_k)
    done = [r for r in rows if r.get("status") == "done"]
    sections = []
    keys = sorted({(m["dataset"], m["series"]) for m in summary["models"]})
    for dataset, series in keys:
        sections.append(_section(summary, dataset, series, cfg))
    report = {
        "title": f"Report: {'sweep ' + cfg.sweep if cfg.sweep else 'all runs'}",
        "source": source,
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "status_counts": dict(Counter(r.get("status") for r in rows)),
        "val_labels": _distinct(done, "val_labels"),
        "policy": _distinct(done, "policy"),
        "k": cfg.k,
        "select_k": cfg.select_k,
        "alpha": cfg.alpha,
        "summary": summary,
        # Replicates are (fold, seed) units in a sweep over folds, seeds otherwise: the tables
        # say which.
        "units": "(fold, seed) units" if any(r.get("fold") is not None for r in done) else "seeds",
        "sections": sections,
        "problems": [r for r in rows if r.get("status") != "done"],
        "tsne_png": None,
        "tsne_errors": [],
        # Curves, costs and per-QG NDCG read from the run folders for the page's script.
        "interactive": interactive.collect(
            rows, k=cfg.k, policy=_only(done, "policy", default="skip")
        ),
    }
    # Per (fold, seed) unit: the vali argmax beside the robust rule, on test (sweeps/choice.py).
    units = choice.unit_study(done)
    report["choice"] = {"units": units, "settings": choice.setting_summary(units)}
    if tsne_dirs:
        report["tsne_png"], report["tsne_errors"] = _tsne(tsne_dirs, cfg)
    report["outlier_figures"] = _outlier_figures(done, cfg) if cfg.outlier_figure else []
    return report


def write(report: dict, rows: list[dict], folder: Path, cfg: ReportConfig) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    results.write_csv(rows, folder / "results.csv", results.columns(cfg.cutoffs))
    results.write_csv(summary_rows(report["summary"]), folder / "summary.csv", SUMMARY_FIELDS)
    choices = report.get("choice", {}).get("settings") or []
    results.write_csv(choices, folder / "choice.csv", list(choice.SUMMARY_FIELDS))
    for section in report["sections"]:
        slug = _slug(f"{section['dataset']}_{section['series']}")
        atomic_write_bytes(folder / f"groups_{slug}.png", section["group_png"])
        atomic_write_bytes(folder / f"models_{slug}.png", section["model_png"])
    if report["tsne_png"]:
        atomic_write_bytes(folder / "tsne.png", report["tsne_png"])
    for figure in report.get("outlier_figures", []):
        if figure["png"]:
            atomic_write_bytes(folder / f"outliers_{_slug(figure['dataset'])}.png", figure["png"])
    atomic_write_text(folder / "dashboard.html", dashboard.render(report))


def summary_rows(summary: dict) -> list[dict]:
    out = []
    for kind, name_key in (("group", "group"), ("model", "model"), ("tuned", "model")):
        for entry in summary["tuned" if kind == "tuned" else f"{kind}s"]:
            row = {f: entry.get(f) for f in SUMMARY_FIELDS}
            row |= {
                "kind": kind,
                "name": entry[name_key],
                "seeds": " ".join(map(str, entry["seeds"])),
                "units": " ".join(_unit_text(u) for u in entry["units"]),
            }
            out.append(row)
    return out


def text_tables(report: dict) -> str:
    """The group tables as plain text: per data set and curve, rows = groups, columns = settings."""
    k, lines = report["k"], []
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
    lines += _tuned_lines(report["summary"].get("tuned", []), k)
    lines += choice.text_lines(report.get("choice", {}).get("settings") or [])
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


def resolve_tsne(entries: list[str], rows: list[dict], bases: list[Path]) -> list[Path]:
    """Run folders of the ``tsne`` entries: a cell id, or a path (as given, or under a base)."""
    by_id = {r.get("id"): r.get("run_dir") for r in rows}
    folders = []
    for entry in entries:
        candidates = [Path(by_id[entry])] if by_id.get(entry) else []
        candidates += [Path(entry)] + [
            (b.parent if b.is_file() else b) / entry for b in bases
        ]  # fmt: skip
        found = next((c for c in candidates if c.is_dir()), None)
        if found is None:
            raise UserError(f"tsne: '{entry}' is neither a cell id of this report nor a run folder")
        folders.append(found)
    return folders


def _section(summary: dict, dataset: str, series: str, cfg: ReportConfig) -> dict:
    def pick(entries: list[dict]) -> list[dict]:
        return [e for e in entries if (e["dataset"], e["series"]) == (dataset, series)]

    models, groups = pick(summary["models"]), pick(summary["groups"])
    settings = [s for _, s in sorted({(m["x"], m["setting"]) for m in models})]
    # No outlier QG flagged in any run of this curve: say so instead of drawing empty panels.
    has_outliers = any(math.isfinite(m["outlier_mean"]) for m in models)
    shown = plots.METRICS if has_outliers else plots.METRICS[:1]
    crossovers = {}
    if series.startswith("%"):
        for metric in ("test", "outlier") if has_outliers else ("test",):
            crossovers[metric] = stats.crossover(
                summary["groups"], dataset=dataset, series=series, metric=f"{metric}_mean"
            )
    title = f"{dataset} · {series}"
    return {
        "dataset": dataset,
        "series": series,
        "settings": settings,
        "models": models,
        "groups": groups,
        "crossovers": crossovers,
        "crossover_text": _crossover_text(crossovers, cfg.k),
        "outlier_note": None if has_outliers else NO_OUTLIERS_HINT,
        "group_png": plots.group_curves(groups, crossovers, title=title, k=cfg.k, metrics=shown),
        "model_png": plots.model_curves(
            models, title=f"{title} · every model", k=cfg.k, metrics=shown
        ),
    }


def _outlier_figures(done: list[dict], cfg: ReportConfig) -> list[dict]:
    """Figure 5 per data set: the histogram rule's cut on one feature, from the first finished
    run of the data set that used the rule (its data settings and its gap G)."""
    figures = []
    for dataset in sorted({r["dataset"] for r in done}):
        for row in (r for r in done if r["dataset"] == dataset):
            outliers = ((read_report(row["run_dir"]) or {}).get("metrics") or {}).get("outliers")
            if outliers and outliers.get("method") == "histogram" and outliers.get("gap"):
                figures.append(_outlier_figure(dataset, Path(row["run_dir"]), outliers, cfg))
                break
    return figures


def _outlier_figure(dataset: str, run_dir: Path, outliers: dict, cfg: ReportConfig) -> dict:
    from scarce_ltr.data.datasets import load_dataset
    from scarce_ltr.data.outliers import feature_histogram, flagged_by_feature
    from scarce_ltr.data.stage_config import CommonConfig

    gap = int(outliers["gap"])
    entry = {"dataset": dataset, "gap": gap, "feature": None, "png": None, "note": None}
    try:
        data = read_config(run_dir, CommonConfig).data
        raw = load_dataset(data)
    except UserError as exc:  # the data is not on this machine: the page says so
        return entry | {"note": f"Figure 5 of {dataset} not drawn: {exc}"}
    vali, test = raw["vali"], raw["test"]
    spec = data.outliers
    options = dict(gap=gap, n_bins=spec.n_bins, max_tail_share=spec.max_tail_share)
    flagged = flagged_by_feature(vali.features, test, **options)
    if cfg.outlier_feature is None:
        column = int(flagged.argmax())
    elif cfg.outlier_feature <= vali.n_features:
        column = cfg.outlier_feature - 1
    else:
        raise UserError(
            f"outlier_feature={cfg.outlier_feature}: data set {dataset} has "
            f"{vali.n_features} features (numbered 1..{vali.n_features})"
        )
    hist = feature_histogram(vali.features, feature=column, **options)
    values = np.asarray(test.features[:, column], dtype=np.float64)
    title = (
        f"{dataset} · feature {column + 1}: vali histogram and the cut of G = {gap}\n"
        f"{int(flagged[column])} test QGs flagged by this feature"
    )
    png = plots.outlier_histogram(hist, values, title=title)
    return entry | {"feature": column + 1, "png": png, "flagged": int(flagged[column])}


def _percents(xs: list[float]) -> str:
    return ", ".join(f"{x:g}%" for x in xs)


def _only(rows: list[dict], key: str, *, default: str) -> str:
    values = {r.get(key) for r in rows if r.get(key)}
    return values.pop() if len(values) == 1 else default


def _unit_text(unit) -> str:
    """``3:1`` (fold 3, seed 1); the seed alone without folds."""
    fold, seed = unit
    return str(seed) if fold is None else f"{fold}:{seed}"


def _paired_steps(info: dict) -> str:
    """Per fraction: the pretrained DL's paired margin against the best other group."""
    steps = []
    for step in info.get("paired", []):
        if step["n"] == 0:
            steps.append(f"{step['x']:g}%: {step['margin']:+.4f} vs {step['against']} (means)")
            continue
        p = step["p"]
        tail = f", p={dashboard.fmt_p(p)}" if math.isfinite(p) else ""
        steps.append(
            f"{step['x']:g}%: {step['margin']:+.4f} vs {step['against']}{tail}, n={step['n']}"
        )
    return f" [{'; '.join(steps)}]" if steps else ""


def _crossover_text(crossovers: dict, k: int) -> str:
    names = {"test": f"NDCG@{k}", "outlier": f"Outlier-NDCG@{k}"}
    texts = []
    for metric, info in crossovers.items():
        status = info["status"]
        if status == "crossover":
            what = (
                f"pretrained DL beats every other group up to {info['last_win']:g}% labeled "
                f"QGs and stops at {info['first_loss']:g}%"
            )
        elif status == "always":
            what = "pretrained DL beats every other group at every label fraction"
        elif status == "never":
            what = (
                f"pretrained DL does not beat the best other group even at {info['first_loss']:g}%"
            )
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
        texts.append(f"{names[metric]}: {what}{_paired_steps(info)}.")
    head = (
        "Crossover (paired margin of pretrained DL against the best other group of each "
        "fraction, over the (fold, seed) units both have; p: one-sided paired t-test in the "
        "margin's direction). "
    )
    return head + " ".join(texts) if texts else ""


def _tsne(folders: list[Path], cfg: ReportConfig) -> tuple[bytes | None, list[str]]:
    from scarce_ltr.sweeps.embeddings import tsne_of_run

    panels, errors = [], []
    for folder in folders:
        print(f"t-SNE of {folder} ...", file=sys.stderr)
        try:
            panels.append(
                tsne_of_run(
                    folder, max_items=cfg.tsne_items, perplexity=cfg.tsne_perplexity, seed=cfg.seed
                )
            )
        except UserError as exc:
            errors.append(f"t-SNE skipped: {exc}")
            print(f"warning: t-SNE skipped: {exc}", file=sys.stderr)
    if not panels:
        return None, errors
    title = "t-SNE of test-item embeddings, colour and size = relevance label"
    return plots.tsne_panels(panels, title=title), errors


def _text_cell(entry: dict | None, metric: str) -> str:
    if entry is None:
        return "-"
    text = dashboard.mean_pm_std(entry, metric)
    p = entry.get(f"p_{metric}", math.nan)
    notes = [f"p={dashboard.fmt_p(p)}"] if math.isfinite(p) else []
    paired = dashboard.paired_text(entry, metric)
    notes += [paired] if paired else []
    return text + (f" ({'; '.join(notes)})" if notes else "")


def _distinct(rows: list[dict], key: str) -> str:
    values = sorted({str(r.get(key)) for r in rows if r.get(key) is not None})
    return ", ".join(values) if values else "unknown"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", text).strip("_")
