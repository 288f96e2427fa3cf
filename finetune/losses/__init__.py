"""Ranking losses, one small file each (allRank style): ``f(scores, labels, *, mask, ...)``.

Every loss is vectorized over padded QGs ``[B, L]``, invariant to the padding, and gives no
gradient from a QG without a relevant item. `LOSS_OPTIONS` names the keyword options of each
loss that ``finetune.config.LossConfig`` passes on.
"""

from __future__ import annotations

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

LOSS_OPTIONS: dict[str, tuple[str, ...]] = {
    "lambdarank": ("sigma", "k"),
    "ranknet": ("sigma",),
    "softmax": (),
    "approx-ndcg": ("temperature",),
    "neural-ndcg": ("temperature", "k"),
    "lambdaloss": ("sigma", "k", "mu"),
    "listmle": (),
    "listnet": (),
    "rmse": (),
}
