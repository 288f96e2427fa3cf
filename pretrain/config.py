"""The pretraining stage's config: ``./run.sh pretrain <method> [key=value ...]``.

Defaults here are the paper's where it gives one (A.2.3: Adam, lr 5e-4, ResNet encoder);
``configs/pretrain/<method>.yaml`` sets each method's augmentation, temperature, batch size and
epochs. See docs/pretrain.md for every key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from scarce_ltr.core.config_fields import NON_NEGATIVE, OptimizerConfig
from scarce_ltr.core.config_sections import SectionSpelling
from scarce_ltr.core.run_identity import RunIdentity
from scarce_ltr.core.sizes import check_fits, model_fits
from scarce_ltr.data.stage_config import CommonConfig, DeviceKeys
from scarce_ltr.pretrain.augmentations import REPLACE_SOURCES
from scarce_ltr.pretrain.encoders import EncoderConfig
from scarce_ltr.pretrain.objectives import OBJECTIVES  # the methods
from scarce_ltr.pretrain.objectives.base import (
    SECTION,
    Objective,
    ObjectiveOptions,
    check_probability,
    config_value,
)
from scarce_ltr.pretrain.presets import VARIANT_MARK

# A pretraining run ranks nothing; its reports have always been filed under this group.
PRETRAIN_GROUP = "no-pretrain-dl"

SSL_VAL_CRITERIA = ("loss", "none")  # pretrain/ssl_val.py
DEFAULT_EPOCHS = 40


@dataclass(frozen=True)
class AugmentConfig:
    """How views and corrupted inputs are made (pretrain/augmentations.py). Which methods read
    a key is their options' (`pretrain.objectives.base.ObjectiveOptions`), and so are the checks
    of the keys only some objectives read (corrupt_p, mixup, subsets, overlap); the view keys
    every view method reads alike are checked here."""

    zero_p: float = 0.0  # zeroing: each feature of each item set to 0 with this probability
    noise_scale: float = 0.0  # Gaussian noise of this std added to every feature
    corrupt_p: float = 0.6  # scarf / vime / subtab: entry replaced by a draw from its marginal
    mixup: float = 0.9  # dacl: an item keeps a share lambda ~ U(mixup, 1) of itself
    subsets: int = 4  # subtab: number of feature subsets
    overlap: float = 0.75  # subtab: overlap of neighbouring subsets, as a share of a subset
    # simclr(-rank/-sample), simsiam: before zeroing and noise, each entry replaced with this
    # probability by the same feature of a donor item (0: off, the paper's views); rank-pretext,
    # qg-bins: the same on the encoder's input, donors always from the item's own QG
    replace_p: float = 0.0
    # where replace_p's, scarf's and vime's donors come from: global (the batch or, for scarf,
    # the training set: other QGs too) or qg (the item's own QG: a value on the same per-query
    # scale; pretrain/augmentations.py)
    replace_source: str = "global"
    # simclr(-rank/-sample), simsiam: the flag columns (exactly two values in the pretraining
    # set, e.g. 0/1) kept out of zeroing and Gaussian noise, each entry instead replaced with
    # this probability by a draw from the column's marginal there (0: off, every column alike)
    binary_p: float = 0.0

    def __post_init__(self) -> None:
        check_probability("augment.zero_p", self.zero_p)
        check_probability("augment.replace_p", self.replace_p, closed=True)
        check_probability("augment.binary_p", self.binary_p, closed=True)
        if self.replace_source not in REPLACE_SOURCES:
            raise ValueError(
                f"augment.replace_source must be one of {', '.join(REPLACE_SOURCES)}, "
                f"got {self.replace_source!r}"
            )
        NON_NEGATIVE.check("augment.noise_scale", self.noise_scale)


@dataclass(frozen=True)
class HeadsConfig:
    """Heads trained with the encoder and thrown away after pretraining (paper A.2.5)."""

    projector_dim: int | None = None  # projector hidden and output width (default: encoder's)
    predictor_hidden: int | None = None  # simsiam predictor bottleneck (default: width // 4)

    def __post_init__(self) -> None:
        for name in ("projector_dim", "predictor_hidden"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"heads.{name} must be >= 1, got {value}")


@dataclass(frozen=True)
class PretextConfig:
    """The pretext tasks built from the data's own structure (rank-pretext, qg-bins:
    pretrain/objectives/rank_pretext.py, qg_bins.py); the methods' options check the values."""

    # rank-pretext: random sparse monotone combinations of the standardized features, each a
    # ranking task of the QG's items (drawn once, with the seed)
    n_tasks: int = 32
    n_active: int = 3  # rank-pretext: features in each combination
    single_features: bool = True  # rank-pretext: one more task per feature, its order alone
    n_bins: int = 4  # qg-bins: equal-count bins of a feature's values within the QG


