"""A deep search's trials trained at once in child processes (``search.n_jobs``,
``deep.search.n_jobs``; the batches of `search.trial_batches`).

Processes, not threads: a trial seeds and draws from torch's global generator (dropout, the
model's initialisation; `core.seeding`), which threads would share, so two trials at once would
draw each other's numbers and no trial would be reproducible; and a small model's epoch is mostly
Python, which threads do not run at once (benchmarks/LOG.md, "Parallel search trials"). The pool is
``spawn``ed (a forked child of a process that ran torch's thread pool or CUDA may hang) and lives
for the search; each child gets the run's prepared data once and ``threads`` torch threads (its
share of the parent's). What crosses is pickled by `pickle` itself into bytes: the pool's own
pickler would share tensors through file descriptors (torch's reductions), which a child of a
forked process cannot receive, and the model's storages would be shared with the parent's.

A trial trains in the child exactly as `finetune.grid.train_point` trains it in the parent: the
parent seeds and builds its model (`Prebuilt`: the model and the random state after building,
which the child restores after seeding), the child trains it in the trial's folder with its own
checkpoint and finishes it there (``result.json`` + ``DONE``), so a kill mid-batch resumes every
trial of the batch where it stood. The child hands back the trial's result and the epoch rows
it would have logged (`Rows`); the parent logs them in trial order and reads the model from the
trial's folder when it needs it (as for a trial finished before). A child whose parent is gone
(killed) stops within a second instead of training on behind a search resumed by another process.

On Ray (``search.trial_executor=ray``, ``deep.search.trial_executor=ray``; `RayTrialPool`): each
trial is one Ray task that runs the same job bytes a child runs, with the same number of torch
threads, so a search's trials, scores and chosen model are those of the process pool for the same
N. The run's data goes to the object store once per search; Ray is reached or started by the
rules of a sweep's ``ray.address`` (`core.ray_cluster`), and the run folder must be one path
every node sees, checked before the first trial. A task whose worker or node died is run again
(its trial resumes from its checkpoint); a trial that raises is not.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.extras import require
from scarce_ltr.core.malloc import keep_freed_memory
from scarce_ltr.core.ray_cluster import SharedFolder, check_shared_folder, connect, first_line
from scarce_ltr.core.seeding import capture_rng_state, restore_rng_state, seed_everything
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.finetune.grid import Candidate, GridTraining, train_point

_PREPARED: PreparedData | None = None  # the child's copy of the run's data


@dataclass
class Prebuilt:
    """A candidate's ``build`` done in the parent: the model, its spec and source, and the
    global random state just after building (what the child's training draws from next)."""

    model: nn.Module
    spec: dict
    source: dict
    rng: dict

    @classmethod
    def of(cls, candidate: Candidate, seed: int) -> Prebuilt:
        seed_everything(seed)  # as `train_point` does before it builds
        model, spec, source = candidate.build()
        return cls(model, spec, source, capture_rng_state())

    def __call__(self) -> tuple[nn.Module, dict, dict]:
        restore_rng_state(self.rng)
        return self.model, self.spec, self.source


@dataclass
class Rows:
    """A child's ``log``: the epoch rows, handed back to be logged in the parent."""

    rows: list[dict] = field(default_factory=list)

    def __call__(self, row: dict) -> None:
        self.rows.append(row)


class TrialPool:
    """``n_jobs`` spawned children that train one trial each at a time (`submit`)."""

    def __init__(self, n_jobs: int, prepared: PreparedData, *, threads: int) -> None:
        self.executor = ProcessPoolExecutor(
            max_workers=n_jobs,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start,
            initargs=(os.getpid(), pickle.dumps(prepared), threads),
        )

    def submit(self, training: GridTraining, candidate: Candidate, prune: Any) -> Future:
        """Train ``candidate`` in a child; the future's value: ``(its result, its epoch rows)``.
        ``prune``: the child's pruner (picklable; None: not pruned)."""
        return self.executor.submit(_train, job_bytes(training, candidate, prune))

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


def job_bytes(training: GridTraining, candidate: Candidate, prune: Any) -> bytes:
    """One trial's job as a child or a Ray task receives it: its model built here (`Prebuilt`),
    its rows collected there (`Rows`), the run's data left out (each worker holds it)."""
    prebuilt = Prebuilt.of(candidate, training.cfg.seed)
    job = replace(candidate, build=prebuilt, log=Rows(), prune=prune)
    return pickle.dumps((replace(training, prepared=None), job))


class RayTrialPool:
    """The trials as Ray tasks (``<prefix>trial_executor=ray``): ``submit`` as `TrialPool`'s,
    each task given ``threads`` CPUs and torch threads."""

    def __init__(
        self, prepared: PreparedData, *, threads: int, address: str, prefix: str, folder: Path
    ) -> None:
        ray = require("ray", f"{prefix}trial_executor=ray")
        connect(address, key=f"{prefix}ray_address")
        try:
            words = SharedFolder(
                what="the run folder",
                needs=f"{prefix}trial_executor=ray",
                give="give the run such a folder with run_dir= or LTR_RUNS_DIR",
            )
            check_shared_folder(folder, words)
            self._data = ray.put(pickle.dumps(prepared))
        except BaseException:
            ray.shutdown()
            raise
        self._task = ray.remote(retry_exceptions=False)(_train_on_ray).options(num_cpus=threads)
        self._token = os.urandom(8).hex()  # this search's data, cached by each worker
        self._threads = threads
        self._refs: list = []

    def submit(self, training: GridTraining, candidate: Candidate, prune: Any) -> RayTrial:
        payload = job_bytes(training, candidate, prune)
        ref = self._task.remote(self._token, self._data, payload, self._threads, os.getcwd())
        self._refs.append(ref)
        return RayTrial(ref, candidate.desc)

    def close(self) -> None:
        import ray

        for ref in self._refs:  # a search ended by an error or Ctrl-C: no trial trains on
            ray.cancel(ref, force=True)
        ray.shutdown()


@dataclass
class RayTrial:
    """A trial's Ray task, waited on as a `Future`."""

    ref: Any
    desc: str

    def result(self) -> tuple[dict, list[dict]]:
        import ray

        try:
            return ray.get(self.ref)
        except ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, UserError | OSError):
                raise UserError(f"{self.desc}, on its Ray node: {cause}") from None
            raise UserError(f"{self.desc}: its Ray task failed: {first_line(exc)}") from None


