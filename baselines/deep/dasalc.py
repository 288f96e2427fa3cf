"""DASALC (Qin et al., 2021): a feed-forward tower crossed with self-attention over the QG.

For the items ``f [B, L, d]`` of a QG (log1p features plus, in training, Gaussian noise: the
data transform and ``deep.noise_std`` provide both, eq. 8)::

    h = tower(f_i)                                   item-wise, n_layers x (Linear, BN, ReLU)
    a = LayerNorm(MHSA^attention_layers(W f))        the QG as context of each item (eq. 9-10)
    score_i = w . ((1 + a_i) * h_i) + b              latent cross (eq. 11), then a linear score

Self-attention sees the real items of the QG only (a key padding mask) and has no positional
encoding, so the ranker is permutation-equivariant (the paper's Proposition 1). BatchNorm runs
on the real items only, so padding never enters its statistics; at evaluation it uses running
statistics, so a QG's scores never depend on the other QGs of its batch. The paper's other
ingredients are the baseline's config (``configs/baseline/dasalc.yaml``): the softmax loss and
the seed ensemble ``seed-ensemble:dasalc`` (DASALC-ens).
"""

from __future__ import annotations

import torch
from torch import nn

from scarce_ltr.core.dropout import Dropout


class DASALC(nn.Module):
    """``forward(features [B, L, d], mask [B, L]) -> scores [B, L]`` (0 at padding).

    Args:
        n_features: ``d``.
        hidden: width of the tower, of the attention (``d_model``) and of the cross.
        n_layers: tower layers.
        attention_layers: Transformer encoder layers of the context.
        n_heads: attention heads; must divide ``hidden``.
        dropout: after each tower layer and inside the attention layers.
    """

    def __init__(
        self,
        *,
        n_features: int,
        hidden: int,
        n_layers: int,
        attention_layers: int,
        n_heads: int,
        dropout: float,
    ) -> None:
        super().__init__()
        if min(n_features, hidden, n_layers, attention_layers, n_heads) < 1:
            raise ValueError("n_features, hidden, n_layers, attention_layers, n_heads must be >= 1")
        if hidden % n_heads:
            raise ValueError(f"deep.n_heads ({n_heads}) must divide deep.hidden ({hidden})")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        layers: list[nn.Module] = []
        size = n_features
        for _ in range(n_layers):
            layers += [nn.Linear(size, hidden), nn.BatchNorm1d(hidden), nn.ReLU()]
            layers.append(Dropout(dropout))
            size = hidden
        self.tower = nn.Sequential(*layers)
        # The paper projects f to queries, keys and values directly; a linear input layer lets
        # any feature count meet a d_model that the heads divide.
        self.project = nn.Linear(n_features, hidden)
        layer = nn.TransformerEncoderLayer(
            d_model=hidden,
            nhead=n_heads,
            dim_feedforward=2 * hidden,
            dropout=dropout,
            batch_first=True,
        )
        # Nested tensors would make eval outputs depend on the padding width through kernels.
        self.context = nn.TransformerEncoder(layer, attention_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(hidden)
        self.score = nn.Linear(hidden, 1)

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if features.ndim != 3 or mask.shape != features.shape[:2]:
            raise ValueError(
                f"expected features [B, L, d] and mask [B, L], got "
                f"{tuple(features.shape)} and {tuple(mask.shape)}"
            )
        # Padded slots may hold anything; zero them so no NaN enters the attention.
        features = torch.where(mask[..., None], features, 0.0)
        context = self.norm(self.context(self.project(features), src_key_padding_mask=~mask))
        items = self.tower(features[mask])  # [N, hidden], real items only (BatchNorm)
        crossed = (1.0 + context[mask]) * items
        scores = self.score(crossed).squeeze(-1)
        out = scores.new_zeros(mask.shape)
        out[mask] = scores
        return out


def build(spec: dict) -> DASALC:
    return DASALC(
        n_features=spec["n_features"],
        hidden=spec["hidden"],
        n_layers=spec["n_layers"],
        attention_layers=spec["attention_layers"],
        n_heads=spec["n_heads"],
        dropout=spec["dropout"],
    )
