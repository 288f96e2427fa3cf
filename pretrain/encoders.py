"""Item encoders: the tabular ResNet of Gorishniy et al. (2021) and the plain MLP of paper A.2.5;
TabM (`pretrain.tabm_encoder`) and the attention encoder (`pretrain.attention_encoder`) live in
modules of their own, and so do the numerical embeddings any item-wise encoder can put in front
of its first layer (`pretrain.num_embeddings`).

Every encoder maps padded QGs to item embeddings: ``forward(features [B, L, d], mask [B, L])
-> [B, L, out_dim]`` (zeros at padding). Item-wise encoders run on the real items only, so
BatchNorm statistics never see padding; a context-aware encoder (items of a QG attend to each
other) has the same signature. Finetuning adds a scoring head on top; pretraining adds projectors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from scarce_ltr.core.dropout import Dropout
from scarce_ltr.core.sizes import largest, model_fits
from scarce_ltr.pretrain.itemwise import ItemwiseEncoder

ENCODER_KINDS = ("resnet", "mlp", "attention", "tabm", "tabm-mini")
NUM_EMBEDDINGS = ("none", "periodic", "piecewise")
# Keys only some kinds read: a value other than the default on another kind is refused
# (n_heads is not: one small encoder's settings serve every kind in the tests and sweeps).
_READERS = {
    "k": ("tabm", "tabm-mini"),
    "num_embeddings": ("resnet", "mlp", "tabm", "tabm-mini"),
}
_EMBEDDING_KEYS = {"d_embedding": None, "n_bins": "piecewise", "frequency_scale": "periodic"}


@dataclass(frozen=True)
class EncoderConfig:
    kind: str = "resnet"  # resnet | mlp | attention | tabm | tabm-mini
    width: int = 128  # embedding size (ResNet main width, MLP hidden width, TabM member width)
    hidden: int = 256  # ResNet block hidden width
    n_blocks: int = 3  # ResNet blocks / MLP and TabM hidden layers / attention layers
    dropout: float = 0.1
    n_heads: int = 4  # attention only
    k: int = 32  # TabM's members (the package's default)
    # Numerical feature embeddings in front of an item-wise encoder: none | periodic | piecewise
    num_embeddings: str = "none"
    d_embedding: int = 16  # each feature's embedding size
    n_bins: int = 48  # piecewise: quantile bins of the train items per feature
    frequency_scale: float = 0.01  # periodic: the initial frequencies' sigma

    def __post_init__(self) -> None:
        if self.kind not in ENCODER_KINDS:
            raise ValueError(f"encoder.kind must be one of {', '.join(ENCODER_KINDS)}")
        if self.num_embeddings not in NUM_EMBEDDINGS:
            raise ValueError(f"encoder.num_embeddings must be one of {', '.join(NUM_EMBEDDINGS)}")
        sizes = (self.width, self.hidden, self.n_blocks, self.n_heads, self.k, self.d_embedding)
        if min(sizes) < 1:
            raise ValueError(
                "encoder width, hidden, n_blocks, n_heads, k and d_embedding must be >= 1"
            )
        if self.n_bins < 2:
            raise ValueError("encoder.n_bins must be >= 2")
        if not self.frequency_scale > 0:
            raise ValueError("encoder.frequency_scale must be > 0")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError("encoder.dropout must be in [0, 1)")
        defaults = EncoderConfig.__dataclass_fields__
        for key, kinds in _READERS.items():
            if getattr(self, key) != defaults[key].default and self.kind not in kinds:
                raise ValueError(
                    f"encoder.{key} is read by encoder.kind {' and '.join(kinds)} only, "
                    f"not {self.kind}"
                )
        for key, kind in _EMBEDDING_KEYS.items():
            used = self.num_embeddings != "none" and kind in (None, self.num_embeddings)
            if getattr(self, key) != defaults[key].default and not used:
                raise ValueError(
                    f"encoder.{key} is read with encoder.num_embeddings="
                    f"{kind or 'periodic or piecewise'} only"
                )

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def out_dim(self) -> int:
        """The width of an item's embedding: TabM's k members side by side."""
        return self.k * self.width if self.kind in ("tabm", "tabm-mini") else self.width

    def parameters(self, n_features: int = 1) -> int:
        """A low count of this encoder's parameters on ``n_features`` features (its weight
        matrices; biases and norms left out), TabM's members' adapters and the numerical
        embeddings' weights included: what `check_size` weighs."""
        n, w, h, b = n_features, self.width, self.hidden, self.n_blocks
        embedding = {
            "none": 0,
            "periodic": n * 48 * (1 + 2 * self.d_embedding),  # rtdl: 48 frequencies a feature
            "piecewise": n * self.n_bins * self.d_embedding,
        }[self.num_embeddings]
        n_in = n if self.num_embeddings == "none" else n * self.d_embedding
        if self.kind == "resnet":
            return embedding + n_in * w + b * 2 * w * h
        if self.kind == "attention":
            return n_in * w + b * (4 * w * w + 2 * w * h)
        body = embedding + n_in * w + (b - 1) * w * w  # mlp, and the MLP TabM's members share
        if self.kind == "tabm":  # every layer's rank-one adapters, for each member
            return body + self.k * (n_in + (2 * b - 1) * w)
        return body + (self.k * n_in if self.kind == "tabm-mini" else 0)

    def check_size(self, prefix: str, n_features: int = 1, *, what: str = "the encoder") -> None:
        """`ValueError` naming the size key (``<prefix>width=100000000``) when training this
        encoder would take more than the machine's memory (`core.sizes`); ``n_features``: the
        data's width where the config knows it, else its least."""
        keys = ("width", "hidden", "n_blocks", "k", "d_embedding", "n_bins")
        model_fits(largest(prefix, self, keys), self.parameters(n_features), what)

    def embedding(self) -> dict:
        """The numerical embeddings' options (`pretrain.num_embeddings.make_embeddings`)."""
        return {k: getattr(self, k) for k in _EMBEDDING_KEYS}


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
        self,
        *,
        n_features: int,
        width: int,
        hidden: int,
        n_blocks: int,
        dropout: float,
        embeddings: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        self.out_dim = width
        self.embeddings = embeddings
        size = n_features if embeddings is None else embeddings.out_dim
        self.input = nn.Linear(size, width)
        self.blocks = nn.Sequential(
            *[ResidualBlock(width=width, hidden=hidden, dropout=dropout) for _ in range(n_blocks)]
        )
        self.output = nn.Sequential(nn.BatchNorm1d(width), nn.ReLU())

    def encode_items(self, x: torch.Tensor) -> torch.Tensor:
        if self.embeddings is not None:
            x = self.embeddings(x)
        return self.output(self.blocks(self.input(x)))


