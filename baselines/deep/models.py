"""Every model a run can leave in ``model.pt``: finetuning's rankers and the deep baselines'.

`scarce_ltr.finetune.model` builds rankers (encoder + head) and their combinations; the deep
baselines that are not encoder + head register their builders in `MODEL_KINDS` here, and code at
this layer or above loads any run's model through `load_model`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from torch import nn

from scarce_ltr.baselines.deep import dasalc, dcnv2, deepfm
from scarce_ltr.finetune import model as finetune_model


def build_model(spec: dict, *, features: np.ndarray | None = None) -> nn.Module:
    return finetune_model.build_model(spec, kinds=MODEL_KINDS, features=features)


def load_model(run_dir: str | Path) -> tuple[nn.Module, dict]:
    return finetune_model.load_model(run_dir, kinds=MODEL_KINDS)


MODEL_KINDS = {"deepfm": deepfm.build, "dcnv2": dcnv2.build, "dasalc": dasalc.build}
