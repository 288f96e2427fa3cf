"""LambdaLoss with the NDCGLoss2++ weights (Wang et al., 2018; allRank's ``lambdaLoss``).

Items of a QG are put in the order of the current scores (ranks ``r = 1..n``, ties by input
order, not differentiated). For real items ``i, j`` with ``y_i > y_j`` and both ranked within the
top ``k``::

    loss_q = sum_{i,j} w_ij * -log2 sigmoid(sigma (s_i - s_j))
    w_ij = (mu * delta_ij + |1/D(r_i) - 1/D(r_j)|) * |G_i - G_j| / IDCG@k_q
    delta_ij = 1/D(|r_i - r_j|) - 1/D(|r_i - r_j| + 1),   D(r) = log2(1 + r),  G = 2**y - 1

``delta`` is NDCGLoss2's weight (it depends only on how far apart the two items are ranked),
the second term LambdaRank's; ``mu`` mixes them (allRank's default 10). The batch loss is the
mean of ``loss_q`` over the QGs that have at least one such pair (allRank sums over the batch).
Example: scores ``[0, 0]``, labels ``[1, 0]``, ``mu = 0``: ``w = (1 - 1/log2 3) * 1 / 1 = 0.3691``
and ``loss = 0.3691 * 1 = 0.3691``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from scarce_ltr.core.config_fields import NON_NEGATIVE
from scarce_ltr.core.metrics_torch import gains_torch, ideal_dcg_torch, rank_order_torch
from scarce_ltr.losses.base import Loss, LossOptions, check_cutoff, check_sigma
from scarce_ltr.losses.common import (
    check_inputs,
    mean_over_groups,
    ordered_pairs,
    pairwise_logistic,
)

NAME = "lambdaloss"


@dataclass(frozen=True)
class LambdaLossOptions(LossOptions):
    sigma: float = 1.0
    k: int | None = None
    mu: float = 10.0  # allRank's

    def check(self) -> None:
        check_sigma(self.sigma)
        check_cutoff(self.k)
        NON_NEGATIVE.check("loss.mu", self.mu)


def lambdaloss_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    *,
    mask: torch.Tensor,
    sigma: float,
    k: int | None = None,
    mu: float,
) -> torch.Tensor:
    """Scalar NDCGLoss2++ of a batch.

    Args:
        scores: ``[B, L]`` model scores.
        labels: ``[B, L]`` graded or binary labels (>= 0 on real items).
        mask: ``[B, L]`` bool, True on real items.
        sigma: steepness of the pairwise logistic.
        k: only pairs whose two items both rank within the top ``k`` count (NDCG@k).
        mu: weight of the NDCGLoss2 term.
    """
    scores, labels = check_inputs(scores, labels, mask)
    batch, width = scores.shape
    top = width if k is None else k
    with torch.no_grad():
        order = rank_order_torch(torch.where(mask, scores, 0.0), mask)
        ranks = torch.empty_like(order)
        positions = torch.arange(width, device=scores.device).expand(batch, width).contiguous()
        ranks.scatter_(1, order, positions)  # 0-based rank of each item
        rank = (ranks + 1).to(scores.dtype)
        inv_d = 1.0 / torch.log2(1.0 + rank)  # 1 / D(r)
        distance = (rank[:, :, None] - rank[:, None, :]).abs()
        # distance >= 1 on every pair that counts; clamping keeps the diagonal finite.
        gap = distance.clamp(min=1.0)
        delta = 1.0 / torch.log2(1.0 + gap) - 1.0 / torch.log2(2.0 + gap)
        gain = gains_torch(labels)
        ideal = ideal_dcg_torch(labels, mask, k=top).clamp(min=1e-12)
        gain_gap = (gain[:, :, None] - gain[:, None, :]).abs() / ideal[:, None, None]
        lambda_rank = (inv_d[:, :, None] - inv_d[:, None, :]).abs()
        in_top = ranks < top
        pairs = ordered_pairs(labels, mask) & in_top[:, :, None] & in_top[:, None, :]
        weight = torch.where(pairs, (mu * delta + lambda_rank) * gain_gap, 0.0)
    per_pair = weight * pairwise_logistic(scores, pairs, sigma=sigma) / math.log(2.0)
    return mean_over_groups(per_pair.sum(dim=(1, 2)), pairs.any(dim=2).any(dim=1))


LOSS = Loss(NAME, LambdaLossOptions, lambdaloss_loss)
