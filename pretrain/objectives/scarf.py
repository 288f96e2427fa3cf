"""SCARF (Bahri et al., 2021): contrast each item with its corrupted self, over the batch.

The positive of item ``i`` is a copy in which exactly ``floor(corrupt_p * d)`` features, chosen
uniformly, are replaced by the same feature of a uniformly drawn item of the whole training set
(a draw from the feature's empirical marginal; `augmentations.scarf_corruption`). The pretraining
stage hands the objective its training items (`set_training_items`); an objective used on its
own draws from the batch instead. The InfoNCE loss, as SCARF's own code has it, scores the clean
anchor against the corrupted views of every item of the (global, under DDP) batch:

    l_i = -log exp(cos(a_i, p_i) / tau) / sum_j exp(cos(a_i, p_j) / tau)

SCARF uses ``tau = 1``. The paper's "corruption probability" (A.2.3) is SCARF's corruption rate
``c``: the share of features corrupted in every row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from scarce_ltr.core.collectives import gather_with_grad
from scarce_ltr.pretrain.augmentations import (
    group_index,
    qg_scarf_corruption,
    scarf_corruption,
)
from scarce_ltr.pretrain.heads import Projector
from scarce_ltr.pretrain.objectives.base import (
    ContrastOptions,
    CorruptionOptions,
    Objective,
    head_width,
    option,
)


def scarf_loss(
    anchors: torch.Tensor, positives: torch.Tensor, *, temperature: float
) -> torch.Tensor:
    """InfoNCE of ``anchors [N, D]`` against ``positives [N, D]`` (row i is i's positive)."""
    if anchors.shape != positives.shape or anchors.ndim != 2:
        raise ValueError("anchors and positives must both be [N, D]")
    a = F.normalize(anchors.float(), dim=-1)
    p = F.normalize(positives.float(), dim=-1)
    candidates, offset = gather_with_grad(p)
    logits = a @ candidates.T / temperature  # [N, M]
    target = offset + torch.arange(a.shape[0], device=a.device)
    return F.cross_entropy(logits, target) if a.shape[0] else a.sum() * 0.0


@dataclass(frozen=True)
class SCARFOptions(ContrastOptions, CorruptionOptions):
    """SCARF's keys: ``corrupt_p`` (its corruption rate), ``temperature``, the projector's width
    and where donors come from (``augment.replace_source``; `pretrain.config.AugmentConfig`
    checks it)."""

    replace_source: str = option("augment.replace_source")


class SCARF(Objective):
    needs_training_items = True
    options = SCARFOptions

    def __init__(
        self,
        *,
        encoder: nn.Module,
        projector_dim: int | None = None,
        temperature: float = 1.0,
        corrupt_p: float = 0.6,
        replace_source: str = "global",
    ) -> None:
        super().__init__(encoder=encoder)
        self.replace_source = replace_source
        self.projector = Projector(in_dim=self.width, dim=head_width(projector_dim, self.width))
        self.temperature = temperature
        self.corrupt_p = corrupt_p
        self.table: torch.Tensor | None = None  # the training items [M, d] (not a weight)

    def set_training_items(self, items: torch.Tensor) -> None:
        self.table = items

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor, *, generator: torch.Generator
    ) -> torch.Tensor:
        x, view_mask = self.inputs(features, mask)
        if self.replace_source == "qg":  # donors from the item's own QG of the batch
            corrupted = qg_scarf_corruption(
                x, view_mask, rate=self.corrupt_p, generator=generator, groups=group_index(mask)
            )
        else:
            table = self.table if self.table is not None else features[mask]
            corrupted = scarf_corruption(
                x, view_mask, rate=self.corrupt_p, table=table.to(x.device), generator=generator
            )
        anchors = self.projector(self.encode(x, mask))
        positives = self.projector(self.encode(corrupted, mask))
        return scarf_loss(anchors, positives, temperature=self.temperature)
