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
uses the encoder of seed s), averaged with uniform weights. The member of seed s is the model's
plain run of seed s, the same job as its own cell where the sweep has that model; where
``<model>`` searches its recipe (``search.n_trials``), that member searches and the others train
the recipe it chose (``search.recipe_from``), one tuned model repeated over seeds as DASALC-ens
is.
``stack:<model>,<model>,...`` is planned as ``ensemble:`` is, its job with ``normalize=rank
weights=crossfit`` (after the sweep's ensemble overrides, so that they hold): rank-normalised
scores with cross-fitted weights;
``topk:<model>,...`` likewise with ``normalize=rank weights=topk``: the plain average of the
vali-best k of its models, k cross-fitted over the vali QGs (`search.topk`).

A taught model ``<student>~<teacher>`` (``simclr-rank+full~gbdt-optuna``,
``gbdt-pseudo~ensemble:simclr-rank+full,gbdt-optuna``) is the student's job with
``teacher=<the teacher's run>`` (``gbdt.teacher=`` for a tree student), run after the teacher's
job of the same data set, fold, label setting and seed; the teacher must be an untaught model of
the sweep. Its run folder is named after the whole model name; ``per_model`` lists of the
student apply, then the taught model's own. ``<student>~self`` (``scratch+full~self``) is the
student's job with ``teacher=self`` (consistency on the unlabeled QGs), which waits for no teacher.
With ``taught_recipe: student`` a taught model whose student searches its recipe trains the
recipe the student's own cell chose on vali (``search.recipe_from``, after that cell) instead of
searching again.

A variant ``<method>@<name>`` (``simclr-rank@zero0.1+full``) pretrains the method with the
sweep's ``variants.<name>`` overrides on top of ``overrides.pretrain`` and
``overrides.per_method.<method>``, in a pretraining folder of its own
(``pretrain/<method>@<name>``); the report's tuned table lets the validation-best variant
stand for the method (paper A.2.3). ``scratch@<name>+<strategy>`` (``scratch@tabm+full``)
finetunes a fresh encoder with ``variants.<name>`` as finetuning keys (``encoder.*``) and
``variant=<name>`` after ``overrides.finetune``, before its ``per_model`` list; nothing pretrains.
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

Beside the planner: a job and the waves jobs run in (`scarce_ltr.sweeps.jobs`); the jobs a
model's name asks for, its pretraining among them (`scarce_ltr.sweeps.model_jobs`); the label
settings and folds (`scarce_ltr.sweeps.settings`); and the checks a sweep's config passes before
it is planned (`scarce_ltr.sweeps.checks`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from scarce_ltr.baselines.config import TAUGHT_TREES
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_identity import run_folder
from scarce_ltr.data.scarcity import ScarcityConfig
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.data.teachers import SELF_TEACHER
from scarce_ltr.ensembles.config import MIX_OPTIONS
from scarce_ltr.models.names import SEED_ENSEMBLE, ModelName
from scarce_ltr.sweeps.jobs import Job, after_dependencies, cli_stage
from scarce_ltr.sweeps.model_jobs import (
    combine_members,
    fresh_variant_overrides,
    pretrain_job,
    sweep_job,
)
from scarce_ltr.sweeps.settings import fold_overrides, fold_place, fold_tags, label_settings

SEED_STRIDE = 1000  # member j of the seed ensemble of sweep seed s trains with seed s + 1000 j
# An ensemble trains nothing: of the sweep's common overrides it takes the keys every stage has
# (data, label setting, seed, metrics), not a trainer's (gbdt.*, encoder.*, ...).
COMMON_KEYS = frozenset(f.name for f in fields(CommonConfig))


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


class _Planner:
    """Builds the jobs of a sweep's cells; a job asked for twice (a shared member) is one job."""

    def __init__(self, cfg, folder: Path) -> None:
        self.cfg, self.folder = cfg, folder
        self.common = [*cfg.overrides.common, f"logger={cfg.logger}"]
        if cfg.keep_checkpoints:
            self.common.append("keep_checkpoints=true")
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
            # The members differ in their seed only: the labeled QGs stay the cell's. The first
            # is the plain run of the cell's seed (the model's own cell where the sweep has it).
            fixed = [*setting, f"scarcity.seed={seed}"]
            first = self._training_job(dataset, member, seed, tag, setting)
            members = [first]
            for j in range(1, self.cfg.seed_ensemble_size):
                members.append(
                    self._training_job(
                        dataset,
                        member,
                        seed + SEED_STRIDE * j,
                        replace(scarcity, seed=seed).tag,
                        fixed,
                        pretrain_seed=seed,
                        recipe_of=first,
                    )
                )
            return self._ensemble_job(
                dataset, model, seed, tag, fixed, members, ["weights=uniform"]
            )
        if name.mixes:  # each member is its own cell's job: a taught one with its teacher
            members = [
                self.cell_job(dataset, str(m), seed, scarcity, setting) for m in name.members
            ]
            return self._ensemble_job(dataset, model, seed, tag, setting, members, [])
        if name.teacher is not None or name.self_taught:
            # a run teaches it: after that run (none for ~self); taught_recipe=student: after
            # the untaught student's cell too, whose search picks the recipe it trains
            taught_by = (
                None
                if name.self_taught
                else self.cell_job(dataset, str(name.teacher), seed, scarcity, setting)
            )
            recipe_of = None
            if self.cfg.taught_recipe == "student":
                recipe_of = self.cell_job(dataset, str(name.student), seed, scarcity, setting)
            return self._training_job(
                dataset, model, seed, tag, setting, teacher=taught_by, recipe_of=recipe_of
            )
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
        recipe_of: Job | None = None,
    ) -> Job:
        """``recipe_of``: a seed ensemble's member of the cell's seed, or a taught model's
        untaught student (``taught_recipe: student``); when it searches its recipe, this job
        trains the recipe it chose (``search.recipe_from``) after it. ``<student>~self`` trains
        the student with ``teacher=self``."""
        method, stage, name = sweep_job(model)
        extra = list(getattr(self.cfg.overrides, stage))
        depends: list[str] = []
        if method is not None:
            seed_of_encoder = seed if pretrain_seed is None else pretrain_seed
            pretrain = pretrain_job(
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
        elif stage == "finetune":  # scratch[@<variant>]+<strategy>: its variant's keys win
            extra = ["pretrained=none", *extra, *fresh_variant_overrides(self.cfg, model)]
        parsed = ModelName.parse(model)
        student = str(parsed.student)
        if teacher is not None:
            key = "gbdt.teacher" if student in TAUGHT_TREES else "teacher"
            extra += [f"{key}={json.dumps(str(teacher.run_dir))}"]
            depends = [*depends, teacher.key]
        elif parsed.self_taught:
            extra += [f"teacher={SELF_TEACHER}"]
        if teacher is not None or parsed.self_taught:  # taught: the student's per_model list,
            extra += self.cfg.overrides.per_model.get(student, [])  # then the taught model's
        extra += self.cfg.overrides.per_model.get(model, [])
        shared = self._shared(dataset, seed, setting)
        if recipe_of is not None and (searched := _search_section(recipe_of.overrides)):
            if _search_section([*shared, *extra]) != searched:  # recipe_from needs a searching job
                raise UserError(
                    f"sweep model '{model}': taught_recipe=student trains the recipe the search "
                    f"of '{student}' chose, but its own overrides do not search "
                    f"({searched}.n_trials); drop that override or use taught_recipe=own"
                )
            extra += [f"{searched}.recipe_from={json.dumps(str(recipe_of.run_dir))}"]
            depends = [*depends, recipe_of.key]
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
        tags = [model, tag, f"seed={seed}", dataset, *fold_tags(self.fold)]
        job = Job(key, stage, name, [*overrides, f"run_dir={run_dir}"], run_dir, depends, tags)
        planned = self.jobs.setdefault(key, job)
        if planned != job:  # one run folder, two commands: a planner bug, never a silent pick
            raise RuntimeError(
                f"sweep planner: the job {key} was planned twice with different commands:\n"
                f"  {' '.join(planned.overrides)}\n  {' '.join(job.overrides)}"
            )
        return job


def _search_section(overrides: list[str]) -> str | None:
    """``search`` or ``deep.search`` where a job's overrides turn its recipe search on: its last
    ``n_trials`` above 0, or ``strategy=portfolio`` (the portfolio's recipes are its trials, so a
    seed ensemble's other members train the recipe it chose rather than the whole portfolio
    again); None where it trains a fixed recipe."""
    trials: dict[str, bool] = {}
    portfolio: dict[str, bool] = {}
    last = None
    for override in overrides:
        key, _, value = override.partition("=")
        section, _, leaf = key.rpartition(".")
        if section in ("search", "deep.search") and leaf in ("n_trials", "strategy"):
            if leaf == "n_trials":
                trials[section] = value.isdigit() and int(value) > 0
            else:
                portfolio[section] = value == "portfolio"
            last = section
    if last is None:
        return None
    return last if trials.get(last) or portfolio.get(last) else None


def _key_of(override: str) -> str:
    """The top-level key of ``key.sub=value``."""
    return override.split("=", 1)[0].split(".", 1)[0]


def _runs_override(members: list[Job]) -> str:
    """``runs=[...]`` of member jobs' folders, each quoted: a label setting's folder name may
    hold a comma (tau=4.5,frac=0.1; ,labels=0)."""
    return f"runs=[{','.join(json.dumps(str(m.run_dir)) for m in members)}]"
