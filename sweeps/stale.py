"""Finished jobs that are not what a sweep plans now: their settings or their data changed.

A sweep skips a job whose run folder is finished (``DONE``) without starting it, so the checks
a run makes when it starts (`scarce_ltr.core.runs.Run.execute`: its settings, the fingerprints of
its data and source runs) are made here instead, for each finished job when its turn comes (after
the jobs it reads, which may have run again in this sweep): the job's config
is composed as its command would compose it (`compose_job`: what
`scarce_ltr.cli_compose.compose_named` does, which the sweeps may not import from the layer above
them) and compared with the run's ``config.yaml`` (`scarce_ltr.core.run_config.changed_settings`,
the free keys left out), and its data files and source runs with the run's ``inputs.json``
(`scarce_ltr.core.run_inputs`).
A job that differs is refused, its cell failed with one line naming the keys (or the file, or
the source run), and the jobs after it are skipped: a sweep rerun with a changed per-model
override or common key never counts its old runs as the cells of the new settings, in its
manifest, ``report`` or ``select``; nor, once a refused encoder's folder is deleted and the encoder
trained again, the runs finished on the old one. `stale_jobs` lists them for ``--dry-run``.

A pretraining job's label setting (``scarcity.*``) is no change: it only sets the probe that
monitors pretraining, from the scarcest label setting of the sweep that runs it, and one
pretraining run serves every label setting of every run of the sweep (`sweeps.model_jobs`).
A run of a version before fingerprints (no ``inputs.json``) is taken as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from scarce_ltr.core.config import CONFIG_ROOT, load_config, merge_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_config import CONFIG, changed_settings
from scarce_ltr.core.run_inputs import input_change, read_inputs, source_inputs
from scarce_ltr.core.runs import is_done
from scarce_ltr.sweeps.jobs import Job, cli_stage

# The keys a pretraining job of a sweep may hold otherwise than its finished run (see above).
PRETRAIN_PROBE = "scarcity"


def stale_jobs(jobs: list[Job]) -> dict[str, str]:
    """``{job key: why}`` for each finished job that is not what the sweep plans now
    (`finished_differs`)."""
    stale = {}
    for job in jobs:
        if is_done(job.run_dir) and (why := finished_differs(job)) is not None:
            stale[job.key] = why
    return stale


def finished_differs(job: Job) -> str | None:
    """Why the finished run in ``job.run_dir`` is not the run ``job`` plans (one line: the keys
    that differ, the data file that changed, or the error composing the job now); None when it
    is the same run."""
    folder = job.run_dir
    advice = (
        "delete that folder to run the cell again with the sweep's settings, or give the sweep "
        "run_dir=<another folder>"
    )
    try:
        composed = compose_job(job)
    except (UserError, OSError, ValueError) as exc:
        return f"{folder}: the sweep's job for it does not compose now ({exc})"
    try:
        saved = OmegaConf.load(folder / CONFIG)
    except (OSError, OmegaConfBaseException) as exc:
        return f"{folder / CONFIG}: not readable ({exc}); {advice}"
    if not isinstance(saved, DictConfig):
        return f"{folder / CONFIG}: not a mapping; {advice}"
    changed = changed_settings(saved, composed.resolved, defaults=composed.defaults)
    if job.stage == "pretrain":
        changed = [k for k in changed if k.split(".")[0] != PRETRAIN_PROBE]
    if changed:
        return (
            f"{folder} holds a run with other settings than the sweep plans now "
            f"({', '.join(changed[:8])} differ); {advice}"
        )
    try:
        recorded = read_inputs(folder)
    except UserError as exc:
        return str(exc)
    inputs = getattr(composed.cfg, "inputs", None)
    if recorded is None or inputs is None:
        return None
    error = input_change(folder, recorded, inputs(), source_inputs(composed.resolved))
    return None if error is None else str(error)


@dataclass(frozen=True)
class ComposedJob:
    """A job's config as its command composes it: the typed object, the resolved YAML its run
    saves and the values the user left unset (`scarce_ltr.core.runs.Run.start`'s ``defaults``)."""

    cfg: Any
    resolved: DictConfig
    defaults: DictConfig


def compose_job(job: Job) -> ComposedJob:
    """The config ``./run.sh <stage> <name> <overrides>`` of ``job`` composes: the stage's schema
    <- data set file <- ``configs/<stage>/<name>.yaml`` <- ``<name key>=<name>`` and the job's
    overrides, as `scarce_ltr.cli_compose.compose_named` does (tests/test_sweep_changes.py holds
    them equal for every stage a sweep runs)."""
    stage = cli_stage(job.stage)
    schema, name_key = _stage_schema(stage)
    overrides = list(job.overrides)
    stage_file = None
    if name_key is not None:
        overrides = [f"{name_key}={job.name}", *overrides]
        stage_file = CONFIG_ROOT / stage / f"{job.name}.yaml"
    cfg, resolved = load_config(schema, overrides, stage_file=stage_file)
    defaults = merge_config(schema, overrides, stage_file=stage_file, defaults_only=True)
    return ComposedJob(cfg, resolved, defaults)


def _stage_schema(stage: str) -> tuple[type, str | None]:
    """A job stage's config class and the key its command-line name sets (None: it takes no
    name), imported when a finished job is checked."""
    if stage == "pretrain":
        from scarce_ltr.pretrain.config import PretrainConfig

        return PretrainConfig, "method"
    if stage == "finetune":
        from scarce_ltr.finetune.config import FinetuneConfig

        return FinetuneConfig, "strategy"
    if stage == "baseline":
        from scarce_ltr.baselines.config import BaselineConfig

        return BaselineConfig, "method"
    from scarce_ltr.ensembles.config import EnsembleConfig

    return EnsembleConfig, None


def describe(stale: dict[str, str]) -> str | None:
    """The line ``--dry-run`` prints when a run would refuse finished jobs."""
    if not stale:
        return None
    first = next(iter(stale.values()))
    return (
        f"warning: {len(stale)} finished job(s) differ from what the sweep plans now and would "
        f"be refused (their cells fail, the jobs after them are skipped); the first: {first}"
    )
