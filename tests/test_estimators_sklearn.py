"""The estimators as scikit-learn and LightGBM users take them: BaseEstimator's contract,
``qid`` routed through GridSearchCV, cross_val_score and Pipeline, LGBMRanker's arguments and
attributes, and a scikit-learn-style error for each misuse (issues 48 and 49)."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import warnings
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pandas as pd
import pytest
import sklearn
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.metrics import ndcg_score
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_val_score
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import estimator_checks as checks
from sklearn.utils._param_validation import InvalidParameterError
from tiny import tiny_data

import scarce_ltr
from scarce_ltr.api import PretrainedRanker, TreeRanker, base, load_estimator
from scarce_ltr.core.config import load_config
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.stage_config import CommonConfig

# A tiny LightGBM: 10 rounds, one grid point (LightGBM's defaults), one thread.
FAST = {"n_estimators": 10, "n_jobs": 1, "num_leaves": 31, "verbose": False}


@pytest.fixture(scope="module")
def data():
    cfg, _ = load_config(CommonConfig, [*tiny_data(), "logger=none"])
    out = {}
    for name, split in load_dataset(cfg.data).items():
        qid = np.repeat(split.qids, split.group_sizes)
        out[name] = (np.asarray(split.features), np.asarray(split.labels), qid)
    return out


@pytest.fixture(scope="module")
def fitted(data):
    return TreeRanker("gbdt", **FAST).fit(*data["train"], eval_set=data["vali"])


def sizes(qid: np.ndarray) -> np.ndarray:
    """LightGBM's group: the sizes of consecutive QGs."""
    starts = np.flatnonzero(np.r_[True, qid[1:] != qid[:-1]])
    return np.diff(np.r_[starts, len(qid)])


# ---- scikit-learn --------------------------------------------------------------------------


@pytest.mark.parametrize("make", [TreeRanker, PretrainedRanker])
def test_the_scikit_learn_checks_that_apply_to_rankers(make) -> None:
    """scikit-learn's own checks of the estimator contract (the ones that fit call fit(X, y)
    without qid; a ranker needs one: the fitting checks are the tests below). Config keys
    are set as attributes, as LGBMRanker's **kwargs are: the checks take the named
    parameters."""
    estimator = make(random_state=0, verbose=False)
    name = type(estimator).__name__
    for check in (
        checks.check_no_attributes_set_in_init,
        checks.check_parameters_default_constructible,
        checks.check_get_params_invariance,
        checks.check_set_params,
        checks.check_estimator_repr,
        checks.check_estimator_cloneable,
        checks.check_estimators_unfitted,
        checks.check_do_not_raise_errors_in_init_or_set_params,
        checks.check_valid_tag_types,
        checks.check_estimator_tags_renamed,
        checks.check_mixin_order,
    ):
        check(name, estimator)
    assert estimator.__sklearn_tags__().input_tags.sparse


def test_gridsearchcv_with_groupkfold_cross_val_score_and_pipeline(data) -> None:
    """qid routed with metadata routing: the folds keep whole QGs, each fit and score gets its
    fold's qid, and the search refits on all rows."""
    x, y, qid = data["train"]
    test = data["test"]
    with sklearn.config_context(enable_metadata_routing=True):
        ranker = TreeRanker("gbdt", **FAST).set_fit_request(qid=True).set_score_request(qid=True)
        search = GridSearchCV(ranker, {"n_estimators": [2, 10]}, cv=GroupKFold(n_splits=2))
        search.fit(x, y, qid=qid, groups=qid)
        assert set(search.cv_results_["param_n_estimators"]) == {2, 10}
        assert np.isfinite(search.cv_results_["mean_test_score"]).all()
        best = search.best_estimator_
        assert best.n_labeled_groups_ == 24  # refit on the 30 QGs, 6 held out to validate
        assert 0 < search.score(*test[:2], qid=test[2]) <= 1
        scores = cross_val_score(
            ranker, x, y, cv=GroupKFold(n_splits=2), params={"qid": qid, "groups": qid}
        )
        assert scores.shape == (2,) and ((0 < scores) & (scores <= 1)).all()
        pipe = Pipeline([("scale", StandardScaler()),
                         ("rank", TreeRanker("gbdt", **FAST).set_fit_request(qid=True)
                          .set_predict_request(qid=True).set_score_request(qid=True))])  # fmt: skip
        pipe.fit(x, y, qid=qid)
        expected = pipe["rank"].predict(pipe["scale"].transform(test[0]), test[2])
        np.testing.assert_array_equal(pipe.predict(test[0], qid=test[2]), expected)
        assert pipe.score(*test[:2], qid=test[2]) == pipe["rank"].score(
            pipe["scale"].transform(test[0]), test[1], test[2]
        )
    # without routing, score says how to route qid
    with pytest.raises(ValueError, match="set_score_request"):
        best.score(*test[:2])


