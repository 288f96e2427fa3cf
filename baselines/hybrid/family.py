"""LightGBM on a pretrained encoder's embeddings (``gbdt-ssl``): its family entry."""

from __future__ import annotations

from scarce_ltr.baselines.config import HYBRID_BASELINES
from scarce_ltr.baselines.gbdt.grid import BUNDLE_KIND
from scarce_ltr.baselines.gbdt.scorer import LightGBMScorer
from scarce_ltr.baselines.hybrid import train
from scarce_ltr.core.families import ModelFamily

FAMILY = ModelFamily(
    names=HYBRID_BASELINES,
    stage="baseline",
    train=train.main,
    group="hybrid",
    bundle_kind=BUNDLE_KIND,  # LightGBM's, with the encoder beside the booster
    scorer=LightGBMScorer,  # so its scorer (gbdt/family.py), which reads the encoder too
    export_formats=(),  # the booster reads encoder columns no export format computes
)
