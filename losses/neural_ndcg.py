"""NeuralNDCG (Pobrotyn & Bialobrzeski, 2021; allRank's ``neuralNDCG``): NDCG through a smooth sort.

NeuralSort (Grover et al., 2019) relaxes the permutation that sorts the ``n`` real scores of a
QG into a row-stochastic matrix, row ``i`` (rank ``i = 1..n``) being::

    P[i, :] = softmax(((n + 1 - 2 i) s - A 1) / T),   A[j, l] = |s_j - s_l|

Sinkhorn scaling (a fixed number of alternating column and row normalisations) then makes it
nearly doubly stochastic, so every item is spread over the ranks with total weight one. The
gains "sorted" by it, ``P G`` with ``G = 2**y - 1``, give a smooth DCG@k, and
``loss_q = 1 - sum_{i <= k} (P G)_i / log2(i + 1) / IDCG@k_q``. Smaller temperatures ``T``
approach the true sort. The batch loss is the mean of ``loss_q`` over QGs with a relevant item.
allRank stops Sinkhorn early at a batch-wide tolerance; a fixed count keeps a QG's loss
independent of the other QGs of its batch. Memory: autograd keeps every Sinkhorn step, about
``2 * SINKHORN_ITERS`` tensors ``[B, L, L]``, so long lists want a small ``item_budget``.
Example: scores ``[1, 0]``, labels ``[1, 0]``, ``T = 1``: ``P = [[0.731, 0.269], [0.269, 0.731]]``
(already doubly stochastic) and ``loss = 1 - (0.731 + 0.269 / log2 3) = 0.0993``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from scarce_ltr.core.metrics_torch import discounts_torch, gains_torch, ideal_dcg_torch
from scarce_ltr.losses.base import Loss, LossOptions, check_cutoff, check_temperature
from scarce_ltr.losses.common import check_inputs, has_relevant, mean_over_groups

NAME = "neural-ndcg"
SINKHORN_ITERS = 50  # allRank's max_iter


@dataclass(frozen=True)
class NeuralNDCGOptions(LossOptions):
    temperature: float | None = None  # None: the function's 1.0 (allRank's)
    k: int | None = None

    def check(self) -> None:
        check_temperature(self.temperature)
        check_cutoff(self.k)


def neural_sort(scores: torch.Tensor, mask: torch.Tensor, *, temperature: float) -> torch.Tensor:
    """``[B, L, L]`` relaxed sort: ``P[b, i, j]`` weight of item ``j`` at rank ``i``.

    Rows ``i >= n_b`` (ranks past the QG's ``n_b`` real items) and columns of padded items are 0.
    """
    width = scores.shape[1]
    safe = torch.where(mask, scores, 0.0)
    both = mask[:, :, None] & mask[:, None, :]
    spread = torch.where(both, (safe[:, :, None] - safe[:, None, :]).abs(), 0.0).sum(dim=2)
    n_real = mask.sum(dim=1, keepdim=True).to(scores.dtype)  # [B, 1]
    rank = torch.arange(1, width + 1, dtype=scores.dtype, device=scores.device)
    scale = n_real + 1.0 - 2.0 * rank  # [B, L] over ranks i
    logits = (scale[:, :, None] * safe[:, None, :] - spread[:, None, :]) / temperature
    valid_rank = rank[None, :] <= n_real  # [B, L]
    cell = valid_rank[:, :, None] & mask[:, None, :]
    # A rank row without a real column (padding rows) would be all -inf: give it zeros instead.
    logits = torch.where(cell, logits, float("-inf"))
    logits = torch.where(valid_rank[:, :, None], logits, 0.0)
    return torch.where(cell, torch.softmax(logits, dim=2), 0.0)


def sinkhorn(matrix: torch.Tensor, *, iterations: int = SINKHORN_ITERS) -> torch.Tensor:
    """Alternate column and row normalisation of ``[B, L, L]``; all-zero rows and columns stay 0."""
    for _ in range(iterations):
        matrix = matrix / _nonzero(matrix.sum(dim=1, keepdim=True))
        matrix = matrix / _nonzero(matrix.sum(dim=2, keepdim=True))
    return matrix


def _nonzero(sums: torch.Tensor) -> torch.Tensor:
    # Padding rows and columns sum to 0: divide them by 1, not by a tiny clamp whose 1/eps
    # factor, compounded over the iterations, overflows the backward pass into NaN.
    return torch.where(sums > 0, sums, 1.0)


def neural_ndcg_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    *,
    mask: torch.Tensor,
    temperature: float = 1.0,
    k: int | None = None,
) -> torch.Tensor:
    """Scalar ``1 - NeuralNDCG@k`` of a batch; ``scores``, ``labels``, ``mask`` are ``[B, L]``.

    ``temperature``: of NeuralSort's softmax (allRank's default 1.0); ``k``: the cutoff (None:
    the whole list).
    """
    scores, labels = check_inputs(scores, labels, mask)
    width = scores.shape[1]
    top = width if k is None else k
    permutation = sinkhorn(neural_sort(scores, mask, temperature=temperature))
    gain = torch.where(mask, gains_torch(labels), 0.0)
    sorted_gain = (permutation @ gain[:, :, None]).squeeze(2)  # [B, L] over ranks
    discount = discounts_torch(width, k=min(top, width), dtype=scores.dtype, device=scores.device)
    dcg = (sorted_gain * discount).sum(dim=1)
    ideal = ideal_dcg_torch(labels, mask, k=top)
    active = has_relevant(labels, mask)
    return mean_over_groups(1.0 - dcg / ideal.clamp(min=1e-12), active)


LOSS = Loss(NAME, NeuralNDCGOptions, neural_ndcg_loss)
