"""What a finetuning fit keeps and hands back (`finetune.loop.fit`): its `Progress`, saved in
every checkpoint with the weights, optimizer, best weights and random states (`save_state`,
its keys `STATE_KEYS`), the `FitResult` it returns, and `TrialPruned`, raised when a search's
pruner (`Prune`) stops the trial.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from scarce_ltr.core.checkpointing import save_checkpoint
from scarce_ltr.core.seeding import capture_rng_state
from scarce_ltr.core.training import Position

CHECKPOINT = "checkpoint.pt"
STATE_KEYS = ("model", "optimizer", "best_model", "progress", "rng")
# A search's pruner (`finetune.search`): given the epochs' rows so far, True to stop the trial
Prune = Callable[[list[dict]], bool]


class TrialPruned(Exception):
    """A search's pruner stopped the trial after an epoch; ``fitted`` is what it had trained
    (the vali-best weights so far back in the model)."""

    def __init__(self, fitted: FitResult) -> None:
        super().__init__(f"pruned after epoch {fitted.epochs}")
        self.fitted = fitted


@dataclass
class Progress(Position):
    """Where training stands (`core.training.Position`) and what it found; saved in every
    checkpoint."""

    best_epoch: int = 0
    best_score: float = -math.inf
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    history: list[dict] = field(default_factory=list)


@dataclass
class FitResult:
    best_epoch: int
    best_vali: float
    epochs: int
    seconds_per_epoch: float  # training and vali scoring of one epoch
    train_seconds_per_epoch: float
    history: list[dict]


def save_state(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    best_state: dict | None,
    progress: Progress,
    meta: dict | None,
    joint: dict | None = None,
) -> None:
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "best_model": best_state,
        "progress": dict(progress.__dict__),
        "rng": capture_rng_state(),
        "meta": meta or {},
    }
    if joint is not None:  # the joint term's projector (`finetune.joint`)
        state["joint"] = joint
    save_checkpoint(path, state)
