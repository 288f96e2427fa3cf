"""Train from Python on arrays, DataFrames and sparse matrices (docs/estimators.md).

`PretrainedRanker` (pretraining + finetuning) and `TreeRanker` (the baselines: LightGBM, its
Optuna search, CatBoost, XGBoost, the hybrid gbdt-ssl) call the stages' functions
(`pretrain.fit`, `finetune.fit`, `baselines.fit`) on the arrays they are given, in memory, with
the configs ``./run.sh`` composes; `load_estimator` reads back what ``save`` wrote. Below the
command line: it imports no `scarce_ltr.cli`.
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
