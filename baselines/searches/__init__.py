"""The search strategies of the tree pipeline: one module each, one line each in `SEARCHES`.

A strategy proposes the fits of one search for any tree backend
(`baselines.tree_run.TreeBackend`) and keeps the vali-best
(`baselines.tuning.keep_if_best`): ``search(backend, *, seed, train, on_trial) -> SearchOutcome``.
``train(choices, report)`` fits and scores one trial (`baselines.tree_run.trainer`);
``on_trial`` sees every trial's result as it ends. The run's config names the strategy
(``gbdt.search``, ``catboost.search``, ``xgboost.search``).

A strategy that walks the backend's fixed ``grid()`` (``grid=True``) is offered only by a
backend that has one (LightGBM's paper grid); the others draw ``backend.n_trials`` trials from the
backend's space (``suggest``), trial 0 its defaults (``first``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scarce_ltr.baselines.searches import paper_grid, random_search, tpe
from scarce_ltr.baselines.tuning import SearchOutcome


@dataclass(frozen=True)
class Strategy:
    search: Callable[..., SearchOutcome]  # (backend, *, seed, train, on_trial) -> SearchOutcome
    grid: bool = False  # walks the backend's grid(): trial i is point i; else n_trials trials


def check_search(key: str, name: Any) -> None:
    """`ValueError` naming ``key`` and every strategy unless ``name`` is one."""
    if name not in SEARCHES:
        raise ValueError(f"{key} must be one of {', '.join(SEARCHES)}, got {name!r}")


# Command-line name (``<section>.search=<name>``) -> strategy.
SEARCHES: dict[str, Strategy] = {
    "paper-grid": Strategy(paper_grid.search, grid=True),
    "optuna": Strategy(tpe.search),
    "random": Strategy(random_search.search),
}
