"""Ensembles of finished runs (``ensemble:``, ``stack:``, ``seed-ensemble:``): their entry."""

from __future__ import annotations

from scarce_ltr.core.families import ModelFamily
from scarce_ltr.ensembles import ensemble

FAMILY = ModelFamily(
    names=("ensemble",),
    stage="ensemble",
    train=ensemble.main,
    group=None,  # the members' group when they share one, else hybrid (models.names)
    bundle_kind=ensemble.BUNDLE_KIND,
    scorer=ensemble.EnsembleScorer,  # its members loaded through serving (ScoringContext)
)
