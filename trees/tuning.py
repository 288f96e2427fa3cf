"""What every tree ranker shares: the keys of a searched backend's section, a backend's entry
in the registry (`TreeBackendEntry`), an optional backend, a model file checked in a child
process, and the label check of a backend's objective.
A search's trials, the strategies and choosing on vali are `search` (`search.trials`,
`search.strategies`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from scarce_ltr.core.config_fields import MAX_EPOCHS, MAX_TRIALS
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.extras import Extra, require
from scarce_ltr.core.families import ModelFamily
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.search.strategies import check_search
from scarce_ltr.search.studies import check_storage
from scarce_ltr.search.trial_batches import check_n_jobs, thread_share


@dataclass(frozen=True)
class SearchOptions:
    """The keys every searched tree backend's section shares (``catboost.*``, ``xgboost.*``);
    a backend subclasses it with its loss or objective and names its section."""

    section: ClassVar[str] = "backend"  # the config section, for messages
    library: ClassVar[str] = "the backend"  # its library's name, for messages
    # Whether its ranking objectives take integer grades only (its `check_labels`; the
    # estimators name the library when a real grade is given).
    integer_labels: ClassVar[bool] = False
    # The backend's parameters the project sets itself -> the key a user sets them with instead.
    reserved_params: ClassVar[dict[str, str]] = {}

    # optuna: a seeded TPE search | random: a seeded random search (search/strategies)
    search: str = "optuna"
    n_trials: int = 20  # trials of the search; the vali-best is kept
    max_rounds: int = 500  # trees at most; `epochs` caps it further when set
    early_stopping_rounds: int = 50  # on vali NDCG@5
    num_threads: int = 0  # 0: every core of the machine; with n_jobs, shared by the trials
    # trials trained at once (threads, each with num_threads // n_jobs of the cores): asked and
    # told in trial order, reproducible for a given n_jobs (search.trial_batches); 1: one by one
    n_jobs: int = 1
    params: dict[str, Any] = field(default_factory=dict)  # any backend parameter, every trial
    # an Optuna RDB URL (sqlite:///studies.db) the search's study is recorded in, for
    # optuna.load_study and optuna-dashboard, and continued by a search of the same name
    # (search.studies); null: in memory only
    storage: str | None = None
    # the study's name in storage; null: the run folder below the runs root (search.studies)
    study_name: str | None = None

    def __post_init__(self) -> None:
        check_search(f"{self.section}.search", self.search)
        check_storage(f"{self.section}.storage", self.storage)
        if not 1 <= self.n_trials <= MAX_TRIALS:
            raise ValueError(
                f"{self.section}.n_trials must be >= 1 and <= {MAX_TRIALS}, got {self.n_trials}"
            )
        for key in ("max_rounds", "early_stopping_rounds"):
            if not 1 <= getattr(self, key) <= MAX_EPOCHS:
                raise ValueError(f"{self.section}.{key} must be >= 1 and <= {MAX_EPOCHS}")
        if self.num_threads < 0:
            raise ValueError(f"{self.section}.num_threads must be >= 0 (0: every core)")
        check_n_jobs(f"{self.section}.n_jobs", self.n_jobs)
        if self.params:
            self.check_params(self.params)

    def check_params(self, params: dict[str, Any]) -> None:
        """`ValueError` naming the section's key for a parameter the project sets itself
        (`reserved_params`) or the backend does not take (`known_params`)."""
        known = self.known_params()
        if known is None:
            return  # the run stops later with the install command (`require_backend`)
        for key in params:
            if key in self.reserved_params:
                raise ValueError(
                    f"{self.section}.params.{key}: set by the project; use "
                    f"{self.reserved_params[key]}"
                )
            if key not in known:
                raise ValueError(
                    f"{self.section}.params.{key}: {self.library} has no parameter {key!r}"
                )

    @classmethod
    def known_params(cls) -> set[str] | None:
        """Every parameter name (aliases too) the backend's library takes; None when the
        library is not installed."""
        return None

    def threads(self) -> int:
        """The search's threads (``num_threads``, 0: every core)."""
        return self.num_threads or os.cpu_count() or 1

    def trial_threads(self) -> int:
        """One fit's threads: its share of `threads` among the ``n_jobs`` trials at once."""
        return thread_share(self.threads(), self.n_jobs)

    def rounds(self, epochs: int | None) -> int:
        return self.max_rounds if epochs is None else min(self.max_rounds, epochs)


