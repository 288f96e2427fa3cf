"""The cells of a sweep and the jobs that produce them.

A cell is one (data set, model, label setting, seed). A job is one ``./run.sh`` command; a
pretrained model's cell needs two jobs, pretraining (shared by every label setting of that data
set, method and seed) and finetuning (``simclr-rank+full``) or a hybrid baseline on the
pretrained encoder (``gbdt-ssl+simclr-rank``).

An ensemble (``./run.sh ensemble``) is the model ``ensemble:<model>,<model>,...``: its job mixes
the saved scores of its members' cells of the same data set, label setting and seed, so it runs
after them, and every member must be a model of the sweep itself. ``seed-ensemble:<model>`` is
the seed ensemble (DASALC-ens): for sweep seed s, ``seed_ensemble_size`` runs of ``<model>`` with
seeds s, s + 1000, ... and the labeled QGs of seed s (``scarcity.seed=s``; a pretrained model
uses the encoder of seed s), averaged with uniform weights. ``stack:<model>,<model>,...`` is
planned as ``ensemble:`` is, its job with ``normalize=rank weights=crossfit`` (after the sweep's
ensemble overrides, so that they hold): rank-normalised scores with cross-fitted weights;
``topk:<model>,...`` likewise with ``normalize=rank weights=topk``: the plain average of the
vali-best k of its models, k cross-fitted over the vali QGs (`ensembles.topk`).

A taught model ``<student>~<teacher>`` (``simclr-rank+full~gbdt-optuna``,
``gbdt-pseudo~ensemble:simclr-rank+full,gbdt-optuna``) is the student's job with
``teacher=<the teacher's run>`` (``gbdt.teacher=`` for a tree student), run after the teacher's
job of the same data set, fold, label setting and seed; the teacher must be an untaught model of
the sweep. Its run folder is named after the whole model name; ``per_model`` lists of the
student apply, then the taught model's own.

A variant ``<method>@<name>`` (``simclr-rank@zero0.1+full``) pretrains the method with the
sweep's ``variants.<name>`` overrides on top of ``overrides.pretrain`` and
``overrides.per_method.<method>``, in a pretraining folder of its own
(``pretrain/<method>@<name>``); the report's tuned table lets the validation-best variant
stand for the method (paper A.2.3).
``<method>+<method>[+...]+combine`` (``simclr-rank+simsiam+combine``, paper A.3.7) is a
``./run.sh finetune combine`` job over the ``<method>+full`` cells of the same data set, label
setting and seed, which must be models of the sweep; it runs after them.

With ``folds: [1, 2, ...]`` every cell and every pretraining job runs once per fold of a data set
laid out as ``Fold<k>/`` (the LETOR presets): the preset's split files have their ``Fold<n>``
folder replaced by ``Fold<k>`` (``data.splits.train=Fold3/train``, ...), and each fold keeps its
runs in ``<sweep>/<dataset>/fold=<k>/``, laid out below as a sweep without folds. Jobs and cells
of a fold name it (``ohsumed/fold=3/gbdt/frac=0.2/seed=0``); pretraining runs once per (fold,
method, seed), and an ensemble mixes members of its own fold. Without folds the plan is the one it
always was: the data set's own splits, the same folders and keys.
"""

from __future__ import annotations

import heapq
import json
import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from scarce_ltr.baselines.config import HYBRID_BASELINES, TAUGHT_TREES
from scarce_ltr.core.config import CONFIG_ROOT, load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_identity import STAGES, run_folder
from scarce_ltr.data.scarcity import ScarcityConfig
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.ensembles.config import MIX_OPTIONS
from scarce_ltr.families import family_of
from scarce_ltr.finetune.config import ENCODER_MARK
from scarce_ltr.models.names import (
    COMBINED,
    FINETUNED,
    HYBRID,
    SEED_ENSEMBLE,
    ModelName,
    split_variant,
)

