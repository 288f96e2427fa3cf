"""`TreeRanker`'s LightGBM face: ``TreeRanker()`` (method ``lightgbm``) is ``lightgbm.LGBMRanker``.

A LightGBM user's arguments mean what they mean to LightGBM, with nothing of the project's
added: `fit` hands them, and the user's arrays as they are (no float32 copy, no reordering
unless ``qid=`` asks for it), to one ``lightgbm.LGBMRanker`` fit, so the same arguments give the
same booster, predictions bit for bit, ``best_iteration_``, ``best_score_`` and
``evals_result_`` (LightGBM's early-stopping rule over every ``eval_at`` metric, ``callbacks``,
``sample_weight``, several eval sets). No search, no hold-out, no early stopping unless asked:
``TreeRanker("gbdt")`` and ``TreeRanker("gbdt-optuna")`` are the project's searched methods
(``./run.sh baseline ...``). What the face adds: ``qid=`` ids in any order (rows grouped
stably), and a model bundle of the booster (transform ``none``), so ``save``,
`load_estimator`, ``scarce_ltr.load_ranker``, ``./run.sh predict`` and ``export`` take it as
they take a run's.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from scarce_ltr.api import inputs, lgbm
from scarce_ltr.core.bundle import write_bundle
from scarce_ltr.data.ranking_split import QidGroups
from scarce_ltr.trees.lightgbm.aliases import main_names

METHOD = "lightgbm"
# Keys of the project the face reads itself: score's policy for QGs without a relevant item.
OWN_KEYS = ("metrics__policy",)
_FOLDER = "lightgbm"  # the fit folder's run folder, holding bundle/


def lightgbm_params(est: Any) -> dict[str, Any]:
    """``LGBMRanker``'s keyword arguments of the estimator: its explicit LightGBM parameters
    that are set, ``verbose`` when not the default, and every config keyword but `OWN_KEYS`
    (a LightGBM parameter or alias; another name is refused, as a typo LightGBM only warns of)."""
    import lightgbm as lgb

    params: dict[str, Any] = {"importance_type": est.importance_type}
    for name in ("n_estimators", "learning_rate", "n_jobs", "random_state"):
        if getattr(est, name) is not None:
            params[name] = getattr(est, name)
    if est.verbose is not True:  # LightGBM's verbosity (-1: silent); True: LightGBM's default
        params["verbose"] = int(est.verbose)
    known = set(inspect.signature(lgb.LGBMModel.__init__).parameters) - {"self", "kwargs"}
    known |= set(lgbm_main_names())
    for key in est._config_keys:
        if key in OWN_KEYS:
            continue
        if key not in known:
            what = "a config key of the stages" if "__" in key else "no LightGBM parameter"
            raise ValueError(
                f"{key}: {what}; TreeRanker('lightgbm') is lightgbm.LGBMRanker (its "
                "parameters and aliases), TreeRanker('gbdt') runs ./run.sh baseline gbdt"
            )
        params[key] = getattr(est, key)
    return params


def lgbm_main_names() -> dict[str, str]:
    names = main_names()
    return names | {main: main for main in names.values()}


def own_config(est: Any) -> dict[str, Any]:
    """The project's keys the face reads (`OWN_KEYS`), for ``score``."""
    return {k: getattr(est, k) for k in est._config_keys if k in OWN_KEYS}


def fit(est: Any, X, y, qid=None, *, group=None, unlabeled=None, eval_set=None, eval_group=None,
        eval_names=None, eval_at=None, callbacks=None, eval_X=None, eval_y=None,
        sample_weight=None, init_score=None, eval_sample_weight=None, eval_init_score=None,
        **rest: Any) -> tuple[Any, Any, int]:  # fmt: skip
    """(the fitted ``LGBMRanker``, the X it took, its number of QGs):
    ``lightgbm.LGBMRanker(**lightgbm_params(est)).fit(...)`` with the same
    arguments (``rest``: eval_metric, feature_name, categorical_feature, init_model, as given).
    ``qid=`` (and ``(X_v, y_v, qid_v)`` eval sets): rows grouped stably by qid, LightGBM's
    ``group`` sizes given; ``group=``: the rows as they are."""
    import lightgbm as lgb

    if unlabeled is not None:
        raise ValueError(
            "unlabeled: LGBMRanker trains on labeled QGs only (TreeRanker('gbdt-pseudo') "
            "labels more QGs with its own model)"
        )
    if est.missing not in (None, "keep"):
        raise ValueError(
            f"missing={est.missing!r}: TreeRanker('lightgbm') gives NaN to LightGBM as "
            "LGBMRanker does (missing='keep'); TreeRanker('gbdt') imputes or refuses"
        )
    params = lightgbm_params(est)
    n = _n_rows(X, "X")
    order, sizes = _rows(qid, group, n, "")
    X, y, sample_weight, init_score = (
        _take(a, order) for a in (X, y, sample_weight, init_score)
    )  # fmt: skip
    sets, groups, weights, inits = _eval_sets(eval_set, eval_group, eval_sample_weight,
                                              eval_init_score)  # fmt: skip
    given = {"eval_at": eval_at} if eval_at is not None else {}
    if eval_X is not None or eval_y is not None:  # LightGBM 4.7's own spelling, passed on
        given |= {"eval_X": eval_X, "eval_y": eval_y}
    elif sets is not None and sets is not eval_set:  # grouped by qid here: no deprecated name
        given |= {"eval_X": tuple(s[0] for s in sets), "eval_y": tuple(s[1] for s in sets)}
        sets = None
    model = lgb.LGBMRanker(**params)
    model.fit(X, y, group=sizes, eval_set=sets, eval_group=groups, eval_names=eval_names,
              sample_weight=sample_weight, init_score=init_score, eval_sample_weight=weights,
              eval_init_score=inits, callbacks=callbacks, **given, **rest)  # fmt: skip
    return model, X, len(sizes)


