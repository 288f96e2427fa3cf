"""Where a sweep's jobs run: one planner (`scarce_ltr.sweeps.sweep`), two executors.

The sweep plans its jobs, orders them (pretraining before its finetunings, members before their
ensembles), skips finished ones, writes the manifest and the report; an executor only runs one
job's command, ``python -m scarce_ltr <stage> ...`` with its output appended to the run
folder's ``log.txt``, and says its exit code. The sweep calls ``run`` from ``workers`` threads.

- ``local`` (the default): `LocalExecutor`, job servers on this machine (sweeps/jobserver.py).
- ``ray``: `scarce_ltr.sweeps.ray_executor.RayExecutor`, each job a Ray task on a cluster.
"""

from __future__ import annotations

import os
import queue
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from scarce_ltr.sweeps.jobs import Job
from scarce_ltr.sweeps.jobserver import JobServer

if TYPE_CHECKING:
    from scarce_ltr.sweeps.sweep import SweepConfig

EXECUTORS = ("local", "ray")


class Executor(Protocol):
    def run(self, job: Job, args: list[str], *, log: Path, env: dict[str, str]) -> int:
        """Run ``scarce-ltr args`` for ``job`` with the sweep's variables ``env`` on top of the
        machine's, its output appended to ``log``; its exit code (negative: killed by a
        signal). Raises `UserError` when the job could not be run at all."""
        ...

    def cancel(self) -> None:
        """Ctrl-C on the sweep: stop the running jobs and start no other."""
        ...

    def close(self) -> None: ...


class LocalExecutor:
    """At most ``workers`` jobs at a time on this machine, each forked from a job server."""

    def __init__(self, workers: int) -> None:
        threads = max(1, (os.cpu_count() or 1) // workers)
        # Jobs running side by side share the cores: no OpenMP spin-waiting, fair threads.
        self.env = {"OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": str(threads), **os.environ}
        self.servers: list[JobServer] = []  # at most one per worker
        self.idle_servers: queue.SimpleQueue[JobServer] = queue.SimpleQueue()

    def run(self, job: Job, args: list[str], *, log: Path, env: dict[str, str]) -> int:
        try:
            server = self.idle_servers.get_nowait()
        except queue.Empty:
            server = JobServer(self.env)
            self.servers.append(server)
        try:
            return server.run(args, log=log, env={**self.env, **env})
        finally:
            self.idle_servers.put(server)

    def cancel(self) -> None:
        pass  # Ctrl-C reaches the jobs themselves: they share the terminal's process group

    def close(self) -> None:
        for server in self.servers:
            server.close()


def make_executor(cfg: SweepConfig, folder: Path, jobs: list[Job]) -> Executor:
    if cfg.executor == "ray":
        from scarce_ltr.sweeps.ray_executor import RayExecutor

        return RayExecutor(cfg.ray, folder, stages={job.stage for job in jobs})
    return LocalExecutor(cfg.workers)