SEED_STRIDE = 1000  # member j of the seed ensemble of sweep seed s trains with seed s + 1000 j
# An ensemble trains nothing: of the sweep's common overrides it takes the keys every stage has
# (data, label setting, seed, metrics), not a trainer's (gbdt.*, encoder.*, ...).
COMMON_KEYS = frozenset(f.name for f in fields(CommonConfig))


@dataclass(frozen=True)
class Job:
    key: str
    stage: str  # pretrain | finetune | baseline
    name: str  # method, strategy or baseline
    overrides: list[str]
    run_dir: Path
    depends_on: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SweepCell:
    id: str
    dataset: str
    model: str
    group: str
    stage: str
    setting: str
    fraction: float
    binary_tau: float | None
    seed: int
    run_dir: str
    job_key: str
    fold: int | None = None  # the data set's Fold<k> (sweep key folds); None: its own splits
    status: str = "pending"
    error: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def check_ensembles(models: list[str]) -> None:
    """Stop unless every sweep ensemble mixes two or more other (non-ensemble) sweep models."""
    for model in models:
        name = ModelName.parse(model)
        if not name.mixes:
            continue
        members = [str(m) for m in name.members]
        if len(set(members)) != len(members):
            raise UserError(f"sweep model '{model}': a member appears twice")
        for member, parsed in zip(members, name.members, strict=True):
            if parsed.ensembles or member not in models:
                raise UserError(
                    f"sweep model '{model}': member '{member}' is not a (non-ensemble) model "
                    f"of this sweep; add it to models: {', '.join(models)}"
                )


# Keys a sweep sets on every job itself, and the sweep key that says them instead. One given in
# overrides too would be beaten (or would beat the sweep) without a word, so it is refused.
SWEEP_KEYS = {
    "data": "datasets",
    "seed": "seeds",
    "scarcity.fraction": "fractions",
    "scarcity.binary_tau": "binary_taus",
    "scarcity.val": "val",
    "logger": "logger",
    "run_dir": "run_dir",
    "pretrained": "models (a sweep plans the encoders)",
    "runs": "models (ensemble:<model>,<model>)",
    "teacher": "models (<student>~<teacher>)",
    "gbdt.teacher": "models (<student>~<teacher>)",
}


def check_teachers(models: list[str]) -> None:
    """Stop unless every taught model's teacher is an untaught model of the sweep (its run is
    the cell of the same data set, fold, label setting and seed)."""
    for model in models:
        name = ModelName.parse(model)
        if name.ensembles:
            if name.kind == SEED_ENSEMBLE and name.members[0].teacher is not None:
                raise UserError(
                    f"sweep model '{model}': a seed ensemble's members train with other seeds, "
                    "which have no teacher run; ensemble taught models with ensemble:<model>,..."
                )
            continue
        teacher = name.teacher
        if teacher is not None and teacher.kind == SEED_ENSEMBLE:
            raise UserError(
                f"sweep model '{model}': a seed ensemble fixes its labels with scarcity.seed, "
                "so its runs see other label settings than the student; teach with a model or "
                "an ensemble:<model>,... of the sweep"
            )
        if teacher is not None and str(teacher) not in models:
            raise UserError(
                f"sweep model '{model}': its teacher '{teacher}' is not a model of this sweep; "
                f"add it to models: {', '.join(models)}"
            )


def check_overrides(overrides) -> None:
    """Stop when an override sets a key the sweep sets itself, naming the sweep key to use."""
    lists = {name: getattr(overrides, name) for name in ("common", *STAGE_LISTS)}
    lists.update({f"per_model.{m}": items for m, items in overrides.per_model.items()})
    lists.update({f"per_method.{m}": items for m, items in overrides.per_method.items()})
    for where, items in lists.items():
        for item in items:
            key = item.split("=", 1)[0].strip()
            if key in SWEEP_KEYS:
                raise UserError(
                    f"overrides.{where}: '{item}' sets '{key}', which the sweep sets on every "
                    f"job itself; use the sweep key {SWEEP_KEYS[key]} instead"
                )


