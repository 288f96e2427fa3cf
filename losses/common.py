"""What every ranking loss shares: checks, pair masks, per-QG reduction.

Losses take ``scores [B, L]``, ``labels [B, L]`` and a bool ``mask [B, L]`` of real items.
Padded slots may hold anything (even NaN): every quantity is selected with ``torch.where`` on the
mask, never multiplied by it, so a loss has the same value and gradient whatever the padding.
A QG's loss is reduced within the QG first, then averaged over the QGs that have something to
learn from (a relevant item, or a pair of differently labeled items), so QGs without a relevant
item contribute neither gradient nor weight.
"""

from __future__ import annotations

import torch


def check_inputs(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``scores`` and ``labels`` as float32 (losses are computed in float32 under autocast)."""
    if scores.ndim != 2 or labels.shape != scores.shape or mask.shape != scores.shape:
        shapes = f"{tuple(scores.shape)}, {tuple(labels.shape)}, {tuple(mask.shape)}"
        raise ValueError(f"scores, labels and mask must all be [B, L], got {shapes}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got {mask.dtype}")
    scores = scores.float()
    # Padded labels may be NaN: replace them so that comparisons below stay well defined.
    labels = torch.where(mask, labels.float(), 0.0)
    return scores, labels


def ordered_pairs(labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, L, L]`` bool: real items ``i, j`` of one QG with ``labels[i] > labels[j]``."""
    both_real = mask[:, :, None] & mask[:, None, :]
    return both_real & (labels[:, :, None] > labels[:, None, :])


def has_relevant(labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: QGs with at least one real item labeled above 0."""
    return (mask & (labels > 0)).any(dim=1)


def mean_over_groups(per_group: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """Mean of ``per_group [B]`` over ``active [B]`` QGs; a zero that keeps the graph if none.

    Inactive entries are selected away (not multiplied), so a NaN or inf there never leaks.
    """
    kept = torch.where(active, per_group, 0.0)
    return kept.sum() / active.sum().clamp(min=1)


def pairwise_logistic(scores: torch.Tensor, pairs: torch.Tensor, *, sigma: float) -> torch.Tensor:
    """``[B, L, L]`` ``log(1 + exp(-sigma (s_i - s_j)))`` on ``pairs``, 0 elsewhere."""
    diff = scores[:, :, None] - scores[:, None, :]
    # Padded scores may be inf or NaN; zero their differences before softplus sees them.
    diff = torch.where(pairs, diff, 0.0)
    return torch.where(pairs, torch.nn.functional.softplus(-sigma * diff), 0.0)
