"""The optimizer and learning-rate schedule of an `OptimizerConfig`, for every training loop.

Two recipes: the paper's A.2.3 (Adam, a constant learning rate: the default) and its A.2.5
industry recipe (AdamW with weight decay 0.01 and a cosine schedule with linear warmup:
``optimizer.name=adamw optimizer.weight_decay=0.01 optimizer.schedule=cosine``). The schedule is
a pure function of training progress (the share of the run or phase done, counted in batches),
so a run resumed from a checkpoint continues the same curve without saving scheduler state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

OPTIMIZERS = ("adam", "adamw")
SCHEDULES = ("constant", "cosine")


def make_optimizer(
    params: Iterable[torch.nn.Parameter], *, name: str, lr: float, weight_decay: float
) -> torch.optim.Optimizer:
    """Adam (L2 penalty in the gradient) or AdamW (decoupled weight decay).

    Both with torch's multi-tensor (``foreach``) step, also on the CPU, where torch's default is
    one tensor at a time: the same arithmetic per element, so the same weights bit for bit
    (tests/test_optim.py), at about 0.9 ms less CPU per step for a finetuned ResNet (2.5 -> 1.7
    ms; 2-3 % of a search trial on OHSUMED: benchmarks/LOG.md, "Where a search trial's time goes").
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer.name must be one of {', '.join(OPTIMIZERS)}, got {name!r}")
    kind = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    return kind(params, lr=lr, weight_decay=weight_decay, foreach=True)


def lr_factor(schedule: str, warmup: float, progress: float) -> float:
    """The multiplier of the base learning rate at ``progress`` in [0, 1] of the schedule.

    ``cosine``: linear warmup from 0 over the first ``warmup`` share, then half a cosine from 1
    down to 0 at the end; ``constant``: 1.
    """
    if schedule == "constant":
        return 1.0
    if schedule != "cosine":
        raise ValueError(f"optimizer.schedule must be one of {', '.join(SCHEDULES)}")
    progress = min(max(progress, 0.0), 1.0)
    if progress < warmup:
        return progress / warmup
    rest = (progress - warmup) / max(1.0 - warmup, 1e-12)
    return 0.5 * (1.0 + math.cos(math.pi * rest))


def set_learning_rate(
    optimizer: torch.optim.Optimizer, lr: float, *, schedule: str, warmup: float, progress: float
) -> None:
    """Every parameter group's rate for the next step."""
    value = lr * lr_factor(schedule, warmup, progress)
    for group in optimizer.param_groups:
        group["lr"] = value