class BoosterModel:
    """The fitted booster as the estimators read a bundle, in memory (`api.fitted`'s face):
    ``kind`` lightgbm on raw features; `write` puts its bundle in a folder."""

    folder = None
    kind = METHOD
    transform = None  # raw features: nothing fitted before the booster

    def __init__(self, booster: Any, manifest: dict) -> None:
        self.model = SimpleNamespace(booster=booster, pca=None, embedding=None)
        self.manifest = manifest
        self.n_features = manifest["n_features"]

    def predict(self, features: np.ndarray, qids: np.ndarray | None = None) -> np.ndarray:
        return np.asarray(self.model.booster.predict(features), dtype=np.float64)

    def write(self, folder: Path) -> None:
        text = self.model.booster.model_to_string().encode()
        write_bundle(folder, self.manifest, {"model.txt": text})


def adopt(est: Any, model: Any, X, n_groups: int, folder: Path | None) -> None:
    """``est``'s fitted attributes from the fitted ``LGBMRanker``: its booster as the model in
    memory (``ranker_``; its bundle also written in ``folder``, a fit folder of ``work_dir``),
    LightGBM's attributes."""
    booster = model.booster_
    names = [str(c) for c in X.columns] if inputs.is_dataframe(X) else None
    est.ranker_ = BoosterModel(booster, _manifest(model, names))
    est.run_ = None
    if folder is not None:
        est.run_ = folder / _FOLDER
        est.run_.mkdir()
        est.ranker_.write(est.run_)
    est.commands_ = []  # no ./run.sh stage: LightGBM itself trained it
    est.report_ = None
    est.pretrain_run_ = est.encoder_ = None
    est.n_features_in_ = int(model.n_features_in_)
    if names is not None:
        est.feature_names_in_ = np.asarray(names, dtype=object)
    est.categories_ = _categories(X, booster)
    est.missing_ = "keep"
    est.medians_ = None
    est.n_labeled_groups_ = n_groups
    est.best_iteration_ = model.best_iteration_
    est.best_score_ = model.best_score_
    est.evals_result_ = model.evals_result_
    seed = booster.params.get("random_state", booster.params.get("seed"))
    est._config = own_config(est) | ({} if seed is None else {"seed": int(seed)})


def predict(est: Any, X, qid=None, group=None) -> np.ndarray:
    """``[n_items]`` float64 scores as ``LGBMRanker.predict`` gives them: the booster on the
    rows as given (a DataFrame's columns picked by name); ``qid``/``group`` are checked for
    length only (a tree scores each row alone)."""
    booster = lgbm.booster_of(est._fitted())
    rows = predict_input(est, X)
    if qid is not None or group is not None:
        inputs.query_ids(qid, group, _n_rows(rows, "X"))
    return booster.predict(rows)


def predict_input(est: Any, X):
    """``X`` as LightGBM's ``predict`` takes it (scikit-learn's check for arrays and sparse
    matrices, every dtype kept), a DataFrame's columns in fit's order by name."""
    from sklearn.utils import check_array

    names = getattr(est, "feature_names_in_", None)
    if inputs.is_dataframe(X):
        if names is not None:
            absent = [c for c in names if c not in set(map(str, X.columns))]
            if absent:
                raise ValueError(f"X lacks the column(s) {', '.join(map(repr, absent))} the "
                                 "ranker was fit on")  # fmt: skip
            labels = {str(c): c for c in X.columns}
            X = X[[labels[c] for c in names]]
        width = X.shape[1]
    else:
        X = check_array(X, accept_sparse=True, ensure_all_finite=False, ensure_min_samples=1)
        width = X.shape[1]
    if width != est.n_features_in_:
        raise ValueError(f"X has {width} features; the ranker was fit on {est.n_features_in_}")
    return X


