"""Gather finished runs into one table: a list of flat dicts, one per (cell, seed), and its CSV.

A cell of a sweep over folds carries its ``fold`` (None otherwise; manifests older than folds
have none).

Two sources:

- a sweep's ``manifest.json`` (``runs/sweeps/<name>/``): every cell with its identity and
  status; a done cell's metrics come from ``report.json`` in its run directory;
- no sweep: every ``report.json`` under the runs folder that holds test metrics (pretraining
  runs have none and are left out); identity comes from ``config.yaml`` and ``report.json``.

A cell marked done whose report is missing or unreadable becomes a failed row with the reason
and ``hole`` set (``select`` stops at it; `holes`); nothing here raises on one bad run. Metrics
that a report lacks are NaN.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import atomic_write_text
from scarce_ltr.core.metrics import METRICS, PRIMARY
from scarce_ltr.core.run_config import read_config
from scarce_ltr.core.runs import report_model
from scarce_ltr.data.scarcity import ScarcityConfig
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.models.names import model_group

MANIFEST = "manifest.json"
REPORT = "report.json"
IDENTITY = (
    "id", "dataset", "model", "group", "stage", "setting", "fraction", "binary_tau", "fold",
    "val_labels", "policy", "seed", "status", "error", "seconds", "cpu_seconds",
    "run_dir",
)  # fmt: skip
COUNTS = ("n_vali_groups", "n_test_groups", "n_outlier_groups")
STATUSES = ("done", "failed", "pending", "skipped")


def metric_columns(ks: list[int]) -> list[str]:
    """Per k: ``vali_ndcg@k``, then ``test_<m>@k`` and ``test_outlier_<m>@k`` of each metric
    with a cutoff (NDCG, ERR, P); then ``test_<m>`` of those without (MRR, MAP) and their
    outlier versions (`core.metrics.METRICS`)."""
    return [column for column, _ in _metric_sources(ks)]


def _metric_sources(ks: list[int]) -> list[tuple[str, tuple[str, str]]]:
    """``(results column, (report split, report key))`` of every metric column, in order."""
    sources = []
    for k in ks:
        sources.append((f"vali_{PRIMARY.key(k)}", ("vali", PRIMARY.key(k))))
        for metric in (m for m in METRICS.values() if m.cutoff):
            for prefix in ("", "outlier_"):
                key = f"{prefix}{metric.key(k)}"
                sources.append((f"test_{key}", ("test", key)))
    whole = [m for m in METRICS.values() if not m.cutoff]
    for prefix in ("", "outlier_"):
        sources += [(f"test_{prefix}{m.name}", ("test", f"{prefix}{m.name}")) for m in whole]
    return sources


def columns(ks: list[int]) -> list[str]:
    return [*IDENTITY, *metric_columns(ks), *COUNTS]


def sweeps_found(runs_root: Path) -> list[str]:
    folder = runs_root / "sweeps"
    return sorted(p.parent.name for p in folder.glob(f"*/{MANIFEST}")) if folder.is_dir() else []


def manifest_path(sweep: str, runs_root: Path) -> Path:
    """The manifest of sweep ``sweep`` (a name under ``runs/sweeps/``, or a sweep folder)."""
    candidates = [runs_root / "sweeps" / sweep / MANIFEST]
    if "/" in sweep or Path(sweep).is_dir():
        candidates.insert(0, Path(sweep) / MANIFEST)
    for path in candidates:
        if path.is_file():
            return path
    found = sweeps_found(runs_root)
    listing = ", ".join(found) if found else "none yet (./run.sh sweep <name> makes one)"
    raise UserError(
        f"no sweep '{sweep}': {candidates[-1]} does not exist; sweeps found in "
        f"{runs_root / 'sweeps'}: {listing}"
    )


def read_manifest(path: Path) -> list[dict]:
    """The cells of the sweep manifest at ``path``; `UserError` naming it when it is not one
    (``report`` and ``select`` read it, ``sweep`` refuses to write over it)."""
    try:
        manifest = json.loads(path.read_text())
        cells = manifest["cells"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: not a sweep manifest ({exc})") from None
    if not isinstance(cells, list):
        raise UserError(f"{path}: 'cells' must be a list")
    for i, cell in enumerate(cells):
        if not isinstance(cell, dict) or "run_dir" not in cell:
            raise UserError(f"{path}: cell {i} is not an object with a run_dir")
    return cells


def rows_from_manifest(path: Path, ks: list[int]) -> list[dict]:
    """One row per cell of the manifest at ``path``."""
    rows = []
    for cell in read_manifest(path):
        row = _empty_row(ks) | {key: cell.get(key) for key in IDENTITY if key in cell}
        row["status"] = row["status"] if row["status"] in STATUSES else "pending"
        if row["status"] == "done":
            row |= _read_metrics(Path(cell["run_dir"]), ks)
            row["hole"] = row["status"] != "done"  # marked done; its folder or report is not
        rows.append(row)
    return rows


def holes(rows: list[dict]) -> list[dict]:
    """``{"id", "run_dir", "reason"}`` of each cell a manifest marks done whose run folder is
    gone or whose ``report.json`` is missing or damaged (`rows_from_manifest`)."""
    return [
        {
            "id": row["id"],
            "run_dir": row["run_dir"],
            "reason": row["error"]
            if Path(str(row["run_dir"])).is_dir()
            else f"its folder {row['run_dir']} is gone",
        }
        for row in rows
        if row.get("hole")
    ]


def rows_from_scan(runs_root: Path, ks: list[int], notes: list[str] | None = None) -> list[dict]:
    """One row per cell (data set, model, label setting, seed) under ``runs_root``.

    Two runs of one cell compete; the one kept is the one whose settings most other runs of that
    model share (an ad-hoc 4-epoch run never stands in for the sweep's 200-epoch ones), the newer
    on a tie. Every such choice is appended to ``notes``, naming both runs, the keys in which they
    differ, the one kept and why.
    """
    found: dict[str, list[tuple[float, dict, dict]]] = {}
    for report in sorted(runs_root.rglob(REPORT)):
        row = _scanned_row(report.parent, ks)
        if row is None:
            continue
        settings = _settings(report.parent)
        found.setdefault(row["id"], []).append((report.stat().st_mtime, row, settings))
    # How many cells of each (data set, model) run with each settings: the majority is the norm.
    usage = Counter(
        (row["dataset"], row["model"], _fingerprint(settings))
        for runs in found.values()
        for _, row, settings in runs
    )
    kept = []
    for cell_id in sorted(found):
        runs = found[cell_id]
        best = max(runs, key=lambda r: (r[1]["status"] == "done", usage[_usage_key(r)], r[0]))
        kept.append(best[1])
        for other in runs:
            if other is not best and notes is not None:
                notes.append(_competition_note(cell_id, best, other, usage))
    return kept


# Keys that do not change what a run measures: where it lives, its logger and device, and the
# cell's own coordinates (label setting and seed are in the cell id; an encoder run is a path).
UNSETTING_KEYS = (
    "run_dir", "logger", "keep_checkpoints", "device", "amp", "seed", "scarcity", "pretrained",
    "runs",
)  # fmt: skip


def _settings(run_dir: Path) -> dict:
    """A run's config.yaml, flattened, without `UNSETTING_KEYS`."""
    try:
        raw = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            flat[prefix[:-1]] = node

    walk({k: v for k, v in raw.items() if k not in UNSETTING_KEYS}, "")
    return flat


def _fingerprint(settings: dict) -> str:
    return json.dumps(settings, sort_keys=True, default=str)


def _usage_key(run: tuple[float, dict, dict]) -> tuple[str, str, str]:
    return (run[1]["dataset"], run[1]["model"], _fingerprint(run[2]))


def _competition_note(
    cell_id: str, kept: tuple[float, dict, dict], dropped: tuple[float, dict, dict], usage: Counter
) -> str:
    keys = sorted(set(kept[2]) | set(dropped[2]))
    differ = [k for k in keys if kept[2].get(k) != dropped[2].get(k)]
    shown = ", ".join(f"{k}: {kept[2].get(k)!r} vs {dropped[2].get(k)!r}" for k in differ[:6])
    if kept[1]["status"] != dropped[1]["status"]:
        why = f"the other one is {dropped[1]['status']}"
    elif not differ:
        why = "same settings; kept the newer run"
    elif usage[_usage_key(kept)] != usage[_usage_key(dropped)]:
        why = (
            f"settings differ ({shown}); kept the run whose settings {usage[_usage_key(kept)]} "
            f"run(s) of {kept[1]['model']} share, against {usage[_usage_key(dropped)]}"
        )
    else:
        why = f"settings differ ({shown}); as common as each other, so kept the newer run"
    return (
        f"{cell_id}: two runs, {kept[1]['run_dir']} (kept) and {dropped[1]['run_dir']} "
        f"(left out): {why}. Report a sweep (./run.sh report <sweep>) or move one away to choose."
    )


def write_csv(rows: list[dict], path: Path, fields: list[str]) -> None:
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_value(row.get(k)) for k in fields})
    atomic_write_text(path, buffer.getvalue())


