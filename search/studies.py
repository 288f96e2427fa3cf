"""An Optuna study on shared storage (``<section>.storage``, ``<section>.study_name``): a search's
trials kept in an Optuna RDB storage (SQLite, PostgreSQL, MySQL URL), where ``optuna.load_study``
and optuna-dashboard read them and where a later search of the same name continues them.

A search draws every trial from its own in-memory study (`search.study_loop`), made exactly as
without a storage, so a storage changes no draw, no pruning and no choice. The stored study is
the search's record, continued as Optuna's ``load_if_exists`` continues a study (`StoredStudy`):

- It is loaded when it exists, made otherwise. A trial a killed search left running is marked
  failed first (user attribute ``fail_reason``): it never counts and is never resumed.
- Its finished trials (complete, pruned, or failed with a score that was not finite, as a search
  told them; marked with the search's trial number, `SEARCH_TRIAL`) are the search's first
  trials, in order, and count toward ``n_trials``, which is the total: a study holding more
  finished trials than ``n_trials`` is refused (the run would choose among fewer trials than
  the study holds).
- Trial k the study already holds must be the trial the search draws and scores now: the same
  params, state and vali score (the same seed, space, data and settings), else the run stops
  naming the key (the study holds another search). It is not stored again. The run still
  takes the trial's score from its run folder (a deep search's ``grid/trial=<k>/``) or trains
  it again (a tree search keeps no model of a trial), never from the study: the study records,
  the run decides.
- A trial past them is added as the search draws it (running while it trains), then ended with
  its state, score and per-epoch (per-round) values.

A study is one search's: it remembers the run it searches (`OWNER`: data set, stage, model,
label setting and seed), and a run of another is refused. Its name defaults to the run folder
below the runs root (``<data>/<stage>/<model>/<setting>/seed=<s>``); for a folder in the system's
temporary folder (an estimator's fit) to the run's identity in the same form, never the
temporary path; elsewhere to the folder's full path. Without a storage (the default) nothing is
stored, as it always was.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_identity import runs_root

# The study's user attribute naming the run whose search it holds.
OWNER = "scarce_ltr_run"
# A stored trial's user attribute: the search's trial number, set when the search ended it.
SEARCH_TRIAL = "scarce_ltr_trial"
# Why a stored trial failed without its search telling it (Optuna's own key for a failure).
FAIL_REASON = "fail_reason"
KILLED = "left running by a search that was killed; marked failed when the study resumed"


def check_storage(key: str, url: str | None) -> None:
    """`ValueError` naming ``key`` unless ``url`` is None or looks like a database URL."""
    if url is None:
        return
    if not isinstance(url, str) or "://" not in url or url.startswith("://"):
        raise ValueError(
            f"{key} must be an Optuna storage URL (sqlite:///path/to/studies.db, "
            f"postgresql://user@host/db) or null, got {url!r}"
        )


@dataclass(frozen=True)
class StudyStore:
    """Where one search's study is kept: ``storage`` (the URL), ``name``, the run whose search
    it holds (``owner``) and the config key, for messages (``gbdt.storage``)."""

    storage: str
    name: str
    owner: str
    key: str

    @classmethod
    def of(cls, storage: str | None, study_name: str | None, run: Any, *, key: str):
        """The store of a run's search (``run``: a `core.runs.Run`, or its folder alone); None
        without a storage. The name defaults as the module docstring says."""
        if not storage:
            return None
        folder = os.path.abspath(getattr(run, "folder", run))
        identity = getattr(run, "identity", None)
        owner = identity.tracker_name if identity is not None else folder
        name = study_name or default_name(folder, identity, key=key)
        return cls(storage=storage, name=name, owner=owner, key=key)

    def part(self, suffix: str) -> StudyStore:
        """The store of another search of the same run (a second feature set, the pseudo-labels'
        search): ``<name>/<suffix>``."""
        return replace(self, name=f"{self.name}/{suffix}") if suffix else self

    @property
    def name_key(self) -> str:
        """The key naming the study (``gbdt.study_name``), for messages."""
        return self.key.rsplit(".", 1)[0] + ".study_name"


def default_name(folder: str, identity: Any, *, key: str) -> str:
    """A run's study name when ``study_name`` is not given: its folder below the runs root; its
    identity (``<data>/<stage>/<model>/<setting>/seed=<s>``) for a folder in the temporary
    folder, whose path changes from fit to fit; else the folder's full path."""
    if _below(folder, runs_root()):
        below = os.path.relpath(os.path.realpath(folder), os.path.realpath(runs_root()))
        return Path(below).as_posix()
    if not _below(folder, tempfile.gettempdir()):
        return folder
    if identity is None:
        name_key = key.rsplit(".", 1)[0] + ".study_name"
        raise UserError(
            f"{key}: the run folder {folder} is temporary, no name for its study; give "
            f"{name_key}=<name>"
        )
    return identity.tracker_name


def _below(folder: str, root: str | os.PathLike) -> bool:
    real = os.path.realpath(root)
    return os.path.realpath(folder) == real or os.path.realpath(folder).startswith(real + os.sep)