def _rows(qid, group, n: int, what: str) -> tuple[np.ndarray | None, Any]:
    """(the row order, LightGBM's group sizes): ``group`` as given (None: rows as they are);
    ``qid`` ids grouped stably (None when already grouped in ascending order)."""
    if qid is None and group is None:
        raise ValueError(f"{what}qid or {what}group is needed: LightGBM ranks within QGs")
    ids = inputs.query_ids(qid, group, n, what=what)  # checked: lengths, sizes that add up
    if group is not None:
        return None, group
    groups = QidGroups(inputs.codes(ids)[0])
    ordered = bool(np.all(groups.order == np.arange(n)))
    return (None if ordered else groups.order), np.diff(groups.offsets)


def _eval_sets(eval_set, eval_group, weights, inits) -> tuple[list | None, ...]:
    """Eval sets in LightGBM's form: ``(X_v, y_v)`` pairs with ``eval_group`` as given, or the
    project's ``(X_v, y_v, qid_v)`` (one, or a list) grouped by qid."""
    if eval_set is None:
        return None, eval_group, weights, inits
    items = [eval_set] if isinstance(eval_set, tuple) else list(eval_set)
    if not any(isinstance(i, tuple | list) and len(i) == 3 for i in items):
        return eval_set, eval_group, weights, inits
    if eval_group is not None:
        raise ValueError("eval_set has its qid_v; eval_group is given too: pass one")
    sets, groups = [], []
    weights, inits = list(weights or [None] * len(items)), list(inits or [None] * len(items))
    for i, item in enumerate(items):
        if not isinstance(item, tuple | list) or len(item) != 3:
            raise ValueError("eval_set: give every set as (X_v, y_v, qid_v), or pairs with "
                             "eval_group")  # fmt: skip
        x_v, y_v, qid_v = item
        order, sizes = _rows(qid_v, None, _n_rows(x_v, "eval_set X"), "eval_set ")
        sets.append((_take(x_v, order), _take(y_v, order)))
        groups.append(sizes)
        weights[i], inits[i] = _take(weights[i], order), _take(inits[i], order)
    none = all(w is None for w in weights), all(s is None for s in inits)
    return sets, groups, None if none[0] else weights, None if none[1] else inits


def _take(values, order: np.ndarray | None):
    """Rows ``order`` of an array, sparse matrix, DataFrame or Series (None: as given)."""
    if values is None or order is None:
        return values
    if hasattr(values, "iloc"):
        return values.iloc[order]
    if isinstance(values, Sequence) and not isinstance(values, str):
        values = np.asarray(values)
    return values[order]


def _n_rows(x, arg: str) -> int:
    shape = getattr(x, "shape", None)
    if shape is None:
        shape = np.shape(x)
    if len(shape) != 2:
        raise ValueError(f"{arg} must be 2-D [n_items, n_features], got shape {tuple(shape)}")
    return int(shape[0])


def _categories(X, booster) -> dict[int, list]:
    """A DataFrame's categorical columns -> the categories LightGBM kept (its
    ``pandas_categorical``, in column order): `load_estimator` maps them back."""
    kept = getattr(booster, "pandas_categorical", None) or []
    if not inputs.is_dataframe(X) or not kept:
        return {}
    columns = [j for j, t in enumerate(X.dtypes) if str(t) == "category"]
    return {j: list(cats) for j, cats in zip(columns, kept, strict=False)}


def _manifest(model: Any, names: list[str] | None) -> dict[str, Any]:
    """The bundle's manifest: the booster (kind ``lightgbm``) on raw features, nothing fitted
    before it; the selection LightGBM's, when an eval set was scored."""
    import lightgbm as lgb

    n = int(model.n_features_in_)
    scores = {k: dict(v) for k, v in (model.best_score_ or {}).items()}
    manifest = {
        "model": {"kind": "lightgbm", "booster": "model.txt", "pca": None},
        "n_features": n,
        "feature_indices": list(range(1, n + 1)),
        "transform": {"kind": "none", "clip": None, "file": None},
        "outliers": {"method": "none", "file": None},
        "label_setting": "full",
        "selection": {"split": "eval_set", "lightgbm": scores, "rounds": model.best_iteration_},
        "run": {"stage": "estimator", "model": METHOD, "lightgbm": lgb.__version__},
    }
    if names is not None:
        manifest["feature_names"] = names
    return manifest