def _empty_row(ks: list[int]) -> dict:
    row: dict[str, Any] = dict.fromkeys(IDENTITY)
    row |= dict.fromkeys(metric_columns(ks), math.nan)
    return row | dict.fromkeys(COUNTS)


def _load_report(run_dir: Path) -> dict:
    """The report's ``metrics``; ValueError with the reason when it is not usable."""
    path = run_dir / REPORT
    try:
        report = json.loads(path.read_text())
    except OSError:
        raise ValueError(f"{path} is missing") from None
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc})") from None
    metrics = report.get("metrics") if isinstance(report, dict) else None
    if not isinstance(metrics, dict) or not isinstance(metrics.get("test"), dict):
        raise ValueError(f"{path} holds no test metrics")
    return report


def _read_metrics(run_dir: Path, ks: list[int]) -> dict:
    try:
        report = _load_report(run_dir)
    except ValueError as exc:
        return {"status": "failed", "error": str(exc)}
    metrics = report["metrics"]
    vali, test = metrics.get("vali") or {}, metrics["test"]
    out: dict[str, Any] = {
        "val_labels": metrics.get("val_labels"),
        "policy": metrics.get("policy"),
        "n_vali_groups": vali.get("n_groups_evaluated"),
        "n_test_groups": test.get("n_groups_evaluated"),
        "n_outlier_groups": test.get("n_outlier_groups"),
        # the run's own CPU time (`core.runs.Run.finish`); NaN in reports older than it
        "cpu_seconds": _number(report.get("cpu_seconds")),
    }
    splits = {"vali": vali, "test": test}
    for column, (split, key) in _metric_sources(ks):
        out[column] = _number(splits[split].get(key))  # NaN in reports older than the metric
    return out