def test_parameters_are_validated_as_scikit_learn_does(data) -> None:
    x, y, qid = data["train"]
    with pytest.raises(InvalidParameterError, match="'method' parameter of TreeRanker"):
        TreeRanker(None).fit(x, y, qid)
    with pytest.raises(InvalidParameterError, match="'strategy' parameter"):
        PretrainedRanker(strategy="combine").fit(x, y, qid)
    with pytest.raises(InvalidParameterError, match="'n_estimators' parameter"):
        TreeRanker(n_estimators=0).fit(x, y, qid)
    with pytest.raises(ValueError, match="'fit' is not a parameter"):
        TreeRanker(fit=1)
    twin = clone(TreeRanker("xgboost", n_jobs=2, random_state=3, xgboost__n_trials=2))
    assert twin.get_params()["xgboost__n_trials"] == 2 and twin.random_state == 3


# ---- LightGBM's LGBMRanker ----------------------------------------------------------------


def test_lgbmranker_arguments_and_attributes(data, fitted) -> None:
    """group=/eval_group= as LightGBM takes them give the model qid= gives; eval_at,
    record_evaluation, best_iteration_, evals_result_, feature_importances_, booster_."""
    (x, y, qid), (xv, yv, qv), (xt, _, qt) = data["train"], data["vali"], data["test"]
    record: dict = {}
    ranker = TreeRanker("gbdt", **FAST).fit(
        x, y, group=sizes(qid), eval_set=[(xv, yv)], eval_group=[sizes(qv)], eval_at=[1, 5],
        callbacks=[lgb.early_stopping(5), lgb.log_evaluation(0), lgb.record_evaluation(record)],
    )  # fmt: skip
    assert ranker.commands_[0].count("gbdt.early_stopping_rounds=5") == 1
    assert set(ranker.evals_result_["valid_0"]) == {"ndcg@1", "ndcg@5"}
    curve = ranker.evals_result_["valid_0"]["ndcg@5"]
    assert len(curve) == ranker.best_iteration_ == ranker.booster_.current_iteration()
    assert curve[-1] == pytest.approx(ranker.report_["metrics"]["vali"]["ndcg@5"], abs=1e-6)
    assert record == ranker.evals_result_
    assert ranker.feature_importances_.shape == (12,) and ranker.feature_importances_.sum() > 0
    assert ranker.n_iter_ == ranker.n_estimators_ == ranker.best_iteration_
    assert ranker.objective_ == "lambdarank" and ranker.feature_name_[0] == "Column_0"
    assert ranker.best_score_["valid_0"]["ndcg@5"] == curve[-1]
    ranker.importance_type = "gain"
    gain = ranker.feature_importances_
    np.testing.assert_allclose(gain, ranker.booster_.feature_importance("gain"))
    # LightGBM 4.7's eval_X/eval_y
    same = TreeRanker("gbdt", **FAST).fit(x, y, qid, eval_X=(xv,), eval_y=(yv,),
                                          eval_group=[sizes(qv)])  # fmt: skip
    np.testing.assert_array_equal(same.predict(xt, qt), fitted.predict(xt, qt))
    # qid= gives the same model (QG numbers only name the groups)
    np.testing.assert_array_equal(ranker.predict(xt, qt), fitted.predict(xt, qt))
    assert fitted.best_iteration_ == len(fitted.evals_result_["valid_0"]["ndcg@5"])


