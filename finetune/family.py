"""The finetuned torch rankers (``./run.sh finetune <strategy>``): their family entry."""

from __future__ import annotations

from scarce_ltr.core.families import ModelFamily
from scarce_ltr.finetune import train
from scarce_ltr.finetune.config import STRATEGIES
from scarce_ltr.finetune.model import BUNDLE_KIND
from scarce_ltr.finetune.scorer import TorchScorer

# The group of a ranker on a pretrained encoder; its config files a fresh encoder's under
# no-pretrain-dl and a taught one's under hybrid (FinetuneConfig.identity).
FAMILY = ModelFamily(
    names=STRATEGIES,
    stage="finetune",
    train=train.main,
    group="pretrained-dl",
    bundle_kind=BUNDLE_KIND,
    scorer=TorchScorer,  # the torch kind's, which the deep baselines' bundles share
    export_formats=("onnx", "torchscript"),
)
