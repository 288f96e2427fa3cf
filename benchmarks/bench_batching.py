"""Collating padded batches of whole QGs: items per second and padding, with and without buckets.

Usage (from the project root)::

    .venv/bin/python benchmarks/bench_batching.py [--items 2300000] [--epochs 2]

Data shaped like MSLR-WEB30K (`bench_pretrain.mslr_like`: 136 features, QG sizes log-normal
around 120 items, clipped to [5, 1251]). For each item budget (1,024: the pretraining default;
16,384: the CPU pretraining benchmark; 200,000: the paper's GPU batch) one shuffled epoch of
`data.batching.QueryGroupBatcher` is iterated, plain and with ``length_buckets``, on one thread;
the pretraining loop collates every batch this way before the model sees it, so at 2.3M items an
epoch can run no faster than ``items / (items per second)`` here.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch
from bench_pretrain import mslr_like

from scarce_ltr.data.batching import QueryGroupBatcher

BUDGETS = (1_024, 16_384, 200_000)


def one_epoch(batcher: QueryGroupBatcher, epoch: int) -> dict:
    batcher.set_epoch(epoch)
    real = padded = batches = 0
    start = time.perf_counter()
    for batch in batcher:
        real += int(batch.mask.sum())
        padded += batch.mask.numel()
        batches += 1
    seconds = time.perf_counter() - start
    return {"items_per_s": real / seconds, "padding": padded / real, "batches": batches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2_300_000)
    parser.add_argument("--epochs", type=int, default=2, help="the best epoch is reported")
    args = parser.parse_args()
    torch.set_num_threads(1)
    split = mslr_like(args.items)
    print(
        f"{platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
        f"{time.strftime('%Y-%m-%d')}; {split.n_items:,d} items in {split.n_groups:,d} QGs, "
        f"{split.n_features} features, one thread"
    )
    print("| item budget | batching | batches | padded / real items | items/s | s per epoch |")
    print("|---|---|---|---|---|---|")
    for budget in BUDGETS:
        for buckets in (False, True):
            batcher = QueryGroupBatcher(
                split, item_budget=budget, shuffle=True, seed=0, length_buckets=buckets
            )
            runs = [one_epoch(batcher, epoch) for epoch in range(args.epochs)]
            best = max(runs, key=lambda r: r["items_per_s"])
            print(
                f"| {budget:,d} | {'length buckets' if buckets else 'plain'} | "
                f"{best['batches']:,d} | {best['padding']:.2f} | {best['items_per_s']:,.0f} | "
                f"{split.n_items / best['items_per_s']:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
