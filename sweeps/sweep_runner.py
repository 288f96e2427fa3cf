"""Running a sweep's jobs (`SweepRunner`): in dependency order (pretraining first, a taught model
after its teacher), ``workers`` at a time, on the sweep's executor; a finished job's settings
checked when its turn comes (`sweeps.stale`), each job's command line and output in its
``log.txt``, and ``manifest.json`` (`MANIFEST`) written after every job. SIGTERM stops the sweep
as Ctrl-C does.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import file_error, make_folder, open_no_follow, write_json
from scarce_ltr.core.locks import WAIT_ENV
from scarce_ltr.core.progress import progress_bar
from scarce_ltr.core.runs import is_done
from scarce_ltr.sweeps.cells import SweepCell
from scarce_ltr.sweeps.executors import Executor
from scarce_ltr.sweeps.jobs import Job, cli_stage, job_waves
from scarce_ltr.sweeps.stale import finished_differs

MANIFEST = "manifest.json"


def _stop_on_sigterm(executor: Executor):
    """SIGTERM on the sweep (``kill``, ``timeout``, a scheduler) stops it as Ctrl-C does: its jobs
    stop and save (they never see the signal: without this they ran on, orphaned), no other job
    starts, and the manifest is written. Returns what puts the old handler back. Only the main
    thread may set a handler; a sweep run from another thread keeps the default."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def stop(signum, frame) -> None:
        executor.stop_jobs()
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, stop)
    return lambda: signal.signal(signal.SIGTERM, old)


class SweepRunner:
    """Runs jobs in dependency order (pretraining first), `workers` at a time, on `executor`."""

    def __init__(
        self,
        cfg: Any,  # the `sweeps.sweep.SweepConfig` (whose module imports this one)
        folder: Path,
        jobs: list[Job],
        cells: list[SweepCell],
        executor: Executor,
        earlier: list[dict] | None = None,
    ):
        self.cfg, self.folder, self.jobs, self.cells = cfg, folder, jobs, cells
        self.earlier = earlier or []  # cells of earlier runs beyond this plan, as they were
        self.executor = executor
        self.results: dict[str, tuple[str, str | None, float]] = {}
        self.started = time.time()
        self.bar = None

    def run(self) -> None:
        # A bar on a terminal; plain lines with an ETA when the sweep's output goes to a file.
        self.bar = progress_bar(total=len(self.jobs), desc=f"sweep {self.cfg.name}", unit="job")
        self._write_manifest()
        restore = _stop_on_sigterm(self.executor)
        try:
            for todo in job_waves(self.jobs):  # stage by stage; a taught model after its teacher
                with ThreadPoolExecutor(self.cfg.workers) as pool:
                    try:
                        for _ in pool.map(self._run_job, todo):
                            pass
                    except BaseException:  # Ctrl-C: before the pool waits for its threads
                        self.executor.cancel()
                        raise
        finally:
            restore()
            self.executor.close()
            self.bar.close()
            self._write_manifest()

    def _run_job(self, job: Job) -> None:
        failed_dependency = next(
            (d for d in job.depends_on if self.results.get(d, ("done",))[0] != "done"), None
        )
        if failed_dependency is not None:
            self.results[job.key] = ("skipped", f"dependency failed: {failed_dependency}", 0.0)
        elif is_done(job.run_dir):
            # Checked when its turn comes, after the jobs it reads ran: an encoder run again in
            # this sweep is seen by the runs finished on the old one.
            why = finished_differs(job)
            self.results[job.key] = ("done", None, 0.0) if why is None else ("failed", why, 0.0)
            if why is not None:
                print(f"refused {job.key}: {why}", file=sys.stderr)
        else:
            try:
                self.results[job.key] = self._execute(job)
            except (UserError, OSError) as exc:  # the job's folder or log: the cell fails alone
                error = exc if isinstance(exc, UserError) else file_error(exc, "use")
                self.results[job.key] = ("failed", str(error), 0.0)
        assert self.bar is not None
        self.bar.update(1)
        self._write_manifest()

    def _execute(self, job: Job) -> tuple[str, str | None, float]:
        make_folder(job.run_dir)
        name = [job.name] if job.name else []  # ./run.sh ensemble takes no method name
        stage = cli_stage(job.stage)
        args = [stage, *name, *job.overrides]
        env = {  # on top of the machine's environment (the executor's)
            "WANDB_RUN_GROUP": self.cfg.name,
            "WANDB_TAGS": ",".join(job.tags),
            # A job still running from an earlier, killed sweep holds its folder: wait for it
            # (its run then counts as done) rather than fail the cell.
            WAIT_ENV: os.environ.get(WAIT_ENV, str(24 * 3600)),
        }
        start = time.time()
        # Never through a link: the job's output would go to the file it points at (a
        # `UserError` here fails the cell alone, in `_run_job`).
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        fd = open_no_follow(job.run_dir / "log.txt", flags, "log")
        with open(fd, "ab") as log:
            # The command that reruns the job by hand.
            log.write(f"$ {sys.executable} -m scarce_ltr {' '.join(args)}\n".encode())
        code = self.executor.run(job, args, log=job.run_dir / "log.txt", env=env)
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
                "cells": [c.to_dict() for c in self.cells] + self.earlier,
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
            f"manifest {self.folder / MANIFEST}; next: ./run.sh report {self.target()}"
        )

    def target(self) -> str:
        """What ``./run.sh report`` finds this sweep by: a sweep in a folder of its own
        (``run_dir=``) is not found by its name, so its folder."""
        return str(self.folder) if self.cfg.run_dir else self.cfg.name


def _last_error(log: Path, code: int) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    tail = errors[-1] if errors else (lines[-1] if lines else "")
    return f"exit code {code}: {tail[:500]}"
