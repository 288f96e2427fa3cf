"""Batch-wide SimCLR (paper eq. 2), whose negatives are every other view of the batch.

    l_qi^a = -cos(z_qi^a, z_qi^(1-a)) / tau
             + log sum_{(q', i', a') != (q, i, a)} exp(cos(z_qi^a, z_q'i'^a') / tau)

over all items of all QGs of the batch: ``O((B L)^2)`` time and memory. Under DDP the candidates
are gathered from every rank (`core.collectives.gather_with_grad`), so the batch is the global
one and gradients reach the rows of every rank. DACL+ (pretrain/objectives/dacl.py) is the same
loss on other views.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from scarce_ltr.core.collectives import gather_with_grad
from scarce_ltr.pretrain.heads import Projector
from scarce_ltr.pretrain.objectives.base import (
    NEG,
    ContrastOptions,
    Objective,
    ViewOptions,
    head_width,
)


def simclr_loss(
    z0: torch.Tensor, z1: torch.Tensor, *, temperature: float, reduction: str = "mean"
) -> torch.Tensor:
    """Eq. 2 over the real items of the batch (of every rank under DDP).

    Args:
        z0, z1: ``[N, D]`` projections of the two views of this rank's items.
        temperature: tau.
        reduction: ``mean`` (scalar: the mean over items of ``l^0 + l^1``) or ``none``
            (``[2N]``: each anchor's ``l^a``, anchors of view 0, then view 1).
    """
    if z0.shape != z1.shape or z0.ndim != 2:
        raise ValueError("z0 and z1 must both be [N, D]")
    n = z0.shape[0]
    z = F.normalize(torch.cat([z0, z1]).float(), dim=-1)  # [2N, D]
    candidates, offset = gather_with_grad(z)  # [2M, D]; this rank's rows at offset
    with torch.autocast(device_type=z.device.type, enabled=False):
        logits = z @ candidates.T / temperature  # [2N, 2M], fp32 under autocast too
    rows = torch.arange(2 * n, device=z.device)
    logits[rows, offset + rows] = NEG  # in place: the division does not keep its output
    positive = logits[rows, offset + (rows + n) % (2 * n)]
    per_anchor = torch.logsumexp(logits, dim=1) - positive
    if reduction == "none":
        return per_anchor
    # Mean over items of l^0 + l^1 (eq. 2 sums the two views of an item): 2N anchors, N items.
    return per_anchor.sum() / n if n else z.sum() * 0.0


@dataclass(frozen=True)
class SimCLROptions(ContrastOptions, ViewOptions):
    """SimCLR's keys (SimCLR-Rank's and SimCLR-Sample's too): its views', the temperature and
    the projector's width."""


class SimCLR(Objective):
    """Encoder and projector; views by donor replacement, zeroing and/or Gaussian noise; eq. 2."""

    options = SimCLROptions

    def __init__(
        self,
        *,
        encoder: nn.Module,
        projector_dim: int | None = None,
        temperature: float = 0.1,
        zero_p: float = 0.0,
        noise_scale: float = 1.0,
        replace_p: float = 0.0,
        replace_source: str = "global",
        binary_p: float = 0.0,
    ) -> None:
        super().__init__(encoder=encoder)
        self.projector = Projector(in_dim=self.width, dim=head_width(projector_dim, self.width))
        self.temperature = temperature
        self.use_views(
            zero_p=zero_p,
            noise_scale=noise_scale,
            replace_p=replace_p,
            replace_source=replace_source,
            binary_p=binary_p,
        )

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor, *, generator: torch.Generator
    ) -> torch.Tensor:
        z0, z1 = self.project_two_views(features, mask, generator=generator)
        return self.contrast(z0, z1, mask)

    def contrast(self, z0: torch.Tensor, z1: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The loss of the two views' projections ``[n_items, D]``: eq. 2, the whole batch."""
        return simclr_loss(z0, z1, temperature=self.temperature)
