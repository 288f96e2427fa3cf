"""Ranking losses by ``loss.name``, one small file each (allRank style).

Every loss is vectorized over padded QGs ``[B, L]``, invariant to the padding, and gives no
gradient from a QG without a relevant item. A loss module exports its ``NAME``, its options (a
`base.LossOptions` dataclass: the keys of the ``loss`` section it reads, their defaults and
checks) and ``LOSS``, which binds them to its pure function ``f(scores, labels, *, mask,
**options)`` (`base.Loss`). `LOSSES` is the one list of names: ``finetune.config.LossConfig``
(the ``loss.*`` keys) builds the chosen loss from it and refuses a key that loss does not read.
``LOSSES[name](scores, labels, mask=mask, **options)`` computes a batch's loss directly.
"""

from __future__ import annotations

from scarce_ltr.core.registry import Registry
from scarce_ltr.losses import (
    approx_ndcg,
    lambdaloss,
    lambdarank,
    listmle,
    listnet,
    neural_ndcg,
    ranknet,
    rmse,
    softmax,
)
from scarce_ltr.losses.base import Loss

# `LOSSES.reads(name)`: the keys of the ``loss`` section loss ``name`` reads (lambdarank:
# ``("sigma", "k")``; softmax: none); `.option_keys()`: every key some loss reads;
# `.readers(key)`: the losses that do.
LOSSES: Registry[Loss] = Registry(
    "name",
    {
        loss.name: loss
        for loss in (
            lambdarank.LOSS,
            ranknet.LOSS,
            softmax.LOSS,
            approx_ndcg.LOSS,
            # allRank (Pobrotyn et al., 2020) and the classics it ships
            neural_ndcg.LOSS,
            lambdaloss.LOSS,
            listmle.LOSS,
            listnet.LOSS,
            rmse.LOSS,
        )
    },
    reads=lambda loss: loss.options.keys(),
)
