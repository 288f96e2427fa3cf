"""RankNet (Burges et al., 2005): pairwise logistic loss on every ordered pair of a QG.

``loss_q = mean_{i,j: y_i > y_j} log(1 + exp(-sigma (s_i - s_j)))`` over the real items of QG
``q``; the batch loss is the mean of ``loss_q`` over QGs with at least one such pair.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from scarce_ltr.losses.base import Loss, LossOptions, check_sigma
from scarce_ltr.losses.common import (
    check_inputs,
    mean_over_groups,
    ordered_pairs,
    pairwise_logistic,
)

NAME = "ranknet"


@dataclass(frozen=True)
class RankNetOptions(LossOptions):
    sigma: float = 1.0

    def check(self) -> None:
        check_sigma(self.sigma)


def ranknet_loss(
    scores: torch.Tensor, labels: torch.Tensor, *, mask: torch.Tensor, sigma: float
) -> torch.Tensor:
    """Scalar RankNet loss of a batch; ``scores``, ``labels``, ``mask`` are ``[B, L]``."""
    scores, labels = check_inputs(scores, labels, mask)
    pairs = ordered_pairs(labels, mask)
    n_pairs = pairs.sum(dim=(1, 2))
    per_group = pairwise_logistic(scores, pairs, sigma=sigma).sum(dim=(1, 2))
    return mean_over_groups(per_group / n_pairs.clamp(min=1), n_pairs > 0)


LOSS = Loss(NAME, RankNetOptions, ranknet_loss)
