"""``./run.sh report [<sweep>] [key=value ...]``: tables, plots, t-tests and one HTML dashboard.

With a sweep name (or a sweep folder), the cells of ``runs/sweeps/<sweep>/manifest.json``;
without, every finished run under ``runs/``. Writes ``results.csv`` (one row per cell),
``summary.csv`` (per model and per group: mean, std, Welch p-value, and the paired margin and
p-value over (fold, seed) units against the validation-best GBDT: `reports.stats`),
``choice.csv`` (`reports.choice`), ``where.csv`` (per test-QG bin, where the deep groups win or
lose against that tree: `reports.where`), the PNGs
and ``dashboard.html`` into ``runs/sweeps/<sweep>/report/`` (``runs/report/`` without a sweep,
or ``out=<folder>``), prints the group tables and ends with the dashboard's path. t-SNE plots
are opt-in and slow: ``tsne=[<run dir or cell id>,...]`` (pretraining runs show their encoder,
finetuning runs their scoring head's input).

This module gathers the rows, builds the report and writes its files; the printed tables are
`reports.report_text`, the figures that read run folders and data (Figure 5, t-SNE)
`reports.report_figures`.
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import atomic_write_bytes, atomic_write_text
from scarce_ltr.core.run_identity import runs_root as default_runs_root
from scarce_ltr.data.evaluation import TestGroupReader
from scarce_ltr.data.info import NO_OUTLIERS_HINT
from scarce_ltr.reports import (
    choice,
    choice_summary,
    curve_stats,
    dashboard,
    interactive,
    plots,
    report_figures,
    report_text,
    results,
    stats,
    where,
)

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
        name = manifest.parent.name  # a sweep given as a folder is still titled by its name
    else:
        if not root.is_dir():
            raise UserError(f"no runs folder {root}; run a stage or a sweep first")
        rows = results.rows_from_scan(root, cfg.cutoffs, notes)
        source, default_out, manifest = str(root), root / "report", None
        name = None
        if not rows:
            raise UserError(f"no finished ranking run (report.json with test metrics) under {root}")
    folder = Path(cfg.out) if cfg.out else default_out
    tsne_dirs = resolve_tsne(cfg.tsne, rows, [p for p in (manifest, root) if p is not None])
    report = build(cfg, rows, source=source, tsne_dirs=tsne_dirs, name=name)
    report["notes"] = notes
    write(report, rows, folder, cfg)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(report_text.text_tables(report) or "no finished cell to tabulate")
    cost = report_text.cost_text(rows)
    if cost:
        print(cost)
    if report["problems"]:
        print(f"{len(report['problems'])} cell(s) failed or did not finish; see the dashboard")
    print(f"dashboard: {folder / 'dashboard.html'}")
    return report


def runs_root(cfg: ReportConfig) -> Path:
    if cfg.runs_root:
        return Path(cfg.runs_root)
    return default_runs_root()


def build(
    cfg: ReportConfig,
    rows: list[dict],
    *,
    source: str,
    tsne_dirs: list[Path],
    name: str | None = None,
) -> dict:
    """Everything the dashboard shows: tables, PNG bytes, problems; ``name``: the sweep's."""
    summary = stats.summarize(rows, k=cfg.k, select_k=cfg.select_k)
    done = [r for r in rows if r.get("status") == "done"]
    # Each run's test QGs, read once for the page's per-QG view and the "where" section.
    read = TestGroupReader(k=cfg.k, policy=_only(done, "policy", default="skip"))
    sections = []
    keys = sorted({(m["dataset"], m["series"]) for m in summary["models"]})
    for dataset, series in keys:
        sections.append(_section(summary, dataset, series, cfg))
    report = {
        "title": f"sweep {name}" if name else "all runs",
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
        "interactive": interactive.collect(rows, k=cfg.k, read=read),
    }
    # Per (fold, seed) unit: the vali argmax beside the robust rule, on test (reports/choice.py).
    units = choice.unit_study(done)
    report["choice"] = {"units": units, "settings": choice_summary.setting_summary(units)}
    # Per test QG: where each deep group's member wins or loses against the vali-best tree.
    report["where"] = where.study(summary, done, read=read)
    if tsne_dirs:
        report["tsne_png"], report["tsne_errors"] = report_figures.tsne_figure(
            tsne_dirs, max_items=cfg.tsne_items, perplexity=cfg.tsne_perplexity, seed=cfg.seed
        )
    report["outlier_figures"] = (
        report_figures.outlier_figures(done, feature=cfg.outlier_feature)
        if cfg.outlier_figure
        else []
    )
    return report


def write(report: dict, rows: list[dict], folder: Path, cfg: ReportConfig) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    results.write_csv(rows, folder / "results.csv", results.columns(cfg.cutoffs))
    results.write_csv(summary_rows(report["summary"]), folder / "summary.csv", SUMMARY_FIELDS)
    choices = report.get("choice", {}).get("settings") or []
    results.write_csv(choices, folder / "choice.csv", list(choice_summary.SUMMARY_FIELDS))
    where_rows = where.csv_rows(report.get("where") or [])
    results.write_csv(where_rows, folder / "where.csv", where.CSV_FIELDS)
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
    crossovers, gains = {}, {}
    for metric in ("test", "outlier") if has_outliers else ("test",):
        curve = {"dataset": dataset, "series": series, "metric": f"{metric}_mean"}
        if series.startswith("%"):
            crossovers[metric] = curve_stats.crossover(summary["groups"], **curve)
        gains[metric] = curve_stats.pretraining_gain(summary["groups"], **curve)
    title = f"{dataset} · {series}"
    return {
        "dataset": dataset,
        "series": series,
        "settings": settings,
        "models": models,
        "groups": groups,
        "crossovers": crossovers,
        "crossover_text": report_text.crossover_text(crossovers, cfg.k, alpha=cfg.alpha),
        # Per label setting, who wins NDCG@k: claimed only at a paired p below alpha.
        "verdicts": curve_stats.verdicts(
            summary["groups"], dataset=dataset, series=series, alpha=cfg.alpha
        ),
        "pretraining_gain": gains,
        "pretraining_text": report_text.pretraining_text(gains, cfg.k),
        "outlier_note": None if has_outliers else NO_OUTLIERS_HINT,
        "group_png": plots.group_curves(groups, title=title, k=cfg.k, metrics=shown),
        "model_png": plots.model_curves(
            models, title=f"{title} · every model", k=cfg.k, metrics=shown
        ),
    }


def _only(rows: list[dict], key: str, *, default: str) -> str:
    values = {r.get(key) for r in rows if r.get(key)}
    return values.pop() if len(values) == 1 else default


def _unit_text(unit) -> str:
    """``3:1`` (fold 3, seed 1); the seed alone without folds."""
    fold, seed = unit
    return str(seed) if fold is None else f"{fold}:{seed}"


def _distinct(rows: list[dict], key: str) -> str:
    values = sorted({str(r.get(key)) for r in rows if r.get(key) is not None})
    return ", ".join(values) if values else "unknown"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", text).strip("_")
