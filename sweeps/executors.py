"""Where a sweep's jobs run: one planner (`scarce_ltr.sweeps.sweep`), the executors of `EXECUTORS`.

The sweep plans its jobs, orders them (pretraining before its finetunings, members before their
ensembles), skips finished ones, writes the manifest and the report; an executor only runs one
job's command, ``python -m scarce_ltr <stage> ...`` with its output appended to the run
folder's ``log.txt``, and says its exit code. The sweep calls ``run`` from ``workers`` threads.

- ``local`` (the default): `scarce_ltr.sweeps.local_executor.LocalExecutor`, job servers on this
  machine (sweeps/jobserver.py).
- ``ray``: `scarce_ltr.sweeps.ray_executor.RayExecutor`, each job a Ray task on a cluster.

Each executor is one module exporting ``NAME``, ``Options`` and ``KIND``
(`scarce_ltr.sweeps.executor_kind`); the sweep config holds ``executor=<name>`` and the chosen
one's options, and refuses another executor's keys (`check_executor_keys`). docs/architecture.md
("A sweep executor") lists what a new one touches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from scarce_ltr.core.registry import Registry
from scarce_ltr.sweeps import local_executor, ray_executor
from scarce_ltr.sweeps.executor_kind import Executor, ExecutorKind
from scarce_ltr.sweeps.jobs import Job

# The one list of executors (``executor=``), in the order its messages list them; each reads
# the sweep config's section of its options (`ExecutorKind.section`), if it has one.
EXECUTORS: Registry[ExecutorKind] = Registry(
    "executor",
    {
        local_executor.NAME: local_executor.KIND,
        ray_executor.NAME: ray_executor.KIND,
    },
    reads=lambda kind: (kind.section,) if kind.section else (),
    sections=True,
)


class ExecutorChoice(Protocol):
    """A sweep config as the executors read it (`scarce_ltr.sweeps.sweep.SweepConfig` is one):
    the chosen executor, the jobs run at once and, under each executor's section name
    (`ExecutorKind.section`), its options. Typed here, not against the sweep config, which
    imports this module."""

    @property
    def executor(self) -> str: ...

    @property
    def workers(self) -> int: ...


def options_of(cfg: ExecutorChoice, kind: ExecutorKind) -> Any:
    """The options ``cfg`` (a sweep config) holds for ``kind`` (its own, empty, without a
    section)."""
    return getattr(cfg, kind.section) if kind.section else kind.options()


def check_executor_keys(cfg: ExecutorChoice) -> None:
    """Another executor's key set away from its default is an error naming the keys the chosen
    executor reads (`core.registry.check_unread`), not a silent no-op (``ray.address=...`` with
    ``executor=local``)."""

    def changed(section: str) -> list[str]:
        kind = next(kind for kind in EXECUTORS.values() if kind.section == section)
        return kind.changed_keys(getattr(cfg, section))

    EXECUTORS.check_unread(cfg.executor, changed, also_read=["workers"])


def make_executor(cfg: ExecutorChoice, folder: Path, jobs: list[Job]) -> Executor:
    kind = EXECUTORS[cfg.executor]
    stages = {job.stage for job in jobs}
    return kind.build(options_of(cfg, kind), workers=cfg.workers, folder=folder, stages=stages)
