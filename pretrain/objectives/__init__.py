"""Pretraining objectives by command-line name (``./run.sh pretrain <name>``)."""

from __future__ import annotations

from scarce_ltr.pretrain.encoders import build_encoder
from scarce_ltr.pretrain.objectives.base import Objective
from scarce_ltr.pretrain.objectives.scarf import SCARF
from scarce_ltr.pretrain.objectives.simclr import DACL, SimCLR
from scarce_ltr.pretrain.objectives.simclr_rank import SimCLRRank, SimCLRSample
from scarce_ltr.pretrain.objectives.simsiam import SimSiam
from scarce_ltr.pretrain.objectives.subtab import SubTab
from scarce_ltr.pretrain.objectives.vime import VIME


def build_objective(cfg, *, n_features: int) -> Objective:
    """The encoder of ``cfg.encoder`` inside the objective of ``cfg.method``, with its heads."""
    encoder = build_encoder(cfg.encoder, n_features=n_features)
    return OBJECTIVES[cfg.method].from_config(encoder, cfg, n_features=n_features)


OBJECTIVES: dict[str, type[Objective]] = {
    "simclr-rank": SimCLRRank,
    "simclr-sample": SimCLRSample,
    "simclr": SimCLR,
    "simsiam": SimSiam,
    "scarf": SCARF,
    "dacl": DACL,
    "vime": VIME,
    "subtab": SubTab,
}
