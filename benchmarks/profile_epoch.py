"""Where an epoch's CPU time goes: `torch.profiler` tables of SimCLR-Rank, SimSiam and `full`.

Usage (from the project root)::

    .venv/bin/python benchmarks/profile_epoch.py [--items 60000] [--rows 15] [--threads 2]

Data shaped like MSLR-WEB30K (`bench_pretrain.mslr_like`: 136 features, QGs of ~120 items). For
each of simclr-rank and simsiam (16,384 items per batch, the ResNet of width 136 as in
`bench_pretrain.py`) and for `full` finetuning (the finetuning config's 1,000-item batches and
softmax loss, random graded labels), two warm-up steps, then one profiled epoch; the table lists
the top ops by self CPU time, with their share of the epoch's total. Extra ``key=value``
arguments override both configs (``encoder.dropout=0``, ``compile=true``, ...).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pretrain import mslr_like, prepare  # noqa: E402


def pretrain_steps(method: str, split, overrides: list[str]):
    """One epoch of one pretraining method, as a callable, after `bench_pretrain.prepare`'s
    warm-up."""
    from scarce_ltr.pretrain.train import _CrashAfter, _train_epoch

    cfg, runtime, objective, optimizer, batcher = prepare(
        method, split, budget=16384, overrides=overrides
    )

    def epoch() -> None:
        _train_epoch(objective, optimizer, batcher, cfg, runtime, 0, _CrashAfter())

    return epoch


def finetune_steps(split, overrides: list[str], *, base=("encoder.width=136",)):
    """``(epoch, model)``: one `full` finetuning epoch, as a callable, after two warm-up steps,
    and the model it trains (``base``: keys before ``overrides``; the split's features are what
    an encoder that learns from the data when built takes its bins from)."""
    from scarce_ltr.core.config import CONFIG_ROOT, load_config
    from scarce_ltr.core.device import setup_runtime
    from scarce_ltr.data.batching import QueryGroupBatcher
    from scarce_ltr.finetune.config import FinetuneConfig
    from scarce_ltr.finetune.model import build_model, ranker_spec
    from scarce_ltr.finetune.steps import train_epoch

    stage_file = CONFIG_ROOT / "finetune" / "full.yaml"
    keys = [*base, "pretrained=none", "device=cpu", *overrides]
    cfg, _ = load_config(FinetuneConfig, keys, stage_file=stage_file)
    spec = ranker_spec(
        n_features=split.n_features,
        encoder=cfg.encoder,
        head=cfg.head,
        hidden=cfg.head_hidden,
        dropout=cfg.head_dropout,
    )
    model = build_model(spec, features=split.features)
    runtime = setup_runtime(amp=False, device="cpu")
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.optimizer.lr)
    batches = QueryGroupBatcher(split, item_budget=cfg.item_budget, shuffle=True, seed=0)
    loss_fn = cfg.loss.build()

    for _, batch in zip(range(2), batches, strict=False):  # warm-up: kernels, allocator
        scores = model(batch.features, batch.mask)
        loss = loss_fn(scores, batch.labels, mask=batch.mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def epoch() -> None:
        train_epoch(model, batches, optimizer, loss_fn, runtime=runtime)

    return epoch, model


def table(prof, rows: int) -> str:
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    lines = ["| op | self CPU ms | share | calls |", "|---|---:|---:|---:|"]
    for e in events[:rows]:
        share = e.self_cpu_time_total / total
        ms = e.self_cpu_time_total / 1000
        lines.append(f"| `{e.key}` | {ms:,.0f} | {share:.1%} | {e.count:,d} |")
    lines.append(f"| total | {total / 1000:,.0f} | 100% | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=60_000)
    parser.add_argument("--rows", type=int, default=15)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--only", nargs="*", default=None, help="simclr-rank simsiam full")
    args, overrides = parser.parse_known_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    split = mslr_like(args.items)
    labeled = mslr_like(args.items // 4, seed=1)
    labeled.labels[:] = np.random.default_rng(0).integers(0, 5, labeled.n_items)
    plans = {
        "simclr-rank": lambda: pretrain_steps("simclr-rank", split, overrides),
        "simsiam": lambda: pretrain_steps("simsiam", split, overrides),
        "full": lambda: finetune_steps(labeled, overrides)[0],
    }
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, overrides {overrides}")
    for name, plan in plans.items():
        if args.only and name not in args.only:
            continue
        epoch = plan()  # warmed up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            epoch()
        print(f"\n### {name}\n\n{table(prof, args.rows)}", flush=True)


if __name__ == "__main__":
    main()
