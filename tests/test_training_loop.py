"""The epoch loop pretraining and finetuning share (`core.training.train_phases`): phases in
order, early stopping per phase on vali, the save cadence, and a resumed position that ends in
the same steps as an uninterrupted run."""

from __future__ import annotations

from scarce_ltr.core.training import Cadence, Position, train_phases


class Recorder:
    """A task whose epoch ``e`` (counted from 1) is better on vali when ``e`` is in ``better``;
    it records every call of the loop as a tuple."""

    def __init__(self, better: set[int]) -> None:
        self.better, self.calls = better, []

    def begin_phase(self, position: Position) -> None:
        self.calls.append(("begin", position.phase))

    def run_epoch(self, position: Position) -> int:
        return position.epoch + 1

    def end_epoch(self, position: Position, trained: int) -> bool:
        assert trained == position.epoch  # the position counts the epoch before this call
        self.calls.append(("epoch", position.phase, position.phase_epoch, position.epoch))
        return position.epoch in self.better

    def end_phase(self, position: Position) -> None:
        self.calls.append(("end", position.phase, position.phase_epoch))

    def save(self, position: Position, *, in_phase: bool) -> None:
        self.calls.append(("save", in_phase, position.epoch))


def _epochs(calls: list[tuple]) -> list[int]:
    return [c[3] for c in calls if c[0] == "epoch"]


def test_a_phase_stops_after_patience_epochs_without_a_better_vali_score() -> None:
    task = Recorder(better={1, 5})
    position = Position()
    train_phases(task, position, [4, 3], patience=2, cadence=Cadence(None, phase_end=False))
    # phase 0: epoch 1 better, 2 and 3 not: stopped; phase 1 starts its own count: 4, 5, 6
    assert task.calls == [
        ("begin", 0),
        ("epoch", 0, 1, 1),
        ("epoch", 0, 2, 2),
        ("epoch", 0, 3, 3),
        ("end", 0, 3),
        ("begin", 1),
        ("epoch", 1, 1, 4),
        ("epoch", 1, 2, 5),
        ("epoch", 1, 3, 6),
        ("end", 1, 3),
    ]
    assert position == Position(epoch=6, phase=2, phase_epoch=0, since_best=0)


def test_no_patience_trains_every_epoch() -> None:
    task = Recorder(better=set())
    train_phases(task, Position(), [2, 3], patience=None, cadence=Cadence(None, phase_end=False))
    assert _epochs(task.calls) == [1, 2, 3, 4, 5]


def test_the_cadence_saves_every_epoch_or_only_at_phase_ends() -> None:
    every = Recorder(better=set())
    train_phases(every, Position(), [2], patience=None, cadence=Cadence(0, phase_end=False))
    assert [c for c in every.calls if c[0] == "save"] == [("save", True, 1), ("save", True, 2)]
    ends = Recorder(better=set())
    train_phases(ends, Position(), [2, 1], patience=None, cadence=Cadence(3600.0))
    assert [c for c in ends.calls if c[0] == "save"] == [("save", False, 2), ("save", False, 3)]


def test_a_resumed_position_ends_as_an_uninterrupted_run() -> None:
    """Saved in phase 1 after its first epoch, one epoch since the best: the rest is the same
    epochs, and early stopping counts the epoch before the interruption."""
    whole = Recorder(better={1, 2})
    train_phases(whole, Position(), [2, 4], patience=2, cadence=Cadence(0))
    resumed = Recorder(better={1, 2})
    position = Position(epoch=3, phase=1, phase_epoch=1, since_best=1)  # saved after epoch 3
    train_phases(resumed, position, [2, 4], patience=2, cadence=Cadence(0))
    assert _epochs(whole.calls) == [1, 2, 3, 4]  # epochs 3 and 4 not better: phase 1 stopped
    after = whole.calls[whole.calls.index(("epoch", 1, 1, 3)) + 2 :]  # after epoch 3's save
    assert resumed.calls == [("begin", 1), *after]
    assert position == Position(epoch=4, phase=2, phase_epoch=0, since_best=0)
