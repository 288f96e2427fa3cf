"""A stored study continued as Optuna's ``load_if_exists`` continues one (`search.studies`): a
search of the same storage and ``study_name`` keeps the trials there, counts them toward its
``n_trials`` and draws on from them; a trial a killed search left running is marked failed when
the study resumes; default study names are never a temporary path; a study of another search is
refused before it is changed. Without a storage nothing changes (tests/test_search*.py pin it)."""

from __future__ import annotations

import math
import os
import signal
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import optuna
import pytest
from test_search import RESNET, _metrics, _trials
from test_study_storage import _without_seconds, identity_name
from test_trees import DATA, FAST
from tiny import fork_or_skip

import scarce_ltr.search.strategies.study as tree_search
from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError
from scarce_ltr.search.studies import FAIL_REASON, SEARCH_TRIAL, StudyStore

pytestmark = pytest.mark.cpu

State = optuna.trial.TrialState
GBDT = ["baseline", "gbdt-optuna", *DATA, *FAST["gbdt-optuna"][:-1]]  # n_trials given per run


def _study(url: str, name: str) -> optuna.Study:
    return optuna.load_study(storage=url, study_name=name)


def _ended(study: optuna.Study) -> list:
    """The trials a search ended, in its trial order."""
    return [t for t in study.trials if SEARCH_TRIAL in t.user_attrs]


def test_a_study_name_again_continues_the_study_up_to_n_trials(tmp_path: Path) -> None:
    """2 trials, then the same search with n_trials=4 under the same name in another folder:
    the 2 stored trials are kept (not stored again), 2 are added, and the run equals a plain
    4-trial search; n_trials=4 again adds none; n_trials=3 is refused (the study holds 4)."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    stored = [f"gbdt.storage={url}", "gbdt.study_name=grow"]
    run([*GBDT, "gbdt.n_trials=2", *stored, f"run_dir={tmp_path / 'two'}"])
    before = _study(url, "grow").trials
    assert [t.user_attrs[SEARCH_TRIAL] for t in before] == [0, 1]
    four = run([*GBDT, "gbdt.n_trials=4", *stored, f"run_dir={tmp_path / 'four'}"])
    plain = run([*GBDT, "gbdt.n_trials=4", f"run_dir={tmp_path / 'plain'}"])
    assert _without_seconds(four) == _without_seconds(plain)
    assert _metrics(four) == _metrics(plain)
    after = _study(url, "grow").trials
    assert [t.user_attrs[SEARCH_TRIAL] for t in after] == [0, 1, 2, 3]
    assert [t.datetime_start for t in after[:2]] == [t.datetime_start for t in before]
    for trial, row in zip(after, plain["grid"], strict=True):
        assert trial.value == row["vali_ndcg@5"] or (trial.value is None and row.get("pruned"))
    run([*GBDT, "gbdt.n_trials=4", *stored, f"run_dir={tmp_path / 'again'}"])
    assert len(_study(url, "grow").trials) == 4
    with pytest.raises(
        UserError,
        match=r"holds 4 finished trials, more than this search's "
        r"n_trials=3; give n_trials=4 or more to continue it, or gbdt.study_name",
    ):
        run([*GBDT, "gbdt.n_trials=3", *stored, f"run_dir={tmp_path / 'three'}"])  # fmt: skip


def test_a_study_of_another_search_space_is_refused_at_its_first_trial(tmp_path: Path) -> None:
    """The same run (identity) with another learning rate draws other params than the study's
    trial 0: refused before anything is stored."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    stored = [f"gbdt.storage={url}", "gbdt.study_name=s", "gbdt.n_trials=2"]
    run([*GBDT, *stored, f"run_dir={tmp_path / 'a'}"])
    with pytest.raises(
        UserError,
        match=r"study 's' trial 0 there has params .*, this search "
        r"draws .*; give gbdt.study_name=<another name>, or delete that study",
    ):
        run([*GBDT, *stored, "gbdt.learning_rate=0.1", f"run_dir={tmp_path / 'b'}"])
    assert len(_study(url, "s").trials) == 2


def _vali(choices: dict) -> float:
    return 1.0 - (choices["x"] - 0.3) ** 2


def _search(store: StudyStore | None, *, kill_at: int | None = None, shift: float = 0.0):
    """4 trials of a seeded TPE search over one float; ``kill_at``: SIGKILL the process while
    that trial trains; ``shift``: other scores (another data set)."""

    def train(choices: dict, report) -> tuple:
        if train.calls == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        train.calls += 1
        vali = _vali(choices) + shift
        return {"x": choices["x"]}, 1, vali, 0.0, np.array([vali])

    train.calls = 0
    return tree_search.optuna_search(
        n_trials=4,
        sampler=optuna.samplers.TPESampler(seed=3),
        suggest=lambda trial: {"x": trial.suggest_float("x", 0.0, 1.0)},
        train=train,
        first={"x": 0.5},
        study=store,
    )


