"""ApproxNDCG (Qin et al., 2010; Bruch et al., 2019): NDCG with smooth ranks.

The rank of item ``i`` is approximated by ``pi_i = 1 + sum_{j != i} sigmoid((s_j - s_i) / T)``
over the real items of its QG, and ``loss_q = 1 - sum_i G_i / log2(1 + pi_i) / IDCG_q`` with
``G = 2**y - 1``. Smaller temperatures ``T`` track the true ranks more closely (and give sparser
gradients). The batch loss is the mean of ``loss_q`` over QGs with a relevant item.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from scarce_ltr.core.metrics_torch import gains_torch, ideal_dcg_torch
from scarce_ltr.losses.base import Loss, LossOptions, check_temperature
from scarce_ltr.losses.common import check_inputs, has_relevant, mean_over_groups

NAME = "approx-ndcg"


@dataclass(frozen=True)
class ApproxNDCGOptions(LossOptions):
    temperature: float | None = None  # None: the function's 0.1

    def check(self) -> None:
        check_temperature(self.temperature)


def approx_ndcg_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    *,
    mask: torch.Tensor,
    temperature: float = 0.1,
) -> torch.Tensor:
    """Scalar ``1 - ApproxNDCG`` of a batch; ``scores``, ``labels``, ``mask`` are ``[B, L]``."""
    scores, labels = check_inputs(scores, labels, mask)
    width = scores.shape[1]
    others = mask[:, None, :] & mask[:, :, None]
    others &= ~torch.eye(width, dtype=torch.bool, device=scores.device)
    safe = torch.where(mask, scores, 0.0)
    beats = torch.sigmoid((safe[:, None, :] - safe[:, :, None]) / temperature)  # [B, i, j]
    approx_rank = 1.0 + torch.where(others, beats, 0.0).sum(dim=2)
    gain = torch.where(mask, gains_torch(labels), 0.0)
    dcg = (gain / torch.log2(1.0 + approx_rank)).sum(dim=1)
    ideal = ideal_dcg_torch(labels, mask, k=max(width, 1))
    active = has_relevant(labels, mask)
    return mean_over_groups(1.0 - dcg / ideal.clamp(min=1e-12), active)


LOSS = Loss(NAME, ApproxNDCGOptions, approx_ndcg_loss)
