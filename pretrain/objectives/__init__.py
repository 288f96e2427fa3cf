"""Pretraining objectives by command-line name (``./run.sh pretrain <name>``).

Each is one module: an `Objective` subclass whose ``options`` (an `ObjectiveOptions`) name the
keys of the pretraining config it reads, with their checks, and whose ``build`` makes it from
them. `OBJECTIVES` is the one list of names; the config refuses a key the chosen method does not
read (`pretrain.config.PretrainConfig`).
"""

from __future__ import annotations

import numpy as np

from scarce_ltr.core.registry import Registry
from scarce_ltr.pretrain.encoders import build_encoder
from scarce_ltr.pretrain.objectives.base import Objective
from scarce_ltr.pretrain.objectives.dacl import DACL
from scarce_ltr.pretrain.objectives.qg_bins import QGBins
from scarce_ltr.pretrain.objectives.rank_pretext import RankPretext
from scarce_ltr.pretrain.objectives.scarf import SCARF
from scarce_ltr.pretrain.objectives.simclr import SimCLR
from scarce_ltr.pretrain.objectives.simclr_pretext import SimCLRPretext
from scarce_ltr.pretrain.objectives.simclr_rank import SimCLRRank
from scarce_ltr.pretrain.objectives.simclr_sample import SimCLRSample
from scarce_ltr.pretrain.objectives.simsiam import SimSiam
from scarce_ltr.pretrain.objectives.subtab import SubTab
from scarce_ltr.pretrain.objectives.vime import VIME


def build_objective(cfg, *, n_features: int, features: np.ndarray | None = None) -> Objective:
    """The encoder of ``cfg.encoder`` inside the objective of ``cfg.method``, with its heads,
    made from the options ``cfg`` gives it (checked); ``features``: the pretraining items, for
    an encoder that learns from the data when built (`pretrain.encoders.build_encoder`)."""
    objective = OBJECTIVES[cfg.method]
    encoder = build_encoder(cfg.encoder, n_features=n_features, features=features)
    seed = {"seed": cfg.seed} if objective.seeded else {}  # a draw fixed for the whole run
    return objective.build(encoder, objective.options.of(cfg), n_features=n_features, **seed)


# `OBJECTIVES.option_keys()`: every key some method reads; `.readers(key)`: the methods that do.
OBJECTIVES: Registry[type[Objective]] = Registry(
    "method",
    {
        "simclr-rank": SimCLRRank,
        "simclr-sample": SimCLRSample,
        "simclr": SimCLR,
        "simsiam": SimSiam,
        "scarf": SCARF,
        "dacl": DACL,
        "vime": VIME,
        "subtab": SubTab,
        # pretext tasks from the data's own structure (issue 60), not methods of the paper
        "rank-pretext": RankPretext,
        "qg-bins": QGBins,
        # SimCLR plus rank-pretext on one encoder: between-QG contrast and in-QG orders
        "simclr-pretext": SimCLRPretext,
    },
    reads=lambda objective: objective.options.keys(),
)
