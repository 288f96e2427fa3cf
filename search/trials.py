"""A search's trials: one trained trial's result (`TrialResult`), the search's outcome with only
the vali-best model kept (`SearchOutcome`, `keep_if_best`), what trains one trial (`TrainTrial`)
and how its pruner stops it (`Pruned`), and what a strategy reads of what it searches
(`Searchable`: `trees.tree_run.TreeBackend` is one).

A search trains one model per trial and scores it on the labeled vali QGs with the project's
NDCG@5; the trial with the highest vali score is chosen (`search.selection.select_best`), and
only its model is kept. Test never enters: the caller scores test once, with the chosen model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from scarce_ltr.search.selection import select_best


class Searchable(Protocol):
    """What a strategy reads of the model it searches (`search.strategies`). ``grid()`` (the
    fixed points of a grid walk) and ``apart(choices)`` (a key per trial: trials of different
    keys never train at once) are optional."""

    name: str  # as a message names it: "CatBoost YetiRank"
    n_trials: int
    early_stopping_rounds: int  # no trial is pruned before it
    options: Any  # its config section: storage, study_name, n_jobs

    def suggest(self, trial: Any) -> dict: ...

    def first(self) -> dict:
        """Trial 0: the defaults."""
        ...


@dataclass
class TrialResult:
    """One trained trial: its choices, rounds kept, vali NDCG@5 (``nan``: pruned or undefined)
    and that score per labeled vali QG (None: pruned; `search.trial_scores`)."""

    number: int
    choices: dict[str, Any]
    rounds: int
    vali_ndcg: float
    seconds: float
    pruned: bool = False
    vali_per_group: np.ndarray | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        return {
            "trial": self.number,
            **self.choices,
            "rounds": self.rounds,
            "vali_ndcg@5": None if math.isnan(self.vali_ndcg) else self.vali_ndcg,
            "seconds": round(self.seconds, 3),
            **({"pruned": True} if self.pruned else {}),
        }


@dataclass
class SearchOutcome:
    results: list[TrialResult] = field(default_factory=list)
    best: int = -1  # index into results
    best_model: Any = None  # only the vali-best model is kept in memory

    @property
    def best_result(self) -> TrialResult:
        return self.results[self.best]


class Pruned(Exception):
    """Raised by a trial's training callback when the pruner stops it."""

    def __init__(self, rounds: int) -> None:
        super().__init__(f"pruned after {rounds} rounds")
        self.rounds = rounds


# One trial: (choices, a report(step, value) -> None that raises Pruned, or None when no pruner
# watches) -> (model, rounds, vali ndcg@5, seconds, vali ndcg@5 per labeled vali QG).
TrainTrial = Callable[
    [dict, Callable[[int, float], None] | None], tuple[Any, int, float, float, np.ndarray]
]


def keep_if_best(outcome: SearchOutcome, result: TrialResult, model: Any) -> None:
    """Append ``result``; keep ``model`` when it is now the vali-best (first of ties)."""
    outcome.results.append(result)
    if select_best([r.vali_ndcg for r in outcome.results]) == len(outcome.results) - 1:
        outcome.best, outcome.best_model = len(outcome.results) - 1, model
