"""LightGBM LambdaMART and its PCA and pseudo-label variants: their family entry."""

from __future__ import annotations

from scarce_ltr.core.families import ModelFamily
from scarce_ltr.trees.lightgbm import train
from scarce_ltr.trees.lightgbm.config import LIGHTGBM_METHODS
from scarce_ltr.trees.lightgbm.grid import BUNDLE_KIND
from scarce_ltr.trees.lightgbm.scorer import LightGBMScorer

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
