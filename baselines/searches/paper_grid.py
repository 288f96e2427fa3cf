"""``paper-grid``: every point of a backend's fixed grid, in order (LightGBM's paper grid)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from scarce_ltr.baselines.tuning import SearchOutcome, TrainTrial, TrialResult, keep_if_best

if TYPE_CHECKING:
    from scarce_ltr.baselines.tree_run import TreeBackend


def search(
    backend: TreeBackend,
    *,
    train: TrainTrial,
    on_trial: Callable[[TrialResult], None],
) -> SearchOutcome:
    """The backend's ``grid()`` (each fit is seeded by the backend)."""
    return grid_search(backend.grid(), train=train, on_trial=on_trial)


def grid_search(
    points: list[dict],
    *,
    train: TrainTrial,
    on_trial: Callable[[TrialResult], None] = lambda result: None,
) -> SearchOutcome:
    """Every point of a fixed grid in order (trial ``i`` is ``points[i]``), none pruned; the
    vali-best wins, the first of ties (the paper's LightGBM grid)."""
    outcome = SearchOutcome()
    for number, choices in enumerate(points):
        model, rounds, vali, seconds, per_group = train(choices, None)
        result = TrialResult(number, choices, rounds, vali, seconds, vali_per_group=per_group)
        keep_if_best(outcome, result, model)
        on_trial(result)
    return outcome
