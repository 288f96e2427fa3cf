"""The config of ``./run.sh finetune <strategy> pretrained=<run dir>|none [key=value ...]``.

``configs/finetune/<strategy>.yaml`` sets ``strategy`` (equal to the file name) and the paper's
values (A.2.3): ``lp`` a linear head on the frozen encoder for 200 epochs, ``mp`` a 3-layer MLP
head on the frozen encoder for 200 epochs, ``full`` the MLP head alone for 100 epochs and then the
whole network for 100 epochs, Adam with lr 5e-5, LambdaRank; ``combine`` a linear layer over the
final embeddings of finetuned ``runs``. ``epochs=N`` caps the total: `Schedule` splits it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from scarce_ltr.core.config_fields import (
    NON_NEGATIVE,
    POSITIVE,
    OptimizerConfig,
    allowed,
)
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_config import read_config
from scarce_ltr.core.run_identity import RunIdentity
from scarce_ltr.core.runs import read_report
from scarce_ltr.data.stage_config import CommonConfig, DeviceKeys, TrainingKeys
from scarce_ltr.data.teachers import (
    TAUGHT_GROUP,
    TeachingConfig,
    no_teacher,
    self_taught,
    taught_model,
)
from scarce_ltr.finetune.heads import check_head_size
from scarce_ltr.finetune.joint import JointConfig
from scarce_ltr.finetune.recipe import LossConfig as LossConfig  # the loss section, named here too
from scarce_ltr.finetune.recipe import RankerRecipe
from scarce_ltr.finetune.search_config import PHASE_EPOCHS
from scarce_ltr.pretrain.config import PretrainConfig
from scarce_ltr.pretrain.presets import VARIANT_MARK

COMBINE = "combine"  # paper A.3.7's linear layer over finetuned rankers: <m>+<m>[+...]+combine
STRATEGIES = ("lp", "mp", "full", COMBINE)
# <encoder>+<strategy>: a ranker built on an encoder (simclr-rank+full); a hybrid baseline joins
# its encoder the same way (gbdt-ssl+simclr-rank), and a combination its methods.
ENCODER_MARK = "+"
SCRATCH = "scratch"  # the encoder's name in a fresh encoder's model: scratch+full
# A variant's name goes into a model name and a folder name: no separator of either (a sweep's
# variants, and a fresh encoder's: scratch@tabm+full).
VARIANT_NAME = re.compile(r"[A-Za-z0-9._-]+")
DEFAULT_COMBINE_DROPOUT = 0.7  # paper A.3.7 on MSLR-WEB30K and Istella-S
FROZEN_HEADS = {"lp": "linear", "mp": "mlp"}  # the frozen strategies and the head each uses


# What the loop reads of the training keys finetuning and the deep baselines share: the fields
# of `TrainingKeys` (data/stage_config.py, declared there once with their help lines and checks)
# that are not where the stage runs (`DeviceKeys`).
TRAINING_KEYS = tuple(
    f.name for f in fields(TrainingKeys) if f.name not in {d.name for d in fields(DeviceKeys)}
)


@dataclass(frozen=True)
class TrainOptions:
    """How `finetune.loop.fit` trains a deep ranker: the optimizer and the `TRAINING_KEYS` of a
    finetuning or deep-baseline config. Built by `of`, so every field is set on purpose."""

    lr: float
    weight_decay: float
    optimizer: str  # adam | adamw (core.optim)
    schedule: str  # constant | cosine, over each phase
    warmup: float  # cosine: share of a phase's steps warming up
    item_budget: int
    eval_item_budget: int
    max_list_len: int | None
    patience: int | None
    vali_every: int  # score vali after every n-th epoch of a phase and its last
    noise_std: float  # DASALC's Gaussian input noise in training (0: off)
    # L2-SP (finetuning only): alpha of alpha/2 * ||encoder - its pretrained weights||^2 added to
    # the loss in the phases that train the encoder (`finetune.l2sp`); 0: off
    l2sp: float = 0.0
    head_lr: float | None = None  # the head-only phase's rate (LP-FT); None: lr

    def rate(self, phase: Phase) -> float:
        """The learning rate of ``phase``: ``head_lr`` while the encoder is frozen, if set."""
        return self.lr if self.head_lr is None or phase.train_encoder else self.head_lr

    @classmethod
    def of(cls, cfg: TrainingKeys, optimizer: OptimizerConfig) -> TrainOptions:
        """``cfg``'s training keys with ``optimizer`` (its rate the one to train at)."""
        return cls(
            lr=optimizer.lr,
            weight_decay=optimizer.weight_decay,
            optimizer=optimizer.name,
            schedule=optimizer.schedule,
            warmup=optimizer.warmup,
            **{key: getattr(cfg, key) for key in TRAINING_KEYS},
        )


