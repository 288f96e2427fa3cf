"""LambdaRank (Burges, 2010): pairwise logistic loss weighted by |delta NDCG|.

For real items ``i, j`` of one QG with ``y_i > y_j``::

    loss_q = sum_{i,j} |delta NDCG@k_ij| * log(1 + exp(-sigma (s_i - s_j)))
    |delta NDCG@k_ij| = |G_i - G_j| * |D(r_i) - D(r_j)| / IDCG@k_q

with ``G = 2**y - 1``, ``D(r) = 1 / log2(r + 1)`` for ranks ``r <= k`` and 0 beyond (no
truncation when ``k`` is None), ranks taken from the current scores (ties by input order, as in
the metric) and not differentiated. The weight is the change of NDCG@k when ``i`` and ``j`` swap
places, so the gradient of this loss is LambdaRank's lambda. The batch loss is the mean of
``loss_q`` over the QGs that have at least one such pair.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from scarce_ltr.core.metrics_torch import (
    discounts_torch,
    gains_torch,
    ideal_dcg_torch,
    rank_order_torch,
)
from scarce_ltr.losses.base import Loss, LossOptions, check_cutoff, check_sigma
from scarce_ltr.losses.common import (
    check_inputs,
    mean_over_groups,
    ordered_pairs,
    pairwise_logistic,
)

NAME = "lambdarank"


@dataclass(frozen=True)
class LambdaRankOptions(LossOptions):
    sigma: float = 1.0
    k: int | None = None

    def check(self) -> None:
        check_sigma(self.sigma)
        check_cutoff(self.k)


def lambdarank_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    *,
    mask: torch.Tensor,
    sigma: float,
    k: int | None = None,
) -> torch.Tensor:
    """Scalar LambdaRank loss of a batch.

    Args:
        scores: ``[B, L]`` model scores.
        labels: ``[B, L]`` graded or binary labels (>= 0 on real items).
        mask: ``[B, L]`` bool, True on real items.
        sigma: steepness of the pairwise logistic.
        k: truncation: only rank changes within the top ``k`` carry weight (NDCG@k).
    """
    scores, labels = check_inputs(scores, labels, mask)
    batch, width = scores.shape
    pairs = ordered_pairs(labels, mask)
    with torch.no_grad():
        order = rank_order_torch(scores.detach(), mask)
        ranks = torch.empty_like(order)
        positions = torch.arange(width, device=scores.device).expand(batch, width).contiguous()
        ranks.scatter_(1, order, positions)  # 0-based rank of each item
        discount = discounts_torch(width, k=k, dtype=scores.dtype, device=scores.device)[ranks]
        ideal = ideal_dcg_torch(labels, mask, k=k if k is not None else max(width, 1))
        gain = gains_torch(labels)
        delta = (gain[:, :, None] - gain[:, None, :]).abs() * (
            discount[:, :, None] - discount[:, None, :]
        ).abs()
        weight = torch.where(pairs, delta / ideal.clamp(min=1e-12)[:, None, None], 0.0)
    per_pair = weight * pairwise_logistic(scores, pairs, sigma=sigma)
    return mean_over_groups(per_pair.sum(dim=(1, 2)), pairs.any(dim=2).any(dim=1))


LOSS = Loss(NAME, LambdaRankOptions, lambdarank_loss)
