"""``paper-grid``: every point of a backend's fixed grid, in order (LightGBM's paper grid)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from scarce_ltr.search.strategies.study import n_jobs_of
from scarce_ltr.search.trial_batches import batches, in_threads
from scarce_ltr.search.trials import (
    Searchable,
    SearchOutcome,
    TrainTrial,
    TrialResult,
    keep_if_best,
)


def search(
    backend: Searchable,
    *,
    train: TrainTrial,
    on_trial: Callable[[TrialResult], None],
) -> SearchOutcome:
    """The backend's ``grid()`` (each fit is seeded by the backend), ``options.n_jobs`` points
    trained at once."""
    n_jobs = n_jobs_of(backend)
    return grid_search(backend.grid(), train=train, on_trial=on_trial, n_jobs=n_jobs)


def grid_search(
    points: list[dict],
    *,
    train: TrainTrial,
    on_trial: Callable[[TrialResult], None] = lambda result: None,
    n_jobs: int = 1,
) -> SearchOutcome:
    """Every point of a fixed grid in order (trial ``i`` is ``points[i]``), none pruned; the
    vali-best wins, the first of ties (the paper's LightGBM grid). ``n_jobs`` points train at
    once in threads, their results kept in point order (`search.trial_batches`)."""
    outcome = SearchOutcome()
    for batch in batches(len(points), n_jobs):
        done = in_threads([partial(train, points[number], None) for number in batch])
        for number, (model, rounds, vali, seconds, per_group) in zip(batch, done, strict=True):
            result = TrialResult(
                number, points[number], rounds, vali, seconds, vali_per_group=per_group
            )
            keep_if_best(outcome, result, model)
            on_trial(result)
    return outcome
