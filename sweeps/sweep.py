"""``./run.sh sweep <name> [key=value ...]``: methods x label settings x seeds, resumable.

``configs/sweep/<name>.yaml`` lists data sets, models, label settings (fractions or binary tau
values) and seeds. A model is a baseline (``gbdt``, ``resnet``, ...), ``<pretraining
method>+<finetuning strategy>`` (``simclr-rank+full``), a hybrid baseline on a pretrained encoder
(``gbdt-ssl+simclr-rank``) or an ensemble of other models of the sweep
(``ensemble:simclr-rank+full,gbdt``), which runs after its members, or a seed ensemble
(``seed-ensemble:simclr-rank+full``), a variant of a method's pretraining
(``simclr-rank@zero0.1+full`` with ``variants: {zero0.1: [augment.zero_p=0.1]}``) or a
combination of finetuned rankers (``simclr-rank+simsiam+combine``). Pretraining runs once per
(data set, method or variant, seed) and its encoder serves every label setting. ``folds: [1, 2,
3, 4, 5]`` repeats all of it on each fold of a data set laid out as ``Fold<k>/`` (the LETOR
presets), in ``<sweep>/<dataset>/fold=<k>/``: the report pairs its comparisons over (fold, seed).
Each job is a separate process running ``cli`` (forked from a server that has imported torch once:
`scarce_ltr.sweeps.jobserver`), its output kept in ``log.txt`` in its run directory, so a
crashing cell is recorded with its error and the sweep goes on. A job whose run directory holds
``DONE`` is skipped, unless its settings or data are not what the sweep plans now: then its cell
fails naming the keys or the file (`scarce_ltr.sweeps.stale`); an unfinished one resumes from its
checkpoint. ``runs/sweeps/<name>/manifest.json`` lists every cell, its status and run directory,
and keeps the cells an earlier run of the same folder listed beyond this plan (other models,
settings or seeds, e.g. ``models=[...]`` given on the command line) while their run folders
exist; one that is not a manifest is refused, never written over. ``./run.sh report <name>``
turns it into tables and plots.

Every run is logged to wandb with group = the sweep and tags for model, label setting and seed
(``WANDB_RUN_GROUP`` / ``WANDB_TAGS``), when ``logger=wandb``; without a W&B login the runs are
offline, in each run folder's ``wandb/``, and the sweep ends with a line saying where they are
and how to upload them (``wandb sync``) or turn them off (``logger=none``).

``executor=ray`` runs the same jobs as Ray tasks across a cluster (`scarce_ltr.sweeps.executors`,
`scarce_ltr.sweeps.ray_executor`); the plan, order, manifest and report stay this module's.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from scarce_ltr.core.config_fields import LOGGERS
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.extras import MissingExtra, import_feature
from scarce_ltr.core.files import TEMP_SUFFIX, make_folder
from scarce_ltr.core.locks import FolderLock
from scarce_ltr.core.run_identity import runs_root
from scarce_ltr.core.runs import is_done
from scarce_ltr.core.tracking import offline_note
from scarce_ltr.models.names import ModelName
from scarce_ltr.reports.report_text import cost_text
from scarce_ltr.reports.results import read_manifest, rows_from_manifest
from scarce_ltr.sweeps.cells import SweepCell, plan_cells
from scarce_ltr.sweeps.checks import (
    STAGE_LISTS,
    check_combines,
    check_ensembles,
    check_overrides,
    check_teachers,
    check_variants,
)
from scarce_ltr.sweeps.executors import EXECUTORS, check_executor_keys, make_executor
from scarce_ltr.sweeps.jobs import cli_stage
from scarce_ltr.sweeps.model_jobs import pretraining_methods
from scarce_ltr.sweeps.ray_executor import RayConfig
from scarce_ltr.sweeps.settings import fold_overrides
from scarce_ltr.sweeps.stale import describe, stale_jobs
from scarce_ltr.sweeps.sweep_runner import MANIFEST, SweepRunner

TAUGHT_RECIPES = ("own", "student")  # SweepConfig.taught_recipe


@dataclass(frozen=True)
class StageOverrides:
    """Extra ``key=value`` overrides for the jobs of each stage (``common`` goes to all).

    A key in two lists takes the most specific one's value: ``per_model`` over a stage's list
    over ``common``; for pretraining, a sweep variant's list over ``per_method`` over
    ``pretrain``. Keys the sweep sets itself (``logger``, ``seed``, ...) are refused here.
    """

    common: list[str] = field(default_factory=list)
    pretrain: list[str] = field(default_factory=list)
    finetune: list[str] = field(default_factory=list)
    baseline: list[str] = field(default_factory=list)
    ensemble: list[str] = field(default_factory=list)  # e.g. [normalize=rank]
    per_model: dict[str, list[str]] = field(default_factory=dict)  # e.g. {resnet: [epochs=60]}
    # Pretraining jobs of one method, e.g. {simclr: [item_budget=2000]} (paper A.2.3 (9)).
    per_method: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class SweepConfig:
    name: str = "sweep"  # the sweep's folder: runs/sweeps/<name>
    datasets: list[str] = field(default_factory=lambda: ["synthetic"])  # configs/data names
    models: list[str] = field(default_factory=lambda: ["gbdt"])  # see the module docstring
    fractions: list[float] = field(default_factory=lambda: [1.0])  # labeled shares of train QGs
    binary_taus: list[float] = field(default_factory=list)  # implicit-feedback settings
    seeds: list[int] = field(default_factory=lambda: [0])  # one cell per seed
    # Folds of a data set laid out as Fold<k>/ (the LETOR presets): every cell and pretraining
    # job runs once per fold, on that fold's split files. Empty: the data set's own splits.
    folds: list[int] = field(default_factory=list)
    val: str = "full"  # validation labels: full | same
    overrides: StageOverrides = field(default_factory=StageOverrides)
    # Named pretraining settings a model picks with <method>@<name>, e.g.
    # {zero0.1: [augment.zero_p=0.1, augment.noise_scale=0.0]}, or a fresh encoder's finetuning
    # settings with scratch@<name>+<strategy> ({tabm: [encoder.kind=tabm]}): see docs/sweeps.md.
    variants: dict[str, list[str]] = field(default_factory=dict)
    workers: int = 1  # jobs run at the same time
    executor: str = "local"  # local | ray (jobs as Ray tasks: the ray.* keys, docs/sweeps.md)
    ray: RayConfig = field(default_factory=RayConfig)  # executor=ray's options
    seed_ensemble_size: int = 3  # runs per seed-ensemble:<model> cell (DASALC-ens: 3-5)
    # A taught model's recipe (<student>~<teacher>, <student>~self): own (the default: its own
    # overrides, a search of its own where they search) | student (where the untaught
    # student's cell searches its recipe, the taught model trains the recipe that search chose
    # on vali, one training instead of a second study: a taught search reads every unlabeled
    # QG each epoch, 70 CPU minutes a cell on Yandex)
    taught_recipe: str = "own"
    dry_run: bool = False  # --dry-run: list the jobs, run nothing
    run_dir: str | None = None  # default runs/sweeps/<name>
    report: bool = True  # end with ./run.sh report <name>: the table and the dashboard
    logger: str = "wandb"  # every job's logger: wandb | none
    # every job keeps its checkpoint.pt once finished (by default only a resume's use, removed)
    keep_checkpoints: bool = False

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}")
        if self.seed_ensemble_size < 2:
            raise ValueError("seed_ensemble_size must be >= 2")
        if self.taught_recipe not in TAUGHT_RECIPES:
            raise ValueError(f"taught_recipe must be one of {', '.join(TAUGHT_RECIPES)}")
        if not self.datasets or not self.models or not self.seeds:
            raise ValueError("a sweep needs at least one data set, model and seed")
        if not self.fractions and not self.binary_taus:
            raise ValueError("a sweep needs fractions or binary_taus")
        if any(not 0 < f <= 1 for f in self.fractions):
            raise ValueError("fractions must lie in (0, 1]")
        if any(k < 1 for k in self.folds) or len(set(self.folds)) != len(self.folds):
            raise ValueError(
                f"folds must be distinct fold numbers >= 1 (Fold<k>/), got {self.folds}"
            )
        if self.logger not in LOGGERS:
            raise ValueError(f"logger must be one of {', '.join(LOGGERS)}")
        for model in [*self.models, *self.overrides.per_model]:
            ModelName.parse(model).check()  # names the unknown part of a model
        check_overrides(self.overrides)
        if self.folds:
            check_fold_overrides(self.overrides)
        check_ensembles(list(self.models))
        check_combines(list(self.models))
        check_teachers(list(self.models))
        # Last, so that a config with another error too is refused for that one, as before.
        check_executor_keys(self)


def sweep_dir(cfg: SweepConfig) -> Path:
    return Path(cfg.run_dir) if cfg.run_dir else runs_root() / "sweeps" / cfg.name


def check_datasets(cfg: SweepConfig) -> None:
    """Stop before any cell runs when a data set is unknown or its files are missing."""
    from scarce_ltr.core.config import load_config
    from scarce_ltr.data.datasets import check_files, split_file
    from scarce_ltr.data.stage_config import CommonConfig

    ssl_val = "ssl_val=none" not in [o.replace(" ", "") for o in cfg.overrides.pretrain]
    pretrains = ssl_val and bool(pretraining_methods(list(cfg.models)))
    for dataset in cfg.datasets:
        # Each fold's split files (a data set without Fold<n> stems stops here, named).
        for splits in fold_overrides(cfg, dataset).values():
            overrides = [f"data={dataset}", *splits, *_data_overrides(cfg)]
            data_cfg, _ = load_config(CommonConfig, overrides)
            try:
                check_files(data_cfg.data)
            except UserError as exc:
                if not cfg.dry_run:
                    raise
                # A plan needs no data: list it, and say what a real run would stop at.
                print(f"warning: {exc}; a run (without --dry-run) stops here", file=sys.stderr)
                continue
            vali = split_file(data_cfg.data, "vali")
            # Pretraining chooses its checkpoint on the vali QGs (SSL Val, unless ssl_val=none).
            if pretrains and vali is not None and vali.stat().st_size == 0:
                raise UserError(
                    f"data set {dataset}: the vali file {vali} is empty, and pretraining "
                    "chooses its checkpoint on the vali QGs (SSL Val); give vali QGs, or "
                    "overrides.pretrain=[ssl_val=none] to keep the last epoch"
                )


def check_fold_overrides(overrides: StageOverrides) -> None:
    """With folds the sweep sets ``data.splits.*`` on every job: refuse an override of them,
    which would put every fold on the same files without a word."""
    lists = {name: getattr(overrides, name) for name in ("common", *STAGE_LISTS)}
    lists.update({f"per_model.{m}": items for m, items in overrides.per_model.items()})
    lists.update({f"per_method.{m}": items for m, items in overrides.per_method.items()})
    for where, items in lists.items():
        for item in items:
            if item.split("=", 1)[0].strip().startswith("data.splits"):
                raise UserError(
                    f"overrides.{where}: '{item}' sets the split files, which the sweep sets on "
                    "every job of a fold itself (folds=); drop it, or set folds=[] to use it"
                )


def _data_overrides(cfg: SweepConfig) -> list[str]:
    return [o for o in cfg.overrides.common if o.startswith("data.")]


def main(cfg: SweepConfig, out_dir: Path | None = None) -> list[dict]:
    folder = sweep_dir(cfg)
    preflight = EXECUTORS[cfg.executor].preflight
    if preflight and not cfg.dry_run:
        preflight()
    check_variants(cfg)
    check_datasets(cfg)
    jobs, cells = plan_cells(cfg, folder)
    if cfg.dry_run:
        stale = stale_jobs(jobs)
        for job in jobs:
            state = "stale" if job.key in stale else "done" if is_done(job.run_dir) else "to run"
            print(
                f"[{state:>6}] "
                + " ".join(filter(None, [cli_stage(job.stage), job.name, *job.overrides]))
            )
        print(f"{len(cells)} cells, {len(jobs)} jobs; run folder {folder}")
        if note := describe(stale):
            print(note, file=sys.stderr)
        return [c.to_dict() for c in cells]
    make_folder(folder)
    with FolderLock(folder, what="sweep"):  # one process per sweep; its jobs lock their runs
        for temp in folder.glob(f".*{TEMP_SUFFIX}"):  # the manifest's; jobs clear their own
            temp.unlink(missing_ok=True)
        earlier = earlier_cells(folder / MANIFEST, cells)  # refuses a manifest not ours
        finished = sum(is_done(job.run_dir) for job in jobs)
        if (folder / MANIFEST).is_file():
            kept = f"; the manifest keeps {len(earlier)} cells of earlier runs" if earlier else ""
            print(
                f"sweep {cfg.name}: resuming; {finished} of {len(jobs)} jobs finished before{kept}",
                file=sys.stderr,
            )
        executor = make_executor(cfg, folder, jobs)
        runner = SweepRunner(cfg, folder, jobs, cells, executor, earlier)
        runner.run()
        print(runner.summary_line())
        cost = cost_text(rows_from_manifest(folder / MANIFEST, [5]))
        if cost:  # what a unit costs, from the done cells' reports
            print(cost)
        note = offline_note(folder) if cfg.logger == "wandb" else None
        if note:  # offline W&B runs would otherwise pile up unsaid
            print(note)
        if cfg.report and any(c.status == "done" for c in runner.cells):
            _report(folder, runner.target())
    return SweepResult(runner.cells, folder)


def _report(folder: Path, target: str) -> None:
    """``./run.sh report`` of the finished sweep; without the extra it needs, one line instead
    (the runs are there: the report can be made once it is installed)."""
    try:
        report = import_feature("scarce_ltr.reports.report", "the sweep's report")
        report.main(report.ReportConfig(sweep=str(folder)))
    except MissingExtra as exc:
        print(f"warning: {exc}; then ./run.sh report {target}", file=sys.stderr)


def earlier_cells(path: Path, cells: list[SweepCell]) -> list[dict]:
    """The cells of the manifest at ``path`` (an earlier run of this sweep folder) that ``cells``
    do not hold, and whose run folders still exist: a sweep rerun with other ``models`` (or
    settings, or seeds) adds its cells to the report instead of hiding the earlier ones; deleting
    a cell's run folder drops it. Nothing without a manifest; a manifest that is not one (not
    JSON, no cells) is refused as ``report`` refuses it, never written over."""
    if not os.path.lexists(path):
        return []
    try:
        previous = read_manifest(path)
    except UserError as exc:
        raise UserError(
            f"{exc}; the sweep does not write over it: move it away (the run folders stay) and "
            "run the sweep again"
        ) from None
    planned = {cell.id for cell in cells}
    return [
        cell
        for cell in previous
        if isinstance(cell, dict) and cell.get("id") not in planned
        and isinstance(cell.get("run_dir"), str) and Path(cell["run_dir"]).is_dir()
    ]  # fmt: skip


class SweepResult(list):
    """The cells as dicts; ``exit_code`` 1 when any cell did not finish (the command line exits
    with it, after the other cells ran), and a line saying how many."""

    def __init__(self, cells: list[SweepCell], folder: Path) -> None:
        super().__init__(c.to_dict() for c in cells)
        failed = [c for c in cells if c.status != "done"]
        self.exit_code = 1 if failed else 0
        if failed:
            print(
                f"error: {len(failed)} of {len(cells)} cells of the sweep did not finish (see "
                f"{folder / MANIFEST} and each cell's log.txt); run the same command again to "
                "retry them (finished cells are skipped)",
                file=sys.stderr,
            )
