"""What a cheaper deep search costs and whether it chooses as well (issue 47, item 2).

For each (fold, seed, fraction) unit of the five OHSUMED folds it runs, one process each with
one thread (``OMP_NUM_THREADS=1``), the searched ``scratch+full`` of ``configs/sweep/
ohsumed-search.yaml`` (30 trials from a fresh encoder, lr 2e-4 first) under each candidate
search setting, and ``gbdt-optuna``'s 30 trials on the same labels. It then prints, per fraction
and candidate: the CPU seconds (``report.json``'s ``cpu_seconds``: the run's own process, user +
system) against ``gbdt-optuna``'s, the epochs trained, the trials pruned, and the chosen recipe's
test NDCG@5 paired against today's search (``none``) over the units, with its spread. Vali
chooses everything; test is only reported.

    nice -n 10 .venv/bin/python benchmarks/bench_search_cost.py [--folds 1 2 3 4 5]
        [--seeds 0] [--fractions 0.2 0.05] [--candidates none patience20 median10]
        [--jobs 2] [--report-only] [--portfolio <file>]

``--portfolio <file>`` adds the candidate ``portfolio``: the file's K recipes
(``search.strategy=portfolio``, no Optuna trials; docs/finetune.md "A portfolio instead of a
search"), issue 61's cost bar (at most 4x ``gbdt-optuna`` on OHSUMED Fold1 at 20 %).

Runs live in ``runs/bench/search-cost/<data>/fold=<k>/<candidate>/frac=<f>/seed=<s>/``; a run
holding ``DONE`` is skipped, so the benchmark resumes.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from ohsumed_folds import ROOT, data_args, paired, run_finetuning

TREE = "gbdt-optuna"
# The candidate search settings beside today's (``none``), on top of search.n_trials=30.
CANDIDATES = {
    "none": [],
    "patience20": ["patience=20"],
    "median10": [
        "patience=20",
        "search.pruner=median",
        "search.prune_startup=10",
        "search.prune_warmup=30",
    ],
    "median5": ["patience=20", "search.pruner=median", "search.prune_warmup=20"],
}
# Not a search setting but the search's replacement: --portfolio's file, K recipes, no trials.
PORTFOLIO = "portfolio"


def run_path(args, name: str, fold: int, seed: int, fraction: float) -> Path:
    return args.root / args.data / f"fold={fold}" / name / f"frac={fraction:g}" / f"seed={seed}"


def common(args, fold: int, seed: int, fraction: float) -> list[str]:
    splits = [f"data.splits.{s}=Fold{fold}/{s}" for s in ("train", "vali", "test")]
    return [
        *data_args(args.data),
        *splits,
        "logger=none",
        f"seed={seed}",
        f"scarcity.fraction={fraction}",
        "scarcity.val=full",
    ]


def arguments(args, name: str, fold: int, seed: int, fraction: float) -> list[str]:
    if name == TREE:
        tree = ["gbdt.num_threads=1", "gbdt.n_trials=30"]
        return ["baseline", TREE, *common(args, fold, seed, fraction), *tree]
    if name == PORTFOLIO:
        trials = ["search.strategy=portfolio", f"search.portfolio={args.portfolio}"]
    else:
        trials = ["search.n_trials=30", *CANDIDATES[name]]
    search = ["pretrained=none", "optimizer.lr=2.0e-4", *trials]
    return ["finetune", "full", *common(args, fold, seed, fraction), *search]


def cells(args) -> list[tuple[str, int, int, float]]:
    """Unit by unit (each fold's fractions before the next fold), the tree first in a unit."""
    return [
        (name, fold, seed, fraction)
        for fold in args.folds
        for seed in args.seeds
        for fraction in args.fractions
        for name in [TREE, *args.candidates]
    ]


def train(args, cell: tuple[str, int, int, float]) -> None:
    name, fold, seed, fraction = cell
    out = run_path(args, name, fold, seed, fraction)
    label = f"{name} fold={fold} seed={seed} frac={fraction:g}"
    run_finetuning(out, arguments(args, name, fold, seed, fraction), label, wait_for=None)


def read(folder: Path) -> dict | None:
    """A finished run's test and vali NDCG@5, CPU seconds, epochs and pruned trials."""
    if not (folder / "DONE").is_file():
        return None
    report = json.loads((folder / "report.json").read_text())
    row = {
        "test": report["metrics"]["test"]["ndcg@5"],
        "vali": report["metrics"]["vali"]["ndcg@5"],
        "cpu": report.get("cpu_seconds", float("nan")),
    }
    trials = [json.loads(p.read_text()) for p in folder.glob("grid/*/result.json")]
    row["epochs"] = sum(t.get("epochs_trained", 0) for t in trials)
    row["pruned"] = sum(bool(t.get("pruned")) for t in trials)
    search = report.get("search")  # a tree's names its strategy; a deep search's is a dict
    row["chosen"] = search.get("chosen_trial") if isinstance(search, dict) else None
    return row


def report(args) -> None:
    for fraction in args.fractions:
        print(f"\n### {args.data}, {fraction:g} of the train QGs labeled\n")
        units = [(f, s) for f in args.folds for s in args.seeds]
        runs = {
            (name, unit): read(run_path(args, name, *unit, fraction))
            for name in [TREE, *args.candidates]
            for unit in units
        }
        print(
            "| search | units | CPU s (mean) | x gbdt-optuna (mean, min-max) | epochs (mean) "
            "| pruned trials (mean) | test NDCG@5 (mean) | paired vs none (test) "
            "| paired vs none (vali) |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for name in args.candidates:
            done = [u for u in units if runs[name, u] and runs[TREE, u]]
            if not done:
                print(f"| {name} | 0 | | | | | | | |")
                continue
            rows = [runs[name, u] for u in done]
            ratios = [runs[name, u]["cpu"] / runs[TREE, u]["cpu"] for u in done]
            against = [u for u in done if runs["none", u]]
            vs_test = vs_vali = "-"
            if name != "none" and len(against) >= 2:
                vs_test = paired(
                    [runs[name, u]["test"] for u in against],
                    [runs["none", u]["test"] for u in against],
                )
                vs_vali = paired(
                    [runs[name, u]["vali"] for u in against],
                    [runs["none", u]["vali"] for u in against],
                )
            print(
                f"| {name} | {len(done)} | {np.mean([r['cpu'] for r in rows]):.0f} "
                f"| {np.mean(ratios):.1f}x ({min(ratios):.1f}-{max(ratios):.1f}) "
                f"| {np.mean([r['epochs'] for r in rows]):.0f} "
                f"| {np.mean([r['pruned'] for r in rows]):.1f} "
                f"| {np.mean([r['test'] for r in rows]):.4f} | {vs_test} | {vs_vali} |"
            )
        tree = [runs[TREE, u] for u in units if runs[TREE, u]]
        if tree:
            print(
                f"\n{TREE}: {len(tree)} units, {np.mean([r['cpu'] for r in tree]):.1f} CPU s, "
                f"test NDCG@5 {np.mean([r['test'] for r in tree]):.4f}"
            )


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="ohsumed")
    parser.add_argument("--folds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.2, 0.05])
    parser.add_argument(
        "--candidates",
        nargs="+",
        default=["none", "patience20", "median10"],
        choices=[*CANDIDATES, PORTFOLIO],
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--root", type=Path, default=ROOT / "runs" / "bench" / "search-cost")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--portfolio", type=Path, help="the portfolio file of candidate portfolio")
    args = parser.parse_args()
    if (PORTFOLIO in args.candidates) != (args.portfolio is not None):
        parser.error("--candidates portfolio and --portfolio <file> go together")
    if args.portfolio is not None:
        args.portfolio = args.portfolio.resolve()
    if "none" not in args.candidates:
        parser.error("--candidates must hold none: every candidate is paired against it")
    return args


def main() -> None:
    args = parse_args()
    if not args.report_only:
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda cell: train(args, cell), cells(args)))
    report(args)


if __name__ == "__main__":
    main()
