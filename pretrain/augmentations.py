"""Augmentations and corruptions of QG batches: pure functions of an explicit generator.

Every function takes ``features`` and ``mask`` and returns a new tensor of the same shape:

- padded QGs: ``features [B, L, d]`` with ``mask [B, L]`` (True on real items); padded slots of
  the result are zero;
- real items only: ``features [N, d]`` with ``mask=None`` (what objectives pass for item-wise
  encoders, so that a large padded batch is gathered once rather than at every step).

Random numbers are drawn for the real items only, in row-major order of ``features[mask]``, so a
result depends on the generator's state and the real items alone, never on the padding width,
and the padded and item forms give the same items. Compose them with `compose`.

- `zero_features`: each entry set to 0 with probability ``p`` (paper's "Zeroing").
- `gaussian_noise`: ``N(0, scale^2)`` added to every entry (paper's "Gaussian noise").
- `marginal_corruption`: each entry replaced with probability ``p`` by the same feature of a
  uniformly drawn item of the batch, i.e. a draw from the feature's empirical marginal (SCARF's
  corruption, VIME's and SubTab's swap noise); also returns which entries were drawn.
- `scarf_corruption`: SCARF's own, exactly ``floor(rate * d)`` features of each item replaced
  by draws from the whole training set's marginals.
- `swap_noise`: SubTab's, entries swapped with other items of the batch along per-feature
  permutations.
- `mixup_noise`: DACL's Mixup-noise, ``lambda x + (1 - lambda) x'`` with ``lambda ~ U(alpha, 1)``
  per item and ``x'`` another item of the batch.
- `keep_features`: zero every feature outside a subset (SubTab's feature subsets).
- `qg_corruption`, `qg_scarf_corruption`: `marginal_corruption` and `scarf_corruption` with
  donors drawn from the item's own QG (``augment.replace_source=qg``), see below.
- `flag_swap` (`pretrain.flag_noise`): on the two-valued columns (0/1 flags) only, each entry
  replaced with probability ``p`` by a draw from that column's marginal over the training items
  (`FlagColumns`); with ``augment.binary_p`` the views keep flags out of zeroing and Gaussian
  noise, which would put them between or beyond their two values, and give them this noise
  instead.

Where the donors come from (``augment.replace_source``): ``global`` (the default, SCARF's and
VIME's choice) draws a replacement from the feature's marginal over the batch or the training
set, i.e. from other QGs. On features normalised per query (LETOR's QueryLevelNorm: each
feature min-max scaled within its QG) a value only means something relative to its QG: 1.0 is
"the highest of this query", and a donor from another QG carries another query's scale, so a
view mixes positions of different queries. ``qg`` draws the donor from the same QG's real items
(the item itself included, as in SCARF), so a replaced value is still a position within the
query. The QG form needs the QG structure: the padded ``[B, L, d]`` form, or the item form with
``groups`` (`group_index`). Padding is never a donor.

Zeroing after ``data.transform=standardize`` sets a feature to its train mean (0 after the
z-score), not to "absent" or the query's minimum: on per-query min-max features it moves an
item to the average position over all queries, again a value from outside its QG.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

Augmentation = Callable[..., torch.Tensor]  # (features, mask, *, generator) -> features


def items_of(features: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        if features.ndim != 2:
            raise ValueError("without a mask, features must be the real items [N, d]")
        return features
    if features.ndim != 3 or mask.shape != features.shape[:2] or mask.dtype != torch.bool:
        raise ValueError("features must be [B, L, d] with a bool mask [B, L]")
    return features[mask]


def restore_items(items: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Items back in the caller's form: as they are, or scattered into zero padding."""
    if mask is None:
        return items
    out = items.new_zeros(*mask.shape, items.shape[-1])
    out[mask] = items
    return out


def uniform_like(shape: tuple[int, ...], like: torch.Tensor, generator: torch.Generator):
    return torch.rand(shape, generator=generator, device=like.device, dtype=torch.float32)


def zero_features(
    features: torch.Tensor, mask: torch.Tensor | None, *, p: float, generator: torch.Generator
) -> torch.Tensor:
    """Each entry of each real item set to 0 independently with probability ``p``."""
    items = items_of(features, mask)
    keep = uniform_like(tuple(items.shape), items, generator) >= p
    return restore_items(items * keep.to(items.dtype), mask)


def gaussian_noise(
    features: torch.Tensor, mask: torch.Tensor | None, *, scale: float, generator: torch.Generator
) -> torch.Tensor:
    """``features + scale * N(0, 1)`` on real items."""
    items = items_of(features, mask)
    noise = torch.randn(items.shape, generator=generator, device=items.device, dtype=torch.float32)
    return restore_items(items + scale * noise.to(items.dtype), mask)