@dataclass(frozen=True)
class MonitorConfig:
    """Label-free monitors and the k-NN probe, measured before training and after each epoch."""

    enabled: bool = True
    every: int = 1  # epochs between measurements (the last epoch is always measured)
    n_items: int = 2048  # items of train (+ vali) for alignment, uniformity and effective rank
    vali_items: int = 20000  # most vali items (whole QGs) for effective_rank_vali
    zero_p: float = 0.1  # the monitor's own view augmentation, the same for every method
    noise_scale: float = 0.0
    knn_k: int = 10
    probe_items: int = 20000  # most labeled train items in the k-NN index
    probe_groups: int = 500  # most labeled vali QGs scored by the probe
    collapse_share: float = 0.1  # warn when effective rank < max(collapse_min, share * width)
    collapse_min: float = 5.0

    def __post_init__(self) -> None:
        counts = (self.every, self.n_items, self.vali_items, self.knn_k, self.probe_items)
        if min(*counts, self.probe_groups) < 1:
            raise ValueError(
                "monitor.every, n_items, vali_items, knn_k, probe_items, probe_groups must be >= 1"
            )
        if self.n_items < 2:
            raise ValueError("monitor.n_items must be >= 2")
        check_probability("monitor.zero_p", self.zero_p)
        NON_NEGATIVE.check("monitor.noise_scale", self.noise_scale)
        check_probability("monitor.collapse_share", self.collapse_share, closed=True)
        NON_NEGATIVE.check("monitor.collapse_min", self.collapse_min)


def _own_options(objective: type[Objective], given: dict[str, Any]) -> dict[str, Any]:
    """The ``objective`` mapping a run stores: every own option of ``objective``, given or at
    its default, and after them any other key given (refused by the config unless at the
    default of the method that reads it)."""
    own = objective.options.own_values(given)
    return own | {key: value for key, value in given.items() if key not in own}


# ``objective: {name: vime, alpha: 1.0}`` is ``method: vime`` and ``vime_alpha: 1.0``: the
# section's keys are the field names of the chosen method's options (`ObjectiveOptions.spelled`).
OBJECTIVE_SECTION = SectionSpelling(
    SECTION,
    OBJECTIVES,
    fields=lambda objective: objective.options.spelled(),
    complete=_own_options,
)


