"""What every pretraining objective is: an encoder plus heads, and a loss of a padded batch.

An objective is an ``nn.Module`` holding the encoder (``self.encoder``, the part finetuning
keeps) and its heads. Its ``options`` class (an `ObjectiveOptions`) names the keys of the
pretraining config it reads and checks their values; ``build(encoder, options, *, n_features)``
makes it from them (`pretrain.objectives.OBJECTIVES` lists them by command-line name).
``forward(features [B, L, d], mask [B, L], *, generator) -> loss`` (a scalar) draws its
augmentations from ``generator``; ``embed(features, mask) -> [B, L, D]`` is what the monitors
look at (the encoder's output unless a method aggregates several passes).

With an item-wise encoder (ResNet, MLP) an objective gathers the batch's real items once
(`Objective.inputs`) and augments, encodes and scores ``[N, d]`` rows from there: a padded batch
can hold several times more slots than items. A context-aware encoder gets the padded batch.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import torch
from torch import nn

from scarce_ltr.core.config_fields import POSITIVE
from scarce_ltr.pretrain.augmentations import group_index, view_augmentation
from scarce_ltr.pretrain.encoders import ItemwiseEncoder
from scarce_ltr.pretrain.flag_noise import FlagColumns, flag_aware

# Masked logits: far below any cosine / temperature, finite so that softmax gradients stay finite.
NEG = -1e9


# The pretraining config's section of the objective: ``objective: {name: vime, alpha: 1.0}``
# (`core.config_sections`), and its mapping of the options an objective declares itself.
SECTION = "objective"


def option(key: str) -> Any:
    """A field of an `ObjectiveOptions`: the value of the pretraining config's ``key`` (dotted
    for a key of a section: ``augment.corrupt_p``)."""
    return field(metadata={"key": key})


def own_option(default: Any) -> Any:
    """A field of an `ObjectiveOptions` that no key of the pretraining config holds: the
    objective's own, set as ``objective.<field>=<value>`` and kept in the config's ``objective``
    mapping (a new objective adds a setting in its module alone). Keyword-only, so that it may
    come before fields without a default; ``default``: a scalar or None, the value a run stores
    when none is given."""
    if not (default is None or isinstance(default, bool | int | float | str)):
        raise TypeError(f"own_option's default must be a scalar or None, got {default!r}")
    return field(default=default, kw_only=True, metadata={"key": None})


def config_value(cfg: Any, key: str) -> Any:
    """``cfg``'s value of the dotted ``key``."""
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _typed(key: str, hint: Any, value: Any) -> Any:
    """``value`` of an own option whose field is annotated ``hint`` (a scalar type, or a union
    of them with None); an int for a float is taken as the float, as the config's own keys
    take it. `ValueError` naming ``key`` and the type for another value."""
    kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None and type(None) in kinds:
        return None
    for kind in kinds:
        if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if kind in (bool, int, str) and type(value) is kind:
            return value
    names = " or ".join(
        "None" if k is type(None) else getattr(k, "__name__", str(k)) for k in kinds
    )
    raise ValueError(f"{key} expects {names}, got {value!r}")


def check_probability(key: str, value: float, *, closed: bool = False) -> None:
    """``key`` must be in [0, 1] (``closed``) or [0, 1)."""
    upper_ok = value <= 1.0 if closed else value < 1.0
    if not (0.0 <= value and upper_ok):
        raise ValueError(f"{key} must be in [0, {'1]' if closed else '1)'}, got {value}")


