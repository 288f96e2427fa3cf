"""XGBoost's rankers: their family entry."""

from __future__ import annotations

from scarce_ltr.baselines.xgboost import train
from scarce_ltr.core.families import ModelFamily

FAMILY = ModelFamily(
    names=("xgboost",),
    stage="baseline",
    train=train.main,
    group="gbdt",
    bundle_kind=train.BUNDLE_KIND,
    scorer=train.XGBoostScorer,
)
