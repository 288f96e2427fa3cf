"""The base of the item-wise encoders (`pretrain.encoders`, `pretrain.tabm_encoder`): each item
is encoded alone, so they run on the real items only and BatchNorm never sees padding."""

from __future__ import annotations

import torch
from torch import nn


class ItemwiseEncoder(nn.Module):
    """Base for encoders that see one item at a time: run on ``features[mask]`` only."""

    out_dim: int

    def encode_items(self, x: torch.Tensor) -> torch.Tensor:  # [N, d] -> [N, out_dim]
        raise NotImplementedError

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        items = self.encode_items(features[mask])
        out = items.new_zeros(*mask.shape, self.out_dim)
        out[mask] = items
        return out