STAGE_LISTS = STAGES  # a sweep has an overrides list per stage: overrides.<stage>
COMBINE_MEMBER = "full"  # the finetuning strategy of a combination's members
# A variant's name goes into a folder name and a model name: no separator of either.
VARIANT_NAME = re.compile(r"[A-Za-z0-9._-]+")
# Keys a variant may not set: they name the run, not a setting of the method.
VARIANT_FIXED = ("method", "variant")


def combine_members(model: str) -> list[str] | None:
    """The sweep models a combination combines (``<method>+full`` each); None for others."""
    name = ModelName.parse(model)
    if name.kind != COMBINED:
        return None
    return [str(ModelName.finetuned(m, COMBINE_MEMBER)) for m in name.methods]


def check_combines(models: list[str]) -> None:
    """Stop unless every combination's members are models of the sweep."""
    for model in models:
        for member in combine_members(model) or []:
            if member not in models:
                raise UserError(
                    f"sweep model '{model}': member '{member}' is not a model of this sweep; "
                    f"add it to models: {', '.join(models)}"
                )


def pretraining_methods(models: list[str]) -> list[str]:
    """Every ``<method>[@<variant>]`` the sweep pretrains, in order of first mention."""
    found: list[str] = []
    for model in models:
        name = ModelName.parse(model)
        for member in name.members or [name]:
            if member.kind == COMBINED:
                methods = list(member.methods)
            else:
                method, stage, _ = _sweep_job(str(member))
                methods = [method] if method is not None and stage != "ensemble" else []
            found += [m for m in methods if m not in found]
    return found


def check_variants(cfg) -> None:
    """Stop when a model names an undeclared variant, or a variant or ``per_method`` list sets
    a key the method's pretraining config does not have (checked as ``./run.sh pretrain``
    would load it)."""
    for name, items in cfg.variants.items():
        if not VARIANT_NAME.fullmatch(name):
            raise UserError(
                f"variants.{name}: a variant's name may hold letters, digits, '.', '_' and '-' "
                "only (it goes into model and folder names)"
            )
        for item in items:
            key = item.split("=", 1)[0].strip()
            if key in SWEEP_KEYS or key in VARIANT_FIXED:
                raise UserError(
                    f"variants.{name}: '{item}' sets '{key}', which names the run; a variant "
                    "sets pretraining settings (augment.*, item_budget, encoder.*, epochs, ...)"
                )
    pretraining = available_methods()
    for method in cfg.overrides.per_method:
        if method not in pretraining:
            raise UserError(
                f"overrides.per_method.{method}: unknown pretraining method; valid: "
                f"{', '.join(pretraining)}"
            )
    for method in pretraining_methods(list(cfg.models)):
        base, variant = split_variant(method)
        if variant is not None and variant not in cfg.variants:
            declared = ", ".join(cfg.variants) or "none"
            raise UserError(
                f"sweep model naming '{method}': no variant '{variant}' under variants: "
                f"(declared: {declared})"
            )
        overrides = [*cfg.overrides.pretrain, *cfg.overrides.per_method.get(base, [])]
        where = f"overrides.pretrain / overrides.per_method.{base}"
        if variant is not None:
            overrides += cfg.variants[variant]
            where += f" / variants.{variant}"
        _check_pretrain_overrides(base, overrides, where)


def available_methods() -> list[str]:
    from scarce_ltr.core.config import available

    return available("pretrain")


def _check_pretrain_overrides(method: str, overrides: list[str], where: str) -> None:
    from scarce_ltr.pretrain.config import PretrainConfig

    try:
        load_config(
            PretrainConfig, overrides, stage_file=CONFIG_ROOT / "pretrain" / f"{method}.yaml"
        )
    except UserError as exc:
        raise UserError(f"{where} (pretraining {method}): {exc}") from None


