"""The config of ``./run.sh baseline <name>``: common keys, the method, one section per family.

``configs/baseline/<name>.yaml`` sets ``method`` (equal to the file name) and the method's
defaults. A family of baselines keeps its own keys in a section of its own (``gbdt:`` for the
LightGBM ones), a frozen dataclass in its own module that checks them; a registered tree backend
(`trees.backends.TREE_BACKENDS`) gets its section from its entry (`tree_sections`), another
family adds its field here. What the sections' options declare derives from the fields
(`MISSING_AS_NAN`, `SEARCHED_TREES`, the refusal of a section the method does not read).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path

from scarce_ltr.baselines.deep.config import DeepBaselineOptions
from scarce_ltr.core.config_fields import changed_keys, check_read
from scarce_ltr.core.registry import check_unread
from scarce_ltr.core.run_identity import RunIdentity
from scarce_ltr.core.runs import run_model
from scarce_ltr.data.teachers import (
    TAUGHT_GROUP,
    TeachingConfig,
    no_teacher,
    self_taught,
    taught_model,
)
from scarce_ltr.finetune.config import ENCODER_MARK
from scarce_ltr.trees.backends import TREE_BACKENDS
from scarce_ltr.trees.lightgbm.config import PSEUDO_METHODS, GBDTOptions
from scarce_ltr.trees.lightgbm.hybrid.config import EmbeddingOptions
from scarce_ltr.trees.tree_run import TreeRunConfig
from scarce_ltr.trees.tuning import SearchOptions

# The from-scratch deep rankers (trained by finetune.loop.fit): the report's no-pretrain-dl group.
DEEP_BASELINES = DeepBaselineOptions.read_by
# Run on a pretraining run: <baseline>+<the encoder run's model>, in the report's hybrid group.
HYBRID_BASELINES = EmbeddingOptions.read_by
# The tree students: their pseudo-labels come from the teacher instead of their own first GBDT.
TAUGHT_TREES = PSEUDO_METHODS


def tree_sections(cls: type) -> type:
    """``cls`` with a section per registered tree backend (`TREE_BACKENDS`), as if written by
    hand right after LightGBM's ``gbdt`` (``catboost: CatBoostOptions = field(default_factory=
    CatBoostOptions)``, then ``xgboost``), where config.yaml and --help have always shown them.

    Why a decorator under ``@dataclass``: fields typed here by hand made every new backend edit
    this file; a class built by ``make_dataclass`` would lose the class body below. This adds
    the annotations and defaults ``@dataclass`` then reads, nothing else. The cost: a type
    checker does not see ``cfg.xgboost``; a backend reads its section typed, with `section_of`.
    """
    own = dict(cls.__dict__.get("__annotations__", {}))
    taken = {key for base in cls.__mro__ for key in base.__dict__.get("__annotations__", {})}
    added = {backend.name: backend.options for backend in TREE_BACKENDS.values()}
    clash = sorted(added.keys() & taken)
    if clash:
        raise ValueError(f"tree backend {clash[0]}: {cls.__name__} has a key {clash[0]} already")
    keys = list(own)
    at = keys.index("gbdt") + 1
    cls.__annotations__ = {
        **{key: own[key] for key in keys[:at]},
        **added,
        **{key: own[key] for key in keys[at:]},
    }
    for name, options in added.items():
        setattr(cls, name, field(default_factory=options))
    return cls


@dataclass(frozen=True)
@tree_sections  # catboost:, xgboost:, ...: one section per `TREE_BACKENDS` entry
class BaselineConfig(TreeRunConfig):
    """Keys of every baseline run; ``method`` picks the entry in `baselines.run.BASELINES`."""

    gbdt: GBDTOptions = field(default_factory=GBDTOptions)
    deep: DeepBaselineOptions = field(default_factory=DeepBaselineOptions)
    pretrained: str | None = None  # gbdt-ssl: a pretraining or finetuning run dir
    embedding: EmbeddingOptions = field(default_factory=EmbeddingOptions)  # gbdt-ssl
    # deep baselines: a finished run (same data, labels, seed) whose train scores teach the
    # unlabeled train QGs, as `teaching` says (data.teachers), or self (consistency on them);
    # gbdt-*pseudo: gbdt.teacher
    teacher: str | None = None
    teaching: TeachingConfig = field(default_factory=TeachingConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.method:
            raise ValueError("method must name a baseline")
        if self.pretrained is not None and self.method != "gbdt-ssl":
            raise ValueError(f"pretrained is a key of gbdt-ssl, not of {self.method}")
        if not no_teacher(self.teacher) and self.method not in DEEP_BASELINES:
            where = "gbdt.teacher" if self.method in TAUGHT_TREES else "a key of the deep baselines"
            raise ValueError(f"teacher is {where}, not a key of {self.method}")
        if self_taught(self.gbdt.teacher):
            raise ValueError(
                "gbdt.teacher=self: a pseudo-labeling GBDT teaches itself without a teacher "
                "(leave gbdt.teacher out); gbdt.teacher names a finished run"
            )
        self.teaching.check_read(self.teacher)
        if self_taught(self.teacher):
            self.teaching.check_self_taught()
        if not no_teacher(self.gbdt.teacher) and self.method not in TAUGHT_TREES:
            raise ValueError(
                f"gbdt.teacher is a key of {', '.join(TAUGHT_TREES)}, not of {self.method}"
            )
        if self.method == "dasalc" and self.deep.hidden % self.deep.n_heads:
            raise ValueError(
                f"deep.n_heads ({self.deep.n_heads}) must divide deep.hidden ({self.deep.hidden})"
            )
        self._refuse_unread_sections()
        if self.method in DEEP_BASELINES:  # sizes beyond this machine's memory (core.sizes)
            self.deep.check_size(self.method, self.data.known_features)

    def _refuse_unread_sections(self) -> None:
        """A key of a section the method does not read (its options' ``read_by``), set away
        from its default, is an error naming the methods that do and the sections it reads
        (`core.registry.check_unread`), not a no-op (``baseline gbdt xgboost.n_trials=5``); so
        is a key of a section it reads that only other methods or searches of the section read
        (its field's `read_with`: ``baseline resnet deep.cross_layers=[2]``, ``gbdt.n_trials=5``
        with the paper grid)."""
        readers = section_readers(type(self))

        def changed(name: str) -> list[str]:
            section = getattr(self, name)
            return changed_keys(name, section, type(section)())

        check_unread(
            choice="method",
            chosen=[self.method],
            readers=readers,
            changed=changed,
            shown=lambda name: f"{name}.*",
        )
        for name, methods in readers.items():
            if self.method in methods:
                check_read(name, getattr(self, name), method=self.method)

    def identity(self) -> RunIdentity:
        """gbdt-ssl is named after its encoder's run (``gbdt-ssl+simclr-rank``), so that two
        encoders never share one folder."""
        model, group = self.method, self._group()
        if self.method in HYBRID_BASELINES and self.pretrained:
            encoder_model = run_model(self.pretrained) or Path(self.pretrained).name
            model = f"{self.method}{ENCODER_MARK}{encoder_model}"
        teacher = self.teacher if self.method in DEEP_BASELINES else self.gbdt.teacher
        if not no_teacher(teacher):
            assert teacher is not None
            model, group = taught_model(model, teacher), TAUGHT_GROUP
        return RunIdentity(
            dataset=self.data.run_name,
            stage="baseline",
            model=model,
            setting=self.scarcity.tag,
            seed=self.seed,
            group=group,
        )

    def _group(self) -> str:
        return baseline_group(self.method)

    @property
    def keeps_missing(self) -> bool:
        """Whether this method's trees take NaN as a missing value (`MISSING_AS_NAN`): its data
        keeps NaN; the other methods refuse it (``data.pipeline.prepare_data``)."""
        return self.method in MISSING_AS_NAN

    @property
    def nan_trees(self) -> tuple[str, ...]:
        return MISSING_AS_NAN


def section_readers(schema: type) -> dict[str, tuple[str, ...]]:
    """Each section of ``schema`` whose options name the methods that read it (``read_by``)
    -> those methods."""
    return {
        name: tp.read_by
        for name, tp in sections(schema).items()
        if isinstance(getattr(tp, "read_by", None), tuple)
    }


@cache
def sections(schema: type = BaselineConfig) -> dict[str, type]:
    """Each key of ``schema`` -> its type, in field order: a section's is its options class."""
    hints = typing.get_type_hints(schema)
    return {f.name: hints[f.name] for f in fields(schema)}


def missing_as_nan(schema: type = BaselineConfig) -> tuple[str, ...]:
    """The methods whose trees split on NaN, in the order of ``schema``'s sections: what each
    section's options name (``missing_as_nan``, a class attribute of a tree backend's options)."""
    return tuple(n for tp in sections(schema).values() for n in getattr(tp, "missing_as_nan", ()))


# The trees that split on NaN (a missing value takes a branch of its own); the PCA and hybrid
# variants pass the features through a PCA or an encoder, where a NaN spoils every output.
MISSING_AS_NAN = missing_as_nan()
# The searched tree backends (CatBoost, XGBoost): a method whose section, of its own name, holds
# `SearchOptions` (the estimators take LightGBM's keywords for its ``<name>.*`` keys).
SEARCHED_TREES = tuple(
    key for key, tp in sections().items() if isinstance(tp, type) and issubclass(tp, SearchOptions)
)


def baseline_group(method: str) -> str:
    """The report group of the baseline ``method`` untaught (a taught one is hybrid)."""
    if method in DEEP_BASELINES:
        return "no-pretrain-dl"
    return "hybrid" if method in HYBRID_BASELINES else "gbdt"
