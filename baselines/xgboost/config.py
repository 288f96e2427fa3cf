"""Options of the XGBoost ranker: the ``xgboost:`` section of ``./run.sh baseline xgboost``.

``xgboost.objective`` is ``rank:ndcg`` (LambdaMART) or ``rank:pairwise`` (RankNet); the search
(``n_trials`` Optuna trials over learning rate, depth, child weight, sampling and L1/L2) and the
number of trees (early stopping) are chosen on the labeled vali QGs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from scarce_ltr.baselines.tuning import SearchOptions

OBJECTIVES = ("rank:ndcg", "rank:pairwise")
MAX_XGBOOST_LABEL = 30  # rank:ndcg's exponential gain 2^y - 1 (and its ndcg metric) stops at 31
# XGBoost parameters the project sets itself, and the key a user sets them with instead.
RESERVED_PARAMS = {
    "objective": "xgboost.objective",
    "eval_metric": "nothing: selection is the project's vali NDCG@5",
    "seed": "seed",
    "random_state": "seed",
    "nthread": "xgboost.num_threads",
    "n_jobs": "xgboost.num_threads",
    "eta": "the search (xgboost.n_trials)",
    "learning_rate": "the search (xgboost.n_trials)",
}


@dataclass(frozen=True)
class XGBoostOptions(SearchOptions):
    section: ClassVar[str] = "xgboost"

    objective: str = "rank:ndcg"  # rank:ndcg | rank:pairwise

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(
                f"xgboost.objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}"
            )
        super().__post_init__()

    def check_params(self, params: dict[str, Any]) -> None:
        check_params(params)


def check_params(params: dict[str, Any]) -> None:
    """`ValueError` naming the backend and the key for a parameter XGBoost does not know."""
    try:
        import json

        import numpy as np
        import xgboost as xgb
    except ImportError:
        return  # the run stops later with the install command (baselines.tuning.require_backend)
    # XGBoost keeps unknown parameters with a warning only; its saved config names every
    # parameter it knows (the leaves of the JSON tree; nested sections are dicts).
    data = xgb.DMatrix(np.zeros((2, 1), dtype=np.float32), label=np.zeros(2))
    booster = xgb.Booster({"objective": "rank:ndcg", "verbosity": 0}, [data])
    known: set[str] = set()

    def leaves(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, dict | list):
                    leaves(value)
                else:
                    known.add(key)

    leaves(json.loads(booster.save_config()))
    for key in params:
        if key in RESERVED_PARAMS:
            raise ValueError(
                f"xgboost.params.{key}: set by the project; use {RESERVED_PARAMS[key]}"
            )
        if key not in known:
            raise ValueError(f"xgboost.params.{key}: XGBoost has no parameter {key!r}")
