"""GBDT baseline speed: seconds per grid point, on MSLR-shaped synthetic data and on OHSUMED.

For each data set (every train QG labeled): the time to prepare the data (generate or parse,
transform, outliers), to bin the LightGBM datasets once, to fit PCA and append its features,
then each point of the paper's grid trained for a fixed number of rounds (early stopping off,
so every point does the same work) with its vali NDCG@5.

    .venv/bin/python benchmarks/bench_gbdt.py [--rounds 100] [--threads 2] [--data ohsumed]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from scarce_ltr.baselines.config import BaselineConfig  # noqa: E402
from scarce_ltr.core.config import load_config  # noqa: E402
from scarce_ltr.data.pipeline import prepare_data  # noqa: E402
from scarce_ltr.trees.lightgbm.grid import capped, grid_points  # noqa: E402
from scarce_ltr.trees.lightgbm.lightgbm_ranker import BoosterOptions, RankingData, fit  # noqa: E402
from scarce_ltr.trees.lightgbm.semi_supervised import PCAFeatures  # noqa: E402

DATA = {
    # MSLR-WEB shaped: 136 features, about 120 items per QG, 120k train items.
    "synthetic": [
        "data.synthetic.n_features=136",
        "data.synthetic.n_train_groups=1000",
        "data.synthetic.n_vali_groups=200",
        "data.synthetic.n_test_groups=200",
        "data.synthetic.mean_group_size=120",
    ],
    "ohsumed": ["data=ohsumed", f"data.path={ROOT.parent / 'shared/data/ohsumed-letor3'}"],
}


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def bench(name: str, *, rounds: int, threads: int) -> list[tuple]:
    cfg, _ = load_config(BaselineConfig, [*DATA[name], "logger=none"])
    prepared, t_prepare = timed(lambda: prepare_data(cfg))
    train, vali = prepared.labels.labeled_train(), prepared.labels.labeled_vali()
    print(
        f"{name}: {train.n_items} train items in {train.n_groups} QGs, {train.n_features} "
        f"features; vali {vali.n_items} items; prepare_data {t_prepare:.1f} s",
        flush=True,
    )
    data, t_bin = timed(lambda: RankingData(train=train, vali=vali, num_threads=threads))
    pca, t_pca = timed(lambda: PCAFeatures(train.features, max_components=15, seed=0))
    _, t_append = timed(lambda: pca.append(train, 15))
    print(f"  LightGBM binning {t_bin:.2f} s; PCA(15) fit {t_pca:.2f} s, append {t_append:.2f} s")
    training = BoosterOptions(
        learning_rate=0.05, rounds=rounds, early_stopping_rounds=rounds, num_threads=threads, seed=0
    )
    rows = []
    for leaves, _ in capped(grid_points(cfg.gbdt), data.cap):
        history: dict = {}
        cpu = time.process_time()
        result = fit(leaves, training, data, history=history)
        cpu = time.process_time() - cpu
        ndcg = history["vali"]["ndcg@5"][result.best_rounds - 1]
        rows.append((name, leaves, result.seconds, cpu, ndcg))
        print(
            f"  leaves={leaves.num_leaves:<4} min_data={leaves.min_data_in_leaf:<4} "
            f"ff={leaves.feature_fraction:<4} {result.seconds:7.2f} s (cpu {cpu:6.2f} s)  "
            f"vali ndcg@5 {ndcg:.4f}",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", nargs="+", default=list(DATA), choices=list(DATA))
    args = parser.parse_args()
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if "Model name" in ln), "")
    print(f"{platform.platform()}; CPU {model or platform.processor()}; threads {args.threads}")
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}; load {os.getloadavg()}")
    rows = [
        row for name in args.data for row in bench(name, rounds=args.rounds, threads=args.threads)
    ]
    print(f"load after: {os.getloadavg()}")
    print(f"\n| data | leaves | min_data | ff | s / {args.rounds} rounds | cpu s | vali ndcg@5 |")
    print("|---|---|---|---|---|---|---|")
    for name, leaves, seconds, cpu_s, ndcg in rows:
        print(
            f"| {name} | {leaves.num_leaves} | {leaves.min_data_in_leaf} | "
            f"{leaves.feature_fraction} | {seconds:.2f} | {cpu_s:.2f} | {ndcg:.4f} |"
        )
    for name in args.data:
        times = [r[2] for r in rows if r[0] == name]
        print(f"{name}: mean {np.mean(times):.2f} s per grid point, {np.sum(times):.1f} s per grid")


if __name__ == "__main__":
    main()
