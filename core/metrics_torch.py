"""NDCG@k on padded torch batches, for training loops and ranking losses.

Same convention as the numpy reference ``core.metrics`` (and tested against it): gain
``2**y - 1``, discount ``1 / log2(rank + 1)``, k clipped to the list length, ties in score broken
by stable input order, and an empty-QG policy (``skip``, ``one``, ``zero``) for QGs whose ideal DCG
is 0. Every function takes a ``[B, L]`` bool ``mask`` of real items and gives the same values
whatever the padding width ``L`` and wherever the padded slots sit in a row. Scores must not be
NaN on real items (padded slots may hold anything); labels of real items must be >= 0.
"""

from __future__ import annotations

import torch

from scarce_ltr.core.metric_inputs import check_k, check_policy


def gains_torch(labels: torch.Tensor) -> torch.Tensor:
    """``2**labels - 1``, same shape and (floating) dtype as ``labels``."""
    return torch.exp2(labels) - 1.0


def discounts_torch(
    list_size: int, *, k: int | None = None, dtype: torch.dtype, device: torch.device | str
) -> torch.Tensor:
    """``[list_size]`` discount ``1 / log2(rank + 1)`` of ranks 1..list_size, 0 past rank ``k``."""
    ranks = torch.arange(1, list_size + 1, dtype=dtype, device=device)
    discount = 1.0 / torch.log2(ranks + 1.0)
    if k is not None:
        discount = discount.masked_fill(ranks > check_k(k), 0.0)
    return discount


def rank_order_torch(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, L]`` int64 permutation of each row: real items by descending score, then padding.

    Ties keep input order. Two stable sorts rather than one sort on ``scores`` with padding set
    to -inf: a real item scored -inf would then tie with the padding and could land behind it.
    """
    by_score = torch.sort(scores, dim=1, descending=True, stable=True).indices
    is_padding = (~mask).gather(1, by_score).to(torch.uint8)
    real_first = torch.sort(is_padding, dim=1, stable=True).indices
    return by_score.gather(1, real_first)


def ideal_dcg_torch(labels: torch.Tensor, mask: torch.Tensor, *, k: int) -> torch.Tensor:
    """``[B]`` DCG@k of the best ordering of each row's real items (0 for rows without any).

    Args:
        labels: ``[B, L]`` relevance labels (real items >= 0; padded slots ignored).
        mask: ``[B, L]`` bool, True on real items.
    """
    _check_shapes(labels, labels, mask)
    labels = _as_float(labels)
    # Tied labels have equal gains, so the ideal order needs no tie-breaking rule.
    best_first = labels.masked_fill(~mask, float("-inf")).sort(dim=1, descending=True).values
    n_real = mask.sum(dim=1, keepdim=True)
    is_real = torch.arange(labels.shape[1], device=labels.device) < n_real
    item_gains = torch.where(is_real, gains_torch(best_first), 0.0)
    discount = discounts_torch(labels.shape[1], k=k, dtype=labels.dtype, device=labels.device)
    return (item_gains * discount).sum(dim=1)


def ndcg_torch(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    k: int,
    policy: str = "skip",
) -> torch.Tensor:
    """NDCG@k of each row.

    Args:
        scores: ``[B, L]`` model scores, higher ranks first.
        labels: ``[B, L]`` relevance labels, cast to the dtype of ``scores``.
        mask: ``[B, L]`` bool, True on real items.
        k: cutoff, clipped to each row's number of real items.
        policy: empty-QG policy, ``skip``, ``one`` or ``zero``.

    Returns:
        ``[B]`` in the dtype of ``scores``; NaN for rows without a relevant item under ``skip``.
    """
    fill = check_policy(policy)
    k = check_k(k)
    _check_shapes(scores, labels, mask)
    labels = labels.to(_as_float(scores).dtype)
    order = rank_order_torch(scores, mask)
    # Padded labels may be anything (even NaN), so select zeros rather than multiply by the mask.
    ranked_gains = torch.where(mask.gather(1, order), gains_torch(labels.gather(1, order)), 0.0)
    discount = discounts_torch(scores.shape[1], k=k, dtype=labels.dtype, device=labels.device)
    dcg = (ranked_gains * discount).sum(dim=1)
    ideal = ideal_dcg_torch(labels, mask, k=k)
    defined = ideal > 0
    return torch.where(defined, dcg / torch.where(defined, ideal, 1.0), fill)


def mean_ndcg_torch(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    k: int,
    policy: str = "skip",
) -> torch.Tensor:
    """Scalar mean of ``ndcg_torch`` over rows with a defined value; NaN if there is none."""
    return torch.nanmean(ndcg_torch(scores, labels, mask, k=k, policy=policy))


def _as_float(values: torch.Tensor) -> torch.Tensor:
    return values if values.is_floating_point() else values.to(torch.get_default_dtype())


def _check_shapes(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> None:
    if scores.ndim != 2 or labels.shape != scores.shape or mask.shape != scores.shape:
        shapes = f"{tuple(scores.shape)}, {tuple(labels.shape)}, {tuple(mask.shape)}"
        raise ValueError(f"scores, labels and mask must all be [B, L], got {shapes}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got {mask.dtype}")
