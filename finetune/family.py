"""The finetuned torch rankers (``./run.sh finetune <strategy>``): their family entry."""

from __future__ import annotations

from scarce_ltr.core.families import ModelFamily
from scarce_ltr.finetune import train
from scarce_ltr.finetune.config import STRATEGIES
from scarce_ltr.finetune.model import BUNDLE_KIND

# The group of a ranker on a pretrained encoder; its config files a fresh encoder's under
# no-pretrain-dl and a taught one's under hybrid (FinetuneConfig.identity).
FAMILY = ModelFamily(
    names=STRATEGIES,
    stage="finetune",
    train=train.main,
    group="pretrained-dl",
    bundle_kind=BUNDLE_KIND,
    export_formats=("onnx", "torchscript"),
)
