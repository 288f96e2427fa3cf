"""Pointwise RMSE (allRank's ``rmse``): each score regresses its item's label.

``loss_q = sqrt(mean_i (s_i - y_i)**2)`` over the real items of QG ``q``; the batch loss is the
mean of ``loss_q`` over QGs with a relevant item (as every loss here, so that the QGs a batch
trains on do not depend on the loss). Example: scores ``[1, 0]``, labels ``[2, 0]`` give
``sqrt((1 + 0) / 2) = 0.7071``.
"""

from __future__ import annotations

import torch

from scarce_ltr.losses.base import Loss, LossOptions
from scarce_ltr.losses.common import check_inputs, has_relevant, mean_over_groups

NAME = "rmse"


def rmse_loss(scores: torch.Tensor, labels: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
    """Scalar mean per-QG RMSE of a batch; ``scores``, ``labels``, ``mask`` are ``[B, L]``."""
    scores, labels = check_inputs(scores, labels, mask)
    squared = torch.where(mask, (torch.where(mask, scores, 0.0) - labels) ** 2, 0.0)
    mse = squared.sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    # sqrt has an infinite slope at 0: a perfect QG gets a zero gradient instead of NaN.
    return mean_over_groups(torch.sqrt(mse.clamp(min=1e-12)), has_relevant(labels, mask))


LOSS = Loss(NAME, LossOptions, rmse_loss)  # reads no key of the loss section