def _sweep_job(model: str) -> tuple[str | None, str, str]:
    """``(pretraining method or None, stage, name)`` of a sweep model's own job (a taught
    model's: its student's); the stage is the one its family trains in (`family_of`)."""
    name = ModelName.parse(model).student
    if name.ensembles:
        return None, family_of("ensemble").stage, ""
    if name.kind == FINETUNED:
        return name.encoder, family_of(name.name).stage, name.name
    if name.kind == HYBRID:
        if ENCODER_MARK in name.encoder:
            raise UserError(
                f"sweep model '{name}': a sweep runs {name.name} on pretraining runs only "
                f"({name.name}+<pretraining method>)"
            )
        return name.encoder, family_of(name.name).stage, name.name
    if str(name) in HYBRID_BASELINES:
        raise UserError(
            f"sweep model '{name}' needs a pretrained encoder: {name}+<pretraining method>, "
            f"such as {name}+simclr-rank"
        )
    return None, family_of(str(name)).stage, str(name)


def label_settings(cfg) -> list[tuple[ScarcityConfig, list[str]]]:
    """Each label setting of the sweep with the overrides that select it."""
    settings = []
    for fraction in cfg.fractions if not cfg.binary_taus else [1.0]:
        overrides = [f"scarcity.fraction={fraction}", f"scarcity.val={cfg.val}"]
        taus = cfg.binary_taus or [None]
        for tau in taus:
            extra = [] if tau is None else [f"scarcity.binary_tau={tau}"]
            scarcity = ScarcityConfig(fraction=fraction, val=cfg.val, binary_tau=tau)
            settings.append((scarcity, overrides + extra))
    return settings


# A path component that is exactly Fold<n> (Fold1/train; not MyFold1/train).
FOLD_COMPONENT = re.compile(r"(?<![^/])Fold(\d+)(?![^/])")


def fold_overrides(cfg, dataset: str) -> dict[int | None, list[str]]:
    """``{fold: the overrides that select its split files}``; ``{None: []}`` without folds.

    The split stems are the preset's (``configs/data/<dataset>.yaml``, after the sweep's common
    ``data.*`` overrides), each with its ``Fold<n>`` folder replaced by ``Fold<k>``.
    """
    folds = list(cfg.folds)
    if not folds:
        return {None: []}
    data_overrides = [o for o in cfg.overrides.common if o.startswith("data.")]
    data_cfg, _ = load_config(CommonConfig, [f"data={dataset}", *data_overrides])
    splits = data_cfg.data.splits
    missing = [split for split, stem in splits.items() if not FOLD_COMPONENT.search(stem)]
    if missing:
        listing = ", ".join(f"{split}: {stem}" for split, stem in splits.items())
        raise UserError(
            f"folds={folds}: data set '{dataset}' has splits {{{listing}}}, and "
            f"{', '.join(missing)} names no Fold<n> folder; folds need a data set whose split "
            "files lie in Fold<k>/ folders (data.splits such as Fold1/train, as the LETOR "
            "presets ohsumed, mq2007, mslr-web30k), or folds=[] for the data set's own splits"
        )
    return {
        fold: [
            f"data.splits.{split}={FOLD_COMPONENT.sub(f'Fold{fold}', stem)}"
            for split, stem in splits.items()
        ]
        for fold in folds
    }


def fold_place(dataset: str, fold: int | None) -> str:
    """Where a fold's runs and job keys go under the sweep: ``<dataset>[/fold=<k>]``."""
    return dataset if fold is None else f"{dataset}/fold={fold}"


