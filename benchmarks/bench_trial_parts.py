"""What each change of "Where a search trial's time goes" saves per call, on the real vali sets.

bench_trial_cost.py times whole searches, whose CPU seconds vary by about 10 % from run to run
on the loaded 2-core machine: more than these changes save. This times the changed parts alone,
in one process, interleaved over ``--rounds``, in CPU seconds (``time.process_time``), on Fold1
of OHSUMED (20 %) and Yandex (1 %) with ``scarcity.val=full``:

- the selection score: every metric at k=5, NDCG@5 taken (before: ``vali_metrics``) against
  NDCG@5 alone (now: ``vali_selection``), the same float;
- the vali batches: collated per epoch (before) against kept (now: nothing per epoch);
- one Adam step over a finetuned ResNet's parameters (45 features, head 128): one tensor at a
  time (before) against ``foreach`` (now), the same weights.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_trial_parts.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
import torch
from ohsumed_folds import data_args

from scarce_ltr.core.config import load_config
from scarce_ltr.data.batching import QueryGroupBatcher
from scarce_ltr.data.evaluation import vali_metrics, vali_selection
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.data.ranking_split import rows_of_groups
from scarce_ltr.finetune.config import FinetuneConfig
from scarce_ltr.finetune.heads import build_head
from scarce_ltr.finetune.model import Ranker
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder

CASES = {"ohsumed": 0.2, "yandex": 0.01}


def cpu_ms(fn, reps: int) -> float:
    start = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - start) / reps * 1e3


def selection(case: str, rounds: int) -> None:
    splits = [f"data.splits.{s}=Fold1/{s}" for s in ("train", "vali", "test")]
    overrides = [*data_args(case), *splits, "pretrained=none", "logger=none"]
    overrides += [f"scarcity.fraction={CASES[case]}", "scarcity.val=full"]
    cfg, _ = load_config(FinetuneConfig, overrides)
    prepared = prepare_data(cfg)
    scores = np.random.default_rng(0).normal(size=prepared.vali.n_items)
    every = replace(cfg.metrics, ks=[5])
    assert vali_metrics(prepared, scores, every)["ndcg@5"] == vali_selection(
        prepared, scores, cfg.metrics
    )
    labeled = np.flatnonzero(prepared.labels.vali_labeled)

    def collate() -> None:
        batches = QueryGroupBatcher(prepared.vali, item_budget=cfg.eval_item_budget, groups=labeled)
        for batch in batches:
            rows_of_groups(prepared.vali.offsets, batch.groups.numpy())

    parts = {
        "selection: every metric": lambda: vali_metrics(prepared, scores, every),
        "selection: NDCG@5 alone": lambda: vali_selection(prepared, scores, cfg.metrics),
        "vali batches collated": collate,
    }
    times = {name: [] for name in parts}
    for _ in range(rounds):
        for name, fn in parts.items():
            times[name].append(cpu_ms(fn, 20))
    items = prepared.vali.group_sizes[labeled].sum()
    print(f"\n{case}: {len(labeled)} vali QGs, {items} items (CPU ms per call, median of {rounds})")
    for name, values in times.items():
        print(f"  {name}: {np.median(values):.2f} ms")


def adam(rounds: int) -> None:
    torch.manual_seed(0)
    encoder = build_encoder(EncoderConfig(), n_features=45)
    model = Ranker(encoder=encoder, head=build_head("mlp", in_dim=128, hidden=128, dropout=0.1))
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizers = {
        f"Adam step, foreach={f}": torch.optim.Adam(model.parameters(), lr=1e-9, foreach=f)
        for f in (False, True)
    }
    times = {name: [] for name in optimizers}
    for _ in range(rounds):
        for name, optimizer in optimizers.items():
            times[name].append(cpu_ms(optimizer.step, 100))
    print(f"\nAdam over {sum(p.numel() for p in model.parameters())} parameters (CPU ms per step)")
    for name, values in times.items():
        print(f"  {name}: {np.median(values):.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for case in CASES:
        selection(case, args.rounds)
    adam(args.rounds)


if __name__ == "__main__":
    main()