def test_a_trial_left_running_by_a_killed_search_fails_when_the_study_resumes(tmp_path: Path):
    """A child killed (SIGKILL) while it trains trial 2 leaves it running in the study; the
    search run again marks it failed (never counted, never resumed), ends 4 trials and chooses
    as a search in memory; a search of other scores under the name is refused."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    store = StudyStore(url, "killed", owner="a test", key="gbdt.storage")
    pid = fork_or_skip()
    if pid == 0:  # the child: killed in trial 2
        try:
            _search(store, kill_at=2)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    left = _study(url, "killed").trials
    assert [t.state for t in left] == [State.COMPLETE, State.COMPLETE, State.RUNNING]
    resumed = _search(store)
    plain = _search(None)
    assert [r.as_dict() for r in resumed.results] == [r.as_dict() for r in plain.results]
    assert resumed.best_model == plain.best_model
    study = _study(url, "killed")
    assert [t.state for t in study.trials] == [State.COMPLETE] * 2 + [State.FAIL] + [
        State.COMPLETE
    ] * 2
    killed = study.trials[2]
    assert SEARCH_TRIAL not in killed.user_attrs and "killed" in killed.user_attrs[FAIL_REASON]
    ended = _ended(study)
    assert [t.user_attrs[SEARCH_TRIAL] for t in ended] == [0, 1, 2, 3]
    assert [t.value for t in ended] == [r.vali_ndcg for r in plain.results]
    assert [t.params for t in ended] == [r.choices for r in plain.results]
    assert study.best_trial.user_attrs[SEARCH_TRIAL] == plain.best
    with pytest.raises(
        UserError,
        match=r"trial 0 there scored 0\.96 \(COMPLETE\), this search's"
        r" 0\.4\d* \(COMPLETE\): other data or settings; give gbdt.study_name",
    ):
        _search(store, shift=-0.5)  # fmt: skip
    assert len(_study(url, "killed").trials) == 5


def test_default_study_names_are_never_a_temporary_path(tmp_path: Path, monkeypatch) -> None:
    """Below the runs root: the folder there; in the temporary folder: the run's identity (a
    folder alone is refused, naming the key); elsewhere: the folder's full path."""
    monkeypatch.setenv("LTR_RUNS_DIR", str(tmp_path / "runs"))
    identity = SimpleNamespace(tracker_name="synthetic/baseline/xgboost/frac=1/seed=0")
    url, key = "sqlite:///s.db", "xgboost.storage"
    below = SimpleNamespace(folder=tmp_path / "runs" / "d" / "baseline" / "m" / "seed=1",
                            identity=identity)  # fmt: skip
    assert StudyStore.of(url, None, below, key=key).name == "d/baseline/m/seed=1"
    fit = SimpleNamespace(folder=Path(tempfile.mkdtemp()) / "fit-x" / "baseline", identity=identity)
    store = StudyStore.of(url, None, fit, key=key)
    assert store.name == identity.tracker_name and store.owner == identity.tracker_name
    assert StudyStore.of(url, "mine", fit, key=key).name == "mine"
    with pytest.raises(
        UserError,
        match=r"xgboost.storage: the run folder .* is temporary, no "
        r"name for its study; give xgboost.study_name=<name>",
    ):
        StudyStore.of(url, None, fit.folder, key=key)  # fmt: skip
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "elsewhere-tmp"))
    chosen = StudyStore.of(url, None, SimpleNamespace(folder=tmp_path / "mine", identity=identity),
                           key=key)  # fmt: skip
    assert chosen.name == str(tmp_path / "mine")


def test_an_estimators_fit_folder_names_its_study_after_the_run(tmp_path: Path) -> None:
    """``work_dir`` in the temporary folder (pytest's): the fit's run folder is
    ``<work_dir>/fit-*/baseline``; its study is named after the run, no path in it."""
    from test_estimators import arrays

    from scarce_ltr.api import TreeRanker
    from scarce_ltr.core.config import load_config
    from scarce_ltr.data.datasets import load_dataset
    from scarce_ltr.data.stage_config import CommonConfig

    splits = load_dataset(load_config(CommonConfig, DATA)[0].data)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    keys = {k.replace(".", "__"): v for k, v in (o.split("=") for o in FAST["xgboost"])}
    for _ in range(2):  # the second fit continues the first's study
        ranker = TreeRanker("xgboost", **keys, xgboost__storage=url, work_dir=tmp_path / "w")
        ranker.fit(*arrays(splits["train"]), eval_set=arrays(splits["vali"]))
    (name,) = optuna.get_all_study_names(storage=url)
    assert name.endswith("/baseline/xgboost/frac=1/seed=0") and str(tmp_path) not in name
    assert len(_study(url, name).trials) == 3


def test_hyperband_prunes_a_stored_search_as_in_memory(tmp_path: Path) -> None:
    """The search draws and prunes in its in-memory study (Hyperband's brackets hash its fixed
    name), so a storage changes no pruned trial; the study records each."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    args = [*RESNET, "deep.search.n_trials=4", "deep.search.full_epochs=[2,4]", "epochs=4",
            "deep.search.pruner=hyperband", "deep.search.prune_warmup=1"]  # fmt: skip
    stored = run([*args, f"deep.search.storage={url}", f"run_dir={tmp_path / 'a'}"])
    plain = run([*args, f"run_dir={tmp_path / 'b'}"])
    assert _trials(stored) == _trials(plain)
    assert _metrics(stored) == _metrics(plain)
    study = _study(url, identity_name(stored))
    pruned = [bool(t.get("pruned")) for t in plain["search"]["trials"]]
    assert [t.state == State.PRUNED for t in _ended(study)] == pruned
    assert all(math.isfinite(t.value) for t in _ended(study) if t.state == State.COMPLETE)
