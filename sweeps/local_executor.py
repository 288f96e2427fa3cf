"""``executor=local`` (the default): a sweep's jobs on this machine, ``workers`` at a time, each
forked from a job server (sweeps/jobserver.py)."""

from __future__ import annotations

import os
import queue
from dataclasses import dataclass
from pathlib import Path

from scarce_ltr.sweeps.executor_kind import ExecutorKind
from scarce_ltr.sweeps.jobs import Job
from scarce_ltr.sweeps.jobserver import JobServer

NAME = "local"


@dataclass(frozen=True)
class Options:
    """The local executor reads no key of its own: ``workers`` (the sweep's) says how many jobs
    run at a time, and they share this machine's cores."""


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

    def stop_jobs(self) -> None:
        for server in self.servers:
            server.interrupt()

    def close(self) -> None:
        for server in self.servers:
            server.close()


def build(options: Options, *, workers: int, folder: Path, stages: set[str]) -> LocalExecutor:
    return LocalExecutor(workers)


KIND = ExecutorKind(NAME, Options, section=None, build=build)
