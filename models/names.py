"""Model names, typed: `ModelName.parse` takes one apart, ``str()`` writes it back.

A model name says what a sweep trains and how a report files it. Each mark of the grammar is
owned by the layer that defines its concept; this module reads them all:

- ``<method>@<variant>``: a pretraining method with a sweep's named variant of its settings
  (``pretrain.presets.VARIANT_MARK``), and ``scratch@<variant>``, a fresh encoder with a sweep's
  named finetuning settings (``encoder.*``: ``scratch@tabm+full``);
- ``<encoder>+<strategy>``: a finetuned ranker (``simclr-rank+full``, ``scratch+full``) and
  ``<method>+<method>[+...]+combine``, paper A.3.7's linear layer over the methods' ``+full``
  rankers (``finetune.config.ENCODER_MARK``, ``COMBINE``);
- ``<baseline>+<encoder run's model>``: a hybrid baseline on a pretrained encoder
  (``gbdt-ssl+simclr-rank``; ``baselines.config.HYBRID_BASELINES``);
- ``<student>~<teacher>``: a model that also learns from a finished run of another
  (``data.teachers.TEACHER_MARK``);
- ``ensemble:<model>,<model>,...``, ``stack:...``, ``topk:...`` and ``seed-ensemble:<model>``:
  mixes of the scores of other models (this module: the ``ensembles`` package above it builds
  its names with `ModelName`).

Parsing is by form alone, so that any run's model parses (a combination of folder names);
`ModelName.check` and ``group(strict=True)`` hold a sweep's models to the methods, strategies
and baselines that exist (and ``scratch``, a fresh encoder), naming the bad part. The forms are
tried in the order the grammar nests them: a mix prefix holds the whole name (its members may be
taught), then the teacher mark (a teacher may be an ensemble), then ``+combine``, then one ``+``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scarce_ltr.baselines.config import (
    DEEP_BASELINES,
    HYBRID_BASELINES,
    TAUGHT_TREES,
    baseline_group,
)
from scarce_ltr.core.config import available
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.teachers import SELF_TEACHER, TAUGHT_GROUP, TEACHER_MARK
from scarce_ltr.finetune.config import COMBINE, ENCODER_MARK, SCRATCH
from scarce_ltr.pretrain.presets import split_preset

# Models that mix the scores of other models (`scarce_ltr.ensembles`), named here, below the
# package that runs them, so that it builds its names with `ModelName`: ensemble:<m>,<m>,...
ENSEMBLE_PREFIX = "ensemble:"
# Stacking: an ensemble of rank-normalised scores whose weights are cross-fitted over the vali
# QGs (search.crossfit); always in the hybrid group, a learned mix of models, never one of
# them, even when its members share a group.
STACK_PREFIX = "stack:"
# The plain average of the vali-best k of the models' rank-normalised scores, k cross-fitted
# over the vali QGs (search.topk); in the hybrid group like a stack.
TOPK_PREFIX = "topk:"
MIX_PREFIXES = (ENSEMBLE_PREFIX, STACK_PREFIX, TOPK_PREFIX)
# DASALC-ens (Qin et al. 2021): the plain average of runs of one model that differ in their seed.
SEED_ENSEMBLE_PREFIX = "seed-ensemble:"
MEMBER_MARK = ","

# The forms of a name (`ModelName.kind`).
SINGLE = "single"  # a baseline, or a pretraining run's <method>[@<variant>]
FINETUNED = "finetuned"  # <encoder>+<strategy>
COMBINED = "combine"  # <method>+<method>[+...]+combine
HYBRID = "hybrid"  # <hybrid baseline>+<encoder run's model>
TAUGHT = "taught"  # <student>~<teacher>
ENSEMBLE = "ensemble"  # ensemble:<model>,<model>[,...]
STACK = "stack"  # stack:<model>,<model>[,...]
TOPK = "topk"  # topk:<model>,<model>[,...]
SEED_ENSEMBLE = "seed-ensemble"  # seed-ensemble:<model>
MIXES = {ENSEMBLE_PREFIX: ENSEMBLE, STACK_PREFIX: STACK, TOPK_PREFIX: TOPK}
PREFIX_OF = {prefix_kind: prefix for prefix, prefix_kind in MIXES.items()}
PREFIX_OF[SEED_ENSEMBLE] = SEED_ENSEMBLE_PREFIX
LEARNED_MIXES = (STACK, TOPK)  # mixes whose choice is cross-fitted: always the hybrid group


@dataclass(frozen=True)
class ModelName:
    """One model name taken apart; build one with `parse` or the constructors below.

    ``name``: a single model's name, a finetuning strategy, or a hybrid baseline; ``encoder``:
    the encoder's model of a finetuned or hybrid model; ``methods``: a combination's pretraining
    methods; ``parts``: a taught model's (student, teacher), an ensemble's members, a seed
    ensemble's one model.
    """

    kind: str
    name: str = ""
    encoder: str = ""
    methods: tuple[str, ...] = ()
    parts: tuple[ModelName, ...] = ()

    @classmethod
    def parse(cls, text: str) -> ModelName:
        """The name ``text`` taken apart; `UserError` for a malformed ensemble or taught model."""
        if text.startswith(SEED_ENSEMBLE_PREFIX):
            member = text[len(SEED_ENSEMBLE_PREFIX) :]
            if member.startswith((*MIX_PREFIXES, SEED_ENSEMBLE_PREFIX)):
                raise UserError(f"model '{text}': a seed ensemble is seed-ensemble:<one model>")
            return cls(SEED_ENSEMBLE, parts=(cls.parse(member),))
        prefix = next((p for p in MIX_PREFIXES if text.startswith(p)), None)
        if prefix is not None:
            members = text[len(prefix) :].split(MEMBER_MARK)
            if len(members) < 2 or "" in members:
                raise UserError(
                    f"model '{text}': an ensemble is {prefix.rstrip(':')}:<model>,<model>[,...]"
                )
            return cls(MIXES[prefix], parts=tuple(cls.parse(m) for m in members))
        student, mark, teacher = text.partition(TEACHER_MARK)
        if mark:
            if not student or not teacher:
                raise UserError(f"model '{text}': {_TAUGHT_FORM}")
            return cls.taught(cls.parse(student), cls.parse(teacher))
        combined = f"{ENCODER_MARK}{COMBINE}"
        if text.endswith(combined) and text.count(ENCODER_MARK) >= 2:
            return cls(COMBINED, methods=tuple(text[: -len(combined)].split(ENCODER_MARK)))
        first, mark, rest = text.partition(ENCODER_MARK)
        if not mark:
            return cls(SINGLE, name=text)
        if first in HYBRID_BASELINES:
            return cls(HYBRID, name=first, encoder=rest)
        return cls.finetuned(first, rest)

    @classmethod
    def finetuned(cls, encoder: str, strategy: str) -> ModelName:
        return cls(FINETUNED, name=strategy, encoder=encoder)

    @classmethod
    def taught(cls, student: ModelName, teacher: ModelName) -> ModelName:
        return cls(TAUGHT, parts=(student, teacher))

    def __str__(self) -> str:
        if self.kind == SINGLE:
            return self.name
        if self.kind == FINETUNED:
            return f"{self.encoder}{ENCODER_MARK}{self.name}"
        if self.kind == HYBRID:
            return f"{self.name}{ENCODER_MARK}{self.encoder}"
        if self.kind == COMBINED:
            return ENCODER_MARK.join([*self.methods, COMBINE])
        if self.kind == TAUGHT:
            return f"{self.parts[0]}{TEACHER_MARK}{self.parts[1]}"
        return PREFIX_OF[self.kind] + MEMBER_MARK.join(str(p) for p in self.parts)

    # --- the parts a planner asks for ---------------------------------------------------------

    @property
    def mixes(self) -> bool:
        """``ensemble:``, ``stack:`` or ``topk:``: a weighted mix of the scores of other models."""
        return self.kind in MIXES.values()

    @property
    def ensembles(self) -> bool:
        """Any ensemble (a mix, or a seed ensemble): it trains nothing of its own."""
        return self.mixes or self.kind == SEED_ENSEMBLE

    @property
    def members(self) -> tuple[ModelName, ...]:
        """The models an ensemble (or a seed ensemble) combines; () for any other."""
        return self.parts if self.ensembles else ()

    @property
    def student(self) -> ModelName:
        """The model that trains: a taught model's student, else the model itself."""
        return self.parts[0] if self.kind == TAUGHT else self

    @property
    def teacher(self) -> ModelName | None:
        """The model whose run teaches this one; None for an untaught model and for
        ``<student>~self``, which no run teaches."""
        return self.parts[1] if self.kind == TAUGHT and not self.self_taught else None

    @property
    def self_taught(self) -> bool:
        """``<student>~self``: the student teaches itself (``teacher=self``), no teacher run."""
        return self.kind == TAUGHT and str(self.parts[1]) == SELF_TEACHER

    @property
    def fresh_encoder(self) -> bool:
        """``scratch[@<variant>]+<strategy>``: a ranker on a fresh encoder, nothing pretrained."""
        return self.kind == FINETUNED and split_variant(self.encoder)[0] == SCRATCH

    @property
    def has_variant(self) -> bool:
        return self != self.without_variants()

    def without_variants(self) -> ModelName:
        """The name with every ``@<variant>`` left out: the model its variants are candidates of."""
        if self.kind == SINGLE:
            return replace(self, name=split_variant(self.name)[0])
        if self.kind in (FINETUNED, HYBRID):
            return replace(self, encoder=str(ModelName.parse(self.encoder).without_variants()))
        if self.kind == COMBINED:
            return replace(self, methods=tuple(split_variant(m)[0] for m in self.methods))
        return replace(self, parts=tuple(p.without_variants() for p in self.parts))

    # --- checks and groups --------------------------------------------------------------------

    def check(self) -> None:
        """`UserError` unless every method, strategy and baseline the name uses exists."""
        self.group()

    def group(self, *, strict: bool = True) -> str:
        """The report group. An unknown part raises `UserError` when ``strict`` (a sweep's
        models), else the name falls into the group its form suggests (a run's own model name,
        such as ``simclr-rank+simsiam+combine``)."""
        if self.kind == SEED_ENSEMBLE:
            return self.parts[0].group(strict=strict)
        if self.mixes:
            groups = [m.group(strict=strict) for m in self.parts]
            return "hybrid" if self.kind in LEARNED_MIXES else ensemble_group(groups)
        if self.kind == TAUGHT:
            if strict:
                self._check_taught()
            return TAUGHT_GROUP
        try:
            return self._checked_group()
        except UserError:
            if strict:
                raise
        text = str(self)
        if self.fresh_encoder or text.startswith(f"{SCRATCH}{ENCODER_MARK}"):  # a fresh encoder
            return "no-pretrain-dl"
        if text.endswith(f"{ENCODER_MARK}{COMBINE}"):  # combine over finetuned runs
            return "pretrained-dl"
        return "gbdt" if text.startswith("gbdt") else "no-pretrain-dl"

    def _check_taught(self) -> None:
        """A student that learns from a teacher (a finetuned or from-scratch deep ranker, or a
        pseudo-labeling GBDT) and a teacher that is a model of its own (any, an ensemble too,
        but not a taught one)."""
        student, teacher = self.parts
        if TEACHER_MARK in str(teacher):  # taught, or an ensemble of a taught model
            raise UserError(
                f"model '{self}': the teacher '{teacher}' is taught itself; {_TAUGHT_FORM}"
            )
        if student.ensembles:
            raise UserError(
                f"model '{self}': an ensemble learns nothing from a teacher; ensemble the taught "
                "models instead"
            )
        group = student.group()
        deep = group in ("pretrained-dl", "no-pretrain-dl") and student.kind != COMBINED
        if self.self_taught:
            if deep:
                return
            raise UserError(
                f"model '{self}': only a deep ranker teaches itself ({SELF_TEACHER}: consistency "
                f"on the unlabeled QGs); {student} is not one (a gbdt-pseudo teaches itself "
                "without a teacher)"
            )
        if str(student) in TAUGHT_TREES or deep:
            teacher.group()  # a known model, or UserError naming it
            return
        raise UserError(
            f"model '{self}': {student} cannot learn from a teacher; a student is a finetuned "
            f"(<method>+<strategy>) or from-scratch deep ranker ({', '.join(DEEP_BASELINES)}) or "
            f"{' or '.join(TAUGHT_TREES)}"
        )

    def _checked_group(self) -> str:
        """The group of a single, finetuned, combined or hybrid model whose every part exists."""
        model, pretraining = str(self), available("pretrain")
        if self.kind == COMBINED:
            for method in self.methods:
                if split_variant(method)[0] not in pretraining:
                    raise UserError(
                        f"sweep model '{model}': unknown pretraining method '{method}'; a "
                        "combination is <method>+<method>[+...]+combine over "
                        f"{', '.join(pretraining)}"
                    )
            return "pretrained-dl"
        if self.kind == HYBRID:
            method = self.encoder.partition(ENCODER_MARK)[0]
            if split_variant(method)[0] not in pretraining:
                raise UserError(
                    f"sweep model '{model}': unknown pretraining method '{self.encoder}'; valid: "
                    f"{self.name}+<{'|'.join(pretraining)}>"
                )
            return "hybrid"
        if self.kind == FINETUNED:
            return self._finetuned_group(pretraining)
        baselines = available("baseline")
        if model not in baselines:
            raise UserError(
                f"unknown sweep model '{model}'; valid: {', '.join(baselines)}, "
                "<pretraining method>+<finetuning strategy> such as simclr-rank+full, or "
                f"<{'|'.join(HYBRID_BASELINES)}>+<pretraining method> such as gbdt-ssl+simclr-rank"
            )
        return baseline_group(model)

    def _finetuned_group(self, pretraining: list[str]) -> str:
        """``<method>+<strategy>``: a pretrained ranker; ``scratch[@<variant>]+<strategy>``: the
        same recipe on a fresh encoder (``pretrained=none``, a variant's ``encoder.*``),
        pretraining's control."""
        model, method, strategy = str(self), self.encoder, self.name
        fresh = self.fresh_encoder
        if not fresh and split_variant(method)[0] not in pretraining:
            raise UserError(
                f"sweep model '{model}': unknown pretraining method '{method}'; "
                f"valid: {', '.join(pretraining)}, or {SCRATCH} (a fresh encoder)"
            )
        strategies = [s for s in available("finetune") if s != COMBINE]
        if strategy == COMBINE:
            raise UserError(
                f"sweep model '{model}': a combination names two or more pretraining methods, "
                "such as simclr-rank+simsiam+combine (it combines their +full rankers)"
            )
        if strategy not in strategies:
            raise UserError(
                f"sweep model '{model}': unknown finetuning strategy '{strategy}'; "
                f"valid: {', '.join(strategies)}"
            )
        return "no-pretrain-dl" if fresh else "pretrained-dl"


_TAUGHT_FORM = (
    f"a taught model is <student>{TEACHER_MARK}<teacher>, e.g. simclr-rank+full"
    f"{TEACHER_MARK}gbdt-optuna, gbdt-pseudo{TEACHER_MARK}simclr-rank+full or resnet"
    f"{TEACHER_MARK}{SELF_TEACHER}"
)


def model_group(model: str, *, strict: bool = True) -> str:
    """The report group of the model named ``model`` (`ModelName.group`)."""
    return ModelName.parse(model).group(strict=strict)


def split_variant(method: str) -> tuple[str, str | None]:
    """``("simclr-rank", "zero0.1")`` of ``simclr-rank@zero0.1``; ``(method, None)`` without
    (a sweep's variant and a shipped preset are spelled alike: `pretrain.presets.split_preset`)."""
    return split_preset(method)


def ensemble_group(groups: list[str]) -> str:
    """An ensemble's group: its members' when they share one (a seed ensemble), else hybrid."""
    return groups[0] if len(set(groups)) == 1 else "hybrid"
