"""Softmax cross-entropy (ListNet's top-one form, as in TF-Ranking and DASALC).

``loss_q = -sum_i (y_i / sum_j y_j) log softmax(s)_i`` over the real items of QG ``q``: the
cross-entropy between the label-normalized target and the score softmax. The batch loss is the
mean of ``loss_q`` over QGs with a relevant item (the target is undefined without one).
"""

from __future__ import annotations

import torch

from scarce_ltr.losses.base import Loss, LossOptions
from scarce_ltr.losses.common import check_inputs, has_relevant, mean_over_groups

NAME = "softmax"


def softmax_loss(scores: torch.Tensor, labels: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
    """Scalar softmax cross-entropy of a batch; ``scores``, ``labels``, ``mask`` are ``[B, L]``."""
    scores, labels = check_inputs(scores, labels, mask)
    active = has_relevant(labels, mask)
    target = labels / labels.sum(dim=1, keepdim=True).clamp(min=1e-12)
    # -inf keeps padding out of the softmax; a row without real items gets 0 (no NaN gradient).
    fill = torch.where(mask.any(dim=1, keepdim=True), float("-inf"), 0.0)
    log_p = torch.log_softmax(torch.where(mask, scores, fill), dim=1)
    per_item = torch.where(mask, -target * torch.where(mask, log_p, 0.0), 0.0)
    return mean_over_groups(per_item.sum(dim=1), active)


LOSS = Loss(NAME, LossOptions, softmax_loss)  # reads no key of the loss section
