"""Scoring heads: item embeddings ``[..., in_dim]`` to scores ``[...]``.

``linear`` is one linear layer (linear probing, and the paper's head for binary labels);
``mlp`` is the paper's three-layer MLP (A.2.3). Every head splits into ``embed`` (everything but
the last linear layer: the "final embedding" that ``combine`` concatenates, paper A.3.7) and
``score`` (that last layer). Heads are item-wise and hold no BatchNorm, so padding never
reaches any statistic.
"""

from __future__ import annotations

import torch
from torch import nn

from scarce_ltr.core.dropout import Dropout
from scarce_ltr.core.extras import require
from scarce_ltr.core.sizes import model_fits


class LinearHead(nn.Module):
    """``score = w . x + b``; its embedding is its input."""

    def __init__(self, *, in_dim: int) -> None:
        super().__init__()
        if in_dim < 1:
            raise ValueError(f"in_dim must be >= 1, got {in_dim}")
        self.embed_dim = in_dim
        self.out = nn.Linear(in_dim, 1)

    def embed(self, x: torch.Tensor) -> torch.Tensor:  # [..., in_dim] -> [..., in_dim]
        return x

    def score(self, embedding: torch.Tensor) -> torch.Tensor:  # [..., embed_dim] -> [...]
        return self.out(embedding).squeeze(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.score(self.embed(x))


class MLPHead(nn.Module):
    """Three linear layers: ``in_dim -> hidden -> hidden -> 1``, ReLU and dropout between."""

    def __init__(self, *, in_dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        if min(in_dim, hidden) < 1:
            raise ValueError(f"in_dim and hidden must be >= 1, got {in_dim}, {hidden}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.embed_dim = hidden
        self.body = nn.Sequential(
            nn.Linear(in_dim, hidden),
            nn.ReLU(),
            Dropout(dropout),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            Dropout(dropout),
        )
        self.out = nn.Linear(hidden, 1)

    def embed(self, x: torch.Tensor) -> torch.Tensor:  # [..., in_dim] -> [..., hidden]
        return self.body(x)

    def score(self, embedding: torch.Tensor) -> torch.Tensor:  # [..., hidden] -> [...]
        return self.out(embedding).squeeze(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.score(self.embed(x))


def build_head(
    kind: str, *, in_dim: int, hidden: int, dropout: float, members: int = 1
) -> nn.Module:
    """A head for embeddings ``[..., in_dim]``; with ``members > 1`` (an ensemble encoder's k
    members, `pretrain.tabm_encoder`), one head per member: ``[N, members, in_dim] -> [N,
    members]``, every linear layer a ``tabm.LinearEnsemble`` as in TabM's own output layer."""
    if kind not in HEADS:
        raise ValueError(f"head must be one of {', '.join(HEADS)}, got {kind!r}")
    if kind == "linear":
        head = LinearHead(in_dim=in_dim)
    else:
        head = MLPHead(in_dim=in_dim, hidden=hidden, dropout=dropout)
    if members > 1:
        tabm = require("tabm", "an ensemble encoder's heads")
        tabm.ensemble_linear_layers_(head, k=members)
    return head


def check_head_size(key: str, *, in_dim: int, hidden: int, members: int = 1) -> None:
    """`ValueError` naming ``key`` (``head_hidden=100000000``) when an MLP head of ``hidden``
    units on ``in_dim`` inputs, one per member, passes this machine's memory (`core.sizes`)."""
    model_fits(key, members * (in_dim * hidden + hidden * hidden), "the head")


HEADS = {"linear": LinearHead, "mlp": MLPHead}