# The device keys (`DeviceKeys`: amp, cpu_amp, device) come with their defaults and help lines
# from data/stage_config.py, shared with finetuning; in --help they follow the common keys.
# item_budget and max_list_len are pretraining's own, not finetuning's (`TrainingKeys`): another
# default budget and other bounds (a batch of 2 items, a list of 1, where a ranking loss needs
# lists of 2), and no eval_item_budget, patience or noise_std go with them.
@dataclass(frozen=True)
class PretrainConfig(DeviceKeys, CommonConfig):
    method: str = "simclr-rank"  # the objective: the command-line name (or objective.name)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    heads: HeadsConfig = field(default_factory=HeadsConfig)
    pretext: PretextConfig = field(default_factory=PretextConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    item_budget: int = 1024  # most real items per batch (whole QGs)
    max_list_len: int | None = None  # truncate longer QGs (a random subset of their items)
    # Batch QGs of similar size together: far less padding at large item budgets (a GPU's
    # 200,000 items), so collating stops being the bottleneck; see data/batching.py.
    length_buckets: bool = False
    # Hold the pretraining items on the training device and gather each batch there, so only
    # row indices cross from the host (data/batching.py); the same batches. null: on CUDA when
    # the items take at most a quarter of its memory; true: always (on the CPU too); false: never.
    # Methods that regroup the items every epoch (simclr, scarf, dacl, simclr-sample) collate on
    # the host whatever it says.
    gather_on_device: bool | None = None
    # Pretrain on the vali QGs' features too (no labels). Off: the paper's Table 5 keeps them
    # apart as SSL Val; on is a deviation (more data, but then SSL Val is seen in training).
    include_vali: bool = False
    # The share of the train QGs pretraining reads, drawn at random with the seed: how much of
    # the unlabeled pool pretraining needs. 1: every train QG (the paper).
    pool_fraction: float = 1.0
    # The checkpoint finetuning loads: loss = the epoch of the lowest objective loss on the vali
    # QGs (SSL Val, labels unread), none = the last epoch (pretrain/ssl_val.py).
    ssl_val: str = "loss"
    variant: str = ""  # a sweep's name for these settings: the run's model is <method>@<variant>
    # The keys above and in augment, heads and pretext that only some methods read are the
    # options of those methods (their `ObjectiveOptions`): one set away from its default for a
    # method that does not read it is refused, and each method checks its own
    # (`objective_options`).
    temperature: float = 0.1  # contrastive objectives
    vime_alpha: float = 2.0  # vime: weight of feature reconstruction against mask estimation
    # objective.<option>=<value>: the method's options no key above holds (`own_option` in its
    # module), by field name; in a run's config.yaml when the method has any
    objective: dict[str, Any] = field(default_factory=dict)
    # The `objective:` section (name: the method; its other keys: the method's options by field
    # name) spelled in the keys above before the config is built (`core.config_sections`).
    SECTIONS: ClassVar[tuple[SectionSpelling, ...]] = (OBJECTIVE_SECTION,)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.method not in OBJECTIVES:
            raise ValueError(f"method must be one of {', '.join(OBJECTIVES)}, got {self.method}")
        if not 0 < self.pool_fraction <= 1:
            raise ValueError(f"pool_fraction must be in (0, 1], got {self.pool_fraction}")
        if self.item_budget < 2:
            raise ValueError(f"item_budget must be >= 2, got {self.item_budget}")
        if self.max_list_len is not None and self.max_list_len < 1:
            raise ValueError(f"max_list_len must be >= 1, got {self.max_list_len}")
        self.check_device_keys()
        if self.ssl_val not in SSL_VAL_CRITERIA:
            raise ValueError(
                f"ssl_val must be one of {', '.join(SSL_VAL_CRITERIA)}, got {self.ssl_val}"
            )
        if self.variant and not re.fullmatch(r"[A-Za-z0-9._-]+", self.variant):
            raise ValueError(
                f"variant may hold letters, digits, '.', '_' and '-' only, got {self.variant!r}"
            )
        # Last, so that a config with another error too is refused for that one, as before.
        self._refuse_unread()
        OBJECTIVES[self.method].options.of(self)  # the method's own checks
        self._check_sizes()

    def _check_sizes(self) -> None:
        """Sizes beyond this machine's memory, refused before a model is built (`core.sizes`):
        the encoder, its projector heads, the pretext tasks' heads (each at its default is
        small, and one set for a method that does not read it was refused above)."""
        n = self.data.known_features
        self.encoder.check_size("encoder.", n)
        out = self.encoder.out_dim
        for key in ("projector_dim", "predictor_hidden"):
            if (size := getattr(self.heads, key)) is not None:
                model_fits(f"heads.{key}={size}", out * size + size * size, "the projector")
        tasks = self.pretext.n_tasks
        model_fits(f"pretext.n_tasks={tasks}", (out + n) * (tasks + n), "the pretext head")
        # rank-pretext draws its tasks from a [n_tasks, n_features] float32 and its argsort
        check_fits(f"pretext.n_tasks={tasks}", tasks * n * 12, "drawing the pretext tasks")
        bins = self.pretext.n_bins
        model_fits(f"pretext.n_bins={bins}", out * n * bins, "the pretext head")

    def _refuse_unread(self) -> None:
        """A key some method reads (`OBJECTIVES`' options), set away from its default for a
        method that does not read it, is an error naming the methods that do and the keys the
        chosen one reads (`core.registry.check_unread`), not a no-op."""

        def changed(key: str) -> list[str]:
            section, _, name = key.partition(".")
            if section != SECTION:
                value, default = config_value(self, key), _default(key)
            elif name in self.objective:  # an own option: its default is its method's
                value, default = self.objective[name], _own_default(key)
            else:
                return []
            return [] if value == default else [f"{key}={value}"]

        known = OBJECTIVES.option_keys()
        for name in self.objective:
            if f"{SECTION}.{name}" not in known:
                reads = ", ".join(OBJECTIVES.reads(self.method)) or "no option of its own"
                raise ValueError(
                    f"{SECTION}.{name}: no method has this option; method={self.method} reads "
                    f"{reads}"
                )
        OBJECTIVES.check_unread(self.method, changed)

    @property
    def objective_options(self) -> ObjectiveOptions:
        """The chosen method's options: the keys of this config it reads, checked."""
        return OBJECTIVES[self.method].options.of(self)

    def identity(self) -> RunIdentity:
        return RunIdentity(
            dataset=self.data.run_name,
            stage="pretrain",
            model=self.model_name,
            setting=self.scarcity.tag,
            seed=self.seed,
            group=PRETRAIN_GROUP,
        )

    @property
    def model_name(self) -> str:
        """``<method>`` or ``<method>@<variant>``: what a sweep and a finetuning run call it."""
        return f"{self.method}{VARIANT_MARK}{self.variant}" if self.variant else self.method

    @property
    def n_epochs(self) -> int:
        return DEFAULT_EPOCHS if self.epochs is None else self.epochs


def _own_default(key: str):
    """The default of ``objective.<option>``, an own option: that of the first method reading it."""
    reader = OBJECTIVES[OBJECTIVES.readers(key)[0]]
    return reader.options.own_values({})[key.partition(".")[2]]


def _default(key: str):
    """`PretrainConfig`'s default of the dotted ``key`` (of a section: its class's default)."""
    schema, (*sections, name) = PretrainConfig, key.split(".")
    for section in sections:
        schema = schema.__dataclass_fields__[section].default_factory
    return schema.__dataclass_fields__[name].default
