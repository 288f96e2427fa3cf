"""TreeRanker's LightGBM face against lightgbm.LGBMRanker: the same arguments, the same model.

Each case fits ``lightgbm.LGBMRanker(**params).fit(X, y, **fit_args)`` and
``TreeRanker(**params).fit(X, y, **fit_args)`` on the same small synthetic data and asks for
predictions equal bit for bit and the same ``best_iteration_``, ``best_score_`` and
``evals_result_`` (docs/estimators.md, "LightGBM's LGBMRanker").
"""

from __future__ import annotations

import pickle
import warnings

import lightgbm as lgb
import numpy as np
import pytest
import scipy.sparse as sp

from scarce_ltr import load_ranker
from scarce_ltr.api import TreeRanker, load_estimator
from scarce_ltr.serving.export import ExportConfig
from scarce_ltr.serving.export import main as export_main

N_GROUPS, SIZE, WIDTH = 40, 20, 10


def _data(seed: int, n_groups: int):
    rng = np.random.default_rng(seed)
    n = n_groups * SIZE
    x = rng.normal(size=(n, WIDTH))
    y = np.clip(np.round(x[:, 0] + 0.5 * x[:, 1] + rng.normal(size=n)), 0, 4).astype(int)
    return x, y, [SIZE] * n_groups


X, Y, G = _data(0, N_GROUPS)
XV, YV, GV = _data(1, 15)
XT, _, _ = _data(2, 10)
EVAL = {"eval_set": [(XV, YV)], "eval_group": [GV]}

CASES = {
    "defaults": ({}, EVAL),
    "rounds, rate, seed": ({"n_estimators": 50, "learning_rate": 0.05, "random_state": 0}, EVAL),
    "eval_at [5]": ({"n_estimators": 50}, EVAL | {"eval_at": [5]}),
    "eval_at [1, 3, 5]": ({}, EVAL | {"eval_at": [1, 3, 5]}),
    "early stopping callback, every metric": (
        {"n_estimators": 200, "learning_rate": 0.2},
        EVAL | {"eval_at": [1, 3, 5], "callbacks": [lgb.early_stopping(5, verbose=False)]},
    ),
    "early stopping callback, first metric only": (
        {"n_estimators": 200, "learning_rate": 0.2},
        EVAL
        | {
            "eval_at": [3, 1],
            "callbacks": [lgb.early_stopping(5, first_metric_only=True, verbose=False)],
        },
    ),
    "early_stopping_rounds parameter": (
        {"n_estimators": 200, "learning_rate": 0.2, "early_stopping_rounds": 5},
        EVAL,
    ),
    "no eval set": ({"n_estimators": 30}, {}),
    "bagging": (
        {"subsample": 0.7, "subsample_freq": 1, "colsample_bytree": 0.8, "random_state": 3},
        EVAL | {"eval_at": [5]},
    ),
    "leaves, aliases, verbose=-1": (
        {"num_leaves": 7, "min_child_samples": 5, "reg_lambda": 1.0, "max_bin": 63, "verbose": -1},
        EVAL,
    ),
    "two eval sets, names": (
        {"n_estimators": 40},
        {
            "eval_set": [(XV, YV), (X, Y)],
            "eval_group": [GV, G],
            "eval_names": ["v", "train"],
            "eval_at": [2],
        },
    ),
    "sample weights": ({"n_estimators": 20}, EVAL | {"sample_weight": np.linspace(0.5, 2, len(Y))}),
}


def _quiet(fit):
    with warnings.catch_warnings():  # LightGBM 4.7 deprecates eval_set (for both alike)
        warnings.simplefilter("ignore")
        return fit()


def _pair(params: dict, fit_args: dict, x=X):
    ours = TreeRanker(**params)
    _quiet(lambda: ours.fit(x, Y, group=G, **fit_args))
    theirs = _quiet(lambda: lgb.LGBMRanker(**params).fit(x, Y, group=G, **fit_args))
    return ours, theirs


def _assert_same(ours, theirs, *tests) -> None:
    for x in tests:
        assert np.array_equal(ours.predict(x), theirs.predict(x))
    assert ours.best_iteration_ == theirs.best_iteration_
    assert ours.best_score_ == theirs.best_score_
    assert ours.evals_result_ == theirs.evals_result_
    assert ours.n_estimators_ == theirs.n_estimators_
    assert np.array_equal(ours.feature_importances_, theirs.feature_importances_)


