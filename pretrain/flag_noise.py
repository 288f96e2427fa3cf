"""Noise for the flag columns of QG batches (``augment.binary_p``): `FlagColumns`, the
two-valued columns of the training items (0/1 flags, also after an affine transform) and their
marginals; `flag_swap`, each flag entry replaced with probability ``p`` by a draw from its
column's marginal, so a flag keeps its two values; and `flag_aware`, a view augmentation that
leaves the flag columns to `flag_swap` (zeroing and Gaussian noise would put them between or
beyond their two values). Same forms and random-number order as `pretrain.augmentations`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from scarce_ltr.pretrain.augmentations import Augmentation, items_of, restore_items, uniform_like


@dataclass(frozen=True)
class FlagColumns:
    """The two-valued columns of the training items and their marginals, each ``[d]``:
    ``columns`` (bool), their two values ``low`` < ``high`` and ``p_high``, the share of items
    at ``high`` (0 outside ``columns``)."""

    columns: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor
    p_high: torch.Tensor

    @classmethod
    def of(cls, items: torch.Tensor) -> FlagColumns:
        """The columns of ``items [M, d]`` holding exactly two distinct values: 0/1 flags, also
        after an affine transform (``data.transform=standardize`` maps 0/1 to two values)."""
        low, high = items.min(dim=0).values, items.max(dim=0).values
        at_high = items == high
        columns = (at_high | (items == low)).all(dim=0) & (high > low)
        p_high = at_high.float().mean(dim=0)
        zero = torch.zeros_like(low)
        return cls(
            columns,
            torch.where(columns, low, zero),
            torch.where(columns, high, zero),
            torch.where(columns, p_high, zero.float()),
        )


def flag_swap(
    features: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    p: float,
    flags: FlagColumns,
    generator: torch.Generator,
) -> torch.Tensor:
    """Each real entry of a flag column (``flags.columns``) replaced with probability ``p`` by a
    draw from the column's marginal (``high`` with probability ``p_high``, else ``low``: for a
    0/1 flag, Bernoulli(its mean)); the other columns unchanged. A flag keeps its two values.

    >>> flags = FlagColumns.of(torch.tensor([[0.0, 0.5], [1.0, 0.7], [1.0, 0.1], [1.0, 0.2]]))
    >>> flags.columns.tolist(), flags.p_high.tolist()
    ([True, False], [0.75, 0.0])
    """
    items = items_of(features, mask)
    n, d = items.shape
    if n == 0:
        return features.clone()
    drawn = (uniform_like((n, d), items, generator) < p) & flags.columns.to(items.device)
    at_high = uniform_like((n, d), items, generator) < flags.p_high.to(items.device)
    values = torch.where(at_high, flags.high.to(items.device), flags.low.to(items.device))
    return restore_items(torch.where(drawn, values.to(items.dtype), items), mask)


def flag_aware(augment: Augmentation, *, p: float, flags: FlagColumns) -> Augmentation:
    """``augment`` on the other columns, `flag_swap` (drawn first) on the flag columns."""

    def views(
        features: torch.Tensor,
        mask: torch.Tensor | None,
        *,
        generator: torch.Generator,
        groups: torch.Tensor | None = None,
    ) -> torch.Tensor:
        swapped = flag_swap(features, mask, p=p, flags=flags, generator=generator)
        extra = {"groups": groups} if getattr(augment, "needs_groups", False) else {}
        rest = augment(features, mask, generator=generator, **extra)
        return torch.where(flags.columns.to(rest.device), swapped, rest)

    views.needs_groups = getattr(augment, "needs_groups", False)  # type: ignore[attr-defined]
    return views
