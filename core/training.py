"""The epoch loop of every trained torch model: pretraining (`pretrain.train`), finetuning and
the deep baselines (`finetune.loop`).

`train_phases` owns the order of things: phase by phase, epoch by epoch from where a resumed
run stands (`Position`), a phase ending after its epochs or after ``patience`` epochs without a
better vali score, the training state saved as its `Cadence` says. A stage's `EpochTask` owns
what those steps do: its optimizer per phase, an epoch's training and vali score (AMP, its
random streams), what counts as better, its progress lines and what its checkpoint holds, so
each stage keeps its own checkpoint format and a run written by an earlier version resumes.

    for each phase left:            task.begin_phase
        for each epoch left in it:  task.run_epoch, counted, task.end_epoch (better on vali?)
            saved when due:         task.save(in_phase=True)
        task.end_phase; counted;    task.save(in_phase=False) (``Cadence.phase_end``)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass
class Position:
    """Where training stands; a stage's checkpoint carries it."""

    epoch: int = 0  # epochs trained, over all phases
    phase: int = 0  # index of the current phase
    phase_epoch: int = 0  # epochs trained in the current phase
    since_best: int = 0  # epochs of the current phase without a better vali score


@dataclass(frozen=True)
class Cadence:
    """When the training state is saved: after the first epoch that ends ``seconds`` after the
    last save (0: after every epoch; None: never inside a phase), and at each phase's end when
    ``phase_end``."""

    seconds: float | None
    phase_end: bool = True

    def due(self, last_save: float) -> bool:
        return self.seconds is not None and time.monotonic() - last_save >= self.seconds


class EpochTask(Protocol):
    """What one stage's training does at each step of `train_phases`."""

    def begin_phase(self, position: Position) -> None:
        """Ready the model and its optimizer for phase ``position.phase`` (a resumed phase's
        optimizer state restored)."""

    def run_epoch(self, position: Position) -> Any:
        """Train the epoch after ``position.epoch`` (``position.phase_epoch`` of the phase) and
        score vali; what it gives is handed to `end_epoch`."""

    def end_epoch(self, position: Position, trained: Any) -> bool:
        """Record the epoch just counted in ``position`` (history, the best model, progress
        lines, logs); True when its vali score is the best so far."""

    def end_phase(self, position: Position) -> None:
        """The phase's epochs are done or stopped early (the best model restored)."""

    def save(self, position: Position, *, in_phase: bool) -> None:
        """Save the training state (``in_phase``: inside a phase, with its optimizer)."""


def train_phases(
    task: EpochTask,
    position: Position,
    phase_epochs: Sequence[int],
    *,
    patience: int | None,
    cadence: Cadence,
) -> None:
    """Train every phase (its epoch count in ``phase_epochs``) from ``position`` on, which
    moves along; a resumed run ends as an uninterrupted one (the task's state and random
    streams depend on the position alone)."""
    last_save = time.monotonic()
    while position.phase < len(phase_epochs):
        task.begin_phase(position)
        while position.phase_epoch < phase_epochs[position.phase] and not _out_of_patience(
            position, patience
        ):
            trained = task.run_epoch(position)
            position.epoch += 1
            position.phase_epoch += 1
            better = task.end_epoch(position, trained)
            position.since_best = 0 if better else position.since_best + 1
            if cadence.due(last_save):
                task.save(position, in_phase=True)
                last_save = time.monotonic()
        task.end_phase(position)
        position.phase, position.phase_epoch, position.since_best = position.phase + 1, 0, 0
        if cadence.phase_end:
            task.save(position, in_phase=False)


def _out_of_patience(position: Position, patience: int | None) -> bool:
    """``patience`` epochs of the phase without a better vali score (None: never)."""
    return patience is not None and position.since_best >= patience
