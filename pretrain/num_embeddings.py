"""Numerical feature embeddings in front of an item encoder (Gorishniy et al., 2022).

Each of the ``d`` features becomes a vector of ``d_embedding`` numbers before the encoder's
first layer, so an MLP or ResNet sees ``d * d_embedding`` inputs instead of ``d``. From the
field's own package (`rtdl_num_embeddings`, the ``tabular`` extra):

- ``periodic``: ``PeriodicEmbeddings`` (PLR: sin/cos of trained frequencies, then a linear layer
  and ReLU per feature; ``frequency_scale`` is the initial frequencies' sigma, the option the
  authors call the important one);
- ``piecewise``: ``PiecewiseLinearEmbeddings`` (version "B", the TabM paper's): each feature's
  piecewise-linear encoding over quantile bins of the train items, then a linear layer per
  feature, plus a plain linear embedding (so that it starts as one).

The bins are learnt from the data, once, when a fresh encoder is built (`build_encoder`'s
``features``: the train split's items, never vali or test). Every feature gets exactly
``n_bins`` bins, so a saved encoder rebuilds from its configuration alone and its state (the
bins are buffers of the state): where a feature has fewer distinct quantiles (a flag, a constant
column) the missing edges are laid past its largest train value, where train items never reach
them (their components stay 0 in training) and larger unseen values extrapolate linearly as the
library's last bin does.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from scarce_ltr.core.extras import require

# Quantiles come from at most this many train items (a seeded draw): Yandex's train split has
# ~40k items, and 100k keeps every bin edge within a fraction of a percentile of the full data's.
MAX_BIN_ITEMS = 100_000


def library():
    return require("rtdl_num_embeddings", "encoder.num_embeddings")


def quantile_bins(features: np.ndarray, n_bins: int) -> list[torch.Tensor]:
    """Per feature, ``n_bins + 1`` strictly increasing edges: the distinct train quantiles, then
    padding edges past the largest value (spaced by the last bin's width, or 1)."""
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or len(x) < 2:
        raise ValueError("piecewise-linear bins need a [items, features] array of >= 2 items")
    if len(x) > MAX_BIN_ITEMS:
        x = x[np.random.default_rng(0).choice(len(x), MAX_BIN_ITEMS, replace=False)]
    quantiles = np.quantile(x, np.linspace(0.0, 1.0, n_bins + 1), axis=0)  # [n_bins + 1, d]
    bins = []
    for column in quantiles.T:
        edges = np.unique(column)
        step = edges[-1] - edges[-2] if len(edges) > 1 else 1.0
        extra = edges[-1] + step * np.arange(1, n_bins + 2 - len(edges))
        bins.append(torch.as_tensor(np.concatenate([edges, extra]), dtype=torch.float32))
    return bins


def placeholder_bins(n_features: int, n_bins: int) -> list[torch.Tensor]:
    """Bins of the right shape for an encoder whose saved state brings the real ones."""
    return [torch.arange(n_bins + 1, dtype=torch.float32)] * n_features


def make_embeddings(
    kind: str,
    *,
    n_features: int,
    d_embedding: int,
    n_bins: int,
    frequency_scale: float,
    features: np.ndarray | None,
) -> nn.Module:
    """The package's module for ``kind``: ``[N, d] -> [N, d, d_embedding]``."""
    rtdl = library()
    if kind == "periodic":
        return rtdl.PeriodicEmbeddings(
            n_features, d_embedding, frequency_init_scale=frequency_scale, lite=False
        )
    if kind == "piecewise":
        # On the CPU even where the caller builds on "meta" (a bundle's shape check,
        # `finetune.scorer.built_like`): the package reads its bins' values while building.
        with torch.device("cpu"):
            bins = (
                placeholder_bins(n_features, n_bins)
                if features is None
                else quantile_bins(features, n_bins)
            )
            return rtdl.PiecewiseLinearEmbeddings(bins, d_embedding, activation=False, version="B")
    raise ValueError(f"unknown numerical embedding {kind!r}")


def track_fitted(module: nn.Module, fitted: bool) -> None:
    """Piecewise bins of the data, or placeholders a saved state replaces: the flag is saved
    with the state, so an encoder built without its data cannot train or score on placeholders
    (`check_fitted`)."""
    module.register_buffer("fitted", torch.tensor(fitted))
    module._fitted = fitted
    module.register_load_state_dict_post_hook(_refresh_fitted)


def _refresh_fitted(module: nn.Module, _incompatible) -> None:
    module._fitted = bool(module.fitted)


def check_fitted(module: nn.Module) -> None:
    if not module._fitted:
        raise RuntimeError(
            "piecewise-linear embeddings built without train features and not loaded from a "
            "saved state (pass build_encoder's features=)"
        )


class NumericalEmbeddings(nn.Module):
    """``[N, d] -> [N, d * d_embedding]``: one of `pretrain.encoders.NUM_EMBEDDINGS`, flattened."""

    def __init__(self, kind: str, *, n_features: int, features: np.ndarray | None, **options):
        super().__init__()
        self.embed = make_embeddings(kind, n_features=n_features, features=features, **options)
        self.out_dim = n_features * options["d_embedding"]
        track_fitted(self, kind != "piecewise" or features is not None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_fitted(self)
        return self.embed(x).flatten(1)
