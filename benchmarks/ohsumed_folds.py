"""What the five-fold OHSUMED benchmarks share (bench_l2sp.py, bench_recipe.py): a sweep's run
folders, one finetuning run through the CLI beside it, the results a run reports and their rows
per (fraction, fold, seed), and the paired margin they print. The same helpers serve the other
five-fold presets in ../shared/data (`FOLDED`: ``data="yandex"``, bench_oracle_encoder.py
``--data yandex``); OHSUMED is every function's default.

Each benchmark runs its sweep first (``configs/sweep/<name>.yaml``: the models, one pretraining
per (fold, seed)), then finetunes variants of its own on those pretrainings, one process per run,
in ``<sweep>/ohsumed/fold=<k>/finetune/<variant>/frac=<f>/seed=<s>/``; a run holding ``DONE`` is
skipped, so a benchmark resumes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from scipy import stats

from scarce_ltr.reports.stats import paired_greater
from scarce_ltr.sweeps.model_jobs import sweep_job

ROOT = Path(__file__).resolve().parents[1]
# The five-fold presets (configs/data/<name>.yaml) and their folders in ../shared/data beside the
# project root (as configs/sweep/<name>-*.yaml).
FOLDED = {"ohsumed": "ohsumed-letor3", "yandex": "yandex-web"}


def data_args(data: str = "ohsumed") -> list[str]:
    """``data=<preset> data.path=<its five folds>``."""
    return [f"data={data}", f"data.path={ROOT.parent / 'shared' / 'data' / FOLDED[data]}"]


DATA = data_args("ohsumed")


def run_dir(
    sweep: Path, model: str, fold: int, seed: int, fraction: float, data: str = "ohsumed"
) -> Path:
    """A sweep cell's folder, the stage (baseline / finetune / ensemble) the sweep's own."""
    stage = sweep_job(model)[1]
    return sweep / data / f"fold={fold}" / stage / model / f"frac={fraction:g}" / f"seed={seed}"


def pretraining(sweep: Path, fold: int, seed: int, data: str = "ohsumed") -> Path:
    return sweep / data / f"fold={fold}" / "pretrain" / "simclr-rank" / f"seed={seed}"


def finetune_args(
    fold: int, seed: int, fraction: float, pretrained: Path | str, data: str = "ohsumed"
) -> list[str]:
    """The sweep's ``finetune full`` job of a cell (lr 2e-4, vali fully labeled)."""
    splits = [f"data.splits.{s}=Fold{fold}/{s}" for s in ("train", "vali", "test")]
    return [
        "finetune",
        "full",
        *data_args(data),
        *splits,
        "logger=none",
        f"seed={seed}",
        f"scarcity.fraction={fraction}",
        "scarcity.val=full",
        f"pretrained={pretrained}",
        "optimizer.lr=2.0e-4",
    ]


def parser(doc: str, sweep: str) -> argparse.ArgumentParser:
    """The options every such benchmark takes; ``--sweep`` defaults to runs/sweeps/<sweep>."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--folds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.05, 0.2])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sweep", type=Path, default=ROOT / "runs" / "sweeps" / sweep)
    parser.add_argument("--no-sweep", action="store_true", help="the sweep ran (or runs) already")
    parser.add_argument("--report-only", action="store_true")
    return parser


def readout_parser(
    doc: str, sweep: str, *, seeds: tuple[int, ...] = (0, 1, 2)
) -> argparse.ArgumentParser:
    """The options of a script that reads a sweep's finished runs and trains nothing:
    ``--sweep`` (default runs/sweeps/<sweep>), ``--folds``, ``--seeds``; the script adds its
    budget's option (`fold_seed_units` lists the units)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--sweep", type=Path, default=ROOT / "runs" / "sweeps" / sweep)
    parser.add_argument("--folds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(seeds))
    return parser


def fold_seed_units(args) -> list[tuple[int, int]]:
    """``(fold, seed)`` of `readout_parser`'s options, every fold of a seed before the next."""
    return [(f, s) for s in args.seeds for f in args.folds]


def units(args) -> list[tuple[int, int, float]]:
    """``(fold, seed, fraction)``: every fold at the first fraction before the next fraction
    (what fits in a budget)."""
    return [(f, s, frac) for frac in args.fractions for f in args.folds for s in args.seeds]


def run_all(name: str, args, cells: list, train: Callable) -> None:
    """The sweep ``name`` (unless ``--no-sweep``), then ``train`` on every cell, ``--jobs`` at a
    time (beside the sweep's own workers when both run); nothing with ``--report-only``."""
    if args.report_only:
        return
    if not args.no_sweep:
        run_sweep(name, args)
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(train, cells))


def run_sweep(name: str, args, **lists: list) -> None:
    """``./run.sh sweep <name>`` on the benchmark's folds, seeds and fractions; ``lists`` set
    these or other list keys of the sweep instead (``models=[...]``, ``folds=[2]``)."""
    listed = {"folds": args.folds, "seeds": args.seeds, "fractions": args.fractions, **lists}
    # This interpreter, not run.sh: run.sh would reinstall the project into .venv whenever its
    # stamp (pyproject.toml, constraints.txt) differs, and a benchmark runs inside that .venv.
    command = [sys.executable, "-m", "scarce_ltr", "sweep", name]
    command += [f"{key}=[{','.join(f'{v:g}' if isinstance(v, float) else str(v) for v in values)}]"
                for key, values in listed.items()]  # fmt: skip
    command += ["logger=none", f"workers={args.jobs}", f"run_dir={args.sweep}"]
    env = {"OMP_WAIT_POLICY": "passive", **os.environ}  # run.sh's default
    subprocess.run(command, check=True, cwd=ROOT, env=env)


