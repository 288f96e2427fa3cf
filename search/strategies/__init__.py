"""The search strategies of the tree pipeline: one module each, one line each in `SEARCHES`.

A strategy proposes the fits of one search for any tree backend
(`search.trials.Searchable`: `trees.tree_run.TreeBackend`) and keeps the vali-best
(`search.trials.keep_if_best`): `Strategy.search(backend, *, seed, train, on_trial)`. Most are
an Optuna sampler over the backend's space, ``sampler(optuna, seed)``, run by the study they all
share (`study.search_backend`); a walk of the backend's fixed grid is ``walk(backend, *, train,
on_trial)``.
``train(choices, report)`` fits and scores one trial (`trees.tree_run.trainer`);
``on_trial`` sees every trial's result as it ends. The run's config names the strategy
(``gbdt.search``, ``catboost.search``, ``xgboost.search``).

A strategy that walks the backend's fixed ``grid()`` (``grid=True``) is offered only by a
backend that has one (LightGBM's paper grid); the others draw ``backend.n_trials`` trials from the
backend's space (``suggest``), trial 0 its defaults (``first``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from scarce_ltr.search.strategies import paper_grid, random_search, tpe
from scarce_ltr.search.strategies.study import search_backend
from scarce_ltr.search.studies import StudyStore
from scarce_ltr.search.trials import Searchable, SearchOutcome, TrainTrial, TrialResult


@dataclass(frozen=True)
class Strategy:
    sampler: Callable[[ModuleType, int], Any] | None = None  # (optuna, seed) -> its sampler
    walk: Callable[..., SearchOutcome] | None = None  # or (backend, *, train, on_trial): the grid

    @property
    def grid(self) -> bool:
        """Walks the backend's grid(): trial i is point i; else ``n_trials`` sampled trials."""
        return self.walk is not None

    def search(
        self,
        backend: Searchable,
        *,
        seed: int,
        train: TrainTrial,
        on_trial: Callable[[TrialResult], None],
        study: StudyStore | None = None,
    ) -> SearchOutcome:
        """The vali-best fit of this strategy's trials for ``backend``; ``study``: where a
        sampled search's study is kept (`search.studies`; a grid walk has none)."""
        if self.walk is not None:
            return self.walk(backend, train=train, on_trial=on_trial)
        assert self.sampler is not None
        sampler = self.sampler
        return search_backend(
            backend,
            lambda optuna: sampler(optuna, seed),
            train=train,
            on_trial=on_trial,
            study=study,
        )


def check_search(key: str, name: Any) -> None:
    """`ValueError` naming ``key`` and every strategy unless ``name`` is one."""
    if name not in SEARCHES:
        raise ValueError(f"{key} must be one of {', '.join(SEARCHES)}, got {name!r}")


# Command-line name (``<section>.search=<name>``) -> strategy.
SEARCHES: dict[str, Strategy] = {
    "paper-grid": Strategy(walk=paper_grid.search),
    "optuna": Strategy(sampler=tpe.sampler),
    "random": Strategy(sampler=random_search.sampler),
}
