"""What every pretraining objective is: an encoder plus heads, and a loss of a padded batch.

An objective is an ``nn.Module`` holding the encoder (``self.encoder``, the part finetuning
keeps) and its heads. ``forward(features [B, L, d], mask [B, L], *, generator) -> loss`` (a
scalar) draws its augmentations from ``generator``; ``embed(features, mask) -> [B, L, D]`` is what
the monitors look at (the encoder's output unless a method aggregates several passes).

With an item-wise encoder (ResNet, MLP) an objective gathers the batch's real items once
(`Objective.inputs`) and augments, encodes and scores ``[N, d]`` rows from there: a padded batch
can hold several times more slots than items. A context-aware encoder gets the padded batch.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from scarce_ltr.pretrain.augmentations import (
    FlagColumns,
    flag_aware,
    group_index,
    view_augmentation,
)
from scarce_ltr.pretrain.encoders import ItemwiseEncoder

# Masked logits: far below any cosine / temperature, finite so that softmax gradients stay finite.
NEG = -1e9


class Objective(nn.Module):
    fake_groups: ClassVar[bool] = False  # batches of random items grouped into fake QGs
    sync_batchnorm: ClassVar[bool] = False  # BatchNorm statistics over all DDP ranks
    needs_training_items: ClassVar[bool] = False  # gets `set_training_items` before training
    # The keys of PretrainConfig that only some methods read, and which of them this one reads
    # (config.py rejects a setting it would ignore): augment.replace_p (views with donor
    # replacement), augment.replace_source (where donors come from), temperature (contrastive
    # methods), vime_alpha. Its other options it reads in `from_config`.
    config_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, encoder: nn.Module) -> None:
        super().__init__()
        if not hasattr(encoder, "out_dim"):
            raise ValueError("encoder must have an out_dim attribute")
        self.encoder = encoder
        self.binary_p = 0.0

    def use_views(self, *, binary_p: float = 0.0, **settings) -> None:
        """The view-pair methods' ``augment``: `view_augmentation` of ``settings``; with
        ``binary_p`` > 0 the flag columns of the training items (`set_training_items`) get
        `flag_swap` noise instead (`flag_aware`)."""
        if not 0.0 <= binary_p <= 1.0:
            raise ValueError(f"binary_p must be in [0, 1], got {binary_p}")
        self.augment = view_augmentation(**settings)
        self.binary_p = binary_p
        self.needs_training_items = binary_p > 0  # type: ignore[misc]

    def set_training_items(self, items: torch.Tensor) -> None:
        """Every item of the pretraining set, ``[M, d]`` (objectives that draw from it). With
        ``binary_p`` > 0: its flag columns and their marginals, kept as buffers (saved in the
        checkpoint, so a resumed run draws from the same marginals)."""
        if self.binary_p <= 0:
            return
        names = ("columns", "low", "high", "p_high")
        found = FlagColumns.of(items)
        for name in names:
            self.register_buffer(f"flag_{name}", getattr(found, name))
        # the buffers themselves: a resumed checkpoint's values land in what the views read
        flags = FlagColumns(*(getattr(self, f"flag_{name}") for name in names))
        self.augment = flag_aware(self.augment, p=self.binary_p, flags=flags)

    @property
    def width(self) -> int:
        return int(self.encoder.out_dim)

    def embed(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[B, L, D]`` item embeddings (zeros at padding)."""
        return self.encoder(features, mask)

    @property
    def itemwise(self) -> bool:
        return isinstance(self.encoder, ItemwiseEncoder)

    def inputs(
        self, features: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What augmentations and `encode` take: ``(items [N, d], None)`` for an item-wise
        encoder (the padded batch is gathered once), else ``(features [B, L, d], mask)``."""
        return (features[mask], None) if self.itemwise else (features, mask)

    def encode(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[N, D]`` embeddings of the real items (row-major order of ``mask``) from the items
        or the padded batch that `inputs` (and augmentations) gave."""
        if x.ndim == 2:
            return self.encoder.encode_items(x)
        return self.encoder(x, mask)[mask]

    def project_two_views(
        self, features: torch.Tensor, mask: torch.Tensor, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``[N, D]`` projections of two augmented views of the real items, for objectives
        with an ``augment`` and a ``projector`` (the view-pair methods)."""
        x, view_mask = self.inputs(features, mask)
        extra = {}
        if getattr(self.augment, "needs_groups", False):  # within-QG donors: each item's QG
            extra["groups"] = group_index(mask)
        if self.binary_p > 0 and not hasattr(self, "flag_columns"):
            raise RuntimeError(
                "augment.binary_p needs the flag columns of the training items: call "
                "set_training_items(items [M, d]) before training"
            )
        z0 = self.projector(
            self.encode(self.augment(x, view_mask, generator=generator, **extra), mask)
        )
        z1 = self.projector(
            self.encode(self.augment(x, view_mask, generator=generator, **extra), mask)
        )
        return z0, z1

    @classmethod
    def from_config(cls, encoder: nn.Module, cfg, *, n_features: int) -> Objective:
        """The objective of a `pretrain.config.PretrainConfig` around ``encoder``."""
        raise NotImplementedError

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor, *, generator: torch.Generator
    ) -> torch.Tensor:
        """Scalar loss of a batch; augmentations drawn from ``generator``."""
        raise NotImplementedError


def scatter_items(items: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[N, D]`` rows of the real items back into a zero-padded ``[B, L, D]``."""
    out = items.new_zeros(*mask.shape, items.shape[-1])
    out[mask] = items
    return out


def head_width(cfg_dim: int | None, encoder_width: int) -> int:
    return encoder_width if cfg_dim is None else cfg_dim
