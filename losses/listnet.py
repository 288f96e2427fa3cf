"""ListNet in allRank's form (Cao et al., 2007): top-one cross-entropy with a softmax target.

``loss_q = -sum_i softmax(y)_i log softmax(s)_i`` over the real items of QG ``q``. Unlike
``softmax`` (whose target is ``y / sum(y)``), the target here is the softmax of the labels, so
irrelevant items keep some target mass. The batch loss is the mean of ``loss_q`` over QGs with a
relevant item. allRank adds 1e-10 inside the log; ``log_softmax`` computes the exact value.
Example: scores ``[0, 0]``, labels ``[1, 0]`` give ``log 2 = 0.6931`` (a uniform prediction
costs log 2 whatever the target).
"""

from __future__ import annotations

import torch

from scarce_ltr.losses.base import Loss, LossOptions
from scarce_ltr.losses.common import check_inputs, has_relevant, mean_over_groups

NAME = "listnet"


def masked_log_softmax(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, L]`` log-softmax over the real items of each row; 0 at padding."""
    # -inf keeps padding out; a row without real items gets 0 (no NaN gradient).
    fill = torch.where(mask.any(dim=1, keepdim=True), float("-inf"), 0.0)
    log_p = torch.log_softmax(torch.where(mask, values, fill), dim=1)
    return torch.where(mask, log_p, 0.0)


def listnet_loss(scores: torch.Tensor, labels: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
    """Scalar ListNet loss of a batch; ``scores``, ``labels``, ``mask`` are ``[B, L]``."""
    scores, labels = check_inputs(scores, labels, mask)
    target = masked_log_softmax(labels, mask).exp()
    per_item = torch.where(mask, -target * masked_log_softmax(scores, mask), 0.0)
    return mean_over_groups(per_item.sum(dim=1), has_relevant(labels, mask))


LOSS = Loss(NAME, LossOptions, listnet_loss)  # reads no key of the loss section