def plan_cells(cfg, folder: Path) -> tuple[list[Job], list[SweepCell]]:
    """Every job (pretraining first, each once; ensembles last) and every cell of the sweep."""
    planner = _Planner(cfg, folder)
    cells: list[SweepCell] = []
    settings = label_settings(cfg)
    for dataset in cfg.datasets:
        for fold, split_overrides in fold_overrides(cfg, dataset).items():
            planner.fold, planner.fold_splits = fold, split_overrides
            for seed in cfg.seeds:
                for scarcity, setting_overrides in settings:
                    for model in cfg.models:
                        job = planner.cell_job(dataset, model, seed, scarcity, setting_overrides)
                        cells.append(
                            SweepCell(
                                id=job.key,
                                dataset=dataset,
                                model=model,
                                group=ModelName.parse(model).group(),
                                stage=job.stage,
                                setting=scarcity.tag,
                                fraction=scarcity.fraction,
                                binary_tau=scarcity.binary_tau,
                                seed=seed,
                                run_dir=str(job.run_dir),
                                job_key=job.key,
                                fold=fold,
                            )
                        )
    stage_order = {"pretrain": 0, "combine": 2, "ensemble": 3}  # finetune and baseline: 1
    ordered = sorted(planner.jobs.values(), key=lambda j: stage_order.get(j.stage, 1))
    return after_dependencies(ordered), cells


# The waves a sweep runs its jobs in, one stage after the other; a job that depends on a job of
# its own wave or a later one (a taught model on its teacher) moves to the wave after it.
STAGE_WAVES = (("pretrain",), ("finetune", "baseline"), ("combine",), ("ensemble",))


def job_waves(jobs: list[Job]) -> list[list[Job]]:
    """``jobs`` (in dependency order, as `plan_cells` gives them) in the waves they run in: a
    wave starts when the one before it has ended; within one, jobs keep their order."""
    stage_wave = {stage: i for i, stages in enumerate(STAGE_WAVES) for stage in stages}
    wave: dict[str, int] = {}
    for job in jobs:
        after = [wave[d] + 1 for d in job.depends_on if d in wave]
        wave[job.key] = max([stage_wave.get(job.stage, 1), *after])
    waves: list[list[Job]] = [[] for _ in range(max(wave.values(), default=-1) + 1)]
    for job in jobs:
        waves[wave[job.key]].append(job)
    return waves


def after_dependencies(jobs: list[Job]) -> list[Job]:
    """``jobs`` in their order, except that a job comes after the jobs it depends on (a taught
    model after its teacher, which may be an ensemble); a plan already in such an order stays
    as it is."""
    index = {job.key: i for i, job in enumerate(jobs)}
    waiting = {job.key: {d for d in job.depends_on if d in index} for job in jobs}
    children: dict[str, list[str]] = {}
    for key, needs in waiting.items():
        for need in needs:
            children.setdefault(need, []).append(key)
    ready = [index[key] for key, needs in waiting.items() if not needs]
    heapq.heapify(ready)
    out: list[Job] = []
    while ready:
        job = jobs[heapq.heappop(ready)]
        out.append(job)
        for child in children.get(job.key, []):
            waiting[child].discard(job.key)
            if not waiting[child]:
                heapq.heappush(ready, index[child])
    if len(out) != len(jobs):
        stuck = sorted(k for k, needs in waiting.items() if needs)
        raise UserError(f"sweep jobs wait on each other in a cycle: {', '.join(stuck[:5])}")
    return out