def test_aliases_are_the_config_keys_lightgbm_names_stand_for() -> None:
    tree = TreeRanker("gbdt", n_estimators=100, n_jobs=2, random_state=7, learning_rate=0.1,
                      reg_lambda=1.0, min_child_samples=5, max_bin=63)  # fmt: skip
    config = tree.config_params()
    assert config["gbdt__max_rounds"] == 100 and config["gbdt__num_threads"] == 2
    assert config["seed"] == 7 and config["gbdt__learning_rate"] == 0.1
    assert config["gbdt__params"] == {"reg_lambda": 1.0, "max_bin": 63}
    # one grid point, LightGBM's model: the grid value given, the others at LightGBM's defaults
    assert (config["gbdt__grid"], config["gbdt__min_data_in_leaf"]) == ("full", [5])
    assert config["gbdt__num_leaves"] == [31] and config["gbdt__feature_fraction"] == [1.0]
    assert TreeRanker("catboost", n_estimators=50).config_params()["catboost__max_rounds"] == 50
    seed = TreeRanker("gbdt", random_state=np.random.RandomState(0)).config_params()["seed"]
    assert seed == np.random.RandomState(0).randint(np.iinfo(np.int32).max)
    with pytest.raises(ValueError, match="set twice"):
        TreeRanker("gbdt", n_estimators=5, num_iterations=6).config_params()
    with pytest.raises(ValueError, match="random_state and seed"):
        TreeRanker("gbdt", random_state=1, seed=2).config_params()
    with pytest.raises(ValueError, match="class_weight: a ranker has no classes"):
        TreeRanker("gbdt", class_weight="balanced").config_params()
    with pytest.raises(ValueError, match="boosting keywords"):
        TreeRanker("resnet", n_estimators=5).config_params()


