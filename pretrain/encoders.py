"""Item encoders: the tabular ResNet of Gorishniy et al. (2021) and the plain MLP of paper A.2.5.

Every encoder maps padded QGs to item embeddings: ``forward(features [B, L, d], mask [B, L])
-> [B, L, out_dim]`` (zeros at padding). Item-wise encoders run on the real items only, so
BatchNorm statistics never see padding; a context-aware encoder (items of a QG attend to each
other) has the same signature. Finetuning adds a scoring head on top; pretraining adds projectors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from scarce_ltr.core.dropout import Dropout

ENCODER_KINDS = ("resnet", "mlp", "attention")


@dataclass(frozen=True)
class EncoderConfig:
    kind: str = "resnet"  # resnet | mlp | attention
    width: int = 128  # embedding size (ResNet main width, MLP hidden width)
    hidden: int = 256  # ResNet block hidden width
    n_blocks: int = 3  # ResNet blocks / MLP hidden layers / attention layers
    dropout: float = 0.1
    n_heads: int = 4  # attention only

    def __post_init__(self) -> None:
        if self.kind not in ENCODER_KINDS:
            raise ValueError(f"encoder.kind must be one of {', '.join(ENCODER_KINDS)}")
        if min(self.width, self.hidden, self.n_blocks, self.n_heads) < 1:
            raise ValueError("encoder width, hidden, n_blocks and n_heads must be >= 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError("encoder.dropout must be in [0, 1)")

    def to_dict(self) -> dict:
        return asdict(self)


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


class ResidualBlock(nn.Module):
    def __init__(self, *, width: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm1d(width),
            nn.Linear(width, hidden),
            nn.ReLU(),
            Dropout(dropout),
            nn.Linear(hidden, width),
            Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class ResNetEncoder(ItemwiseEncoder):
    """Input linear layer, residual blocks, final BatchNorm and ReLU; no output layer."""

    def __init__(
        self, *, n_features: int, width: int, hidden: int, n_blocks: int, dropout: float
    ) -> None:
        super().__init__()
        if n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        self.out_dim = width
        self.input = nn.Linear(n_features, width)
        self.blocks = nn.Sequential(
            *[ResidualBlock(width=width, hidden=hidden, dropout=dropout) for _ in range(n_blocks)]
        )
        self.output = nn.Sequential(nn.BatchNorm1d(width), nn.ReLU())

    def encode_items(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.blocks(self.input(x)))


class MLPEncoder(ItemwiseEncoder):
    """Paper A.2.5: BatchNorm and dropout on the input, hidden layers Linear-BN-ReLU-Dropout."""

    def __init__(self, *, n_features: int, width: int, n_blocks: int, dropout: float) -> None:
        super().__init__()
        if n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        self.out_dim = width
        layers: list[nn.Module] = [nn.BatchNorm1d(n_features), Dropout(dropout)]
        size = n_features
        for _ in range(n_blocks):
            layers += [
                nn.Linear(size, width),
                nn.BatchNorm1d(width),
                nn.ReLU(),
                Dropout(dropout),
            ]
            size = width
        self.net = nn.Sequential(*layers)

    def encode_items(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def build_encoder(cfg: EncoderConfig, *, n_features: int) -> nn.Module:
    if cfg.kind == "resnet":
        return ResNetEncoder(
            n_features=n_features,
            width=cfg.width,
            hidden=cfg.hidden,
            n_blocks=cfg.n_blocks,
            dropout=cfg.dropout,
        )
    if cfg.kind == "mlp":
        return MLPEncoder(
            n_features=n_features, width=cfg.width, n_blocks=cfg.n_blocks, dropout=cfg.dropout
        )
    # The context-aware encoder lives in its own module (it is also a finetuning model).
    from scarce_ltr.pretrain.attention_encoder import AttentionEncoder

    return AttentionEncoder(
        n_features=n_features,
        width=cfg.width,
        hidden=cfg.hidden,
        n_blocks=cfg.n_blocks,
        n_heads=cfg.n_heads,
        dropout=cfg.dropout,
    )
