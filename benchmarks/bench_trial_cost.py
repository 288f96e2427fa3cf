"""One searched finetuning, this checkout against a base commit: CPU seconds and the same choice.

Issue 47: a search trial made cheaper without changing any number. Each case runs the same
``finetune full`` command (a fresh encoder, lr 2e-4 first, ``search.n_trials`` trials, one
thread: ``OMP_NUM_THREADS=1`` as the sweeps' workers and bench_search_cost.py) once with the
base package and once with this checkout's, alternating which goes first, ``--rounds`` times.
CPU seconds are the child's user + system time (``resource.getrusage(RUSAGE_CHILDREN)``, process
start and imports included), robust to the neighbours; wall seconds follow them. It then checks
that both sides chose the same trial with the same vali and test NDCG@5 and that every trial's
vali score is the same float, and prints a markdown table.

    git worktree add /tmp/base-speed 1235f15
    mkdir -p /tmp/pkg-base && ln -s /tmp/base-speed /tmp/pkg-base/scarce_ltr
    nice -n 10 .venv/bin/python benchmarks/bench_trial_cost.py --base-pkg /tmp/pkg-base
        [--rounds 2] [--ohsumed-trials 10] [--yandex-trials 5] [--cases ohsumed yandex]

Runs live in ``runs/bench/trial-cost/<case>/<side>/round=<k>/`` and are removed before each
run (each is timed from scratch).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ohsumed_folds import ROOT, data_args

OUT = ROOT / "runs" / "bench" / "trial-cost"
# (data preset, label fraction) of each case: the benchmarks' OHSUMED fold and the Yandex sweep's
# scarcest setting (configs/sweep/yandex-augmentations.yaml)
CASES = {"ohsumed": ("ohsumed", 0.2), "yandex": ("yandex", 0.01)}


def command(case: str, trials: int, out: Path) -> list[str]:
    data, fraction = CASES[case]
    splits = [f"data.splits.{s}=Fold1/{s}" for s in ("train", "vali", "test")]
    return [
        sys.executable,
        "-m",
        "scarce_ltr",
        "finetune",
        "full",
        *data_args(data),
        *splits,
        "logger=none",
        "seed=0",
        f"scarcity.fraction={fraction}",
        "scarcity.val=full",
        "pretrained=none",
        "optimizer.lr=2.0e-4",
        f"search.n_trials={trials}",
        f"run_dir={out}",
    ]


def timed(argv: list[str], package: Path, out: Path) -> tuple[float, float]:
    """``(CPU seconds, wall seconds)`` of one run of ``argv`` importing ``package``."""
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(package), "OMP_NUM_THREADS": "1"}
    env |= {"OMP_WAIT_POLICY": "passive", "WANDB_MODE": "disabled"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(out.parent / f"{out.name}.log", "wb") as log:
        subprocess.run(argv, check=True, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def outcome(out: Path) -> dict:
    """The chosen trial, its vali and test NDCG@5, and every trial's vali NDCG@5."""
    report = json.loads((out / "report.json").read_text())
    search = report["search"]
    return {
        "chosen": search["chosen_trial"],
        "vali": report["metrics"]["vali"]["ndcg@5"],
        "test": report["metrics"]["test"]["ndcg@5"],
        "trials": [t["best_vali_ndcg@5"] for t in search["trials"]],
        "epochs": sum(t["epochs_trained"] for t in search["trials"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-pkg", type=Path, required=True, help="holds scarce_ltr -> base")
    parser.add_argument("--new-pkg", type=Path, default=None, help="default: this checkout's")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ohsumed-trials", type=int, default=10)
    parser.add_argument("--yandex-trials", type=int, default=5)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    new_pkg = args.new_pkg or Path(os.environ.get("PYTHONPATH", str(ROOT.parent)))
    sides = {"base": args.base_pkg, "new": new_pkg}
    for side, package in sides.items():
        print(f"{side}: {(package / 'scarce_ltr').resolve()}", flush=True)
    trials = {"ohsumed": args.ohsumed_trials, "yandex": args.yandex_trials}
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    seen: dict[tuple[str, str], list[dict]] = {}
    for k in range(args.rounds):
        for case in args.cases:
            order = ["base", "new"] if k % 2 == 0 else ["new", "base"]
            for side in order:
                out = OUT / case / side / f"round={k}"
                cpu, wall = timed(command(case, trials[case], out), sides[side], out)
                rows.setdefault((case, side), []).append((cpu, wall))
                seen.setdefault((case, side), []).append(outcome(out))
                print(f"  round {k} {case} {side}: {cpu:.1f} CPU s, {wall:.1f} s", flush=True)
    print(
        "\n| case | trials | base CPU s (runs) | new CPU s (runs) | new / base (CPU, mean) "
        "| base wall s | new wall s | same choice |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for case in args.cases:
        base, new = rows[case, "base"], rows[case, "new"]
        results = seen[case, "base"] + seen[case, "new"]
        same = all(r == results[0] for r in results)
        first = results[0]
        ratio = sum(c for c, _ in new) / len(new) / (sum(c for c, _ in base) / len(base))
        print(
            f"| {case} | {trials[case]} | {', '.join(f'{c:.1f}' for c, _ in base)} "
            f"| {', '.join(f'{c:.1f}' for c, _ in new)} | {ratio:.3f} "
            f"| {', '.join(f'{w:.0f}' for _, w in base)} | {', '.join(f'{w:.0f}' for _, w in new)} "
            f"| {'yes' if same else 'NO'}: trial {first['chosen']}, vali {first['vali']:.4f}, "
            f"test {first['test']:.4f}, {first['epochs']} epochs |"
        )
        if not same:
            for result in results:
                print(f"    {result}")


if __name__ == "__main__":
    main()
