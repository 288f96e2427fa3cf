"""Options of the CatBoost ranker: the ``catboost:`` section of ``./run.sh baseline catboost``.

``catboost.loss`` is one of lyzhin2023's losses (`LOSSES`); the search (``n_trials`` Optuna
trials over learning rate, depth and L2 leaf regularisation, lyzhin2023's appendix A), the
number of trees (early stopping) are chosen on the labeled vali QGs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from scarce_ltr.baselines.tuning import SearchOptions

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
class CatBoostOptions(SearchOptions):
    section: ClassVar[str] = "catboost"

    loss: str = "YetiRank"  # YetiRank | YetiRankPairwise | StochasticRank | QueryRMSE

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"catboost.loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        super().__post_init__()

    def check_params(self, params: dict[str, Any]) -> None:
        check_params(params)


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
