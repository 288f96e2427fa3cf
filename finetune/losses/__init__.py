"""Ranking losses, one small file each (allRank style): ``f(scores, labels, *, mask, ...)``.

Every loss is vectorized over padded QGs ``[B, L]``, invariant to the padding, and gives no
gradient from a QG without a relevant item. A loss declares its own options as the keyword
parameters after ``mask``, with their defaults; `loss_options` reads them there, and
``finetune.config.LossConfig`` (the ``loss.*`` keys, each checked as the config loads) passes
on those the loss takes (allRank's pass-through).
"""

from __future__ import annotations

import inspect
from functools import cache

from scarce_ltr.finetune.losses.approx_ndcg import approx_ndcg_loss
from scarce_ltr.finetune.losses.lambdaloss import lambdaloss_loss
from scarce_ltr.finetune.losses.lambdarank import lambdarank_loss
from scarce_ltr.finetune.losses.listmle import listmle_loss
from scarce_ltr.finetune.losses.listnet import listnet_loss
from scarce_ltr.finetune.losses.neural_ndcg import neural_ndcg_loss
from scarce_ltr.finetune.losses.ranknet import ranknet_loss
from scarce_ltr.finetune.losses.rmse import rmse_loss
from scarce_ltr.finetune.losses.softmax import softmax_loss

LOSSES = {
    "lambdarank": lambdarank_loss,
    "ranknet": ranknet_loss,
    "softmax": softmax_loss,
    "approx-ndcg": approx_ndcg_loss,
    # allRank (Pobrotyn et al., 2020) and the classics it ships
    "neural-ndcg": neural_ndcg_loss,
    "lambdaloss": lambdaloss_loss,
    "listmle": listmle_loss,
    "listnet": listnet_loss,
    "rmse": rmse_loss,
}


@cache
def loss_options(name: str) -> tuple[str, ...]:
    """The options loss ``name`` takes: its keyword parameters after ``mask`` (lambdarank:
    ``("sigma", "k")``; softmax: none)."""
    parameters = inspect.signature(LOSSES[name]).parameters.values()
    return tuple(
        p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "mask"
    )
