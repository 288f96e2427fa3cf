"""DCNv2 (Wang et al., 2021), stacked: cross layers, then a deep MLP, then a linear score.

The input ``x0`` concatenates the numeric features with an ``embedding_dim`` embedding of each
near-categorical feature (`baselines.deep.fields`). A cross layer is
``x_{l+1} = x0 * (W_l x_l + b_l) + x_l`` with a full-rank ``W_l``; the paper tunes the number of
cross layers in {2, 3, 4}.
"""

from __future__ import annotations

import torch
from torch import nn

from scarce_ltr.baselines.deep.fields import FieldEmbedding, FieldLayout, ItemwiseScorer, mlp


class CrossLayer(nn.Module):
    def __init__(self, *, dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, dim)

    def forward(self, x0: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x0 * self.linear(x) + x


class DCNv2(ItemwiseScorer):
    """``forward(features [B, L, d], mask [B, L]) -> [B, L]``."""

    def __init__(
        self,
        *,
        layout: FieldLayout,
        embedding_dim: int,
        cross_layers: int,
        hidden: int,
        n_layers: int,
        dropout: float,
    ) -> None:
        super().__init__()
        if cross_layers < 1 or min(hidden, n_layers) < 1:
            raise ValueError("cross_layers, hidden and n_layers must be >= 1")
        self.layout = layout
        self.register_buffer("numeric", torch.tensor(layout.numeric, dtype=torch.long))
        self.categorical = FieldEmbedding(layout=layout, dim=embedding_dim)
        dim = len(layout.numeric) + len(layout.categorical) * embedding_dim
        self.cross = nn.ModuleList(CrossLayer(dim=dim) for _ in range(cross_layers))
        self.deep = mlp(dim, hidden, n_layers, dropout)
        self.out = nn.Linear(hidden, 1)

    def score_items(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, d] -> [N]``."""
        cat_vectors, _ = self.categorical(x)
        x0 = torch.cat([x[:, self.numeric], cat_vectors.flatten(1)], dim=1)
        crossed = x0
        for layer in self.cross:
            crossed = layer(x0, crossed)
        return self.out(self.deep(crossed)).squeeze(-1)


def build(spec: dict) -> DCNv2:
    return DCNv2(
        layout=FieldLayout.from_dict(spec["layout"]),
        embedding_dim=spec["embedding_dim"],
        cross_layers=spec["cross_layers"],
        hidden=spec["hidden"],
        n_layers=spec["n_layers"],
        dropout=spec["dropout"],
    )
