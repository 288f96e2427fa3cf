"""Why pretraining subtracts on query-normalised features (issue 30, item 5).

The runs are read in benchmarks/hybrid-log.md, "Why pretraining subtracts on query-normalised data".

On OHSUMED (LETOR 3.0, QueryLevelNorm: every feature min-max scaled within its query), for each
fold and seed, at one label fraction:

- three SimCLR-Rank pretraining runs (``epochs`` 20, the hybrid sweep's): ``noise`` (the
  method's views, Gaussian noise of scale 1.0: today's recipe), ``global`` (views by donor
  replacement, ``augment.replace_p``, donors from the whole batch: other queries) and ``qg``
  (the same with donors from the item's own QG); their reports give the k-NN probe and the
  effective rank of the vali embeddings after pretraining and of the randomly initialised
  encoder of the same seed (``diagnosis``);
- on each encoder and on a random one (``pretrained=none``): ``lp`` (a linear head on the
  frozen encoder) at the paper's lr 5e-5 for 200 epochs (noise and random encoders only) and
  with the lr grid the from-scratch ResNet gets (chosen on vali), and ``full`` at the sweep's
  lr 2e-4 (on the random encoder: the same network and recipe from scratch); the grid's ``lp``
  and ``full`` stop a phase after 30 epochs without a better vali NDCG@5, as ``resnet`` does;
- ``baseline resnet``: the same ResNet from scratch with its own recipe (300 epochs, 3-point grid).

Every run goes through the CLI, one process each, under ``<out>/fold<k>/seed<s>/...``; a run
holding ``DONE`` is skipped, so the script resumes. Everything is chosen on vali; test is
reported only.

    nice -n 10 .venv/bin/python benchmarks/bench_pretrain_diagnosis.py [--folds 1 2]
        [--seeds 0 1 2] [--fraction 0.2] [--jobs 2]

Prints a markdown table (mean ± std over folds x seeds, and the paired test margin against
``resnet``) and writes ``<out>/results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ["data=ohsumed", f"data.path={ROOT.parent / 'shared/data/ohsumed-letor3'}"]


def pretrain_variants(replace_p: float) -> dict[str, list[str]]:
    replace = ["augment.noise_scale=0", f"augment.replace_p={replace_p}"]
    return {
        "noise": [],
        "global": [*replace, "augment.replace_source=global"],
        "qg": [*replace, "augment.replace_source=qg"],
    }


def cli(args: list[str], run_dir: Path, *, threads: int) -> dict | None:
    """The run's report.json, running the CLI first unless the run finished before."""
    if not (run_dir / "DONE").is_file():
        run_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": str(threads)}
        command = [sys.executable, "-m", "scarce_ltr", *args, f"run_dir={run_dir}"]
        start = time.perf_counter()
        with open(run_dir / "log.txt", "ab") as log:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        name = " ".join(a for a in args[:2] if "=" not in a)
        took = time.perf_counter() - start
        print(f"  {name}: exit {code}, {took:.0f} s ({run_dir})", flush=True)
        if code != 0:
            return None
    return json.loads((run_dir / "report.json").read_text())


def cells(args) -> list[tuple[int, int, Path, list[str]]]:
    return [
        (fold, seed, args.out / f"fold{fold}" / f"seed{seed}", _base(fold, seed))
        for fold in args.folds
        for seed in args.seeds
    ]


def _base(fold: int, seed: int) -> list[str]:
    splits = (
        f"data.splits={{train: Fold{fold}/train, vali: Fold{fold}/vali, test: Fold{fold}/test}}"
    )
    return [*DATA, splits, f"seed={seed}", "logger=none"]


def downstream_runs(args, base: list[str], folder: Path) -> dict[str, tuple[list[str], Path]]:
    """Model name -> (CLI args, run dir) of every labeled run of one (fold, seed)."""
    common = [*base, f"scarcity.fraction={args.fraction}"]
    grid = "lrs=[" + ",".join(f"{lr:g}" for lr in args.lrs) + "]"
    runs: dict[str, tuple[list[str], Path]] = {
        "resnet": (["baseline", "resnet", *common], folder / "resnet")
    }
    encoders = {"random": "none"} | {
        name: str(folder / f"pretrain-{name}") for name in pretrain_variants(args.replace_p)
    }
    for name, pretrained in encoders.items():
        enc = [*common, f"pretrained={pretrained}"]
        if name in ("random", "noise"):
            runs[f"lp@5e-5 {name}"] = (["finetune", "lp", *enc], folder / f"lp-paper-{name}")
        # resnet's early stopping (30 epochs without a better vali NDCG@5), each phase
        stop = "patience=30"
        lp_grid = ["finetune", "lp", *enc, grid, stop]
        runs[f"lp@grid {name}"] = (lp_grid, folder / f"lp-grid-{name}")
        full = ["finetune", "full", *enc, f"optimizer.lr={args.finetune_lr}", stop]
        runs[f"full {name}"] = (full, folder / f"full-{name}")
    return runs


def ndcg(report: dict | None, split: str) -> float:
    return float("nan") if report is None else float(report["metrics"][split]["ndcg@5"])


