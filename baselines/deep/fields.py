"""Feature fields for the CTR-style baselines (DeepFM, DCNv2): near-categorical detection.

LETOR data sets do not say which features are categorical. As the paper did (A.2.3), a feature
with at most ``max_values`` (3) distinct values in the train split is treated as categorical:
its values become a small vocabulary, embedded in ``embedding_dim`` (8) dimensions (the
rule of thumb of Wang et al., 2021). A value never seen in train (in vali or test) gets an extra
"unknown" slot. The vocabulary travels inside the model as a buffer, so a model scores raw
``[B, L, d]`` batches like every other ranker.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from scarce_ltr.core.dropout import Dropout

_SAMPLE_ROWS = 20_000  # a first pass on a sample rules most continuous features out cheaply


@dataclass(frozen=True)
class FieldLayout:
    """Which columns are categorical, and their train vocabularies (sorted values)."""

    n_features: int
    categorical: tuple[int, ...]
    vocab: tuple[tuple[float, ...], ...]  # one per categorical column

    @property
    def numeric(self) -> tuple[int, ...]:
        cat = set(self.categorical)
        return tuple(j for j in range(self.n_features) if j not in cat)

    def to_dict(self) -> dict:
        return {
            "n_features": self.n_features,
            "categorical": list(self.categorical),
            "vocab": [list(v) for v in self.vocab],
        }

    @classmethod
    def from_dict(cls, d: dict) -> FieldLayout:
        return cls(d["n_features"], tuple(d["categorical"]), tuple(tuple(v) for v in d["vocab"]))


def detect_fields(features: np.ndarray, *, max_values: int = 3) -> FieldLayout:
    """Columns of ``features [n_items, d]`` with at most ``max_values`` distinct values."""
    n_items, n_features = features.shape
    step = max(1, n_items // _SAMPLE_ROWS)
    sample = np.asarray(features[::step])
    categorical, vocab = [], []
    for j in range(n_features):
        if len(np.unique(sample[:, j])) > max_values:
            continue
        values = np.unique(np.asarray(features[:, j]))
        if len(values) <= max_values:
            categorical.append(j)
            vocab.append(tuple(float(v) for v in values))
    return FieldLayout(n_features, tuple(categorical), tuple(vocab))


class FieldEmbedding(nn.Module):
    """Categorical columns of ``[N, d]`` items to ``[N, n_categorical, dim]`` embeddings.

    Also gives per-value first-order weights ``[N, n_categorical]`` (DeepFM's linear part).
    """

    def __init__(self, *, layout: FieldLayout, dim: int) -> None:
        super().__init__()
        if dim < 1:
            raise ValueError(f"embedding dim must be >= 1, got {dim}")
        self.layout = layout
        self.dim = dim
        n_cat = len(layout.categorical)
        width = max((len(v) for v in layout.vocab), default=1)
        self.slots = width + 1  # the last slot of every column: a value unseen in train
        table = torch.full((n_cat, width), float("nan"))
        for c, values in enumerate(layout.vocab):
            table[c, : len(values)] = torch.tensor(values)
        self.register_buffer("vocab", table)
        self.register_buffer("columns", torch.tensor(layout.categorical, dtype=torch.long))
        self.embedding = nn.Embedding(max(n_cat, 1) * self.slots, dim)
        self.weight = nn.Embedding(max(n_cat, 1) * self.slots, 1)
        nn.init.normal_(self.embedding.weight, std=0.01)
        nn.init.zeros_(self.weight.weight)

    def indices(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, n_categorical]`` int64 rows of the embedding tables."""
        values = x[:, self.columns].float()  # [N, C]
        tolerance = 1e-5 * self.vocab.abs().clamp(min=1.0)
        hit = (values[:, :, None] - self.vocab[None]).abs() <= tolerance[None]  # NaN never hits
        slot = torch.where(hit.any(dim=2), hit.float().argmax(dim=2), self.slots - 1)
        offsets = torch.arange(len(self.layout.categorical), device=x.device) * self.slots
        return slot + offsets

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(embeddings [N, C, dim], first-order weights [N, C])``."""
        index = self.indices(x)
        return self.embedding(index), self.weight(index).squeeze(-1)


class ItemwiseScorer(nn.Module):
    """Base of rankers that score one item at a time: run on the real items only."""

    def score_items(self, x: torch.Tensor) -> torch.Tensor:  # [N, d] -> [N]
        raise NotImplementedError

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``features [B, L, d]``, ``mask [B, L]`` -> scores ``[B, L]`` (0 at padding)."""
        items = self.score_items(features[mask])
        scores = items.new_zeros(mask.shape)
        scores[mask] = items
        return scores


def mlp(in_dim: int, hidden: int, n_layers: int, dropout: float) -> nn.Sequential:
    """``n_layers`` of Linear-ReLU-Dropout (output size ``hidden``; empty when 0 layers)."""
    layers: list[nn.Module] = []
    size = in_dim
    for _ in range(n_layers):
        layers += [nn.Linear(size, hidden), nn.ReLU(), Dropout(dropout)]
        size = hidden
    return nn.Sequential(*layers)
