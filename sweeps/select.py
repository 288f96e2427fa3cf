"""``./run.sh select <sweep> [key=value ...]``: the validation-best model of each setting.

For every (data set, label setting) of a sweep's done cells, the one model, over all models and
groups, with the highest validation NDCG@``select_k`` averaged over its seeds; ties go to the
model with more seeds, then to the first name in alphabetical order. This is the rule by which the
report chooses each group's member (`sweeps.stats.choose_best`), applied to the whole setting.

Test metrics never enter the choice: a model picked on test would carry an optimistic test score,
and the choice must be one that could have been made before the test set was looked at. The test
NDCG@``k`` (mean and std over seeds) is written only for information.

Writes ``best.json`` (``<sweep folder>/report/best.json``, or ``out=<file>``): per setting the
chosen model, its group, its validation mean and seed count, its test mean and std, and per seed
the run folder and its model bundle (``<run_dir>/bundle``; ``bundle_exists``: it holds
``bundle.json``). Prints a table and the file's path.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from scarce_ltr.core.bundle import BUNDLE_DIR, MANIFEST
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import write_json
from scarce_ltr.core.runs import runs_root as default_runs_root
from scarce_ltr.sweeps import results, stats

BEST = "best.json"
RULE = (
    "highest mean validation NDCG@{select_k} over seeds, over all models of the setting; "
    "ties: more seeds, then alphabetical; test metrics never enter"
)


@dataclass(frozen=True)
class SelectConfig:
    sweep: str | None = None  # required: a sweep name under runs/sweeps/, or a sweep folder
    runs_root: str | None = None  # default: $LTR_RUNS_DIR or ./runs
    out: str | None = None  # default: <sweep folder>/report/best.json
    k: int = 5  # test NDCG cutoff reported (for information only)
    select_k: int = 5  # validation NDCG cutoff that chooses

    def __post_init__(self) -> None:
        if not self.sweep:
            raise ValueError("sweep is required: ./run.sh select <sweep> (a name or a folder)")
        if self.k < 1 or self.select_k < 1:
            raise ValueError("k and select_k must be >= 1")


def main(cfg: SelectConfig, out_dir: Path | None = None) -> dict:
    """Choose, write ``best.json``, print the table; returns what was written."""
    root = Path(cfg.runs_root) if cfg.runs_root else default_runs_root()
    manifest = results.manifest_path(str(cfg.sweep), root)
    rows = results.rows_from_manifest(manifest, sorted({cfg.k, cfg.select_k}))
    done = [r for r in rows if r.get("status") == "done"]
    if not done:
        raise UserError(f"sweep '{cfg.sweep}' ({manifest}) has no finished cell to choose from")
    best = {
        "sweep": cfg.sweep,
        "manifest": str(manifest),
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "k": cfg.k,
        "select_k": cfg.select_k,
        "rule": RULE.format(select_k=cfg.select_k),
        "choices": choose(done, k=cfg.k, select_k=cfg.select_k),
    }
    path = Path(cfg.out) if cfg.out else manifest.parent / "report" / BEST
    write_json(path, best)
    print(text_table(best))
    print(f"best models: {path}")
    return best


def choose(done: list[dict], *, k: int, select_k: int) -> list[dict]:
    """One choice per (data set, setting), in curve order; ``done``: the done rows of a sweep."""
    settings: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for entry in stats.model_table(done, k=k, select_k=select_k):
        settings[(entry["dataset"], entry["setting"])].append(entry)
    runs = {(r["dataset"], r["setting"], r["model"], r["seed"]): r for r in done}
    choices = []
    for (dataset, setting), entries in settings.items():
        entry = stats.choose_best(entries)
        seeds = []
        for seed, vali, test in zip(entry["seeds"], entry["vali"], entry["test"], strict=True):
            run_dir = Path(runs[(dataset, setting, entry["model"], seed)]["run_dir"])
            bundle = run_dir / BUNDLE_DIR
            seeds.append(
                {
                    "seed": seed,
                    "run_dir": str(run_dir),
                    "bundle": str(bundle),
                    "bundle_exists": (bundle / MANIFEST).is_file(),
                    "vali": _number(vali),
                    "test": _number(test),
                }
            )
        choices.append(
            {
                "dataset": dataset,
                "setting": setting,
                "series": entry["series"],
                "x": entry["x"],
                "model": entry["model"],
                "group": entry["group"],
                "vali_mean": _number(entry["vali_mean"]),
                "n_seeds": len(stats.finite(entry["vali"])),  # the count that breaks ties
                "test_mean": _number(entry["test_mean"]),
                "test_std": _number(entry["test_std"]),
                "n_candidates": len(entries),
                "seeds": seeds,
            }
        )
    return sorted(choices, key=lambda c: (c["dataset"], c["series"], c["x"], c["setting"]))


def text_table(best: dict) -> str:
    """The choices as plain text, one line per (data set, setting)."""
    k, select_k = best["k"], best["select_k"]
    header = ["dataset", "setting", "model", "group", f"vali NDCG@{select_k}", "seeds"]
    table = [header + [f"test NDCG@{k}", "bundles"]]
    for c in best["choices"]:
        std = "" if c["test_std"] is None else f" ± {c['test_std']:.4f}"
        test = "-" if c["test_mean"] is None else f"{c['test_mean']:.4f}{std}"
        vali = "-" if c["vali_mean"] is None else f"{c['vali_mean']:.4f}"
        bundles = f"{sum(s['bundle_exists'] for s in c['seeds'])}/{len(c['seeds'])}"
        table.append(
            [c["dataset"], c["setting"], c["model"], c["group"], vali, str(c["n_seeds"])]
            + [test, bundles]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header) + 2)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table
    ]
    return f"Validation-best model per setting ({best['rule']})\n" + "\n".join(lines)


def _number(value: float | None) -> float | None:
    """JSON has no NaN: an undefined mean or std (one seed) is null."""
    return float(value) if value is not None and math.isfinite(float(value)) else None
