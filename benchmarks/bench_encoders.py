"""Seconds per epoch of each encoder against the tabular ResNet (issue 61): TabM, TabM-mini and
the numerical embeddings, in a `full` finetuning epoch and a SimCLR-Rank pretraining epoch.

Usage (from the project root)::

    .venv/bin/python benchmarks/bench_encoders.py [--items 20000] [--features 50] [--repeats 3]

Data shaped like the Yandex web set (``--features`` 50, QGs of ~120 items, `bench_pretrain`'s
sizes; random graded labels for finetuning). Every encoder has the default width (128) and
blocks (3); TabM its package's k = 32. Each row: the median of ``--repeats`` epochs after two
warm-up steps, the encoders timed in turn within each repeat (so a slow spell of the machine
hits all of them), and the ratio to the ResNet's median; parameters counted once. Extra
``key=value`` arguments go to both configs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_epoch import finetune_steps  # noqa: E402

ENCODERS = {
    "resnet": [],
    "resnet + piecewise": ["encoder.num_embeddings=piecewise"],
    "resnet + periodic": ["encoder.num_embeddings=periodic"],
    "mlp + piecewise": ["encoder.kind=mlp", "encoder.num_embeddings=piecewise"],
    "tabm-mini (k=32)": ["encoder.kind=tabm-mini"],
    "tabm (k=32)": ["encoder.kind=tabm"],
    "tabm + piecewise (k=32)": ["encoder.kind=tabm", "encoder.num_embeddings=piecewise"],
    "tabm (k=8)": ["encoder.kind=tabm", "encoder.k=8"],
}


def yandex_like(n_items: int, n_features: int, *, seed: int = 0):
    """A `RankingSplit` of about ``n_items`` items in QGs of ~120, 30 of the features 0/1."""
    from scarce_ltr.data.ranking_split import RankingSplit

    rng = np.random.default_rng(seed)
    sizes = []
    while sum(sizes) < n_items:
        sizes.append(int(np.clip(round(rng.lognormal(np.log(100), 0.6)), 5, 1251)))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    features = rng.standard_normal((offsets[-1], n_features), dtype=np.float32)
    flags = min(30, n_features)
    features[:, :flags] = features[:, :flags] > 0.5
    labels = rng.integers(0, 5, offsets[-1]).astype(np.float32)
    return RankingSplit(features, labels, offsets, np.arange(len(sizes)), "bench")


def pretrain_epoch(split, overrides: list[str]):
    """A SimCLR-Rank pretraining epoch (its config's batches) as a callable, warmed up."""
    from scarce_ltr.core.config import CONFIG_ROOT, load_config
    from scarce_ltr.core.device import setup_runtime
    from scarce_ltr.pretrain.config import PretrainConfig
    from scarce_ltr.pretrain.objectives import build_objective
    from scarce_ltr.pretrain.pretraining_set import make_batcher
    from scarce_ltr.pretrain.train import _CrashAfter, _train_epoch

    stage_file = CONFIG_ROOT / "pretrain" / "simclr-rank.yaml"
    cfg, _ = load_config(PretrainConfig, ["device=cpu", *overrides], stage_file=stage_file)
    runtime = setup_runtime(amp=False, device="cpu", cpu_amp=cfg.cpu_amp)
    objective = build_objective(cfg, n_features=split.n_features, features=split.features)
    optimizer = torch.optim.Adam(objective.parameters(), lr=cfg.optimizer.lr)
    batcher = make_batcher(
        split, item_budget=cfg.item_budget, max_list_len=None, seed=0, rank=0, world_size=1,
        length_buckets=cfg.length_buckets, on_device=None,
    )  # fmt: skip
    for step, batch in zip(range(2), batcher, strict=False):  # warm-up
        loss = objective(batch.features, batch.mask, generator=torch.Generator().manual_seed(step))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return lambda: _train_epoch(objective, optimizer, batcher, cfg, runtime, 0, _CrashAfter())


def timed(epoch) -> float:
    start = time.perf_counter()
    epoch()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000, help="labeled items (finetuning)")
    parser.add_argument("--pool", type=int, default=60_000, help="items (pretraining)")
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--only", nargs="*", default=None, help="encoder names")
    args, overrides = parser.parse_known_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    labeled = yandex_like(args.items, args.features, seed=1)
    pool = yandex_like(args.pool, args.features)
    names = [n for n in ENCODERS if not args.only or n in args.only]
    plans = {}
    for name in names:
        keys = [*ENCODERS[name], *overrides]
        finetune, model = finetune_steps(labeled, keys, base=())
        params = sum(p.numel() for p in model.parameters())
        plans[name] = (finetune, pretrain_epoch(pool, keys), params)
    seconds: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in names}
    for _ in range(args.repeats):
        for name in names:
            finetune, pretrain, _ = plans[name]
            seconds[name][0].append(timed(finetune))
            seconds[name][1].append(timed(pretrain))
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; {labeled.n_items:,} "
        f"labeled items, {pool.n_items:,} pool items, {args.features} features; median of "
        f"{args.repeats} epochs; overrides {overrides}\n"
    )
    print("| encoder | parameters | full epoch s | x ResNet | SimCLR-Rank epoch s | x ResNet |")
    print("|---|---:|---:|---:|---:|---:|")
    base = [statistics.median(s) for s in seconds[names[0]]]
    for name in names:
        finetune, pretrain = (statistics.median(s) for s in seconds[name])
        print(
            f"| {name} | {plans[name][2]:,} | {finetune:.2f} | {finetune / base[0]:.1f} "
            f"| {pretrain:.2f} | {pretrain / base[1]:.1f} |"
        )


if __name__ == "__main__":
    main()
