"""A context-aware encoder: the items of a QG attend to each other (beyond the paper).

After Pobrotyn et al. (2020) and DASALC (Qin et al., 2021): an item-wise input projection, a
stack of Transformer encoder layers whose attention is restricted to the real items of the same
QG (a key padding mask), and DASALC's latent cross as the output::

    h = ReLU(Linear(x))                       [B, L, width]   item-wise
    a = TransformerEncoder(h, padding mask)   [B, L, width]   context of the whole QG
    out = ReLU((1 + LayerNorm(a)) * h)        [B, L, width]   zeros at padding

No positional encoding, so the encoder is permutation-equivariant: it ranks sets, not lists.
LayerNorm rather than BatchNorm, so an item's embedding depends on its own QG only, in training
as in evaluation. Registered as encoder kind ``attention`` (``pretrain.encoders.build_encoder``):
pretraining objectives whose views keep a QG together (SimCLR-Rank, SimSiam) and every
finetuning strategy can use it.
"""

from __future__ import annotations

import torch
from torch import nn


class AttentionEncoder(nn.Module):
    """``forward(features [B, L, d], mask [B, L]) -> [B, L, width]``, zeros at padding.

    Args:
        n_features: ``d``, input features per item.
        width: model width (``d_model``) and output size.
        hidden: feed-forward width inside each Transformer layer.
        n_blocks: number of Transformer encoder layers.
        n_heads: attention heads; must divide ``width``.
        dropout: dropout inside the Transformer layers.
    """

    def __init__(
        self,
        *,
        n_features: int,
        width: int,
        hidden: int,
        n_blocks: int,
        n_heads: int,
        dropout: float,
    ) -> None:
        super().__init__()
        if n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        if min(width, hidden, n_blocks, n_heads) < 1:
            raise ValueError("width, hidden, n_blocks and n_heads must be >= 1")
        if width % n_heads:
            raise ValueError(f"encoder.n_heads ({n_heads}) must divide encoder.width ({width})")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.out_dim = width
        self.input = nn.Sequential(nn.Linear(n_features, width), nn.ReLU())
        layer = nn.TransformerEncoderLayer(
            d_model=width,
            nhead=n_heads,
            dim_feedforward=hidden,
            dropout=dropout,
            batch_first=True,
            norm_first=True,
        )
        # Nested tensors would make eval outputs depend on the padding width through kernels.
        self.context = nn.TransformerEncoder(layer, n_blocks, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if features.ndim != 3 or mask.shape != features.shape[:2]:
            raise ValueError(
                f"expected features [B, L, d] and mask [B, L], got "
                f"{tuple(features.shape)} and {tuple(mask.shape)}"
            )
        # Padded feature slots may hold anything; zero them so no NaN enters the projections.
        features = torch.where(mask[..., None], features, 0.0)
        items = self.input(features)
        context = self.context(items, src_key_padding_mask=~mask)
        out = torch.relu((1.0 + self.norm(context)) * items)
        return torch.where(mask[..., None], out, 0.0)