def run_all(args) -> list[dict]:
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    variants = pretrain_variants(args.replace_p)
    pretrain_jobs = [
        (
            ["pretrain", "simclr-rank", *base, f"epochs={args.pretrain_epochs}", *extra],
            folder / f"pretrain-{name}",
        )
        for _, _, folder, base in cells(args)
        for name, extra in variants.items()
    ]
    labeled_jobs = [
        job
        for _, _, folder, base in cells(args)
        for job in downstream_runs(args, base, folder).values()
    ]
    if not args.table_only:
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda job: cli(*job, threads=threads), pretrain_jobs))
            list(pool.map(lambda job: cli(*job, threads=threads), labeled_jobs))
    rows = []
    for fold, seed, folder, base in cells(args):
        row: dict = {"fold": fold, "seed": seed}
        for name in variants:
            report = _report(folder / f"pretrain-{name}")
            diagnosis = (report or {}).get("diagnosis") or {}
            row[f"pretrain {name}"] = diagnosis
        for name, (_, run_dir) in downstream_runs(args, base, folder).items():
            report = _report(run_dir)
            row[name] = {"vali": ndcg(report, "vali"), "test": ndcg(report, "test")}
            if report and report.get("learning_rate") is not None:
                row[name]["lr"] = report["learning_rate"]
        rows.append(row)
    return rows


def _report(run_dir: Path) -> dict | None:
    path = run_dir / "report.json"
    if not (run_dir / "DONE").is_file() or not path.is_file():
        return None
    return json.loads(path.read_text())


def _cell(values: list, digits: int = 3) -> str:
    kept = [v for v in values if v is not None and np.isfinite(v)]
    if not kept:
        return "missing"  # failed, or not finished
    spread = f" ± {np.std(kept, ddof=1):.{digits}f}" if len(kept) > 1 else ""
    n = f" (n={len(kept)})" if len(kept) < len(values) else ""
    return f"{np.mean(kept):.{digits}f}{spread}{n}"


def _paired(a: list[float], b: list[float]) -> str:
    """Mean of a - b over the cells both have, and the paired t-test's two-sided p."""
    from scipy import stats

    pairs = [(x, y) for x, y in zip(a, b, strict=True) if np.isfinite(x) and np.isfinite(y)]
    if len(pairs) < 2:
        return "-"
    diff = np.array([x - y for x, y in pairs])
    p = stats.ttest_rel([x for x, _ in pairs], [y for _, y in pairs]).pvalue
    return f"{diff.mean():+.3f} (p={p:.2g}, {int((diff > 0).sum())}/{len(diff)} up)"


def tables(rows: list[dict], args) -> str:
    variants = list(pretrain_variants(args.replace_p))
    lines = [
        "| encoder | k-NN probe vali NDCG@5 | effective rank, vali items | chosen epoch |",
        "|---|---|---|---|",
    ]
    raw = [r[f"pretrain {variants[0]}"].get("knn_ndcg@5_raw") for r in rows]
    lines.append(f"| input features | {_cell(raw)} | - | - |")
    first = f"pretrain {variants[0]}"
    for label, source, key in [("random init", first, "random_init")] + [
        (f"simclr-rank {v}", f"pretrain {v}", "pretrained") for v in variants
    ]:
        knn = [(r[source].get(key) or {}).get("knn_ndcg@5") for r in rows]
        rank = [(r[source].get(key) or {}).get("effective_rank_vali") for r in rows]
        epochs = [r[source].get("pretrained_epoch") for r in rows] if key == "pretrained" else []
        chosen = _cell([e for e in epochs if e is not None], 1) if epochs else "-"
        lines.append(f"| {label} | {_cell(knn)} | {_cell(rank, 1)} | {chosen} |")
    models = [k for k in rows[0] if isinstance(rows[0][k], dict) and "test" in rows[0][k]]
    lines += [
        "",
        "| model | vali NDCG@5 | test NDCG@5 | test, paired against resnet "
        "| test, paired against the same recipe on the random encoder |",
        "|---|---|---|---|---|",
    ]
    resnet = [r["resnet"]["test"] for r in rows]
    for name in models:
        vali = [r[name]["vali"] for r in rows]
        test = [r[name]["test"] for r in rows]
        margin = "-" if name == "resnet" else _paired(test, resnet)
        recipe, _, encoder = name.rpartition(" ")
        same = f"{recipe} random"
        if encoder in ("random", "resnet") or same not in rows[0]:
            gain = "-"
        else:
            gain = _paired(test, [r[same]["test"] for r in rows])
        lines.append(f"| {name} | {_cell(vali)} | {_cell(test)} | {margin} | {gain} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", nargs="+", type=int, default=[1])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--fraction", type=float, default=0.2)
    parser.add_argument("--pretrain-epochs", type=int, default=20)  # the hybrid sweep's
    parser.add_argument("--replace-p", type=float, default=0.5)
    parser.add_argument("--finetune-lr", type=float, default=2e-4)  # the hybrid sweep's
    parser.add_argument("--lrs", nargs="+", type=float, default=[1e-2, 1e-3, 1e-4])  # resnet's
    parser.add_argument("--jobs", type=int, default=1)  # runs at a time
    # Read the finished runs only (a run still going, or not started, counts as missing).
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_diagnosis")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = run_all(args)
    print(
        f"\n{platform.node()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}, "
        f"{time.perf_counter() - start:.0f} s; OHSUMED folds {args.folds} x seeds {args.seeds}, "
        f"{100 * args.fraction:g} % labeled train QGs, vali fully labeled; pretraining "
        f"{args.pretrain_epochs} epochs, replace_p {args.replace_p}"
    )
    print(tables(rows, args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
