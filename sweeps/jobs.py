"""A sweep's jobs and the order they run in.

A `Job` is one ``./run.sh`` command of a sweep's plan (`scarce_ltr.sweeps.cells.plan_cells`):
its key, stage, overrides, run folder and the jobs it waits on. `after_dependencies` puts the
jobs of a plan after the jobs they depend on; `job_waves` cuts them into the waves a sweep runs,
one stage after the other.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from pathlib import Path

from scarce_ltr.core.errors import UserError


@dataclass(frozen=True)
class Job:
    key: str
    stage: str  # pretrain | finetune | baseline
    name: str  # method, strategy or baseline
    overrides: list[str]
    run_dir: Path
    depends_on: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)


# The waves a sweep runs its jobs in, one stage after the other; a job that depends on a job of
# its own wave or a later one (a taught model on its teacher) moves to the wave after it.
STAGE_WAVES = (("pretrain",), ("finetune", "baseline"), ("combine",), ("ensemble",))


def job_waves(jobs: list[Job]) -> list[list[Job]]:
    """``jobs`` (in dependency order, as `plan_cells` gives them) in the waves they run in: a
    wave starts when the one before it has ended; within one, jobs keep their order."""
    stage_wave = {stage: i for i, stages in enumerate(STAGE_WAVES) for stage in stages}
    wave: dict[str, int] = {}
    for job in jobs:
        after = [wave[d] + 1 for d in job.depends_on if d in wave]
        wave[job.key] = max([stage_wave.get(job.stage, 1), *after])
    waves: list[list[Job]] = [[] for _ in range(max(wave.values(), default=-1) + 1)]
    for job in jobs:
        waves[wave[job.key]].append(job)
    return waves


def after_dependencies(jobs: list[Job]) -> list[Job]:
    """``jobs`` in their order, except that a job comes after the jobs it depends on (a taught
    model after its teacher, which may be an ensemble); a plan already in such an order stays
    as it is."""
    index = {job.key: i for i, job in enumerate(jobs)}
    waiting = {job.key: {d for d in job.depends_on if d in index} for job in jobs}
    children: dict[str, list[str]] = {}
    for key, needs in waiting.items():
        for need in needs:
            children.setdefault(need, []).append(key)
    ready = [index[key] for key, needs in waiting.items() if not needs]
    heapq.heapify(ready)
    out: list[Job] = []
    while ready:
        job = jobs[heapq.heappop(ready)]
        out.append(job)
        for child in children.get(job.key, []):
            waiting[child].discard(job.key)
            if not waiting[child]:
                heapq.heappush(ready, index[child])
    if len(out) != len(jobs):
        stuck = sorted(k for k, needs in waiting.items() if needs)
        raise UserError(f"sweep jobs wait on each other in a cycle: {', '.join(stuck[:5])}")
    return out


def cli_stage(stage: str) -> str:
    """The ``./run.sh`` stage of a job's stage: a combination is a finetuning run that a sweep
    runs after the other finetuning runs."""
    return "finetune" if stage == "combine" else stage
