"""``./run.sh sweep <name> [key=value ...]``: methods x label settings x seeds, resumable.

``configs/sweep/<name>.yaml`` lists data sets, models, label settings (fractions or binary tau
values) and seeds. A model is a baseline (``gbdt``, ``resnet``, ...), ``<pretraining
method>+<finetuning strategy>`` (``simclr-rank+full``), a hybrid baseline on a pretrained encoder
(``gbdt-ssl+simclr-rank``) or an ensemble of other models of the sweep
(``ensemble:simclr-rank+full,gbdt``), which runs after its members, or a seed ensemble
(``seed-ensemble:simclr-rank+full``). Pretraining runs once per (data set, method, seed) and its
encoder serves every label setting. Each job is a separate process running ``cli``, its output
kept in ``log.txt`` in its run directory, so a crashing cell is recorded with its error and the
sweep goes on. A job whose run directory holds ``DONE`` is skipped; an unfinished one resumes from
its checkpoint. ``runs/sweeps/<name>/manifest.json`` lists every cell, its status and run
directory; ``./run.sh report <name>`` turns it into tables and plots.

Every run is logged to wandb with group = the sweep and tags for model, label setting and seed
(``WANDB_RUN_GROUP`` / ``WANDB_TAGS``), when ``logger=wandb``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from scarce_ltr.core.config import LOGGERS
from scarce_ltr.core.files import write_json
from scarce_ltr.core.runs import is_done, model_group, runs_root
from scarce_ltr.sweeps.cells import Job, SweepCell, check_ensembles, plan_cells

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class StageOverrides:
    """Extra ``key=value`` overrides for the jobs of each stage (``common`` goes to all)."""

    common: list[str] = field(default_factory=list)
    pretrain: list[str] = field(default_factory=list)
    finetune: list[str] = field(default_factory=list)
    baseline: list[str] = field(default_factory=list)
    ensemble: list[str] = field(default_factory=list)  # e.g. [normalize=rank]
    per_model: dict[str, list[str]] = field(default_factory=dict)  # e.g. {resnet: [epochs=60]}


@dataclass(frozen=True)
class SweepConfig:
    name: str = "sweep"
    datasets: list[str] = field(default_factory=lambda: ["synthetic"])
    models: list[str] = field(default_factory=lambda: ["gbdt"])
    fractions: list[float] = field(default_factory=lambda: [1.0])
    binary_taus: list[float] = field(default_factory=list)  # implicit-feedback settings
    seeds: list[int] = field(default_factory=lambda: [0])
    val: str = "full"  # validation labels: full | same
    overrides: StageOverrides = field(default_factory=StageOverrides)
    workers: int = 1
    seed_ensemble_size: int = 3  # runs per seed-ensemble:<model> cell (DASALC-ens: 3-5)
    dry_run: bool = False
    run_dir: str | None = None  # default runs/sweeps/<name>
    report: bool = True  # end with ./run.sh report <name>: the table and the dashboard
    logger: str = "wandb"

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.seed_ensemble_size < 2:
            raise ValueError("seed_ensemble_size must be >= 2")
        if not self.datasets or not self.models or not self.seeds:
            raise ValueError("a sweep needs at least one data set, model and seed")
        if not self.fractions and not self.binary_taus:
            raise ValueError("a sweep needs fractions or binary_taus")
        if any(not 0 < f <= 1 for f in self.fractions):
            raise ValueError("fractions must lie in (0, 1]")
        if self.logger not in LOGGERS:
            raise ValueError(f"logger must be one of {', '.join(LOGGERS)}")
        for model in [*self.models, *self.overrides.per_model]:
            model_group(model)  # raises on an unknown model
        check_ensembles(list(self.models))


def sweep_dir(cfg: SweepConfig) -> Path:
    return Path(cfg.run_dir) if cfg.run_dir else runs_root() / "sweeps" / cfg.name


def check_datasets(cfg: SweepConfig) -> None:
    """Stop before any cell runs when a data set is unknown or its files are missing."""
    from scarce_ltr.core.config import load_config
    from scarce_ltr.data.datasets import check_files
    from scarce_ltr.data.stage_config import CommonConfig

    for dataset in cfg.datasets:
        data_cfg, _ = load_config(CommonConfig, [f"data={dataset}", *_data_overrides(cfg)])
        check_files(data_cfg.data)


def _data_overrides(cfg: SweepConfig) -> list[str]:
    return [o for o in cfg.overrides.common if o.startswith("data.")]


def main(cfg: SweepConfig, out_dir: Path | None = None) -> list[dict]:
    folder = sweep_dir(cfg)
    check_datasets(cfg)
    jobs, cells = plan_cells(cfg, folder)
    if cfg.dry_run:
        for job in jobs:
            state = "done" if is_done(job.run_dir) else "to run"
            print(f"[{state:>6}] {' '.join(filter(None, [job.stage, job.name, *job.overrides]))}")
        print(f"{len(cells)} cells, {len(jobs)} jobs; run folder {folder}")
        return [c.to_dict() for c in cells]
    folder.mkdir(parents=True, exist_ok=True)
    runner = _Runner(cfg, folder, jobs, cells)
    runner.run()
    print(runner.summary_line())
    if cfg.report and any(c.status == "done" for c in runner.cells):
        from scarce_ltr.sweeps.report import ReportConfig
        from scarce_ltr.sweeps.report import main as report

        report(ReportConfig(sweep=str(folder)))
    return [c.to_dict() for c in runner.cells]


class _Runner:
    """Runs jobs in dependency order (pretraining first), `workers` at a time."""

    def __init__(self, cfg: SweepConfig, folder: Path, jobs: list[Job], cells: list[SweepCell]):
        self.cfg, self.folder, self.jobs, self.cells = cfg, folder, jobs, cells
        self.results: dict[str, tuple[str, str | None, float]] = {}
        self.started = time.time()
        self.bar = None

    def run(self) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=len(self.jobs), desc=f"sweep {self.cfg.name}", unit="job")
        self._write_manifest()
        try:
            for phase in (["pretrain"], ["finetune", "baseline"], ["ensemble"]):
                todo = [j for j in self.jobs if j.stage in phase]
                with ThreadPoolExecutor(self.cfg.workers) as pool:
                    for _ in pool.map(self._run_job, todo):
                        pass
        finally:
            self.bar.close()
            self._write_manifest()

    def _run_job(self, job: Job) -> None:
        failed_dependency = next(
            (d for d in job.depends_on if self.results.get(d, ("done",))[0] != "done"), None
        )
        if failed_dependency is not None:
            self.results[job.key] = ("skipped", f"dependency failed: {failed_dependency}", 0.0)
        elif is_done(job.run_dir):
            self.results[job.key] = ("done", None, 0.0)
        else:
            self.results[job.key] = self._execute(job)
        assert self.bar is not None
        self.bar.update(1)
        self._write_manifest()

    def _execute(self, job: Job) -> tuple[str, str | None, float]:
        job.run_dir.mkdir(parents=True, exist_ok=True)
        name = [job.name] if job.name else []  # ./run.sh ensemble takes no method name
        command = [sys.executable, "-m", "scarce_ltr", job.stage, *name, *job.overrides]
        threads = max(1, (os.cpu_count() or 1) // self.cfg.workers)
        env = {
            # Jobs running side by side share the cores: no OpenMP spin-waiting, fair threads.
            "OMP_WAIT_POLICY": "passive",
            "OMP_NUM_THREADS": str(threads),
            **os.environ,
            "WANDB_RUN_GROUP": self.cfg.name,
            "WANDB_TAGS": ",".join(job.tags),
        }
        start = time.time()
        with open(job.run_dir / "log.txt", "ab") as log:
            log.write(f"$ {' '.join(command)}\n".encode())
            log.flush()
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        seconds = time.time() - start
        if code == 0 and is_done(job.run_dir):
            return "done", None, seconds
        return "failed", _last_error(job.run_dir / "log.txt", code), seconds

    def _write_manifest(self) -> None:
        for i, cell in enumerate(self.cells):
            status, error, seconds = self.results.get(cell.job_key, ("pending", None, 0.0))
            self.cells[i] = replace(cell, status=status, error=error, seconds=seconds)
        write_json(
            self.folder / MANIFEST,
            {
                "sweep": self.cfg.name,
                "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "jobs": [
                    {"key": j.key, "status": self.results.get(j.key, ("pending",))[0]}
                    for j in self.jobs
                ],
                "cells": [c.to_dict() for c in self.cells],
            },
        )

    def summary_line(self) -> str:
        counts: dict[str, int] = {}
        for cell in self.cells:
            counts[cell.status] = counts.get(cell.status, 0) + 1
        parts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        minutes = (time.time() - self.started) / 60
        return (
            f"sweep {self.cfg.name}: {len(self.cells)} cells ({parts}) in {minutes:.1f} min; "
            f"manifest {self.folder / MANIFEST}; next: ./run.sh report {self.cfg.name}"
        )


def _last_error(log: Path, code: int) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    tail = errors[-1] if errors else (lines[-1] if lines else "")
    return f"exit code {code}: {tail[:500]}"