class _Planner:
    """Builds the jobs of a sweep's cells; a job asked for twice (a shared member) is one job."""

    def __init__(self, cfg, folder: Path) -> None:
        self.cfg, self.folder = cfg, folder
        self.common = [*cfg.overrides.common, f"logger={cfg.logger}"]
        self.jobs: dict[str, Job] = {}
        # The fold being planned (plan_cells sets both) and its data.splits.* overrides.
        self.fold: int | None = None
        self.fold_splits: list[str] = []

    def cell_job(
        self, dataset: str, model: str, seed: int, scarcity: ScarcityConfig, setting: list[str]
    ) -> Job:
        """The job whose run is the cell (dataset, model, label setting, seed)."""
        tag, name = scarcity.tag, ModelName.parse(model)
        if name.kind == SEED_ENSEMBLE:
            member = str(name.members[0])
            # The members differ in their seed only: the labeled QGs stay the cell's.
            fixed = [*setting, f"scarcity.seed={seed}"]
            members = [
                self._training_job(
                    dataset,
                    member,
                    seed + SEED_STRIDE * j,
                    replace(scarcity, seed=seed).tag,
                    fixed,
                    pretrain_seed=seed,
                )
                for j in range(self.cfg.seed_ensemble_size)
            ]
            return self._ensemble_job(
                dataset, model, seed, tag, fixed, members, ["weights=uniform"]
            )
        if name.mixes:
            members = [self._model_job(dataset, str(m), seed, tag, setting) for m in name.members]
            return self._ensemble_job(dataset, model, seed, tag, setting, members, [])
        if name.teacher is not None:
            taught_by = self.cell_job(dataset, str(name.teacher), seed, scarcity, setting)
            return self._training_job(dataset, model, seed, tag, setting, teacher=taught_by)
        return self._model_job(dataset, model, seed, tag, setting)

    def _model_job(self, dataset: str, model: str, seed: int, tag: str, setting: list[str]) -> Job:
        combined = combine_members(model)
        if combined is None:
            return self._training_job(dataset, model, seed, tag, setting)
        members = [self._training_job(dataset, m, seed, tag, setting) for m in combined]
        return self._combine_job(dataset, model, seed, tag, setting, members)

    def _combine_job(
        self,
        dataset: str,
        model: str,
        seed: int,
        tag: str,
        setting: list[str],
        members: list[Job],
    ) -> Job:
        """``./run.sh finetune combine runs=[...]``. Of the sweep's finetuning overrides it takes
        none: combine.yaml sets its own layer's epochs and lr, and the dropout comes from the
        data preset (``data.combine_dropout``) or ``per_model``."""
        shared = self._shared(dataset, seed, setting)
        runs = _runs_override(members)
        extra = [runs, *self.cfg.overrides.per_model.get(model, [])]
        depends = [m.key for m in members]
        overrides = [*shared, *extra]
        return self._add(dataset, model, "combine", "combine", seed, tag, overrides, depends)

    def _training_job(
        self,
        dataset: str,
        model: str,
        seed: int,
        tag: str,
        setting: list[str],
        *,
        pretrain_seed: int | None = None,
        teacher: Job | None = None,
    ) -> Job:
        method, stage, name = _sweep_job(model)
        extra = list(getattr(self.cfg.overrides, stage))
        depends: list[str] = []
        if method is not None:
            seed_of_encoder = seed if pretrain_seed is None else pretrain_seed
            pretrain = _pretrain_job(
                self.cfg,
                self.folder,
                dataset,
                method,
                seed_of_encoder,
                self.common,
                fold=self.fold,
                fold_splits=self.fold_splits,
            )
            self.jobs.setdefault(pretrain.key, pretrain)
            depends = [pretrain.key]
            extra = [f"pretrained={pretrain.run_dir}", *extra]
        student = str(ModelName.parse(model).student)
        if teacher is not None:  # the student's per_model list, then the taught model's
            key = "gbdt.teacher" if student in TAUGHT_TREES else "teacher"
            extra += [f"{key}={json.dumps(str(teacher.run_dir))}"]
            extra += self.cfg.overrides.per_model.get(student, [])
            depends = [*depends, teacher.key]
        extra += self.cfg.overrides.per_model.get(model, [])
        shared = self._shared(dataset, seed, setting)
        return self._add(dataset, model, stage, name, seed, tag, [*shared, *extra], depends)

    def _ensemble_job(
        self,
        dataset: str,
        model: str,
        seed: int,
        tag: str,
        setting: list[str],
        members: list[Job],
        options: list[str],
    ) -> Job:
        shared = self._shared(dataset, seed, setting)
        shared = [o for o in shared if _key_of(o) in COMMON_KEYS]
        runs = _runs_override(members)
        extra = [runs, *options, *self.cfg.overrides.ensemble]
        extra += self.cfg.overrides.per_model.get(model, [])
        # last, so that they win: the name says them
        extra += MIX_OPTIONS.get(ModelName.parse(model).kind, ())
        depends = [m.key for m in members]
        return self._add(dataset, model, "ensemble", "", seed, tag, [*shared, *extra], depends)

    def _shared(self, dataset: str, seed: int, setting: list[str]) -> list[str]:
        """The overrides every job of a cell starts with."""
        return [f"data={dataset}", *self.fold_splits, *self.common, f"seed={seed}", *setting]

    def _add(
        self,
        dataset: str,
        model: str,
        stage: str,
        name: str,
        seed: int,
        tag: str,
        overrides: list[str],
        depends: list[str],
    ) -> Job:
        folder_stage = cli_stage(stage)
        place = fold_place(dataset, self.fold)
        run_dir = run_folder(
            self.folder, dataset=place, stage=folder_stage, name=model, setting=tag, seed=seed
        )
        key = f"{place}/{model}/{tag}/seed={seed}"
        tags = [model, tag, f"seed={seed}", dataset, *_fold_tags(self.fold)]
        job = Job(key, stage, name, [*overrides, f"run_dir={run_dir}"], run_dir, depends, tags)
        self.jobs[key] = job
        return job