def run_finetuning(out: Path, arguments: list[str], label: str, *, wait_for: Path | None) -> None:
    """``python -m scarce_ltr <arguments> run_dir=<out>``, logged to ``out/log.txt``, unless
    ``out`` is finished; waits for ``wait_for`` (a pretraining the sweep is still running)."""
    if (out / "DONE").is_file():
        return
    while wait_for is not None and not (wait_for / "DONE").is_file():
        time.sleep(10)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "scarce_ltr", *arguments, f"run_dir={out}"]
    start = time.perf_counter()
    with open(out / "log.txt", "ab") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    print(f"  {label}: exit {code}, {time.perf_counter() - start:.0f} s", flush=True)


def fit_seconds(folder: Path, report: dict) -> float:
    """Seconds of training and vali scoring: a finetuning run's epochs (every grid point's, for
    a grid: a killed and resumed run counts as one), a baseline's own ``seconds``; NaN for a
    run that trains nothing (an ensemble of finished runs)."""
    if "seconds" in report:
        return report["seconds"]
    points = [json.loads(p.read_text()) for p in folder.glob("grid/*/result.json")] or [report]
    if any("seconds_per_epoch" not in point for point in points):
        return float("nan")
    return sum(p["seconds_per_epoch"] * p["epochs_trained"] for p in points)


def finished_report(folder: Path) -> dict | None:
    """A finished run's report.json, with its test and vali NDCG@5 and seconds; None before."""
    if not (folder / "DONE").is_file():
        return None
    report = json.loads((folder / "report.json").read_text())
    report["_test"] = report["metrics"]["test"]["ndcg@5"]
    report["_vali"] = report["metrics"]["vali"]["ndcg@5"]
    report["_seconds"] = fit_seconds(folder, report)
    return report


def collect_rows(
    args,
    models: dict[str, str],
    per_run: Callable[[str, Path, dict, dict], None] | None = None,
    per_unit: Callable[[dict], None] | None = None,
) -> list[dict]:
    """One row per (fraction, fold, seed) of ``args``: for each finished run of ``models`` (row
    key: model name), its test and vali NDCG@5 and seconds under ``key``, ``<key>_vali``,
    ``<key>_seconds``; ``per_run(key, folder, report, row)`` adds what a benchmark reads from
    a run, ``per_unit(row)`` what it reads once per unit."""
    rows = []
    for fraction in args.fractions:
        for fold in args.folds:
            for seed in args.seeds:
                row = {"fraction": fraction, "fold": fold, "seed": seed}
                for key, model in models.items():
                    folder = run_dir(args.sweep, model, fold, seed, fraction)
                    report = finished_report(folder)
                    if report is None:
                        continue
                    row[key], row[f"{key}_vali"] = report["_test"], report["_vali"]
                    row[f"{key}_seconds"] = report["_seconds"]
                    if per_run is not None:
                        per_run(key, folder, report, row)
                if per_unit is not None:
                    per_unit(row)
                rows.append(row)
    return rows


def head_phase_kept(report: dict) -> bool:
    """Whether a ``full`` run's vali-best epoch lies in its head-only phase."""
    return report["best_epoch"] <= report["phases"][0]["epochs"]


def units_needed(mean: float, std: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Units a one-sided paired test at ``alpha`` needs to detect a margin ``mean`` with paired
    std ``std`` at ``power``: ``((z_(1-alpha) + z_power) * std / mean)^2`` (the normal
    approximation; about 1.645 + 0.84 = 2.49 at 0.05 and 80 %). Example: mean 0.036, std 0.081
    (OHSUMED's ceiling at 5 %): (2.486 * 0.081 / 0.036)^2 = 31.3; inf for a margin <= 0."""
    if not mean > 0:
        return math.inf
    z = stats.norm.ppf(1 - alpha) + stats.norm.ppf(power)
    return float((z * std / mean) ** 2)


def units_needed_t(
    mean: float, std: float, *, alpha: float = 0.05, power: float = 0.8, most: int = 100_000
) -> int | float:
    """The same count from Student's t, not the normal approximation of `units_needed`: the
    fewest units n >= 2 whose one-sided paired t-test at ``alpha`` has ``power`` against the
    margin (noncentral t, noncentrality ``mean / std * sqrt(n)``). It matters where the margin
    is large against its std: `units_needed` then falls below the 2 units a t-test needs.
    Example: mean 0.036, std 0.081 gives 33 (the approximation: 31.3); mean 0.08, std 0.01
    gives 2 (the approximation: 0.4); inf for a margin <= 0 or beyond ``most``."""
    if not mean > 0:
        return math.inf
    for n in range(2, most + 1):
        critical = stats.t.ppf(1 - alpha, n - 1)
        if stats.nct.sf(critical, n - 1, mean / std * math.sqrt(n)) >= power:
            return n
    return math.inf


def paired(x: list[float], y: list[float]) -> str:
    """The paired margin of x over y: the report's one-sided test (`paired_greater`) and the
    two-sided one beside it."""
    mean, std, n, one = paired_greater(dict(enumerate(x)), dict(enumerate(y)))
    if n < 2:
        return "n < 2"
    two = stats.ttest_rel(x, y).pvalue
    wins = f"{int((np.asarray(x) > np.asarray(y)).sum())}/{n} > 0"
    tests = f"one-sided p={one:.3f}, two-sided p={two:.3f}"
    return f"{mean:+.3f} ± {std:.3f} ({tests}; {wins})"
