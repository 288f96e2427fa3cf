"""Train from Python on arrays, DataFrames and sparse matrices (docs/estimators.md).

`PretrainedRanker` (pretraining + finetuning) and `TreeRanker` (the baselines: LightGBM, its
Optuna search, CatBoost, XGBoost, the hybrid gbdt-ssl) run the same stage code as ``./run.sh``
on the arrays they are given; `load_estimator` reads back what ``save`` wrote. The top layer:
it calls the command line (`scarce_ltr.cli`).
"""

from scarce_ltr.api.base import PretrainedEncoder
from scarce_ltr.api.estimators import PretrainedRanker, TreeRanker, load_estimator
from scarce_ltr.api.scoring import NDCGScorer, ndcg_scorer
from scarce_ltr.serving.predict_table import predict_table

__all__ = [
    "NDCGScorer",
    "PretrainedEncoder",
    "PretrainedRanker",
    "TreeRanker",
    "load_estimator",
    "ndcg_scorer",
    "predict_table",
]
