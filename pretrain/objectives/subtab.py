"""SubTab (Ucar et al., 2021): reconstruct the whole item from each of several feature subsets.

The features are shuffled once (from the seed) and cut into ``subsets`` contiguous blocks;
each subset is its block widened by ``overlap`` of a block into its neighbours (75 % in the
paper). Per subset, features outside it are zeroed (the encoder keeps its full input width, so
finetuning uses the same encoder on whole items) and entries inside it are replaced with
probability ``corrupt_p`` by marginal draws (SubTab's swap noise). A shared linear decoder
reconstructs the whole clean item from each subset's embedding:

    loss = mean_k MSE(decoder(h(noisy subset_k(x))), x)

SubTab's contrastive and distance terms are not used. The monitors' embedding of an item is the
mean of its subsets' embeddings (SubTab's aggregation).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from scarce_ltr.pretrain.augmentations import corrupt, keep_features
from scarce_ltr.pretrain.heads import linear_decoder
from scarce_ltr.pretrain.objectives.base import Objective


def feature_subsets(n_features: int, *, subsets: int, overlap: float, seed: int) -> torch.Tensor:
    """``[subsets, n_features]`` bool: which features each subset holds."""
    if subsets < 1 or not 0.0 <= overlap < 1.0:
        raise ValueError("subsets must be >= 1 and overlap in [0, 1)")
    order = torch.randperm(n_features, generator=torch.Generator().manual_seed(seed))
    block = n_features / subsets
    extra = overlap * block
    members = torch.zeros(subsets, n_features, dtype=torch.bool)
    for k in range(subsets):
        start = max(0, int(round(k * block - extra / 2)))
        stop = min(n_features, int(round((k + 1) * block + extra / 2)))
        members[k, order[start : max(stop, start + 1)]] = True
    return members


class SubTab(Objective):
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
        if not 0.0 <= corrupt_p <= 1.0:
            raise ValueError(f"corrupt_p must be in [0, 1], got {corrupt_p}")
        self.register_buffer(
            "members", feature_subsets(n_features, subsets=subsets, overlap=overlap, seed=seed)
        )
        self.decoder = linear_decoder(in_dim=self.width, out_dim=n_features)
        self.corrupt_p = corrupt_p

    @classmethod
    def from_config(cls, encoder: nn.Module, cfg, *, n_features: int) -> SubTab:
        return cls(
            encoder=encoder,
            n_features=n_features,
            subsets=cfg.augment.subsets,
            overlap=cfg.augment.overlap,
            corrupt_p=cfg.augment.corrupt_p,
            seed=cfg.seed,
        )

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
            noisy = corrupt(x, view_mask, p=self.corrupt_p, generator=generator)
            h = self.encode(keep_features(noisy, view_mask, columns=self.members[k]), mask)
            losses.append(F.mse_loss(self.decoder(h).float(), clean))
        return torch.stack(losses).mean()
