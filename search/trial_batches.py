"""A search's trials trained N at once (``<section>.n_jobs``: ``gbdt.n_jobs``, ``search.n_jobs``,
...), reproducibly.

The study is asked N trials (a batch) in trial-number order, the N are trained at once, and their
results are told to the study in trial-number order once all N are done; then the next batch is
asked. What the sampler saw when it drew a trial, and what a pruner compares a trial with (the
median rule reads the trials finished in earlier batches only), depend on N, never on which trial
of a batch ends first: for a given N the search asks the same trials and chooses the same one on
every run and after a kill. N = 1 is the sequential search, step for step. The batch's trials
differ from the sequential search's, as with Optuna's own ``n_jobs``: TPE sees a result one batch
later.

The trees train a batch in threads (LightGBM, CatBoost and XGBoost release the GIL while they
fit), each with its share of the section's threads (`thread_share`); the deep rankers in child
processes (`finetune.trial_pool`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

MAX_N_JOBS = 1024  # trials trained at once
T = TypeVar("T")


def check_n_jobs(key: str, value: Any) -> None:
    """`ValueError` naming ``key`` unless ``value`` is an int in 1..`MAX_N_JOBS`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_N_JOBS:
        raise ValueError(
            f"{key} must be >= 1 and <= {MAX_N_JOBS} (trials trained at once; 1: one after "
            f"another), got {value!r}"
        )


def batches(n_trials: int, n_jobs: int) -> Iterator[range]:
    """The trial numbers of each batch: ``range(0, N)``, ``range(N, 2N)``, ..., the last short."""
    for start in range(0, n_trials, n_jobs):
        yield range(start, min(start + n_jobs, n_trials))


def thread_share(threads: int, n_jobs: int) -> int:
    """The threads of one of ``n_jobs`` trials trained at once out of ``threads`` in all (at least
    one each): the search stays within the cores it was given."""
    return max(1, threads // n_jobs)


def in_threads(tasks: list[Callable[[], T]], apart: list[Hashable] | None = None) -> list[T]:
    """Each task's result, in order; one task runs in the calling thread (the sequential
    search), several in threads of their own. ``apart``: a key per task; tasks of different
    keys never run at once (the keys one after another, in order of first appearance: a
    library's process-wide state that two of them would set differently). A task's exception
    is raised once every task has ended (the first in order), so no trial is left training
    behind the error."""
    if len(tasks) == 1:
        return [tasks[0]()]
    keys = apart if apart is not None else [None] * len(tasks)
    results: list[Any] = [None] * len(tasks)
    errors: list[BaseException | None] = [None] * len(tasks)
    for key in dict.fromkeys(keys):
        group = [i for i, k in enumerate(keys) if k == key]
        with ThreadPoolExecutor(max_workers=len(group), thread_name_prefix="trial") as pool:
            futures = {i: pool.submit(tasks[i]) for i in group}
        for i, future in futures.items():
            errors[i] = future.exception()
            if errors[i] is None:
                results[i] = future.result()
    for error in errors:
        if error is not None:
            raise error
    return results