@dataclass(frozen=True)
class Phase:
    name: str  # "head": encoder frozen; "full": the whole network
    epochs: int
    train_encoder: bool


def schedule(head_epochs: int, full_epochs: int, cap: int | None) -> list[Phase]:
    """The phases to run; ``cap`` (``epochs=``) scales both down in proportion.

    With a cap below ``head_epochs + full_epochs`` the head phase gets
    ``cap * head_epochs // total`` epochs and the whole-network phase the rest: for ``full``'s
    100 + 100, ``epochs=N`` gives N // 2 head-only epochs and N - N // 2 whole-network epochs.
    """
    total = head_epochs + full_epochs
    if cap is not None and cap < total:
        head_epochs = cap * head_epochs // total
        full_epochs = cap - head_epochs
    phases = [Phase("head", head_epochs, False), Phase("full", full_epochs, True)]
    return [p for p in phases if p.epochs > 0]


# The training keys (`TrainingKeys`: item_budget, patience, amp, device, ...) and the recipe's
# (`finetune.recipe.RankerRecipe`: encoder.*, head, loss.*, lrs, search.*, the deep baselines'
# deep.* too) come with their defaults and help lines from there; in --help they follow the
# common keys.
@dataclass(frozen=True)
class FinetuneConfig(RankerRecipe, CommonConfig):
    strategy: str = "full"  # lp | mp | full | combine: set by configs/finetune/<strategy>.yaml
    pretrained: str | None = None  # a pretraining run dir, or "none" for a fresh encoder
    # pretrained=none only: a name for these encoder.* settings; the run's model is
    # scratch@<variant>+<strategy> (a pretrained encoder is named by its pretraining run)
    variant: str = ""
    # encoder frozen, head trained alone
    head_epochs: int = field(default=100, metadata=allowed(PHASE_EPOCHS))
    # whole network (0 for the frozen strategies)
    full_epochs: int = field(default=100, metadata=allowed(PHASE_EPOCHS))
    # full: the head-only phase's learning rate, e.g. 1e-2 (LP-FT: a head fitted at a probe's
    # rate before the whole network moves at optimizer.lr); null: optimizer.lr in both phases
    head_lr: float | None = None
    # Adam at the paper's finetuning learning rate (A.2.3), 5e-5: lp's, mp's and full's, named
    # here alone (their configs/finetune/*.yaml leave it; combine.yaml sets its layer's 1e-3).
    optimizer: OptimizerConfig = field(default_factory=lambda: OptimizerConfig(lr=5e-5))
    # L2-SP (Li et al. 2018): alpha/2 * ||theta_enc - theta_enc^0||^2, the squared distance of
    # the encoder's weights from their pretrained values, added to the loss in the phases that
    # train the encoder (full's second phase); needs pretrained=<run>; 0: off
    l2sp: float = 0.0
    # An L2-SP grid, e.g. [0.01,0.1,1,10]: one model per alpha in grid/l2sp=<alpha>/ (with
    # lrs: per rate and alpha), the vali-best kept. Empty: l2sp alone.
    l2sp_grid: list[float] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)  # combine: finetuning run dirs
    # combine: the dropout before its linear layer; null: the data preset's data.combine_dropout
    # (paper A.3.7: 0.7 on MSLR and Istella, 0 on Yahoo), else 0.7
    combine_dropout: float | None = None
    # A finished run (same data, labels, seed) whose train scores teach the unlabeled train QGs,
    # as `teaching` says (finetune/teacher.py); the run is named <model>~<teacher model>. self:
    # the model's own clean-view scores teach its noised view (consistency), <model>~self
    teacher: str | None = None
    teaching: TeachingConfig = field(default_factory=TeachingConfig)
    # Joint semi-supervised training: + joint.weight x a self-supervised loss on every train QG
    # of the batch, the unlabeled ones too, in the whole-network epochs (finetune/joint.py;
    # docs/finetune.md "Joint training"); off by default (weight 0)
    joint: JointConfig = field(default_factory=JointConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_keys()
        # Last, so that a config with another error too is refused for that one, as before.
        self.loss.check_taken([self.loss.name, *(self.search.loss if self.search.on else [])])
        self._check_sizes()

    def _check_sizes(self) -> None:
        """Sizes beyond this machine's memory, refused before a model is built (`core.sizes`):
        a fresh encoder's and the head's (a pretrained encoder's were its pretraining's)."""
        in_dim, members = 1, 1
        if self.from_scratch:
            self.encoder.check_size("encoder.", self.data.known_features)
            in_dim = self.encoder.width
            members = self.encoder.out_dim // self.encoder.width  # TabM: a head per member
        if self.head == "mlp":
            hidden = self.head_hidden
            check_head_size(f"head_hidden={hidden}", in_dim=in_dim, hidden=hidden, members=members)

    def _check_keys(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}")
        if self.head_epochs + self.full_epochs < 1:
            raise ValueError("head_epochs + full_epochs must be >= 1: nothing would be trained")
        self.check_recipe()  # head, head_hidden, the training keys, search.*, lrs
        self.teaching.check_read(self.teacher)
        if self_taught(self.teacher):
            self.teaching.check_self_taught()
        if not 0 <= self.combination_dropout < 1:
            raise ValueError("combine_dropout (or data.combine_dropout) must be in [0, 1)")
        self._check_l2sp()
        self._check_joint()
        self._check_variant()
        if self.head_lr is not None:
            POSITIVE.check("head_lr", self.head_lr)
            if self.strategy != "full":
                raise ValueError(
                    f"head_lr is for full: {self.strategy} trains its head alone, at optimizer.lr"
                )
        if self.strategy == "combine":
            if len(self.runs) < 2:
                raise ValueError("combine needs runs=[<finetuning run dir>,<finetuning run dir>]")
            if self.full_epochs:
                raise ValueError("combine trains its last layer only: full_epochs must be 0")
            if self.pretrained is not None:
                raise ValueError("combine takes runs=[...] (finetuning runs), not pretrained=")
            if self.search.on:
                raise ValueError("search is for lp, mp and full; combine trains one layer")
            if not no_teacher(self.teacher):
                raise ValueError("teacher is for lp, mp and full; combine trains one layer")
            return
        if self.runs:
            raise ValueError(f"runs is for combine, not {self.strategy}")
        if self.pretrained is None:
            raise ValueError("pretrained=<pretraining run dir> or pretrained=none is required")
        self._check_search_epochs()
        if self.strategy in FROZEN_HEADS:
            if self.head != FROZEN_HEADS[self.strategy]:
                raise ValueError(
                    f"{self.strategy} uses head={FROZEN_HEADS[self.strategy]}; "
                    "use lp for a linear head, mp for an MLP head, full to train both"
                )
            if self.full_epochs:
                raise ValueError(f"{self.strategy} keeps the encoder frozen: full_epochs must be 0")

    def _check_l2sp(self) -> None:
        """L2-SP pulls a trained encoder toward its pretrained weights: refused where there is
        no pretrained encoder or none is trained."""
        NON_NEGATIVE.check("l2sp", self.l2sp)
        for alpha in self.l2sp_grid:
            NON_NEGATIVE.check("l2sp_grid", alpha)
        if len(set(self.l2sp_grid)) != len(self.l2sp_grid):
            raise ValueError("l2sp_grid must list distinct alphas >= 0 (or be empty)")
        key = "l2sp_grid" if self.l2sp_grid else "l2sp"
        if self.search.on and self.search.l2sp:
            key = "search.l2sp"
        elif not self.l2sp_on:
            return
        if self.strategy != "full":
            raise ValueError(
                f"{key} is for full: {self.strategy} never trains the encoder, so there is "
                "nothing to keep near its pretrained weights"
            )
        if self.from_scratch:
            raise ValueError(
                f"{key} needs pretrained=<pretraining run dir>: a fresh encoder "
                "(pretrained=none) has no pretrained weights to stay near"
            )
        if not any(phase.train_encoder for phase in self.phases()):
            raise ValueError(f"{key} needs whole-network epochs: full_epochs (or epochs=) is 0")
        if self.l2sp_grid and self.search.on:
            raise ValueError("l2sp_grid and search.n_trials: choose alpha by one or the other")

    def _check_variant(self) -> None:
        """A variant names a fresh encoder's settings; a pretrained encoder (and combine's
        members) keep the name their runs give them."""
        if not self.variant:
            return
        if not VARIANT_NAME.fullmatch(self.variant):
            raise ValueError(
                f"variant may hold letters, digits, '.', '_' and '-' only, got {self.variant!r}"
            )
        if self.strategy == COMBINE:
            raise ValueError("variant is for a fresh encoder (pretrained=none), not combine")
        if not self.from_scratch:
            raise ValueError(
                f"variant={self.variant} names a fresh encoder (pretrained=none); the encoder of "
                f"pretrained={self.pretrained} is named by its pretraining run"
            )

    def _check_joint(self) -> None:
        """The joint loss trains the encoder: refused where none is trained."""
        self.joint.check_read()
        if not self.joint.on:
            return
        if self.strategy != "full":
            raise ValueError(
                f"joint.weight is for full: {self.strategy} never trains the encoder, which the "
                "joint loss trains"
            )
        if not any(phase.train_encoder for phase in self.phases()):
            raise ValueError(
                "joint.weight needs whole-network epochs: full_epochs (or epochs=) is 0"
            )

    @property
    def l2sp_on(self) -> bool:
        """Whether L2-SP is asked for: a positive ``l2sp`` or an ``l2sp_grid``."""
        return self.l2sp > 0 or bool(self.l2sp_grid)

    def l2sp_values(self) -> list[float]:
        """The alphas to train with: the grid ``l2sp_grid``, or ``l2sp`` alone."""
        return list(self.l2sp_grid) or [self.l2sp]

    def _check_search_epochs(self) -> None:
        """A trial at the low ends of the epoch ranges must still train an epoch."""
        if not self.search.on:
            return
        head = self.search.head_epochs[0] if self.search.head_epochs else self.head_epochs
        full = self.search.full_epochs[0] if self.search.full_epochs else self.full_epochs
        if head + (full if self.strategy == "full" else 0) < 1:
            raise ValueError(
                "search.head_epochs and search.full_epochs: a trial at their low ends would "
                "train no epoch; raise a low end"
            )

    def identity(self) -> RunIdentity:
        """``<pretraining method>+<strategy>`` (``scratch[@<variant>]+<strategy>`` for a fresh
        encoder): two encoders finetuned alike never share a folder. ``combine`` keeps its runs
        in ``finetune/combine/`` and is named after its members' encoders."""
        model, group = f"{self.encoder_name()}{ENCODER_MARK}{self.strategy}", self._group()
        if not no_teacher(self.teacher):
            assert self.teacher is not None
            model, group = taught_model(model, self.teacher), TAUGHT_GROUP
        return RunIdentity(
            dataset=self.data.run_name,
            stage="finetune",
            model=model,
            setting=self.scarcity.tag,
            seed=self.seed,
            group=group,
            folder_name=COMBINE if self.strategy == COMBINE else None,
        )

    def _group(self) -> str:
        """A fresh encoder's ranker is a deep model without pretraining; a combination is filed
        with the pretrained rankers it combines."""
        fresh = self.from_scratch and self.strategy != COMBINE
        return "no-pretrain-dl" if fresh else "pretrained-dl"

    def encoder_name(self) -> str:
        """The encoder's pretraining as its pretraining run's ``model`` and sweeps name it:
        ``simclr-rank``, ``simclr-rank@zero0.7`` (a sweep's variant), ``+``-joined over the
        members of ``combine``; ``scratch`` for a fresh encoder, ``scratch@<variant>`` with a
        ``variant``."""
        if self.strategy == COMBINE:
            methods = [_pretraining_method_of(run) for run in self.runs]
            return ENCODER_MARK.join(m or "none" for m in methods)
        if self.from_scratch:
            return f"{SCRATCH}{VARIANT_MARK}{self.variant}" if self.variant else SCRATCH
        assert self.pretrained is not None
        try:
            return read_config(self.pretrained, PretrainConfig).model_name
        except UserError:  # named again, with the reason, when the encoder is loaded
            return Path(self.pretrained).name

    @property
    def combination_dropout(self) -> float:
        """combine's dropout: ``combine_dropout``, else the data preset's, else 0.7 (A.3.7)."""
        for value in (self.combine_dropout, self.data.combine_dropout):
            if value is not None:
                return value
        return DEFAULT_COMBINE_DROPOUT

    @property
    def from_scratch(self) -> bool:
        return self.pretrained is None or self.pretrained.lower() in ("none", "null", "")

    def phases(self) -> list[Phase]:
        return schedule(self.head_epochs, self.full_epochs, self.epochs)

    def learning_rates(self) -> list[float]:
        """The rates to train at: the grid ``lrs``, or ``optimizer.lr`` alone."""
        return list(self.lrs) or [self.optimizer.lr]

    def train_options(self, lr: float | None = None, l2sp: float | None = None) -> TrainOptions:
        """The ``optimizer`` section at rate ``lr`` (default ``optimizer.lr``), the training
        keys and the L2-SP alpha ``l2sp`` (default ``l2sp``)."""
        optimizer = self.optimizer if lr is None else replace(self.optimizer, lr=lr)
        alpha = self.l2sp if l2sp is None else l2sp
        return replace(TrainOptions.of(self, optimizer), l2sp=alpha, head_lr=self.head_lr)


def _pretraining_method_of(run: str) -> str | None:
    """The pretraining method of a finetuning run's encoder (None: a fresh encoder)."""
    report = read_report(run) or {}
    return report.get("pretraining_method")
