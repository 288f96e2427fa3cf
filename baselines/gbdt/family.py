"""LightGBM LambdaMART and its PCA and pseudo-label variants: their family entry."""

from __future__ import annotations

from scarce_ltr.baselines.gbdt import train
from scarce_ltr.baselines.gbdt.config import LIGHTGBM_METHODS
from scarce_ltr.baselines.gbdt.grid import BUNDLE_KIND
from scarce_ltr.baselines.gbdt.scorer import LightGBMScorer
from scarce_ltr.core.families import ModelFamily

FAMILY = ModelFamily(
    names=LIGHTGBM_METHODS,
    stage="baseline",
    train=train.main,
    group="gbdt",
    bundle_kind=BUNDLE_KIND,
    scorer=LightGBMScorer,  # the lightgbm kind's, which the hybrid's bundles share
    # A booster on the features alone (gbdt, gbdt-optuna, gbdt-pseudo); serving refuses one
    # that also reads PCA columns, naming why.
    export_formats=("lightgbm",),
)
