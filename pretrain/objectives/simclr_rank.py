"""SimCLR-Rank (paper eq. 3): InfoNCE whose negatives are the other items of the anchor's own QG.

For item ``i`` of QG ``q`` and view ``a``, the positive is view ``1 - a`` of the same item and the
denominator sums over every item and view of QG ``q`` except the anchor itself:

    l_qi^a = -cos(z_qi^a, z_qi^(1-a)) / tau
             + log sum_{(i', a') != (i, a), i' in q} exp(cos(z_qi^a, z_qi'^a') / tau)

Vectorised over padded QGs: one ``[B, 2L, 2L]`` similarity tensor per batch, time and memory
``O(B L^2)``, no loop over QGs. QGs are grouped by length into at most ``2 log2(L) + 1``
buckets, each padded only to its own longest QG, so one long QG does not inflate the whole batch.

Each item contributes ``l^0 + l^1``, both views summed as eq. 3 writes them; the loss is the
mean of that over items. (Averaging the views instead halves the loss; with Adam the updates
are the same up to its epsilon, so the temperature keeps its meaning and its default, 0.1.)

A QG of one item has no negative besides the other view: both its terms are exactly 0 and carry
no gradient, so such items are left out of the mean (the loss is the mean over items of QGs with
at least two items, 0 when there is none). SimCLR-Sample (pretrain/objectives/simclr_sample.py)
is the same loss over fake QGs of random items.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from scarce_ltr.pretrain.objectives.base import NEG, scatter_items
from scarce_ltr.pretrain.objectives.simclr import SimCLR

_GROWTH = 2**0.5  # ratio of the widths of neighbouring length buckets
# Below this temperature exp(-2 / tau) leaves float32's normal range: rows take their own max.
_FIXED_SHIFT_MIN_TAU = 0.05


def _bucket_item_losses(z: torch.Tensor, mask: torch.Tensor, temperature: float) -> torch.Tensor:
    """``[b, E]`` per-item loss ``l^0 + l^1`` of one bucket (padding rows: anything), from
    ``z [b, 2E, D]``: unit-norm projections, view 0 of the E slots then view 1."""
    length = z.shape[1] // 2
    valid = torch.cat([mask, mask], dim=1)  # [b, 2E]
    padding = torch.where(valid, 0.0, NEG)[:, None, :]  # [b, 1, 2E]: no padded candidate
    per_anchor = _InQueryInfoNCE.apply(z, padding, temperature)  # [b, 2E]
    return per_anchor[:, :length] + per_anchor[:, length:]


class _InQueryInfoNCE(torch.autograd.Function):
    """Per anchor, ``logsumexp_j S_aj - S_a,partner(a)`` with ``S = z z^T / tau + padding``
    (the anchor itself excluded), forward and backward written out.

    Through autograd these few lines were about half of a SimCLR-Rank step under bf16 autocast
    and a third in fp32: ``S`` is ``[b, 2E, 2E]`` and every pass over it counts. Here the
    forward exponentiates ``S`` in place and keeps only that; the positives come from ``z``
    directly (``[b, 2E]`` dot products, no gather from ``S``); and since ``S`` is symmetric in
    ``z`` the backward is one ``bmm``, ``dz = (G + G^T) z`` with ``G = g softmax(S) / tau``, and
    the positives' term ``-(g_a + g_partner(a)) z_partner(a) / tau``, where autograd spent two
    ``bmm`` and the passes of the diagonal fill, the gather and ``logsumexp``'s backward.
    ``tests/test_pretrain_losses.py`` checks both against autograd on the plain formula.
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor, padding: torch.Tensor, temperature: float) -> torch.Tensor:
        # exp needs a shift that keeps it finite: unit-norm z bound every S by 1 / tau, which
        # makes the shift free (part of the bias) while exp(-2 / tau) stays a normal float32;
        # at smaller temperatures, each row's own maximum.
        bound = 1.0 / temperature if temperature >= _FIXED_SHIFT_MIN_TAU else 0.0
        logits = torch.baddbmm(padding - bound, z, z.transpose(1, 2), alpha=1.0 / temperature)
        logits.diagonal(dim1=1, dim2=2).fill_(NEG)  # an anchor is not its own candidate
        shift = bound
        if not bound:
            shift = logits.amax(dim=2, keepdim=True)
            logits.sub_(shift)
        weights = logits.exp_()  # [b, 2E, 2E] exp(S - shift), in place: S is not needed again
        total = weights.sum(dim=2, keepdim=True)
        partner = z.roll(z.shape[1] // 2, dims=1)  # view 1 - a of the same slot
        positive = (z * partner).sum(dim=2) / temperature
        ctx.save_for_backward(z, weights, total)
        ctx.temperature = temperature
        return (total.log() + shift).squeeze(2) - positive

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        z, weights, total = ctx.saved_tensors
        scale = grad / ctx.temperature  # [b, 2E]
        g = weights * (scale[:, :, None] / total)  # g * softmax, the logsumexp part
        dz = torch.bmm(g + g.transpose(1, 2), z)
        # The positives' part: -g_a z_partner(a) / tau, for both ends of each pair.
        half = z.shape[1] // 2
        dz -= (scale + scale.roll(half, dims=1))[:, :, None] * z.roll(half, dims=1)
        return dz, None, None


def simclr_rank_loss(
    z0: torch.Tensor,
    z1: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float,
    reduction: str = "mean",
) -> torch.Tensor:
    """Eq. 3 over a batch of padded QGs.

    Args:
        z0, z1: ``[B, L, D]`` projections of the two views (padding ignored).
        mask: ``[B, L]`` bool, True on real items.
        temperature: tau.
        reduction: ``mean`` (scalar over items of QGs with >= 2 items) or ``none`` (``[B, L]``
            per-item ``l^0 + l^1``, 0 at padding and for one-item QGs).
    """
    if z0.shape != z1.shape or z0.ndim != 3 or mask.shape != z0.shape[:2]:
        raise ValueError("z0 and z1 must be [B, L, D] and mask [B, L]")
    loss = simclr_rank_loss_items(
        z0[mask], z1[mask], mask, temperature=temperature, reduction=reduction
    )
    return scatter_items(loss[:, None], mask)[..., 0] if reduction == "none" else loss


def simclr_rank_loss_items(
    z0: torch.Tensor,
    z1: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float,
    reduction: str = "mean",
) -> torch.Tensor:
    """`simclr_rank_loss` of the real items only: ``z0, z1 [N, D]`` in the row-major order of
    ``mask [B, L]`` (the QG structure); ``reduction="none"`` gives ``[N]``."""
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction must be mean or none, got {reduction}")
    if z0.shape != z1.shape or z0.ndim != 2 or z0.shape[0] != int(mask.sum()):
        raise ValueError("z0 and z1 must be [N, D] with N the number of real items in mask")
    with torch.autocast(device_type=z0.device.type, enabled=False):
        # The logits in fp32 under autocast too: bf16 would round cos / tau to about 0.05.
        losses = _item_losses(z0.float(), z1.float(), mask, temperature)
    sizes = mask.sum(dim=1)
    used = (sizes >= 2)[:, None].expand_as(mask)[mask]
    # Keep the graph even when no QG has two items, so that backward() still works (zero grads).
    losses = torch.where(used, losses, 0.0) + 0.0 * (z0.float().sum() + z1.float().sum())
    if reduction == "none":
        return losses
    return losses.sum() / used.sum().clamp(min=1)


def _item_losses(
    z0: torch.Tensor, z1: torch.Tensor, mask: torch.Tensor, temperature: float
) -> torch.Tensor:
    """``[N]`` loss ``l^0 + l^1`` of each real item (anything for QGs of one item)."""
    n = z0.shape[0]
    item = (torch.cumsum(mask.flatten(), 0) - 1).view(mask.shape)  # [B, L] row of z per slot
    sizes = mask.sum(dim=1)
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    extent = (mask * positions).amax(dim=1)  # last real slot + 1 of each QG
    # Bucket k holds QGs whose extent is in (g^(k-1), g^k]; each is cut to its own width, so
    # padding at most doubles (g^2) the pairs a QG's similarity block spends.
    bucket = torch.ceil(torch.log(extent.clamp(min=1).float()) / math.log(_GROWTH)).long()
    ok = sizes >= 2
    buckets = []  # (slots [b, E] rows of z0/z1, real [b, E]) per bucket
    for k in torch.unique(bucket[ok]).tolist():
        rows = torch.nonzero((bucket == k) & ok).squeeze(1)
        width = int(extent[rows].max())
        buckets.append((item[rows, :width].clamp(min=0), mask[rows, :width]))
    losses = z0.new_zeros(n)
    if not buckets:
        return losses
    # Normalised once, then one gather of both views for every bucket: its backward is one
    # scatter into [2N, D] rather than one zero-filled [N, D] gradient per bucket and view.
    z = F.normalize(torch.cat([z0, z1]), dim=-1)  # [2N, D]: view 0 rows, then view 1
    # index_select: its backward adds rows (index_add_), cheaper than z[rows]'s index_put.
    gathered = z.index_select(
        0, torch.cat([torch.cat([slots, slots + n], dim=1).flatten() for slots, _ in buckets])
    )
    # split, not slices: a slice's backward fills a zero tensor of all the gathered rows.
    blocks = gathered.split([slots.numel() * 2 for slots, _ in buckets])
    targets, parts = [], []
    for (slots, real), block in zip(buckets, blocks, strict=True):
        block = block.view(slots.shape[0], 2 * slots.shape[1], -1)
        part = _bucket_item_losses(block, real, temperature)  # [b, E]
        targets.append(slots[real])
        parts.append(part[real])
    return losses.index_put((torch.cat(targets),), torch.cat(parts))


class SimCLRRank(SimCLR):
    """SimCLR's encoder, projector, views and keys (paper A.2.3) with eq. 3: negatives from the
    QG."""

    qg_negatives = True

    def contrast(self, z0: torch.Tensor, z1: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return simclr_rank_loss_items(z0, z1, mask, temperature=self.temperature)
