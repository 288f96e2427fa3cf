"""``optuna``: a seeded TPE study (Optuna's default sampler) over the backend's space; each trial
is drawn where the earlier trials scored well on vali (`study.optuna_search`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from scarce_ltr.baselines.searches.study import search_backend
from scarce_ltr.baselines.tuning import SearchOutcome, TrainTrial, TrialResult

if TYPE_CHECKING:
    from scarce_ltr.baselines.tree_run import TreeBackend


def search(
    backend: TreeBackend,
    *,
    seed: int,
    train: TrainTrial,
    on_trial: Callable[[TrialResult], None],
) -> SearchOutcome:
    return search_backend(
        backend,
        lambda optuna: optuna.samplers.TPESampler(seed=seed),
        train=train,
        on_trial=on_trial,
    )