_RAY_DATA: tuple[str, PreparedData] | None = None  # a Ray worker's copy of one search's data


def _train_on_ray(token: str, data: bytes, payload: bytes, threads: int, cwd: str):
    """The Ray task: ``payload`` trained as a child of `TrialPool` trains it."""
    global _RAY_DATA, _PREPARED
    if _RAY_DATA is None or _RAY_DATA[0] != token:
        _RAY_DATA = (token, pickle.loads(data))
    _PREPARED = _RAY_DATA[1]
    torch.set_num_threads(threads)
    if os.path.isdir(cwd):  # the driver's folder, for a relative run folder
        os.chdir(cwd)
    return _train(payload)


def _start(parent: int, prepared: bytes, threads: int) -> None:
    global _PREPARED
    _PREPARED = pickle.loads(prepared)
    torch.set_num_threads(threads)
    keep_freed_memory()  # a search's own child, as the command's process (core.malloc)
    threading.Thread(target=_watch, args=(parent,), daemon=True).start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)  # the search that started this child is gone


def _train(payload: bytes) -> tuple[dict, list[dict]]:
    training, candidate = pickle.loads(payload)
    assert _PREPARED is not None, "the pool's initializer gives each child the data"
    point = train_point(replace(training, prepared=_PREPARED), candidate, in_grid=True)
    assert isinstance(candidate.log, Rows)
    return point.result, candidate.log.rows
