"""The joint term's self-supervised loss of a batch (`finetune.joint`): two views of its real
items (`joint_view`: entries replaced by donors of the item's QG, and of its grade with
``joint.donors=grade``), encoded, projected and contrasted by ``joint.objective``
(`OBJECTIVES`: SimCLR over the whole batch, SimCLR-Rank within each QG); `joint_loss`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from scarce_ltr.pretrain.augmentations import group_index, view_augmentation
from scarce_ltr.pretrain.encoders import ItemwiseEncoder
from scarce_ltr.pretrain.objectives.base import scatter_items
from scarce_ltr.pretrain.objectives.simclr import simclr_loss
from scarce_ltr.pretrain.objectives.simclr_rank import simclr_rank_loss_items


def joint_view(
    items: torch.Tensor,
    groups: torch.Tensor,
    *,
    p: float,
    generator: torch.Generator,
    grades: torch.Tensor | None = None,
) -> torch.Tensor:
    """One view of the real items ``[N, d]``: each entry replaced with probability ``p`` by the
    same feature of a uniformly drawn item (itself included) of its QG (``groups [N]``, sorted)
    and, with ``grades [N]``, of its grade too. Draws depend on the real items alone."""
    augment = view_augmentation(replace_p=p, replace_source="qg")
    if grades is None or not len(items):
        return augment(items, None, generator=generator, groups=groups)
    _, code = torch.unique(grades, return_inverse=True)
    key = groups * (int(code.max()) + 1) + code  # one donor pool per (QG, grade)
    order = torch.argsort(key, stable=True)
    out = torch.empty_like(items)
    out[order] = augment(items[order], None, generator=generator, groups=key[order])
    return out


def joint_loss(
    encoder: nn.Module,
    projector: nn.Module,
    features: torch.Tensor,
    mask: torch.Tensor,
    *,
    objective: str,
    temperature: float,
    replace_p: float,
    generator: torch.Generator,
    grades: torch.Tensor | None = None,
) -> torch.Tensor:
    """The self-supervised loss of a batch ``features [B, L, d]``, ``mask [B, L]`` (``grades
    [B, L]`` for same-grade donors): two `joint_view` s of the real items, encoded, projected
    and contrasted by ``objective``. The same value whatever the padding width."""
    items, groups = features[mask], group_index(mask)
    graded = None if grades is None else grades[mask]
    views = [
        joint_view(items, groups, p=replace_p, generator=generator, grades=graded) for _ in range(2)
    ]
    z0, z1 = (projector(_encode(encoder, view, mask)) for view in views)
    return OBJECTIVES[objective](z0, z1, mask, temperature=temperature)


def _encode(encoder: nn.Module, items: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[N, out_dim]`` of the real items; a context-aware encoder sees them as padded QGs."""
    if isinstance(encoder, ItemwiseEncoder):
        return encoder.encode_items(items)
    return encoder(scatter_items(items, mask), mask)[mask]


def _simclr(z0, z1, mask, *, temperature: float) -> torch.Tensor:
    return simclr_loss(z0, z1, temperature=temperature)


def _simclr_rank(z0, z1, mask, *, temperature: float) -> torch.Tensor:
    return simclr_rank_loss_items(z0, z1, mask, temperature=temperature)


# ``joint.objective``: (z0 [N, D], z1 [N, D], mask [B, L], *, temperature) -> scalar loss
OBJECTIVES: dict[str, Callable[..., torch.Tensor]] = {
    "simclr": _simclr,
    "simclr-rank": _simclr_rank,
}
