"""The deep rankers trained from scratch (ResNet, DeepFM, DCNv2, DASALC): their family entry."""

from __future__ import annotations

from scarce_ltr.baselines.config import DEEP_BASELINES
from scarce_ltr.baselines.deep import train
from scarce_ltr.baselines.deep.models import MODEL_KINDS
from scarce_ltr.core.families import ModelFamily
from scarce_ltr.finetune.model import BUNDLE_KIND
from scarce_ltr.finetune.scorer import TorchScorer

FAMILY = ModelFamily(
    names=DEEP_BASELINES,
    stage="baseline",
    train=train.main,
    group="no-pretrain-dl",
    bundle_kind=BUNDLE_KIND,  # the finetuned rankers' bundle: a torch module and its spec
    scorer=TorchScorer,  # so their scorer (finetune/family.py)
    export_formats=("onnx", "torchscript"),
    torch_builders=MODEL_KINDS,  # DeepFM, DCNv2, DASALC; ResNet is an encoder + head
)