def _scanned_row(run_dir: Path, ks: list[int]) -> dict | None:
    """The row of a run found by scanning, or None for a run without test metrics."""
    try:
        report = _load_report(run_dir)
    except ValueError:
        return None  # pretraining runs, or runs that are not ranking runs at all
    config = _read_config(run_dir)
    if not config:
        row = _empty_row(ks) | {"id": str(run_dir), "status": "failed", "run_dir": str(run_dir)}
        return row | {"error": f"{run_dir / 'config.yaml'} is missing or unreadable"}
    scarcity = config.get("scarcity") or {}
    # The report's name tells letor folders apart (letor-<folder>); older reports lack it.
    dataset = report.get("dataset") or (config.get("data") or {}).get("name") or "unknown"
    model, group = identify_model(report)
    setting = report.get("label_setting") or _setting_tag(scarcity)
    seed = report.get("seed", config.get("seed"))
    fold = fold_of(run_dir)
    place = dataset if fold is None else f"{dataset}/fold={fold}"
    row = _empty_row(ks) | {
        "id": f"{place}/{model}/{setting}/seed={seed}",
        "fold": fold,
        "dataset": dataset,
        "model": model,
        "group": group,
        "stage": report.get("stage"),
        "setting": setting,
        "fraction": scarcity.get("fraction", 1.0),
        "binary_tau": scarcity.get("binary_tau"),
        "seed": seed,
        "status": "done" if (run_dir / "DONE").is_file() else "pending",
        "run_dir": str(run_dir.resolve()),
    }
    return row | _read_metrics(run_dir, ks)


def fold_of(run_dir: Path) -> int | None:
    """The fold of a run a sweep over folds made (its folder lies under ``fold=<k>/``), so that
    a scan keeps the runs of two folds apart; None for any other run."""
    for part in reversed(run_dir.parts):
        if part.startswith("fold=") and part[5:].isdigit():
            return int(part[5:])
    return None


def identify_model(report: dict) -> tuple[str, str]:
    """``(model, group)`` of a run from its report, named as sweeps name them."""
    model = report_model(report) or "unknown"
    return model, str(report.get("group") or model_group(model, strict=False))


def _read_config(run_dir: Path) -> dict:
    try:
        return asdict(read_config(run_dir, CommonConfig))
    except UserError:
        return {}


def _setting_tag(scarcity: dict) -> str:
    try:
        return ScarcityConfig(
            fraction=float(scarcity.get("fraction", 1.0)),
            val=str(scarcity.get("val", "full")),
            binary_tau=scarcity.get("binary_tau"),
            seed=scarcity.get("seed"),
        ).tag
    except (TypeError, ValueError):
        return "unknown"


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


def _csv_value(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value
