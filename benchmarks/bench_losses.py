"""Ranking losses and DASALC on the synthetic default: test NDCG@5, MRR, ERR@10, seconds.

Every loss of `losses.LOSSES` trains the from-scratch ResNet baseline
(``./run.sh baseline resnet deep.loss.name=<loss>``) at one learning rate; then DASALC
(``./run.sh baseline dasalc``, its config's softmax loss, log1p inputs, noise 1.5) and its seed
ensemble (the uniform average of its seeds' runs, DASALC-ens). Each seed is one run; the
table gives mean ± std over seeds of the test metrics and the seconds per run.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_losses.py [--seeds 0 1 2]
        [--fraction 1.0] [--epochs 60] [--lr 1e-3] [--out /tmp/bench_losses]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from scarce_ltr.cli import run
from scarce_ltr.losses import LOSSES

METRICS = ("ndcg@5", "mrr", "err@10")


def one_run(args: list[str], out: Path) -> tuple[dict, float]:
    start = time.perf_counter()
    if not (out / "DONE").is_file():
        with contextlib.redirect_stdout(io.StringIO()):
            run([*args, f"run_dir={out}"])
    seconds = time.perf_counter() - start
    return json.loads((out / "report.json").read_text())["metrics"]["test"], seconds


def row(name: str, results: list[tuple[dict, float]]) -> str:
    cells = []
    for metric in METRICS:
        values = [r[metric] for r, _ in results]
        cells.append(f"{np.mean(values):.4f} ± {np.std(values, ddof=1):.4f}")
    seconds = np.mean([s for _, s in results])
    return f"| {name} | " + " | ".join(cells) + f" | {seconds:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--fraction", type=float, default=1.0)
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_losses"))
    opts = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    common = ["logger=none", f"scarcity.fraction={opts.fraction}", f"epochs={opts.epochs}"]
    common += [f"deep.lrs=[{opts.lr}]"]
    print(
        f"synthetic default, {opts.fraction:.0%} of train QGs labeled, seeds {opts.seeds}, "
        f"<= {opts.epochs} epochs, lr {opts.lr}; {platform.processor() or platform.machine()}, "
        f"torch {torch.__version__}, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    print("| model | test NDCG@5 | test MRR | test ERR@10 | s/run |\n|---|---|---|---|---|")
    for loss in LOSSES:
        results = [
            one_run(
                ["baseline", "resnet", *common, f"deep.loss.name={loss}", f"seed={seed}"],
                opts.out / f"resnet-{loss}" / f"seed={seed}",
            )
            for seed in opts.seeds
        ]
        print(row(f"resnet, {loss}", results), flush=True)
    # DASALC-ens averages the seeds' runs, so they must share their labeled QGs: below
    # fraction 1 every DASALC seed uses the labels of the first seed (scarcity.seed).
    first = opts.seeds[0]
    same_labels = [f"scarcity.seed={first}"] if opts.fraction < 1 else []
    members = [opts.out / "dasalc" / f"seed={seed}" for seed in opts.seeds]
    results = [
        one_run(["baseline", "dasalc", *common, *same_labels, f"seed={seed}"], folder)
        for seed, folder in zip(opts.seeds, members, strict=True)
    ]
    print(row("dasalc", results), flush=True)
    runs = ",".join(str(m) for m in members)
    ens, _ = one_run(
        ["ensemble", "logger=none", f"scarcity.fraction={opts.fraction}", *same_labels,
         f"seed={first}", f"runs=[{runs}]", "weights=uniform"],
        opts.out / "dasalc-ens",
    )  # fmt: skip
    cells = " | ".join(f"{ens[m]:.4f}" for m in METRICS)
    print(f"| dasalc-ens (uniform average of the {len(members)} seeds) | {cells} | - |")


if __name__ == "__main__":
    main()