def require_backend(extra: Extra) -> ModuleType:
    """Import an optional backend's module as its own module declares it (``extra``), or stop
    with one line naming the extra that installs it (`scarce_ltr.core.extras`)."""
    return require(extra.module, f"the {extra.module} backend", extra=extra)


@dataclass(frozen=True)
class TreeBackendEntry:
    """A tree backend's line in `trees.backends.TREE_BACKENDS`, declared by its one module
    (``BACKEND``): all the package learns of it. From it derive the baseline config's section
    (``<options.section>: <options>``; the methods reading it, ``options.read_by``, refuse no key
    of it, every other method refuses its keys), the baselines' names, entry points and bundle
    kind (``family``), the in-memory fit (``fit``, `baselines.run.fit`) and the one line naming
    a missing package (``extra``, imported by the backend through `require_backend`; None when
    it needs none)."""

    options: type[SearchOptions]
    family: ModelFamily
    fit: Callable[..., Any]  # (cfg, splits, *, labeled, run) -> trees.fitted.FittedTrees
    extra: Extra | None = None

    def __post_init__(self) -> None:
        # The section's readers and the family's names are two spellings of its methods.
        read_by = getattr(self.options, "read_by", None)
        if read_by != self.family.names:
            raise ValueError(
                f"tree backend {self.name}: {self.options.__name__}.read_by {read_by} must be "
                f"its family's names {self.family.names}"
            )

    @property
    def name(self) -> str:
        """Its registry name: its section's (``catboost``)."""
        return self.options.section


def check_in_child(code: str, path: Path, what: str) -> None:
    """Run ``code`` (a model loader given ``path`` as ``sys.argv[1]``) in a child process first:
    XGBoost's and CatBoost's loaders abort or crash the process on some damaged files, which no
    ``except`` catches. About 2 s of CPU (the child imports the backend); `UserError` naming
    ``path`` when the child does not end well."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, os.fspath(path)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=CHILD_SECONDS,
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            f"{path}: not a readable {what} model (loading it took over {CHILD_SECONDS} s)"
        ) from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if re.match(r"[\w.]*(Error|Exception)\b", line)]
        if done.returncode < 0:
            why = f"its loader crashed the process: signal {-done.returncode}"
        else:
            why = (errors or lines or [f"exit code {done.returncode}"])[0][:200]
        raise UserError(f"{path}: not a readable {what} model ({why})")


CHILD_SECONDS = 120


def check_labels(
    split: RankingSplit, what: str, *, backend: str, integer: bool, max_label: float | None
) -> None:
    """Stop unless the labels of ``split`` are what ``backend``'s objective takes: finite and
    non-negative always (the project's gain ``2^y - 1``), integers and at most ``max_label``
    when the objective says so."""
    labels = np.asarray(split.labels, dtype=np.float64)
    if labels.size == 0:
        return
    bad = ~np.isfinite(labels) | (labels < 0)
    if integer:
        bad |= labels != np.round(labels)
    if bad.any():
        kind = "integer labels >= 0" if integer else "finite labels >= 0"
        raise UserError(
            f"{what}: label {labels[bad][0]:g} is not a relevance level; {backend} needs {kind} "
            "(binarize real-valued feedback with scarcity.binary_tau or relabel the file)"
        )
    if max_label is not None and labels.max() > max_label:
        raise UserError(
            f"{what}: label {labels.max():g} is above {max_label:g}; {backend} takes labels "
            f"0..{max_label:g} only (relabel the file)"
        )