class StoredStudy:
    """A search's in-memory study (attributes are its), with its record in storage (see the
    module docstring): `drawn` after the search drew trial k, `ended` after it told it."""

    def __init__(self, study: Any, store: StudyStore, *, n_trials: int) -> None:
        import optuna

        self.study, self.store = study, store
        self._state = optuna.trial.TrialState
        try:
            self.storage = optuna.storages.RDBStorage(store.storage)
        except Exception as exc:  # a bad URL, a missing driver, a database it cannot reach
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UserError(
                f"{store.key}={store.storage}: Optuna cannot open this storage ({why}); give an "
                "RDB URL such as sqlite:///path/to/studies.db"
            ) from None
        self.record = optuna.create_study(
            storage=self.storage,
            study_name=store.name,
            direction="maximize",
            load_if_exists=True,
            sampler=optuna.samplers.RandomSampler(),  # never asked: the search draws in memory
        )
        self.study_id = self.storage.get_study_id_from_name(store.name)
        if self.record.directions != [optuna.study.StudyDirection.MAXIMIZE]:
            raise self._other("minimizes (or has several objectives); a search maximizes")
        self._check_owner()
        self._fail_stale()
        self.finished = self._finished()
        if len(self.finished) > n_trials:
            raise UserError(
                f"{store.key}={store.storage}: study {store.name!r} holds {len(self.finished)} "
                f"finished trials, more than this search's n_trials={n_trials}; give n_trials="
                f"{len(self.finished)} or more to continue it, or {store.name_key}=<another name>"
            )
        self._ids: dict[int, int] = {}  # search trial number -> stored trial id

    def __getattr__(self, name: str) -> Any:
        if name == "study":  # not made yet (a failed __init__)
            raise AttributeError(name)
        return getattr(self.study, name)

    def _check_owner(self) -> None:
        """Refuse a study that holds another run's search; claim one that holds none."""
        owner = self.record.user_attrs.get(OWNER)
        if owner is None:
            self.record.set_user_attr(OWNER, self.store.owner)
        elif owner != self.store.owner:
            raise self._other(f"holds the search of {owner}, not of {self.store.owner}")

    def _fail_stale(self) -> None:
        """Mark failed the trials a killed search left running (one search at a time: a run's
        folder lock keeps a second search of the same run out)."""
        for trial in self.record.get_trials(deepcopy=False, states=(self._state.RUNNING,)):
            trial_id = self._trial_id(trial.number)
            self.storage.set_trial_user_attr(trial_id, FAIL_REASON, KILLED)
            self.storage.set_trial_state_values(trial_id, self._state.FAIL)

    def _finished(self) -> list[Any]:
        """The trials a search ended, in order (a study made outside the project: its complete
        and pruned trials)."""
        kept = (self._state.COMPLETE, self._state.PRUNED)
        return [
            t
            for t in self.record.get_trials(deepcopy=False)
            if t.state in kept or (t.state == self._state.FAIL and SEARCH_TRIAL in t.user_attrs)
        ]

    def drawn(self, number: int, trial: Any) -> None:
        """Trial ``number`` as the search drew it (``trial``, in memory): checked against the
        stored one, or stored as running."""
        import optuna

        if number < len(self.finished):
            stored = self.finished[number]
            if stored.params != trial.params:
                raise self._other(
                    f"trial {number} there has params {stored.params}, this search draws "
                    f"{trial.params}"
                )
            return
        template = optuna.trial.create_trial(
            state=self._state.RUNNING, params=trial.params, distributions=trial.distributions
        )
        self._ids[number] = self.storage.create_new_trial(self.study_id, template_trial=template)

    def ended(self, number: int, trial: Any) -> None:
        """Trial ``number`` once the search told it: checked against the stored one, or its
        per-step values, search number, state and score stored."""
        told = self.study.get_trials(deepcopy=False)[trial.number]
        if number < len(self.finished):
            stored = self.finished[number]
            if stored.state != told.state or not _same(stored.value, told.value):
                raise self._other(
                    f"trial {number} there scored {stored.value} ({stored.state.name}), this "
                    f"search's {told.value} ({told.state.name}): other data or settings"
                )
            return
        trial_id = self._ids.pop(number)
        for step, value in sorted(told.intermediate_values.items()):
            self.storage.set_trial_intermediate_value(trial_id, step, value)
        self.storage.set_trial_user_attr(trial_id, SEARCH_TRIAL, number)
        values = None if told.value is None else [told.value]
        self.storage.set_trial_state_values(trial_id, told.state, values)

    def _trial_id(self, number: int) -> int:
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)

    def _other(self, why: str) -> UserError:
        store = self.store
        return UserError(
            f"{store.key}={store.storage}: study {store.name!r} {why}; give "
            f"{store.name_key}=<another name>, or delete that study"
        )


def _same(stored: float | None, told: float | None) -> bool:
    """Whether two trial scores are one (None: pruned or failed, no score)."""
    if stored is None or told is None:
        return stored is told
    return math.isclose(stored, told, rel_tol=1e-9, abs_tol=1e-12)


def create_study(optuna: Any, store: StudyStore | None, *, n_trials: int = 0, **kwargs: Any):
    """``optuna.create_study(**kwargs)``, in memory; with ``store``, a `StoredStudy` recording
    it there (see the module docstring) for a search of ``n_trials`` trials."""
    study = optuna.create_study(**kwargs)
    return study if store is None else StoredStudy(study, store, n_trials=n_trials)
