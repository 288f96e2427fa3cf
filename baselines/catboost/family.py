"""CatBoost's rankers (YetiRank and the other ranking losses): their family entry."""

from __future__ import annotations

from scarce_ltr.baselines.catboost import train
from scarce_ltr.core.families import ModelFamily

FAMILY = ModelFamily(
    names=("catboost",),
    stage="baseline",
    train=train.main,
    group="gbdt",
    bundle_kind=train.BUNDLE_KIND,
    scorer=train.CatBoostScorer,
)