def test_string_qids_and_pandas_categories(data, fitted) -> None:
    (x, y, qid), vali, (xt, _, qt) = data["train"], data["vali"], data["test"]
    named = np.array([f"q{q:03d}" for q in qid], dtype=object)
    ranker = TreeRanker("gbdt", **FAST).fit(x, y, named, eval_set=vali)
    np.testing.assert_array_equal(ranker.predict(xt, qt.astype(str)), fitted.predict(xt, qt))
    # a categorical column: LightGBM's categorical split on its codes; unseen -> missing
    frame = pd.DataFrame(x, columns=[f"f{j}" for j in range(12)])
    frame["site"] = pd.Categorical(np.where(x[:, 0] > np.median(x[:, 0]), "a", "b"))
    frame_v = pd.DataFrame(vali[0], columns=frame.columns[:12])
    frame_v["site"] = pd.Categorical(np.where(vali[0][:, 0] > 0, "b", "a"))
    cat = TreeRanker("gbdt", **FAST).fit(frame, y, qid, eval_set=(frame_v, *vali[1:]))
    assert cat.categories_ == {12: ["a", "b"]}
    assert "gbdt.params.categorical_feature=[12]" in cat.commands_[0]
    test = frame_v.copy()
    test["site"] = pd.Categorical(["c", "a"] * (len(test) // 2) + ["a"] * (len(test) % 2))
    assert np.isfinite(cat.predict(test, vali[2])).all()
    with pytest.raises(ValueError, match=r"\[12\] are categorical: only TreeRanker's LightGBM"):
        TreeRanker("gbdt-pca", **FAST).fit(frame, y, qid, eval_set=(frame_v, *vali[1:]))


def test_lgbmranker_arguments_without_a_counterpart_are_refused_by_name(data) -> None:
    x, y, qid = data["train"]
    tree = TreeRanker("gbdt", **FAST)
    for keywords, message in [
        ({"sample_weight": np.ones(len(y))}, "sample_weight is not supported"),
        ({"init_model": "model.txt"}, "init_model is not supported"),
        ({"eval_metric": "map"}, "eval_metric='map'"),
        ({"callbacks": [lambda env: None]}, "callbacks: <lambda> is not supported"),
        ({"group": sizes(qid)}, "qid and group are both given"),
        ({"eval_set": [(x, y)]}, r"needs eval_group"),
        ({"eval_set": [(x, y, qid), (x, y, qid)]}, "eval_set holds 2 sets"),
        ({"eval_at": [0]}, "eval_at must be positive"),
    ]:
        with pytest.raises(ValueError, match=message):
            tree.fit(x, y, qid, **keywords)
    with pytest.raises(ValueError, match="group's sizes add up to 5"):
        tree.fit(x, y, group=[2, 3])


# ---- misuse and refits (issue 48) ----------------------------------------------------------


def test_a_refit_forgets_the_first_fit(data) -> None:
    (x, y, qid), vali, (xt, _, qt) = data["train"], data["vali"], data["test"]
    columns = [f"f{j}" for j in range(12)]
    tree = TreeRanker("gbdt", **FAST).fit(pd.DataFrame(x, columns=columns), y, qid, eval_set=vali)
    assert list(tree.feature_names_in_) == columns
    tree.fit(x[:, ::-1], y, qid, eval_set=(vali[0][:, ::-1], *vali[1:]))
    assert not hasattr(tree, "feature_names_in_")
    frame = pd.DataFrame(xt[:, ::-1], columns=columns)  # by position now, not by the old names
    np.testing.assert_array_equal(tree.predict(frame, qt), tree.predict(xt[:, ::-1], qt))


def test_misuse_gets_scikit_learn_style_errors(data, fitted, tmp_path) -> None:
    (x, y, qid), (xt, yt, qt) = data["train"], data["test"]
    with pytest.raises(NotFittedError, match="not fitted"):
        TreeRanker().score(xt, yt, qt)
    with pytest.raises(NotFittedError):
        TreeRanker().save(tmp_path / "never")
    # integer column labels (pd.DataFrame(array)) in eval_set and predict
    frame = TreeRanker("gbdt", **FAST).fit(pd.DataFrame(x), y, qid, eval_set=(
        pd.DataFrame(data["vali"][0]), *data["vali"][1:]))  # fmt: skip
    assert list(frame.feature_names_in_) == [str(j) for j in range(12)]
    np.testing.assert_array_equal(frame.predict(pd.DataFrame(xt), qt), frame.predict(xt, qt))


def test_a_pickled_estimator_saves_after_its_fit_folder_is_gone(data, fitted, tmp_path) -> None:
    xt, _, qt = data["test"]
    state = np.random.RandomState(0)  # estimator.json keeps the seed it drew
    tree = TreeRanker("gbdt", work_dir=tmp_path / "work", random_state=state, **FAST)
    tree.fit(*data["train"], eval_set=data["vali"])
    blob = pickle.dumps(tree)
    shutil.rmtree(tmp_path / "work")
    copy = pickle.loads(blob)
    saved = copy.save(tmp_path / "saved")
    loaded = load_estimator(saved)
    np.testing.assert_array_equal(loaded.predict(xt, qt), tree.predict(xt, qt))
    assert loaded.random_state == np.random.RandomState(0).randint(np.iinfo(np.int32).max)


def test_load_estimator_checks_estimator_json(fitted, tmp_path) -> None:
    saved = fitted.save(tmp_path / "saved")
    good = json.loads((saved / "estimator.json").read_text())
    with pytest.raises(ValueError, match="not a folder that save"):
        load_estimator(saved / "estimator.json")
    for text, message in [
        ("", "estimator.json: not JSON"),
        ("{", "estimator.json: not JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        (json.dumps({**good, "estimator": "Ranker"}), "estimator 'Ranker' is none of"),
        (json.dumps({k: v for k, v in good.items() if k != "n_features"}), "no key 'n_features'"),
        (json.dumps({**good, "n_features": 11}), "n_features is 11; the bundle's model takes 12"),
        (json.dumps({**good, "missing": "raise"}), "missing is 'raise'; its params give 'keep'"),
        (json.dumps({**good, "missing": "median"}), "missing is 'median'"),
        (json.dumps({**good, "params": {**good["params"], "method": None}}), "params: The 'meth"),
        (json.dumps({**good, "feature_names": ["a"]}), "feature_names must be 12"),
    ]:
        (saved / "estimator.json").write_text(text)
        with pytest.raises(ValueError, match=message):
            load_estimator(saved)


def test_progress_is_shown_unless_verbose_is_false(data, capfd) -> None:
    (x, y, qid), vali = data["train"], data["vali"]
    TreeRanker("gbdt", **{**FAST, "verbose": True}).fit(x, y, qid, eval_set=vali)
    shown = capfd.readouterr()
    assert "TreeRanker: baseline gbdt" in shown.err and "gbdt: fit 1/1" in shown.err
    assert "run folder" not in shown.out  # the stage's report stays in its log
    TreeRanker("gbdt", **FAST).fit(x, y, qid, eval_set=vali)
    shown = capfd.readouterr()
    assert shown.out == "" and shown.err == ""


def test_an_offline_wandb_run_without_work_dir_is_announced(data, tmp_path) -> None:
    """The offline W&B run lives in the fit's folder: a temporary one is removed, so say so."""
    (x, y, qid), vali = data["train"], data["vali"]
    with pytest.warns(UserWarning, match="work_dir"):
        TreeRanker("gbdt", **FAST, logger="wandb").fit(x, y, qid, eval_set=vali)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        TreeRanker("gbdt", **FAST, logger="wandb", work_dir=tmp_path).fit(x, y, qid, eval_set=vali)


# ---- labels, score, save and load as the ecosystem's users expect them (issue 49) -----------


def test_integral_float_labels_are_taken_and_a_fraction_refused_as_lgbmranker_does(
    data, fitted, tmp_path
) -> None:
    """y=1.0 is a grade; y=0.5 stops LGBMRanker's lambdarank ("label should be int type"): ours
    stops at the same label with a ValueError naming y, the row and what is expected, before any
    folder is written."""
    (x, y, qid), vali, (xt, _, qt) = data["train"], data["vali"], data["test"]
    floats = TreeRanker("gbdt", **FAST).fit(x, y.astype(np.float64), qid, eval_set=vali)
    np.testing.assert_array_equal(floats.predict(xt, qt), fitted.predict(xt, qt))
    half = y.astype(np.float64)
    half[3] = 0.5
    with pytest.raises(lgb.basic.LightGBMError, match="label should be int type"):
        lgb.LGBMRanker(n_estimators=1, verbose=-1).fit(x, half, group=sizes(qid))
    for method, backend in [("gbdt", "LightGBM"), ("xgboost", "XGBoost")]:
        with pytest.raises(
            ValueError,
            match=rf"^y: row 3: label 0.5 is not an integer; TreeRanker"
            rf"\('{method}'\) \({backend}\) takes integer relevance grades 0..30",
        ):
            TreeRanker(method, work_dir=tmp_path, verbose=False).fit(x, half, qid, eval_set=vali)
    with pytest.raises(ValueError, match="^eval_set y: row 0: label 2.5 is not an integer"):
        TreeRanker("gbdt", **FAST, work_dir=tmp_path).fit(x, y, qid, eval_set=(
            vali[0], np.r_[2.5, vali[1][1:]], vali[2]))  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_score_without_a_relevant_item_is_an_error_or_the_policy_s_number(data, fitted) -> None:
    """A QG without a relevant item has no NDCG (DESIGN.md): with the default policy skip and
    every QG such, score raises rather than return a NaN GridSearchCV would rank silently;
    policy zero gives scikit-learn's ndcg_score number (0)."""
    (x, y, qid), vali, (xt, yt, qt) = data["train"], data["vali"], data["test"]
    none = np.zeros_like(yt)
    with pytest.raises(ValueError, match=r"^score: none of the 10 QGs of y has a relevant item"):
        fitted.score(xt, none, qt)
    some = np.where(qt == qt[0], yt, 0)  # one QG keeps its labels: the mean is over it alone
    assert fitted.score(xt, some, qt) == fitted.score(
        xt[qt == qt[0]], yt[qt == qt[0]], qt[qt == qt[0]]
    )
    assert ndcg_score([[0.0, 0.0, 0.0]], [[3.0, 2.0, 1.0]]) == 0.0
    zero = TreeRanker("gbdt", **FAST, metrics__policy="zero").fit(x, y, qid, eval_set=vali)
    assert zero.score(xt, none, qt) == 0.0


def test_save_replaces_an_earlier_save_and_a_failure_never_leaves_half_of_one(
    fitted, tmp_path, monkeypatch
) -> None:
    """Saving onto an earlier save replaces it, as LightGBM's save_model and torch.save do; the
    new folder is renamed into place, so a save that fails or is killed leaves a whole save."""
    saved = fitted.save(tmp_path / "saved")
    assert fitted.save(saved) == saved and load_estimator(saved).n_features_in_ == 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved"]  # no temp folder left
    real_replace = os.replace
    failed = []

    def replace(src, dst):
        if str(dst) == str(saved) and ".saved." in str(src) and not failed:
            failed.append(src)
            raise OSError(28, "No space left on device")  # moving the new save in fails
        real_replace(src, dst)

    monkeypatch.setattr(base.os, "replace", replace)
    with pytest.raises(OSError, match="No space left"):
        fitted.save(saved)
    assert failed and sorted(p.name for p in tmp_path.iterdir()) == ["saved"]
    load_estimator(saved)  # the earlier save, whole


def test_a_save_killed_while_removing_the_earlier_one_leaves_the_new_one_whole(
    fitted, tmp_path, monkeypatch
) -> None:
    saved = fitted.save(tmp_path / "saved")
    real_rmtree = shutil.rmtree

    def killed_while_removing(folder, *args, **kwargs):
        if (Path(folder) / "estimator.json").is_file():
            (Path(folder) / "estimator.json").unlink()  # half removed, then the process dies
            raise KeyboardInterrupt
        real_rmtree(folder, *args, **kwargs)

    monkeypatch.setattr(base.shutil, "rmtree", killed_while_removing)
    with pytest.raises(KeyboardInterrupt):
        fitted.save(saved)
    monkeypatch.setattr(base.shutil, "rmtree", real_rmtree)
    np.testing.assert_array_equal(
        load_estimator(saved).predict(np.eye(3, 12)), fitted.predict(np.eye(3, 12))
    )


def test_load_estimator_on_a_run_bundle_says_what_scores_it(data, tmp_path) -> None:
    kept = TreeRanker("gbdt", work_dir=tmp_path, **FAST).fit(*data["train"], eval_set=data["vali"])
    for folder in (kept.run_, kept.run_ / "bundle"):  # work_dir keeps the stage's run folder
        with pytest.raises(ValueError) as error:
            load_estimator(folder)
        message = str(error.value)
        assert message.startswith(f"{folder}: a run's model bundle, not an estimator's save()")
        assert f"./run.sh predict {folder} data.path=<file>" in message
        assert "scarce_ltr.load_ranker(" in message and "\n" not in message
        scarce_ltr.load_ranker(folder)  # what the message advises loads it


def test_estimator_json_holds_its_format_and_version_and_a_newer_format_is_refused(
    fitted, tmp_path
) -> None:
    saved = fitted.save(tmp_path / "saved")
    file = saved / "estimator.json"
    good = json.loads(file.read_text())
    assert good["format"] == 1 and good["version"] == scarce_ltr.__version__
    where = re.escape(str(file))
    for info, message in [
        ({**good, "format": 2, "version": "9.0"}, rf"^{where}: format 2 \(written by scarce-ltr "
         rf"9.0\) is newer than scarce-ltr {scarce_ltr.__version__} reads \(format 1\); upgrade"),
        ({**good, "format": "1"}, "format must be a positive integer, got '1'"),
    ]:  # fmt: skip
        file.write_text(json.dumps(info))
        with pytest.raises(ValueError, match=message):
            load_estimator(saved)
    older = {k: v for k, v in good.items() if k not in ("format", "version")}
    file.write_text(json.dumps(older))  # written before the keys existed
    assert load_estimator(saved).n_features_in_ == 12