@pytest.mark.parametrize("case", list(CASES))
def test_same_model_as_lgbm_ranker(case: str) -> None:
    params, fit_args = CASES[case]
    ours, theirs = _pair(params, fit_args)
    _assert_same(ours, theirs, XT, XV)
    if "callbacks" in fit_args or "early_stopping_rounds" in params:
        assert 0 < theirs.best_iteration_ < theirs.n_estimators  # early stopping took place


def test_input_kinds_are_lightgbm_s() -> None:
    """float32, sparse and DataFrame inputs reach LightGBM as they are (no float32 copy)."""
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(WIDTH)])
    for x, test in ((X.astype(np.float32), XT.astype(np.float32)),
                    (sp.csr_matrix(X * (X > 0)), sp.csr_matrix(XT * (XT > 0))),
                    (frame, pd.DataFrame(XT, columns=frame.columns))):  # fmt: skip
        ours, theirs = _pair({"n_estimators": 20}, EVAL if not sp.issparse(x) else {}, x)
        _assert_same(ours, theirs, test)
    # a DataFrame's columns are matched by name, in any order
    shuffled = pd.DataFrame(XT, columns=frame.columns)[list(reversed(frame.columns))]
    assert np.array_equal(
        ours.predict(shuffled), theirs.predict(pd.DataFrame(XT, columns=frame.columns))
    )


def test_qid_in_any_order_is_lightgbm_on_grouped_rows() -> None:
    """``qid=`` ids (rows in any order) train what LGBMRanker trains on the rows grouped by
    qid; ``(X_v, y_v, qid_v)`` likewise."""
    rng = np.random.default_rng(5)
    qid = np.repeat(np.arange(N_GROUPS) * 7, SIZE)
    shuffle = rng.permutation(len(Y))
    qid_v = np.repeat(np.arange(15), SIZE)
    ours = TreeRanker(n_estimators=20, verbose=-1).fit(
        X[shuffle], Y[shuffle], qid[shuffle], eval_set=(XV, YV, qid_v), eval_at=[5]
    )
    grouped = shuffle[np.argsort(qid[shuffle], kind="stable")]  # a QG's rows in input order
    theirs = _quiet(lambda: lgb.LGBMRanker(n_estimators=20, verbose=-1).fit(
        X[grouped], Y[grouped], group=G, eval_set=[(XV, YV)], eval_group=[GV], eval_at=[5]
    ))  # fmt: skip
    _assert_same(ours, theirs, XT)


def test_the_face_is_a_project_ranker(tmp_path) -> None:
    """save / load_estimator / load_ranker / pickle keep LightGBM's predictions."""
    ours, theirs = _pair({"n_estimators": 30, "random_state": 0}, EVAL | {"eval_at": [5]})
    expected = theirs.predict(XT)
    ours.save(tmp_path / "saved")
    loaded = load_estimator(tmp_path / "saved")
    assert np.array_equal(loaded.predict(XT), expected)
    assert loaded.n_estimators_ == theirs.n_estimators_
    assert np.array_equal(pickle.loads(pickle.dumps(ours)).predict(XT), expected)
    # the bundle scores float32 features, as ./run.sh predict does
    x32 = XT.astype(np.float32)
    assert np.array_equal(load_ranker(tmp_path / "saved").predict(x32), theirs.predict(x32))
    assert ours.commands_ == [] and ours.score(XV, YV, group=GV) > 0
    # ./run.sh export format=lightgbm: a model.txt any LightGBM loads, LightGBM's scores
    done = export_main(ExportConfig(run=str(tmp_path / "saved"), format="lightgbm",
                                    out=str(tmp_path / "model.txt")))  # fmt: skip
    assert np.array_equal(lgb.Booster(model_file=done["out"]).predict(XT), expected)
    with pytest.raises(ValueError, match="unlabeled"):
        TreeRanker().fit(X, Y, group=G, unlabeled=(XV, np.zeros(len(XV))))


def test_unknown_keyword_and_stage_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="num_leafs: no LightGBM parameter"):
        TreeRanker(num_leafs=7).fit(X, Y, group=G)
    with pytest.raises(ValueError, match="gbdt__n_trials: a config key of the stages"):
        TreeRanker(gbdt__n_trials=3).fit(X, Y, group=G)
    with pytest.raises(ValueError, match="missing='median'"):
        TreeRanker(missing="median").fit(X, Y, group=G)
    with pytest.raises(ValueError, match="qid or group"):
        TreeRanker().fit(X, Y)