class MLPEncoder(ItemwiseEncoder):
    """Paper A.2.5: BatchNorm and dropout on the input, hidden layers Linear-BN-ReLU-Dropout."""

    def __init__(
        self,
        *,
        n_features: int,
        width: int,
        n_blocks: int,
        dropout: float,
        embeddings: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        self.out_dim = width
        self.embeddings = embeddings
        size = n_features if embeddings is None else embeddings.out_dim
        layers: list[nn.Module] = [nn.BatchNorm1d(size), Dropout(dropout)]
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
        if self.embeddings is not None:
            x = self.embeddings(x)
        return self.net(x)


def build_encoder(
    cfg: EncoderConfig, *, n_features: int, features: np.ndarray | None = None
) -> nn.Module:
    """A fresh encoder of ``cfg``. ``features``: the train split's items ``[N, d]``, from which
    piecewise-linear embeddings learn their bins; a fresh encoder with them needs it, one whose
    saved state is loaded next (bins included) does not."""
    if cfg.kind in ("tabm", "tabm-mini"):
        from scarce_ltr.pretrain.tabm_encoder import TabMEncoder

        return TabMEncoder(
            cfg.kind,
            n_features=n_features,
            k=cfg.k,
            width=cfg.width,
            n_blocks=cfg.n_blocks,
            dropout=cfg.dropout,
            num_embeddings=cfg.num_embeddings,
            embedding=cfg.embedding(),
            features=features,
        )
    embeddings = None
    if cfg.num_embeddings != "none":
        from scarce_ltr.pretrain.num_embeddings import NumericalEmbeddings

        embeddings = NumericalEmbeddings(
            cfg.num_embeddings, n_features=n_features, features=features, **cfg.embedding()
        )
    if cfg.kind == "resnet":
        return ResNetEncoder(
            n_features=n_features,
            width=cfg.width,
            hidden=cfg.hidden,
            n_blocks=cfg.n_blocks,
            dropout=cfg.dropout,
            embeddings=embeddings,
        )
    if cfg.kind == "mlp":
        return MLPEncoder(
            n_features=n_features,
            width=cfg.width,
            n_blocks=cfg.n_blocks,
            dropout=cfg.dropout,
            embeddings=embeddings,
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