@dataclass(frozen=True)
class ObjectiveOptions:
    """The keys of the pretraining config (`pretrain.config.PretrainConfig`) one objective reads.

    Each field is one key (`option`), or an option of the objective's own that no key of the
    config holds (`own_option`: kept in the config's ``objective`` mapping); `of` reads them from
    a config and `check` (run when the options are made) refuses a value the objective cannot
    take, naming the key. A key that some objective's options hold and the chosen one's do not
    is refused by the config when it is set away from its default (`keys`): a method never
    ignores a setting silently. The keys every method reads (encoder, optimizer, batches,
    monitors) are the config's own, not options. The field names are the ``objective`` section's
    keys (``objective.alpha=1`` for VIME's ``alpha``, the key ``vime_alpha``: `spelled`)."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """`ValueError` naming the key of a value this objective cannot take."""

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The config keys these options hold, in field order (an own option's:
        ``objective.<field>``)."""
        return tuple(f.metadata["key"] or f"{SECTION}.{f.name}" for f in fields(cls))

    @classmethod
    def spelled(cls) -> dict[str, str | None]:
        """Field name -> the config key it reads (None: an own option): the ``objective``
        section's keys for this objective (`core.config_sections`)."""
        return {f.name: f.metadata["key"] for f in fields(cls)}

    @classmethod
    def own_values(cls, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every own option's value: ``given``'s (checked against the field's type; an int
        for a float as the float) or its default, in field order. Keys not among them are left
        out."""
        own = [f for f in fields(cls) if f.metadata["key"] is None]
        hints = typing.get_type_hints(cls) if own else {}
        return {
            f.name: _typed(f"{SECTION}.{f.name}", hints[f.name], given[f.name])
            if f.name in given
            else f.default
            for f in own
        }

    @classmethod
    def of(cls, cfg: Any):
        """The options ``cfg`` (a `PretrainConfig`) gives, checked; its own options from its
        ``objective`` mapping (those it lacks at their defaults)."""
        own = cls.own_values(getattr(cfg, SECTION, None) or {})
        return cls(
            **{
                f.name: own[f.name] if f.name in own else config_value(cfg, f.metadata["key"])
                for f in fields(cls)
            }
        )

    def arguments(self) -> dict[str, Any]:
        """The options by field name: the keyword arguments of the objective's constructor."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class ProjectorOptions(ObjectiveOptions):
    projector_dim: int | None = option("heads.projector_dim")


@dataclass(frozen=True)
class ContrastOptions(ProjectorOptions):
    """A contrastive objective's: the projector's width and the temperature of its logits."""

    temperature: float = option("temperature")

    def check(self) -> None:
        super().check()
        POSITIVE.check("temperature", self.temperature)


@dataclass(frozen=True)
class ViewOptions(ObjectiveOptions):
    """The view augmentation's keys (`augmentations.view_augmentation`, with flag noise:
    `Objective.use_views`); `pretrain.config.AugmentConfig` checks their values, since every
    view method reads them alike."""

    zero_p: float = option("augment.zero_p")
    noise_scale: float = option("augment.noise_scale")
    replace_p: float = option("augment.replace_p")
    replace_source: str = option("augment.replace_source")
    binary_p: float = option("augment.binary_p")


@dataclass(frozen=True)
class CorruptionOptions(ObjectiveOptions):
    """An objective that corrupts entries of its input: the share (or probability) corrupted."""

    corrupt_p: float = option("augment.corrupt_p")

    def check(self) -> None:
        super().check()
        check_probability("augment.corrupt_p", self.corrupt_p, closed=True)


class Objective(nn.Module):
    fake_groups: ClassVar[bool] = False  # batches of random items grouped into fake QGs
    sync_batchnorm: ClassVar[bool] = False  # BatchNorm statistics over all DDP ranks
    needs_training_items: ClassVar[bool] = False  # gets `set_training_items` before training
    # Its negatives are the other items of each item's own QG: a pretraining set whose QGs all
    # hold one item leaves it none (`pretraining_set.check_pretraining_set` refuses it).
    qg_negatives: ClassVar[bool] = False
    # `build` gets the run's seed (``seed=``, `objectives.build_objective`): it draws something
    # once for the whole run (rank-pretext's tasks) and keeps it in buffers, which a resumed run
    # loads from its checkpoint.
    seeded: ClassVar[bool] = False
    # The keys it reads (`build` gets them); no options: it reads none of the keys only some
    # methods read.
    options: ClassVar[type[ObjectiveOptions]] = ObjectiveOptions

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
        # an objective that needs them for its own sake keeps needing them
        self.needs_training_items = type(self).needs_training_items or binary_p > 0  # type: ignore[misc]

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
    def build(cls, encoder: nn.Module, options: ObjectiveOptions, *, n_features: int) -> Objective:
        """The objective around ``encoder`` with ``options`` (its `options` class, checked),
        for items of ``n_features`` features: by default its constructor with the options as
        keyword arguments."""
        return cls(encoder=encoder, **options.arguments())

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
