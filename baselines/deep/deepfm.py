"""DeepFM (Guo et al., 2017) as an item-wise ranker for numeric LTR features.

Every feature is a field with an ``embedding_dim`` vector: a numeric feature's vector is scaled
by its value (as DeepFM does for continuous fields), a near-categorical feature
(`baselines.deep.fields`) looks its value up. The score of an item is::

    bias + first-order (w . x_numeric + w_cat) + FM pairwise interactions + deep MLP(fields)

with the FM term ``0.5 * sum_k ((sum_f e_fk)^2 - sum_f e_fk^2)``, computed in O(fields * dim).
"""

from __future__ import annotations

import torch
from torch import nn

from scarce_ltr.baselines.deep.fields import FieldEmbedding, FieldLayout, ItemwiseScorer, mlp


class DeepFM(ItemwiseScorer):
    """``forward(features [B, L, d], mask [B, L]) -> [B, L]``."""

    def __init__(
        self,
        *,
        layout: FieldLayout,
        embedding_dim: int,
        hidden: int,
        n_layers: int,
        dropout: float,
    ) -> None:
        super().__init__()
        if min(hidden, n_layers) < 1:
            raise ValueError("hidden and n_layers must be >= 1")
        self.layout = layout
        numeric = layout.numeric
        self.register_buffer("numeric", torch.tensor(numeric, dtype=torch.long))
        self.categorical = FieldEmbedding(layout=layout, dim=embedding_dim)
        self.numeric_vectors = nn.Parameter(torch.randn(len(numeric), embedding_dim) * 0.01)
        self.linear = nn.Linear(len(numeric), 1) if numeric else None
        n_fields = len(numeric) + len(layout.categorical)
        self.deep = mlp(n_fields * embedding_dim, hidden, n_layers, dropout)
        self.deep_out = nn.Linear(hidden, 1)

    def score_items(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, d] -> [N]``."""
        numeric = x[:, self.numeric]  # [N, n_num]
        cat_vectors, cat_weights = self.categorical(x)  # [N, C, k], [N, C]
        fields = torch.cat([numeric[:, :, None] * self.numeric_vectors, cat_vectors], dim=1)
        first = cat_weights.sum(dim=1)
        if self.linear is not None:
            first = first + self.linear(numeric).squeeze(-1)
        pairwise = 0.5 * (fields.sum(dim=1).square() - fields.square().sum(dim=1)).sum(dim=1)
        deep = self.deep_out(self.deep(fields.flatten(1))).squeeze(-1)
        return first + pairwise + deep


def build(spec: dict) -> DeepFM:
    return DeepFM(
        layout=FieldLayout.from_dict(spec["layout"]),
        embedding_dim=spec["embedding_dim"],
        hidden=spec["hidden"],
        n_layers=spec["n_layers"],
        dropout=spec["dropout"],
    )
