"""Options of the CatBoost ranker: the ``catboost:`` section of ``./run.sh baseline catboost``.

``catboost.loss`` is one of lyzhin2023's losses (`LOSSES`); the search (``n_trials`` Optuna
trials over learning rate, depth and L2 leaf regularisation, lyzhin2023's appendix A), the
number of trees (early stopping) are chosen on the labeled vali QGs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

# Command-line name -> CatBoost's loss_function. StochasticRank smooths the metric it is told
# to optimise: NDCG@5 with exponential gain, the project's selection metric.
LOSSES = {
    "YetiRank": "YetiRank",
    "YetiRankPairwise": "YetiRankPairwise",
    "StochasticRank": "StochasticRank:metric=NDCG;top=5;type=Exp",
    "QueryRMSE": "QueryRMSE",
}
# CatBoost parameters the project sets itself, and the key a user sets them with instead.
RESERVED_PARAMS = {
    "loss_function": "catboost.loss",
    "objective": "catboost.loss",
    "eval_metric": "nothing: selection is the project's vali NDCG@5",
    "iterations": "catboost.max_rounds",
    "n_estimators": "catboost.max_rounds",
    "num_boost_round": "catboost.max_rounds",
    "num_trees": "catboost.max_rounds",
    "early_stopping_rounds": "catboost.early_stopping_rounds",
    "od_wait": "catboost.early_stopping_rounds",
    "thread_count": "catboost.num_threads",
    "random_seed": "seed",
    "random_state": "seed",
    "learning_rate": "the search (catboost.n_trials)",
}


@dataclass(frozen=True)
class CatBoostOptions:
    loss: str = "YetiRank"  # YetiRank | YetiRankPairwise | StochasticRank | QueryRMSE
    n_trials: int = 20  # Optuna trials (seeded TPE); the vali-best is kept
    max_rounds: int = 500  # trees at most; `epochs` caps it further when set
    early_stopping_rounds: int = 50  # on vali NDCG@5
    num_threads: int = 0  # 0: every core of the machine
    params: dict[str, Any] = field(default_factory=dict)  # any CatBoost parameter, every trial

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"catboost.loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.n_trials < 1:
            raise ValueError(f"catboost.n_trials must be >= 1, got {self.n_trials}")
        for key in ("max_rounds", "early_stopping_rounds"):
            if getattr(self, key) < 1:
                raise ValueError(f"catboost.{key} must be >= 1")
        if self.num_threads < 0:
            raise ValueError("catboost.num_threads must be >= 0 (0: every core)")
        if self.params:
            check_params(self.params)

    def threads(self) -> int:
        return self.num_threads or os.cpu_count() or 1

    def rounds(self, epochs: int | None) -> int:
        return self.max_rounds if epochs is None else min(self.max_rounds, epochs)


def check_params(params: dict[str, Any]) -> None:
    """`ValueError` naming the backend and the key for a parameter CatBoost does not take."""
    try:
        import catboost
    except ImportError:
        return  # the run stops later with the install command (baselines.tuning.require_backend)
    import inspect

    # The ranker's constructor names every CatBoost parameter and alias it accepts.
    known = set(inspect.signature(catboost.CatBoostRanker.__init__).parameters) - {"self"}
    for key in params:
        if key in RESERVED_PARAMS:
            raise ValueError(
                f"catboost.params.{key}: set by the project; use {RESERVED_PARAMS[key]}"
            )
        if key not in known:
            raise ValueError(f"catboost.params.{key}: CatBoost has no parameter {key!r}")
