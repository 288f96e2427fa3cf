"""Tree rankers side by side: test NDCG@5 and seconds of every tuned tree ranker and of `gbdt`.

For each data set, label fraction and seed, every model runs as ``./run.sh baseline`` would
(in this process, its own run folder under --out): the paper's LightGBM grid (``gbdt``),
LightGBM's Optuna search (``gbdt-optuna``), CatBoost's four losses and XGBoost's two
objectives. Every choice is made on vali inside each run; the row "trees (vali-best)" takes,
per setting and seed, the tree ranker with the highest vali NDCG@5 (what a sweep's report
group ``gbdt`` does), and its paired margin over ``gbdt`` (mean, std, paired t-test p over
the seeds and fractions of a data set) is the number that says how much stronger the strongest
tree is. Results go to --out/results.json; the table is printed.

    .venv/bin/python benchmarks/bench_trees.py [--data synthetic ohsumed] [--seeds 0 1 2]
        [--fractions 0.05 0.2 1.0] [--trials-lgb 15] [--trials 6] [--out /tmp/bench_trees]
    .venv/bin/python benchmarks/bench_trees.py --summarize a/results.json b/results.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import time
from pathlib import Path

import numpy as np
from scipy import stats

from scarce_ltr.cli import run

ROOT = Path(__file__).resolve().parents[1]
DATA = {
    "synthetic": ["data=synthetic"],
    "ohsumed": ["data=ohsumed", f"data.path={ROOT.parent / 'shared/data/ohsumed-letor3'}"],
}


def models(trials_lgb: int, trials: int) -> dict[str, tuple[str, list[str]]]:
    """Row name -> (baseline name, overrides); one thread each, the machine is shared."""
    cat = ["catboost.num_threads=1", f"catboost.n_trials={trials}"]
    xgb = ["xgboost.num_threads=1", f"xgboost.n_trials={trials}"]
    return {
        "gbdt (paper grid)": ("gbdt", ["gbdt.num_threads=1"]),
        "gbdt-optuna": ("gbdt-optuna", ["gbdt.num_threads=1", f"gbdt.n_trials={trials_lgb}"]),
        "catboost YetiRank": ("catboost", [*cat, "catboost.loss=YetiRank"]),
        "catboost YetiRankPairwise": ("catboost", [*cat, "catboost.loss=YetiRankPairwise"]),
        "catboost StochasticRank": ("catboost", [*cat, "catboost.loss=StochasticRank"]),
        "catboost QueryRMSE": ("catboost", [*cat, "catboost.loss=QueryRMSE"]),
        "xgboost rank:ndcg": ("xgboost", [*xgb, "xgboost.objective=rank:ndcg"]),
        "xgboost rank:pairwise": ("xgboost", [*xgb, "xgboost.objective=rank:pairwise"]),
    }


def one_run(name: str, overrides: list[str], folder: Path) -> dict:
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # the final block of each run
        report = run(["baseline", name, *overrides, "logger=none", f"run_dir={folder}"])
    if report is None:  # finished before: read it back
        report = json.loads((folder / "report.json").read_text())
    seconds = report.get("seconds", time.perf_counter() - start)
    test, vali = report["metrics"]["test"], report["metrics"]["vali"]
    row = {"vali_ndcg@5": vali["ndcg@5"], "test_ndcg@5": test["ndcg@5"], "seconds": seconds}
    for key in ("mrr", "err@10"):  # when core/metrics.py reports them
        if key in test:
            row[f"test_{key}"] = test[key]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=list(DATA), choices=list(DATA))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.05, 0.2, 1.0])
    parser.add_argument("--trials-lgb", type=int, default=15)
    parser.add_argument("--trials", type=int, default=6, help="CatBoost and XGBoost trials")
    parser.add_argument("--models", nargs="*", default=None, help="row names (default: all)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_trees"))
    parser.add_argument(
        "--summarize",
        nargs="+",
        type=Path,
        help="only print the tables of these results.json files (a later file's row replaces "
        "an earlier one of the same data set, fraction, seed and model)",
    )
    args = parser.parse_args()
    if args.summarize:
        merged = {}
        for path in args.summarize:
            for r in json.loads(path.read_text()):
                merged[(r["data"], r["fraction"], r["seed"], r["model"])] = r
        summarize(list(merged.values()))
        return
    table = models(args.trials_lgb, args.trials)
    chosen = {k: v for k, v in table.items() if args.models is None or k in args.models}
    results = []
    for data in args.data:
        for fraction in args.fractions:
            for seed in args.seeds:
                setting = [*DATA[data], f"scarcity.fraction={fraction}", f"seed={seed}"]
                for row, (name, overrides) in chosen.items():
                    folder = args.out / data / row.replace(" ", "_") / f"{fraction}" / f"{seed}"
                    out = one_run(name, [*setting, *overrides], folder)
                    results.append({"data": data, "fraction": fraction, "seed": seed,
                                    "model": row, **out})  # fmt: skip
                    print(f"{data} frac={fraction} seed={seed} {row:<26} vali "
                          f"{out['vali_ndcg@5']:.4f} test {out['test_ndcg@5']:.4f} "
                          f"{out['seconds']:6.1f} s", flush=True)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    summarize(results)


def summarize(results: list[dict]) -> None:
    """Per data set and fraction: mean test NDCG@5 (std over seeds) and seconds per model; the
    vali-best tree's paired margin over gbdt per data set."""
    by = {}
    for r in results:
        by.setdefault((r["data"], r["fraction"], r["seed"]), {})[r["model"]] = r
    names = list(dict.fromkeys(r["model"] for r in results))
    for data in dict.fromkeys(r["data"] for r in results):
        fractions = sorted({f for d, f, _ in by if d == data})
        print(f"\n{data}: test NDCG@5, mean ± std over seeds (seconds per model)")
        print(f"| model | {' | '.join(f'{f:g}' for f in fractions)} |")
        print(f"|---|{'---|' * len(fractions)}")
        for name in [*names, "trees (vali-best)"]:
            cells = []
            for f in fractions:
                rows = [
                    _pick(cell, name) for (d, ff, _), cell in by.items() if d == data and ff == f
                ]
                test = np.array([r["test_ndcg@5"] for r in rows])
                secs = np.mean([r["seconds"] for r in rows])
                std = test.std(ddof=1) if len(test) > 1 else 0.0
                cells.append(f"{test.mean():.4f} ± {std:.4f} ({secs:.0f} s)")
            print(f"| {name} | {' | '.join(cells)} |")
        extra = [k for k in ("test_mrr", "test_err@10") if all(k in r for r in results)]
        if extra:
            print(f"\n{data}: {', '.join(k[5:] for k in extra)} per fraction (mean over seeds)")
            print(f"| model | {' | '.join(f'{k[5:]} {f:g}' for k in extra for f in fractions)} |")
            print(f"|---|{'---|' * len(extra) * len(fractions)}")
            for name in [*names, "trees (vali-best)"]:
                means = [
                    np.mean(
                        [_pick(c, name)[k] for (d, ff, _), c in by.items() if d == data and ff == f]
                    )
                    for k in extra
                    for f in fractions
                ]
                print(f"| {name} | {' | '.join(f'{m:.4f}' for m in means)} |")
        paper = "gbdt (paper grid)"
        cells_of = [cell for (d, _, _), cell in by.items() if d == data and paper in cell]
        for name in [*names, "trees (vali-best)"]:
            usable = [c for c in cells_of if name in c or name == "trees (vali-best)"]
            if name == paper or len(usable) < 2:
                continue
            margin = np.array(
                [_pick(c, name)["test_ndcg@5"] - c[paper]["test_ndcg@5"] for c in usable]
            )
            p = stats.ttest_1samp(margin, 0.0).pvalue
            print(f"{name} - gbdt: {margin.mean():+.4f} ± {margin.std(ddof=1):.4f} "
                  f"(n={len(margin)}, paired t-test p={p:.3g})")  # fmt: skip
        for f in fractions:
            picks = [
                _pick(c, "trees (vali-best)")["model"]
                for (d, ff, _), c in by.items()
                if d == data and ff == f
            ]
            print(f"  frac {f:g}: vali picks {', '.join(picks)}")


def _pick(cell: dict, name: str) -> dict:
    if name != "trees (vali-best)":
        return cell[name]
    best = max(
        cell.values(), key=lambda r: -math.inf if r["vali_ndcg@5"] is None else r["vali_ndcg@5"]
    )
    return best


if __name__ == "__main__":
    main()