def marginal_corruption(
    features: torch.Tensor, mask: torch.Tensor | None, *, p: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """SCARF corruption over the batch's real items.

    Returns:
        ``(corrupted, drawn)`` in the shape of ``features``; ``drawn`` (bool) marks entries
        replaced by a marginal draw (the draw may hit the item itself, as in SCARF and VIME).
    """
    return _replace_entries(
        features,
        mask,
        p=p,
        generator=generator,
        donors=lambda items, shape: torch.randint(
            len(items), shape, generator=generator, device=items.device
        ),
    )


def _replace_entries(features, mask, *, p: float, generator: torch.Generator, donors):
    """Replace each real entry with probability ``p`` by the same feature of a donor item;
    ``donors(items [n, d], (n, d)) -> [n, d]`` row indices, drawn after the replacement mask
    (the order both callers' random streams rely on). Returns ``(corrupted, drawn)``."""
    items = items_of(features, mask)
    n, d = items.shape
    if n == 0:
        return features.clone(), torch.zeros_like(features, dtype=torch.bool)
    drawn = uniform_like((n, d), items, generator) < p
    replaced = torch.where(drawn, items.gather(0, donors(items, (n, d))), items)
    return restore_items(replaced, mask), restore_items(drawn, mask)


def scarf_corruption(
    features: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    rate: float,
    table: torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    """SCARF's corruption (Bahri et al., 2021, section 2): in each real item exactly
    ``floor(rate * d)`` features, chosen uniformly without replacement, are replaced by the same
    feature of a uniformly drawn row of ``table`` (``[M, d]``, the whole training set: a draw
    from the feature's empirical marginal)."""
    items = items_of(features, mask)
    n, d = items.shape
    n_corrupt = int(rate * d)
    if n == 0 or n_corrupt == 0:
        return restore_items(items.clone(), mask)
    if table.ndim != 2 or table.shape[1] != d or table.shape[0] == 0:
        raise ValueError(f"table must be a non-empty [M, {d}] tensor, got {tuple(table.shape)}")
    # The n_corrupt smallest of d uniform keys: a uniform subset of that size per row.
    keys = uniform_like((n, d), items, generator)
    chosen = keys.topk(n_corrupt, dim=1, largest=False).indices  # [n, n_corrupt]
    donors = torch.randint(table.shape[0], (n, n_corrupt), generator=generator, device=items.device)
    corrupted = items.clone()
    corrupted.scatter_(1, chosen, table[donors, chosen].to(items.dtype))
    return restore_items(corrupted, mask)


def group_index(mask: torch.Tensor) -> torch.Tensor:
    """``[N]`` QG (row of ``mask [B, L]``) of each real item, in row-major order."""
    return torch.nonzero(mask)[:, 0]


def _qg_donors(
    groups: torch.Tensor, shape: tuple[int, int], items: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """``[N, k]`` rows of items of the same QG as each row's item, uniform over that QG's real
    items (itself included). ``groups [N]`` must be sorted (row-major order of a mask)."""
    n = groups.shape[0]
    if n and bool((groups[1:] < groups[:-1]).any()):
        raise ValueError("groups must be sorted: the items of a QG together, QGs in order")
    _, sizes = torch.unique_consecutive(groups, return_counts=True)
    starts = torch.cumsum(sizes, 0) - sizes
    first = torch.repeat_interleave(starts, sizes)[:, None]  # [N, 1] first row of the item's QG
    size = torch.repeat_interleave(sizes, sizes)[:, None]
    u = uniform_like(shape, items, generator)
    # floor(u * size) < size for u < 1; the clamp guards float rounding at u close to 1.
    offset = torch.minimum((u * size).long(), size - 1)
    return first + offset


def _groups_of(mask: torch.Tensor | None, groups: torch.Tensor | None, n: int) -> torch.Tensor:
    if mask is not None:
        return group_index(mask)
    if groups is None:
        raise ValueError(
            "within-QG replacement needs the QG structure: a mask [B, L] or groups [N]"
        )
    if groups.shape != (n,):
        raise ValueError(f"groups must be [N] = [{n}], got {tuple(groups.shape)}")
    return groups


def qg_corruption(
    features: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    p: float,
    generator: torch.Generator,
    groups: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`marginal_corruption` with each donor drawn from the entry's own QG.

    Each entry is replaced with probability ``p`` by the same feature of a uniformly drawn real
    item of its QG. ``groups`` (``[N]``, sorted) names the QGs in the item form (``mask=None``).

    Returns:
        ``(corrupted, drawn)`` in the shape of ``features``.
    """
    return _replace_entries(
        features,
        mask,
        p=p,
        generator=generator,
        donors=lambda items, shape: _qg_donors(
            _groups_of(mask, groups, len(items)), shape, items, generator
        ),
    )


def qg_corrupt(
    features: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    p: float,
    generator: torch.Generator,
    groups: torch.Tensor | None = None,
) -> torch.Tensor:
    """`qg_corruption` without the mask of drawn entries (composable)."""
    return qg_corruption(features, mask, p=p, generator=generator, groups=groups)[0]


def qg_scarf_corruption(
    features: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    rate: float,
    generator: torch.Generator,
    groups: torch.Tensor | None = None,
) -> torch.Tensor:
    """`scarf_corruption` with donors from the item's own QG instead of the training set:
    exactly ``floor(rate * d)`` features of each real item, each taken from a uniformly drawn
    real item of the same QG."""
    items = items_of(features, mask)
    n, d = items.shape
    n_corrupt = int(rate * d)
    if n == 0 or n_corrupt == 0:
        return restore_items(items.clone(), mask)
    groups = _groups_of(mask, groups, n)
    keys = uniform_like((n, d), items, generator)
    chosen = keys.topk(n_corrupt, dim=1, largest=False).indices  # [n, n_corrupt]
    donors = _qg_donors(groups, (n, n_corrupt), items, generator)
    corrupted = items.clone()
    corrupted.scatter_(1, chosen, items[donors, chosen])
    return restore_items(corrupted, mask)


def swap_noise(
    features: torch.Tensor, mask: torch.Tensor | None, *, p: float, generator: torch.Generator
) -> torch.Tensor:
    """SubTab's swap noise (Ucar et al., 2021): each entry, with probability ``p``, takes the
    value of the same feature in another item of the batch, each feature's column shuffled by
    its own random permutation of the real items."""
    items = items_of(features, mask)
    n, d = items.shape
    if n == 0:
        return features.clone()
    swapped = uniform_like((n, d), items, generator) < p
    permutations = uniform_like((n, d), items, generator).argsort(dim=0)  # one per column
    shuffled = items.gather(0, permutations)
    return restore_items(torch.where(swapped, shuffled, items), mask)


def corrupt(
    features: torch.Tensor, mask: torch.Tensor | None, *, p: float, generator: torch.Generator
) -> torch.Tensor:
    """`marginal_corruption` without the mask of drawn entries (composable)."""
    return marginal_corruption(features, mask, p=p, generator=generator)[0]


def mixup_noise(
    features: torch.Tensor, mask: torch.Tensor | None, *, alpha: float, generator: torch.Generator
) -> torch.Tensor:
    """DACL Mixup-noise: each real item mixed with another real item of the batch.

    ``lambda ~ U(alpha, 1)`` per item is the share the item keeps of itself; the partner is
    uniform over the other items (the item itself when it is alone in the batch).
    """
    items = items_of(features, mask)
    n = items.shape[0]
    if n == 0:
        return features.clone()
    lam = alpha + (1.0 - alpha) * uniform_like((n, 1), items, generator)
    shift = torch.randint(1, max(n, 2), (n,), generator=generator, device=items.device)
    partner = (torch.arange(n, device=items.device) + shift) % n
    mixed = lam.to(items.dtype) * items + (1.0 - lam).to(items.dtype) * items[partner]
    return restore_items(mixed, mask)


def keep_features(
    features: torch.Tensor, mask: torch.Tensor | None, *, columns: torch.Tensor
) -> torch.Tensor:
    """Features outside ``columns`` (a ``[d]`` bool or index tensor) set to 0; no randomness."""
    keep = torch.zeros(features.shape[-1], dtype=features.dtype, device=features.device)
    keep[columns] = 1.0
    if mask is None:
        return features * keep
    return features * keep * mask.unsqueeze(-1).to(features.dtype)


def compose(*augmentations: Augmentation) -> Augmentation:
    """Apply augmentations in order, all drawing from one generator; identity when empty."""

    def composed(
        features: torch.Tensor,
        mask: torch.Tensor | None,
        *,
        generator: torch.Generator,
        groups: torch.Tensor | None = None,
    ) -> torch.Tensor:
        out = features if mask is None else features * mask.unsqueeze(-1).to(features.dtype)
        for augment in augmentations:
            if getattr(augment, "needs_groups", False):  # within-QG draws: the QG of each item
                out = augment(out, mask, generator=generator, groups=groups)
            else:
                out = augment(out, mask, generator=generator)
        return out

    composed.needs_groups = any(  # type: ignore[attr-defined]
        getattr(augment, "needs_groups", False) for augment in augmentations
    )
    return composed


REPLACE_SOURCES = ("global", "qg")  # augment.replace_source


def view_augmentation(
    *,
    zero_p: float = 0.0,
    noise_scale: float = 0.0,
    replace_p: float = 0.0,
    replace_source: str = "global",
) -> Augmentation:
    """The paper's view augmentation for SimCLR(-Rank/-Sample) and SimSiam: zeroing, then noise;
    first, with ``replace_p`` > 0, each entry replaced by a donor's (`corrupt` for ``global``,
    `qg_corrupt` for ``qg``). The result's ``needs_groups`` says whether it must be given
    the QG of each item: ``groups=`` (`group_index` of the batch's mask) in the item form."""
    if replace_source not in REPLACE_SOURCES:
        raise ValueError(
            f"replace_source must be one of {', '.join(REPLACE_SOURCES)}, got {replace_source!r}"
        )
    steps: list[Augmentation] = []
    if replace_p > 0:
        step = partial(qg_corrupt if replace_source == "qg" else corrupt, p=replace_p)
        step.needs_groups = replace_source == "qg"  # type: ignore[attr-defined]
        steps.append(step)
    if zero_p > 0:
        steps.append(partial(zero_features, p=zero_p))
    if noise_scale > 0:
        steps.append(partial(gaussian_noise, scale=noise_scale))
    return compose(*steps)
