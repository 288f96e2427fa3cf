"""SimSiam (Chen & He, 2021): predict one view's projection from the other, with a stop-gradient.

    loss = -(cos(p^0, sg(z^1)) + cos(p^1, sg(z^0))) / 2,   z = proj(h(x^a)), p = pred(z)

averaged over items; no negatives, ``O(B L)``. Heads of paper A.2.5: a projector with BatchNorm
in its two hidden layers and an affine-free output BatchNorm, a bottleneck predictor. Under DDP
every BatchNorm is synchronised across ranks (``sync_batchnorm``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from scarce_ltr.pretrain.heads import Predictor, SimSiamProjector
from scarce_ltr.pretrain.objectives.base import (
    Objective,
    ProjectorOptions,
    ViewOptions,
    head_width,
    option,
)


def simsiam_loss(
    p0: torch.Tensor, p1: torch.Tensor, z0: torch.Tensor, z1: torch.Tensor
) -> torch.Tensor:
    """Symmetric negative cosine of ``[N, D]`` predictions and (detached) projections."""
    cos0 = F.cosine_similarity(p0.float(), z1.detach().float(), dim=-1)
    cos1 = F.cosine_similarity(p1.float(), z0.detach().float(), dim=-1)
    return -(cos0.mean() + cos1.mean()) / 2


@dataclass(frozen=True)
class SimSiamOptions(ProjectorOptions, ViewOptions):
    """SimSiam's keys: its views', the projector's width and the predictor's bottleneck."""

    predictor_hidden: int | None = option("heads.predictor_hidden")


class SimSiam(Objective):
    sync_batchnorm = True
    options = SimSiamOptions

    def __init__(
        self,
        *,
        encoder: nn.Module,
        projector_dim: int | None = None,
        predictor_hidden: int | None = None,
        zero_p: float = 0.1,
        noise_scale: float = 0.0,
        replace_p: float = 0.0,
        replace_source: str = "global",
        binary_p: float = 0.0,
    ) -> None:
        super().__init__(encoder=encoder)
        dim = head_width(projector_dim, self.width)
        hidden = predictor_hidden if predictor_hidden is not None else max(1, dim // 4)
        self.projector = SimSiamProjector(in_dim=self.width, dim=dim)
        self.predictor = Predictor(dim=dim, hidden=hidden)
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
        return simsiam_loss(self.predictor(z0), self.predictor(z1), z0, z1)
