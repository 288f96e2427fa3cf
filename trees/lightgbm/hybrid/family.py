"""LightGBM on a pretrained encoder's embeddings (``gbdt-ssl``): its family entry."""

from __future__ import annotations

from scarce_ltr.core.families import ModelFamily
from scarce_ltr.trees.lightgbm.grid import BUNDLE_KIND
from scarce_ltr.trees.lightgbm.hybrid import train
from scarce_ltr.trees.lightgbm.hybrid.config import EmbeddingOptions
from scarce_ltr.trees.lightgbm.scorer import LightGBMScorer

FAMILY = ModelFamily(
    names=EmbeddingOptions.read_by,  # `baselines.config.HYBRID_BASELINES` is the same tuple
    stage="baseline",
    train=train.main,
    group="hybrid",
    bundle_kind=BUNDLE_KIND,  # LightGBM's, with the encoder beside the booster
    scorer=LightGBMScorer,  # so its scorer (lightgbm/family.py), which reads the encoder too
    export_formats=(),  # the booster reads encoder columns no export format computes
)
