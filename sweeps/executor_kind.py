"""What every sweep executor module exports: ``NAME``, ``Options`` and ``KIND``.

An executor runs one planned job's command and says its exit code (`Executor`); the sweep
(`scarce_ltr.sweeps.sweep`) plans, orders, skips and reports. Its module exports ``NAME`` (the
``executor=`` value), ``Options`` (a frozen dataclass of its keys, checked in ``__post_init__``;
the sweep config holds it under `ExecutorKind.section`, ``ray.*`` for Ray) and ``KIND``, an
`ExecutorKind` with the builder. `scarce_ltr.sweeps.executors.EXECUTORS` collects them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from scarce_ltr.core.config_fields import changed_keys
from scarce_ltr.sweeps.jobs import Job


class Executor(Protocol):
    def run(self, job: Job, args: list[str], *, log: Path, env: dict[str, str]) -> int:
        """Run ``scarce-ltr args`` for ``job`` with the sweep's variables ``env`` on top of the
        machine's, its output appended to ``log``; its exit code (negative: killed by a
        signal). Raises `UserError` when the job could not be run at all."""
        ...

    def cancel(self) -> None:
        """Ctrl-C on the sweep: stop the running jobs and start no other."""
        ...

    def stop_jobs(self) -> None:
        """SIGTERM on the sweep, which its jobs did not get: stop them as Ctrl-C would."""
        ...

    def close(self) -> None: ...


class Builder(Protocol):
    def __call__(
        self, options: Any, *, workers: int, folder: Path, stages: set[str]
    ) -> Executor: ...


@dataclass(frozen=True)
class ExecutorKind:
    """One way of running a sweep's jobs (see the module docstring)."""

    name: str
    # Its options dataclass (checked in __post_init__); the sweep config holds it as `section`.
    options: type
    # The sweep config's key holding the options (``ray``); None: no key of its own.
    section: str | None
    # The executor for a sweep: its options, ``workers`` (jobs at a time), the sweep's folder and
    # the stages of its jobs.
    build: Builder
    # Before planning, outside dry runs: what must hold for it to run (Ray installed); a
    # `UserError` naming what to do.
    preflight: Callable[[], None] | None = None

    def changed_keys(self, options: Any) -> list[str]:
        """``<section>.<key>=<value>`` of each option set away from its default."""
        return changed_keys(str(self.section), options, self.options())