def cli_stage(stage: str) -> str:
    """The ``./run.sh`` stage of a job's stage: a combination is a finetuning run that a sweep
    runs after the other finetuning runs."""
    return "finetune" if stage == "combine" else stage


def _key_of(override: str) -> str:
    """The top-level key of ``key.sub=value``."""
    return override.split("=", 1)[0].split(".", 1)[0]


def _fold_tags(fold: int | None) -> list[str]:
    return [] if fold is None else [f"fold={fold}"]


def _pretrain_job(
    cfg,
    root: Path,
    dataset: str,
    method: str,
    seed: int,
    common: list[str],
    *,
    fold: int | None = None,
    fold_splits: list[str] | tuple[str, ...] = (),
) -> Job:
    """Pretraining sees no label; its knn probe uses the sweep's scarcest label setting. A fold
    pretrains on its own train QGs (and picks its checkpoint on its own vali QGs)."""
    scarcest = min(cfg.fractions) if cfg.fractions and not cfg.binary_taus else 1.0
    probe = [f"scarcity.fraction={scarcest}", f"scarcity.val={cfg.val}"]
    if cfg.binary_taus:
        probe.append(f"scarcity.binary_tau={max(cfg.binary_taus)}")
    # One pretraining run serves every label setting of the sweep: no setting in its folder.
    place = fold_place(dataset, fold)
    run_dir = run_folder(
        root, dataset=place, stage="pretrain", name=method, setting=None, seed=seed
    )
    base, variant = split_variant(method)
    # The most specific list last, so that it wins: a variant over its method's over the stage's.
    specific = [*cfg.overrides.per_method.get(base, [])]
    if variant is not None:
        specific += [*cfg.variants[variant], f"variant={variant}"]
    overrides = [
        f"data={dataset}",
        *fold_splits,
        *common,
        f"seed={seed}",
        *probe,
        *cfg.overrides.pretrain,
        *specific,
        f"run_dir={run_dir}",
    ]
    return Job(
        f"{place}/pretrain/{method}/seed={seed}",
        "pretrain",
        base,
        overrides,
        run_dir,
        tags=[method, "pretrain", f"seed={seed}", dataset, *_fold_tags(fold)],
    )


def _runs_override(members: list[Job]) -> str:
    """``runs=[...]`` of member jobs' folders, each quoted: a label setting's folder name may
    hold a comma (tau=4.5,frac=0.1; ,labels=0)."""
    return f"runs=[{','.join(json.dumps(str(m.run_dir)) for m in members)}]"
