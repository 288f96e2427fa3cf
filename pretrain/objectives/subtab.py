"""SubTab (Ucar et al., 2021): reconstruct the whole item from each of several feature subsets.

Subsets as SubTab's own code cuts them: with ``m = floor(d / subsets)`` and
``o = floor(overlap * m)``, subset 0 holds features ``[0, m + o)`` and subset ``k > 0`` holds
``[k m - o, (k + 1) m)``: every subset has ``m + o`` features (75 % overlap in the paper, so
59 of MSLR's 136), in the data set's feature order. As in SubTab, the ``d mod subsets`` last
features are in no subset (they are still reconstructed). Per subset, entries are swapped with
probability ``corrupt_p`` along per-feature permutations of the batch (SubTab's swap noise,
`augmentations.swap_noise`; the paper's "masking probability"), and a shared linear decoder
reconstructs the whole clean item from the subset's embedding:

    loss = mean_k MSE(decoder(h(noisy subset_k(x))), x)

One reading differs from SubTab's code, where each subset is a narrower input: here features
outside a subset are zeroed and the encoder keeps its full input width, so that finetuning uses
the same encoder on whole items (the paper finetunes "the pretrained model" with a head; A.2.3).
SubTab's contrastive and distance terms are off in its own default and are not used. The
monitors' embedding of an item is the mean of its subsets' embeddings (SubTab's aggregation).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from scarce_ltr.pretrain.augmentations import keep_features, swap_noise
from scarce_ltr.pretrain.heads import linear_decoder
from scarce_ltr.pretrain.objectives.base import (
    CorruptionOptions,
    Objective,
    check_probability,
    option,
)


def feature_subsets(
    n_features: int, *, subsets: int, overlap: float, seed: int = 0
) -> torch.Tensor:
    """``[subsets, n_features]`` bool: which features each subset holds (see the module
    docstring; ``seed`` is unused: SubTab cuts the features in their order)."""
    if subsets < 1 or not 0.0 <= overlap < 1.0:
        raise ValueError("subsets must be >= 1 and overlap in [0, 1)")
    size = n_features // subsets
    if size < 1:
        raise ValueError(f"{subsets} subsets of {n_features} features leave a subset empty")
    extra = int(overlap * size)
    members = torch.zeros(subsets, n_features, dtype=torch.bool)
    members[0, : size + extra] = True
    for k in range(1, subsets):
        members[k, k * size - extra : (k + 1) * size] = True
    return members


@dataclass(frozen=True)
class SubTabOptions(CorruptionOptions):
    """SubTab's keys: ``corrupt_p`` (its swap noise), the number of feature subsets and their
    overlap."""

    subsets: int = option("augment.subsets")
    overlap: float = option("augment.overlap")

    def check(self) -> None:
        super().check()
        check_probability("augment.overlap", self.overlap)
        if self.subsets < 1:
            raise ValueError(f"augment.subsets must be >= 1, got {self.subsets}")


class SubTab(Objective):
    options = SubTabOptions

    def __init__(
        self,
        *,
        encoder: nn.Module,
        n_features: int,
        subsets: int = 4,
        overlap: float = 0.75,
        corrupt_p: float = 0.3,
        seed: int = 0,
    ) -> None:
        super().__init__(encoder=encoder)
        self.register_buffer(
            "members", feature_subsets(n_features, subsets=subsets, overlap=overlap, seed=seed)
        )
        self.decoder = linear_decoder(in_dim=self.width, out_dim=n_features)
        self.corrupt_p = corrupt_p

    @classmethod
    def build(cls, encoder: nn.Module, options: SubTabOptions, *, n_features: int) -> SubTab:
        return cls(encoder=encoder, n_features=n_features, **options.arguments())

    def _subset_view(self, features: torch.Tensor, mask: torch.Tensor, k: int) -> torch.Tensor:
        return keep_features(features, mask, columns=self.members[k])

    def embed(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        views = [
            self.encoder(self._subset_view(features, mask, k), mask)
            for k in range(len(self.members))
        ]
        return torch.stack(views).mean(0)

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor, *, generator: torch.Generator
    ) -> torch.Tensor:
        x, view_mask = self.inputs(features, mask)
        clean = (x if view_mask is None else features[mask]).float()
        losses = []
        for k in range(len(self.members)):
            noisy = swap_noise(x, view_mask, p=self.corrupt_p, generator=generator)
            h = self.encode(keep_features(noisy, view_mask, columns=self.members[k]), mask)
            losses.append(F.mse_loss(self.decoder(h).float(), clean))
        return torch.stack(losses).mean()
