"""Searches on shared storage (`search.studies`): ``<section>.storage`` records a search's Optuna
study in an RDB (SQLite here) that ``optuna.load_study`` (and so optuna-dashboard) reads; the
choice is the one without a storage, a search of the same name continues the study (each trial
once), and a bad URL or another search's study is one clear line. Resuming, killed trials and
default names: tests/test_study_resume.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import optuna
import pytest
from omegaconf import OmegaConf
from test_search import DEEP_SEARCH, RESNET, _killed_run, _metrics, _trials
from test_trees import DATA, FAST

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_config import changed_settings
from scarce_ltr.search.studies import OWNER, SEARCH_TRIAL, StudyStore

pytestmark = pytest.mark.cpu


def _stored(url: str, name: str) -> list:
    return optuna.load_study(storage=url, study_name=name).trials


def identity_name(report: dict) -> str:
    """The default study name of a run outside the runs root in the temporary folder (pytest's
    ``tmp_path``): its identity, ``<data>/<stage>/<model>/<setting>/seed=<s>``."""
    keys = ("dataset", "stage", "model", "label_setting")
    return "/".join(str(report[k]) for k in keys) + f"/seed={report['seed']}"


def _without_seconds(report: dict) -> list[dict]:
    rows = report["trials"] if "trials" in report else report["grid"]
    return [{k: v for k, v in t.items() if k != "seconds"} for t in rows]


def test_a_tree_search_in_storage_chooses_as_in_memory_and_holds_its_trials(tmp_path: Path):
    """gbdt-optuna with gbdt.storage: the same trials and choice as without; the SQLite file
    holds the study under the run's name, each trial's params and vali score."""
    args = ["baseline", "gbdt-optuna", *DATA, *FAST["gbdt-optuna"]]
    plain = run([*args, f"run_dir={tmp_path / 'plain'}"])
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    stored = run([*args, f"run_dir={tmp_path / 'stored'}", f"gbdt.storage={url}"])
    assert _without_seconds(stored) == _without_seconds(plain)
    assert _metrics(stored) == _metrics(plain)
    trials = _stored(url, identity_name(stored))
    assert len(trials) == len(plain["grid"]) == 4
    for trial, row in zip(trials, plain["grid"], strict=True):
        assert trial.number == row["trial"]
        if row.get("pruned"):
            assert trial.state == optuna.trial.TrialState.PRUNED
        else:
            assert trial.value == row["vali_ndcg@5"]
        assert trial.params and all(row[k] == v for k, v in trial.params.items() if k in row)
    # Run again (a search killed before it wrote its run): the study is continued, its trials
    # trained again and checked against it, none stored twice.
    (tmp_path / "stored" / "DONE").unlink()
    again = run([*args, f"run_dir={tmp_path / 'stored'}", f"gbdt.storage={url}"])
    assert _without_seconds(again) == _without_seconds(plain)
    assert len(_stored(url, identity_name(stored))) == 4


def test_a_killed_deep_search_resumes_and_its_study_mirrors_the_folder(tmp_path: Path) -> None:
    """resnet's search with deep.search.storage, killed in its second trial and run again: the
    trials and choice of a search never killed; the stored study holds each trial once, the
    one the kill left running marked failed."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    writes = _killed_run([*RESNET, *DEEP_SEARCH, f"run_dir={reference}"], tmp_path, 0)
    expected = json.loads((reference / "report.json").read_text())
    stored_args = [*RESNET, *DEEP_SEARCH, f"deep.search.storage={url}", "deep.search.study_name=s"]
    code = _killed_run([*stored_args, f"run_dir={crashed}"], tmp_path, writes // 2)
    assert code == -9
    assert not (crashed / "DONE").exists()
    got = run([*stored_args, f"run_dir={crashed}"])
    assert _trials(got) == _trials(expected)
    assert _metrics(got) == _metrics(expected)
    study = optuna.load_study(storage=url, study_name="s")
    assert study.user_attrs[OWNER] == identity_name(got)
    ended = [t for t in study.trials if t.state != optuna.trial.TrialState.FAIL]
    killed = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert [t.state for t in ended] == [optuna.trial.TrialState.COMPLETE] * 3
    assert killed and all(SEARCH_TRIAL not in t.user_attrs and "fail_reason" in t.user_attrs
                          for t in killed)  # fmt: skip
    rows = got["search"]["trials"]
    assert [t.user_attrs[SEARCH_TRIAL] for t in ended] == [r["trial"] for r in rows]
    assert [t.value for t in ended] == [r["best_vali_ndcg@5"] for r in rows]
    assert study.best_trial.user_attrs[SEARCH_TRIAL] == got["search"]["chosen_trial"]
    assert all(math.isclose(ended[r["trial"]].params["lr"], r["lr"]) for r in rows)


def test_a_study_is_continued_by_its_search_and_left_alone_by_another(tmp_path: Path) -> None:
    """The same search in another folder under the same name continues the study (its trials
    checked, none stored twice); a run of another seed is refused and the study left as it was."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    args = ["baseline", "xgboost", *DATA, *FAST["xgboost"], f"xgboost.storage={url}"]
    first = run([*args, f"run_dir={tmp_path / 'a'}", "xgboost.study_name=shared"])
    second = run([*args, f"run_dir={tmp_path / 'b'}", "xgboost.study_name=shared"])
    assert _without_seconds(second) == _without_seconds(first)
    assert len(_stored(url, "shared")) == 3
    other = r"study 'shared' holds the search of .*/seed=0, not of .*/seed=1; give xgboost"
    with pytest.raises(UserError, match=other):
        run([*args, f"run_dir={tmp_path / 'c'}", "xgboost.study_name=shared", "seed=1"])
    assert len(_stored(url, "shared")) == 3


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("xgboost.storage=studies.db", r"xgboost.storage must be an Optuna storage URL"),
        ("xgboost.storage=nodb://x", r"xgboost.storage=nodb://x: Optuna cannot open this storage"),
        ("gbdt.storage=sqlite:///x.db", r"gbdt.storage: the paper-grid search has no Optuna"),
    ],
)
def test_a_bad_storage_is_one_line_naming_the_key(tmp_path: Path, override, message) -> None:
    method = override.split(".")[0]
    method = "gbdt" if method == "gbdt" else method
    fast = FAST.get(method, [])
    with pytest.raises(UserError, match=message) as error:
        run(["baseline", method, *DATA, *fast, override, f"run_dir={tmp_path / 'r'}"])
    assert "\n" not in str(error.value)


def test_storage_and_study_name_are_free_on_resume() -> None:
    """Adding or moving the mirror changes no setting; a backend's own ``params.storage`` does."""
    saved = OmegaConf.create({"deep": {"search": {"storage": None}}, "xgboost": {"params": {}}})
    moved = {"deep": {"search": {"storage": "sqlite:///s.db", "study_name": "n"}}}
    assert changed_settings(saved, OmegaConf.create({**moved, "xgboost": {"params": {}}})) == []
    gbdt = OmegaConf.create({"gbdt": {"storage": None}})
    assert changed_settings(gbdt, OmegaConf.create({"gbdt": {"storage": "sqlite:///s.db"}})) == []
    own = {**moved, "xgboost": {"params": {"storage": "x"}}}
    assert changed_settings(saved, OmegaConf.create(own)) == ["xgboost.params.storage"]


def test_an_estimator_passes_storage_through(tmp_path: Path) -> None:
    """``xgboost__storage``/``xgboost__study_name`` are keywords like any config key."""
    from test_estimators import arrays

    from scarce_ltr.api import TreeRanker
    from scarce_ltr.core.config import load_config
    from scarce_ltr.data.datasets import load_dataset
    from scarce_ltr.data.stage_config import CommonConfig

    splits = load_dataset(load_config(CommonConfig, DATA)[0].data)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    keys = {k.replace(".", "__"): v for k, v in (o.split("=") for o in FAST["xgboost"])}
    ranker = TreeRanker("xgboost", **keys, xgboost__storage=url, xgboost__study_name="est")
    ranker.fit(*arrays(splits["train"]), eval_set=arrays(splits["vali"]))
    assert len(_stored(url, "est")) == 3


def test_the_default_study_name_is_the_run_folder_below_the_runs_root(monkeypatch, tmp_path):
    monkeypatch.setenv("LTR_RUNS_DIR", str(tmp_path / "runs"))
    folder = tmp_path / "runs" / "synthetic" / "baseline" / "xgboost" / "frac=1" / "seed=0"
    store = StudyStore.of("sqlite:///s.db", None, folder, key="xgboost.storage")
    assert store is not None and store.name == "synthetic/baseline/xgboost/frac=1/seed=0"
    assert store.part("pseudo").name == f"{store.name}/pseudo"
    assert StudyStore.of(None, "named", folder, key="gbdt.storage") is None
