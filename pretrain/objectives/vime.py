"""VIME-self (Yoon et al., 2020): from a corrupted item, tell which entries were corrupted and
reconstruct the clean item.

Entries are replaced with probability ``corrupt_p`` by draws from their feature's empirical
marginal in the batch (mask ``m``). Two linear estimators on the encoder's embedding of the
corrupted item predict ``m`` (binary cross-entropy) and the clean features (mean squared error):

    loss = BCE(mask_head(h), m) + alpha * MSE(feature_head(h), x),   alpha = 2 in VIME's code.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from scarce_ltr.core.config_fields import NON_NEGATIVE
from scarce_ltr.pretrain.augmentations import (
    group_index,
    marginal_corruption,
    qg_corruption,
)
from scarce_ltr.pretrain.heads import linear_decoder
from scarce_ltr.pretrain.objectives.base import CorruptionOptions, Objective, option


def vime_loss(
    mask_logits: torch.Tensor,
    drawn: torch.Tensor,
    reconstruction: torch.Tensor,
    clean: torch.Tensor,
    *,
    alpha: float,
) -> torch.Tensor:
    """All ``[N, d]``: mask logits, corrupted-entry mask, reconstructed and clean features."""
    mask_term = F.binary_cross_entropy_with_logits(mask_logits.float(), drawn.float())
    return mask_term + alpha * F.mse_loss(reconstruction.float(), clean.float())


@dataclass(frozen=True)
class VIMEOptions(CorruptionOptions):
    """VIME's keys: ``corrupt_p``, ``vime_alpha`` (the weight of the reconstruction) and where
    the drawn values come from (``augment.replace_source``)."""

    alpha: float = option("vime_alpha")
    replace_source: str = option("augment.replace_source")

    def check(self) -> None:
        super().check()
        NON_NEGATIVE.check("vime_alpha", self.alpha)


class VIME(Objective):
    options = VIMEOptions

    def __init__(
        self,
        *,
        encoder: nn.Module,
        n_features: int,
        corrupt_p: float = 0.3,
        alpha: float = 2.0,
        replace_source: str = "global",
    ) -> None:
        super().__init__(encoder=encoder)
        self.replace_source = replace_source
        self.mask_head = linear_decoder(in_dim=self.width, out_dim=n_features)
        self.feature_head = linear_decoder(in_dim=self.width, out_dim=n_features)
        self.corrupt_p = corrupt_p
        self.alpha = alpha

    @classmethod
    def build(cls, encoder: nn.Module, options: VIMEOptions, *, n_features: int) -> VIME:
        return cls(encoder=encoder, n_features=n_features, **options.arguments())

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor, *, generator: torch.Generator
    ) -> torch.Tensor:
        x, view_mask = self.inputs(features, mask)
        if self.replace_source == "qg":  # donors from the item's own QG
            corrupted, drawn = qg_corruption(
                x, view_mask, p=self.corrupt_p, generator=generator, groups=group_index(mask)
            )
        else:
            corrupted, drawn = marginal_corruption(
                x, view_mask, p=self.corrupt_p, generator=generator
            )
        if view_mask is not None:
            drawn = drawn[mask]
        h = self.encode(corrupted, mask)
        clean = features[mask] if view_mask is not None else x
        return vime_loss(self.mask_head(h), drawn, self.feature_head(h), clean, alpha=self.alpha)
