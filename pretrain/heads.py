"""Heads that pretraining trains on top of the encoder and then discards (paper A.2.5).

All act on item embeddings ``[N, D]`` (real items only, so BatchNorm never sees padding).
"""

from __future__ import annotations

from torch import nn


def _check(**sizes: int) -> None:
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


class Columns(nn.Module):
    """Columns ``[start, stop)`` of the embeddings ``[N, D]``: in front of a head that reads
    part of the embedding (simclr-pretext's ``objective.rank_dims``)."""

    def __init__(self, start: int, stop: int) -> None:
        super().__init__()
        if not 0 <= start < stop:
            raise ValueError(f"need 0 <= start < stop, got [{start}, {stop})")
        self.start, self.stop = start, stop

    def forward(self, h):  # [N, D] -> [N, stop - start]
        return h[:, self.start : self.stop]


class Projector(nn.Module):
    """SimCLR projector: 2 hidden layers with ReLU, no bias, no normalisation or dropout."""

    def __init__(self, *, in_dim: int, dim: int) -> None:
        super().__init__()
        _check(in_dim=in_dim, dim=dim)
        self.net = nn.Sequential(
            nn.Linear(in_dim, dim, bias=False),
            nn.ReLU(),
            nn.Linear(dim, dim, bias=False),
            nn.ReLU(),
            nn.Linear(dim, dim, bias=False),
        )

    def forward(self, h):  # [N, in_dim] -> [N, dim]
        return self.net(h)


class SimSiamProjector(nn.Module):
    """Like `Projector` with BatchNorm in the hidden layers and an affine-free output BatchNorm."""

    def __init__(self, *, in_dim: int, dim: int) -> None:
        super().__init__()
        _check(in_dim=in_dim, dim=dim)
        self.net = nn.Sequential(
            nn.Linear(in_dim, dim, bias=False),
            nn.BatchNorm1d(dim),
            nn.ReLU(),
            nn.Linear(dim, dim, bias=False),
            nn.BatchNorm1d(dim),
            nn.ReLU(),
            nn.Linear(dim, dim, bias=False),
            nn.BatchNorm1d(dim, affine=False),
        )

    def forward(self, h):  # [N, in_dim] -> [N, dim]
        return self.net(h)


class Predictor(nn.Module):
    """SimSiam predictor: one hidden layer (no bias, BatchNorm, ReLU); output size = input size."""

    def __init__(self, *, dim: int, hidden: int) -> None:
        super().__init__()
        _check(dim=dim, hidden=hidden)
        self.net = nn.Sequential(
            nn.Linear(dim, hidden, bias=False),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Linear(hidden, dim),
        )

    def forward(self, z):  # [N, dim] -> [N, dim]
        return self.net(z)


def linear_decoder(*, in_dim: int, out_dim: int) -> nn.Linear:
    """VIME's and SubTab's estimators: one linear layer from the embedding."""
    _check(in_dim=in_dim, out_dim=out_dim)
    return nn.Linear(in_dim, out_dim)
