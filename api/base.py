"""What the estimators share: parameters, checked inputs, fit's folder and the bundle's scoring.

`Ranker.fit` checks every input (nothing is written before), writes the arrays as a
``data=arrays`` data set (`scarce_ltr.api.layout`) in a folder of its own (`Workspace`) and lets
the subclass run its stages (`scarce_ltr.api.stages`); `predict`, `score` and `save` use the run's
model bundle. ``get_params``/``set_params`` follow scikit-learn's protocol, so that
`sklearn.base.clone` works, and every fitted attribute ends in ``_``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from scarce_ltr.api import inputs
from scarce_ltr.api.layout import holdout, train_split
from scarce_ltr.api.stages import leaves, route, run_stage
from scarce_ltr.core.metrics import mean_ndcg
from scarce_ltr.data.arrays import write_arrays
from scarce_ltr.data.ranking_split import QidGroups, RankingSplit
from scarce_ltr.serving.ranker import ESTIMATOR_FILE, BundledRanker, load_ranker

# Trees that take NaN as a missing value (the others' inputs pass through an encoder or PCA).
NAN_TREES = ("gbdt", "gbdt-optuna", "gbdt-pseudo", "catboost", "xgboost")
# What the estimators set unless a keyword says otherwise: no tracker; no Outlier-NDCG (fit's
# test split is its eval_set again: the stages need one, the estimator reports none).
DEFAULTS = {"logger": "none", "data__outliers__method": "none"}


class PretrainedEncoder:
    """A pretraining run: ``pretrained=`` of other estimators finetunes the same encoder (pretrain
    once, finetune for each label budget). `copy.deepcopy` and `sklearn.base.clone` share it."""

    def __init__(self, folder: str | Path, *, workspace: Workspace | None = None) -> None:
        self.folder = Path(folder)
        self._workspace = workspace  # keeps a temporary work folder alive while in use

    def __deepcopy__(self, memo: dict) -> PretrainedEncoder:
        return self

    def __repr__(self) -> str:
        return f"PretrainedEncoder({str(self.folder)!r})"


class Workspace:
    """One fit's folder: ``<work_dir>/fit-*`` or a temporary folder removed with its last user."""

    def __init__(self, work_dir: str | Path | None) -> None:
        if work_dir is None:
            self.path = Path(tempfile.mkdtemp(prefix="scarce-ltr-fit-"))
            weakref.finalize(self, shutil.rmtree, str(self.path), ignore_errors=True)
        else:
            Path(work_dir).mkdir(parents=True, exist_ok=True)
            self.path = Path(tempfile.mkdtemp(prefix="fit-", dir=work_dir))
        self.temporary = work_dir is None

    def __deepcopy__(self, memo: dict) -> Workspace:
        return self


class Ranker:
    """Parameters, inputs, fit's workspace and the bundle's scoring shared by the estimators."""

    _explicit: tuple[str, ...] = ()

    def __init__(self, **params: Any) -> None:
        self._config_keys: list[str] = []
        self.set_params(**params)

    # ---- scikit-learn's parameter protocol --------------------------------------------------
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        names = [*self._explicit, *self._config_keys]
        return {name: getattr(self, name) for name in names}

    def set_params(self, **params: Any) -> Ranker:
        for name, value in params.items():
            if name not in self._explicit and name not in self._config_keys:
                self._config_keys.append(name)
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items() if v is not None)
        return f"{type(self).__name__}({shown})"

    def config_params(self) -> dict[str, Any]:
        """The config keywords, over the estimators' `DEFAULTS`."""
        return DEFAULTS | {k: getattr(self, k) for k in self._config_keys}

    # ---- fit --------------------------------------------------------------------------------
    def fit(self, X, y, qid, *, unlabeled=None, eval_set=None) -> Ranker:
        """Train on the labeled rows ``(X, y, qid)``; ``unlabeled=(X_u, qid_u)``: more QGs
        without labels (pretraining and the semi-supervised trees use them); ``eval_set=
        (X_v, y_v, qid_v)``: every choice (epoch, grid point, checkpoint) is made on it (a
        seeded 20% of the labeled QGs when it is left out). Returns ``self``."""
        policy = self._missing_policy()
        if policy not in inputs.MISSING_POLICIES:
            raise ValueError(f"missing must be one of {', '.join(inputs.MISSING_POLICIES)}")
        labeled = inputs.as_features(X, arg="X")
        names = labeled.names
        pieces = {"X": labeled}
        if unlabeled is not None:
            x_u, qid_u = _pair(unlabeled)
            pieces["unlabeled X"] = inputs.as_features(x_u, arg="unlabeled X", columns=names)
        if eval_set is not None:
            x_v, y_v, qid_v = _triple(eval_set)
            pieces["eval_set X"] = inputs.as_features(x_v, arg="eval_set X", columns=names)
        width = labeled.values.shape[1]
        for arg, piece in pieces.items():
            if piece.values.shape[1] != width:
                raise ValueError(f"{arg} has {piece.values.shape[1]} features; X has {width}")
        splits = {"train": _split(labeled, y, qid, "")}
        if unlabeled is not None:
            splits["unlabeled"] = _split(pieces["unlabeled X"], None, qid_u, "unlabeled ")
            _check_disjoint(splits["train"], splits["unlabeled"])
        if eval_set is not None:
            splits["vali"] = _split(pieces["eval_set X"], y_v, qid_v, "eval_set ")
        if splits["train"].n_items == 0:
            raise ValueError("the labeled set is empty: X, y and qid have no row")
        every = np.concatenate([splits[s].features for s in splits if s != "vali"])
        inputs.check_columns(inputs.Features(every, names), arg="X and unlabeled X")
        medians = None
        if policy == "median":
            medians = np.nanmedian(every, axis=0).astype(np.float32)
            splits = {
                k: s.with_features(inputs.impute(s.features, medians)) for k, s in splits.items()
            }
        for arg, split in zip(("X", "unlabeled X", "eval_set X"), splits.values(), strict=False):
            inputs.check_missing(inputs.Features(split.features, names), policy, arg=arg)
        seed = int(self.config_params().get("seed", 0))
        if "vali" not in splits:
            splits["train"], splits["vali"] = holdout(splits["train"], seed=seed)
        for name in ("train", "vali"):
            if not splits[name].groups_with_relevant().any():
                what = "y" if name == "train" else "eval_set's y"
                raise ValueError(f"{what} has no label above 0: no QG has a relevant item")
        self.pretrained_source_ = self._pretrained_source()
        overrides = route(self.config_params(), self._stages())  # before anything is written
        workspace = Workspace(self.work_dir)
        try:
            train, fraction = train_split(splits["train"], splits.get("unlabeled"), seed=seed)
            data = workspace.path / "data"
            write_arrays(train, data / "train")
            write_arrays(splits["vali"], data / "vali")
            common = ["data=arrays", f"data.path={data}", "data.splits.test=vali"]
            log = None if self.verbose else workspace.path / "log.txt"
            self.commands_: list[list[str]] = []
            self._run_stages(workspace, common, overrides, fraction, log)
            drawn = ((self.report_ or {}).get("labels") or {}).get("train_labeled_groups")
            if drawn not in (None, splits["train"].n_groups):  # layout.train_split's promise
                raise RuntimeError(f"the run labeled {drawn} QGs, not {splits['train'].n_groups}")
            if workspace.temporary:  # the runs keep what they need; the copy of X goes
                shutil.rmtree(data, ignore_errors=True)
        except BaseException:
            shutil.rmtree(workspace.path, ignore_errors=True)
            raise
        self.workspace_ = workspace
        self.ranker_ = load_ranker(self.run_)
        self.n_features_in_ = width
        if names is not None:
            self.feature_names_in_ = np.asarray(names, dtype=object)
        self.missing_ = policy
        self.medians_ = medians
        self.n_labeled_groups_ = splits["train"].n_groups
        return self

    def _stage(self, log: Path | None, argv: list[str]) -> dict | None:
        self.commands_.append(argv)
        return run_stage(argv, log)

    # ---- predict, score, save ---------------------------------------------------------------
    def predict(self, X, qid=None) -> np.ndarray:
        """``[n_items]`` float64 scores of raw ``X``, in the input order; ``qid`` in any order
        (None: all rows are one QG). A DataFrame's columns are matched by name."""
        ranker = self._fitted()
        features = self._features(X)
        n = len(features)
        qids = np.zeros(n, dtype=np.int64) if qid is None else inputs.as_qids(qid, n)
        groups = QidGroups(qids)
        scores = ranker.predict(features[groups.order], groups.item_qids())
        return groups.to_input_order(scores)

    def score(self, X, y, qid) -> float:
        """Mean NDCG@5 over the QGs of ``(X, y, qid)`` (`scarce_ltr.core.metrics`: gain
        2^y - 1, QGs without a relevant item skipped unless ``metrics__policy`` says)."""
        n = len(self._features(X))
        labels = inputs.as_labels(y, n)
        qids = inputs.as_qids(qid, n)
        groups = QidGroups(qids)
        scores = self.predict(X, qids)[groups.order]
        policy = dict(leaves(self.config_params())).get("metrics.policy", "skip")
        return mean_ndcg(scores, labels[groups.order], groups.offsets, k=5, policy=policy)

    def save(self, path: str | Path) -> Path:
        """Write the run's model bundle to ``path`` (a new folder, or one an earlier `save`
        wrote), with ``estimator.json``: `load_estimator` and `scarce_ltr.load_ranker` read it."""
        self._fitted()
        path = Path(path)
        if path.exists() and not (path / ESTIMATOR_FILE).is_file():
            if not path.is_dir() or any(path.iterdir()):
                raise ValueError(f"{path} exists and holds no saved ranker; give a new folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        try:
            shutil.copytree(self.ranker_.folder, tmp, dirs_exist_ok=True)
            (tmp / ESTIMATOR_FILE).write_text(json.dumps(self._description(), indent=1) + "\n")
            if path.exists():
                shutil.rmtree(path)
            os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path

    def _description(self) -> dict:
        names = getattr(self, "feature_names_in_", None)
        return {
            "estimator": type(self).__name__,
            "params": {k: _jsonable(v) for k, v in self.get_params().items()},
            "n_features": self.n_features_in_,
            "feature_names": None if names is None else [str(n) for n in names],
            "missing": self.missing_,
            "medians": None if self.medians_ is None else self.medians_.tolist(),
            "run": str(getattr(self, "run_", "")),
        }

    def _features(self, X) -> np.ndarray:
        names = getattr(self, "feature_names_in_", None)
        columns = None if names is None else [str(n) for n in names]
        features = inputs.as_features(
            X, arg="X", columns=columns if inputs.is_dataframe(X) else None
        )
        if features.values.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {features.values.shape[1]} features; the ranker was fit on "
                f"{self.n_features_in_}"
            )
        values = features.values
        if self.medians_ is not None:
            values = inputs.impute(values, self.medians_)
        inputs.check_missing(inputs.Features(values, features.names), self.missing_)
        return values

    def _fitted(self) -> BundledRanker:
        ranker = getattr(self, "ranker_", None)
        if ranker is None:
            raise ValueError(f"this {type(self).__name__} is not fitted yet: call fit first")
        return ranker

    # ---- for the subclasses -----------------------------------------------------------------
    def _missing_policy(self) -> str:
        return self.missing or "raise"

    def _pretrained_source(self) -> Path | None:
        """The pretraining run that ``pretrained=`` names (None: pretrain in fit)."""
        given = self.pretrained
        if given is None or given in ("none",):
            return None
        if isinstance(given, PretrainedEncoder):
            return given.folder
        if isinstance(given, Ranker):
            encoder = getattr(given, "encoder_", None)
            if encoder is None:
                raise ValueError(
                    "pretrained= is a ranker without a pretrained encoder (not fitted, or a copy "
                    "clone() made): pass its encoder_, or a pretraining run folder"
                )
            return encoder.folder
        folder = Path(given)
        if not (folder / "config.yaml").is_file():
            raise ValueError(f"pretrained={given}: not a run folder (no config.yaml)")
        return folder

    def _encoder_handle(
        self, folder: Path | None, workspace: Workspace
    ) -> PretrainedEncoder | None:
        if folder is None:
            return None
        given = self.pretrained
        if isinstance(given, PretrainedEncoder):
            return given
        if isinstance(given, Ranker):
            return given.encoder_
        return PretrainedEncoder(folder, workspace=workspace)

    def _stages(self) -> tuple[str, ...]:
        """The stages fit runs (after `_pretrained_source`)."""
        raise NotImplementedError

    def _run_stages(self, workspace, common, overrides, fraction, log) -> None:
        raise NotImplementedError


def _split(features: inputs.Features, y, qid, what: str) -> RankingSplit:
    """Rows grouped stably by qid (QGs by ascending qid) as a split."""
    n = len(features.values)
    qids = inputs.as_qids(qid, n, arg=f"{what}qid")
    labels = np.zeros(n, dtype=np.float32) if y is None else inputs.as_labels(y, n, arg=f"{what}y")
    groups = QidGroups(qids)
    return RankingSplit(
        features.values[groups.order], labels[groups.order], groups.offsets, groups.qids,
        "vali" if what == "eval_set " else "train",
    )  # fmt: skip


def _check_disjoint(labeled: RankingSplit, unlabeled: RankingSplit) -> None:
    both = np.intersect1d(labeled.qids, unlabeled.qids)
    if len(both):
        raise ValueError(
            f"qid {int(both[0])} is in both the labeled and the unlabeled rows: a QG is labeled "
            "or not"
        )


def _pair(value) -> tuple:
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise ValueError("unlabeled must be a pair (X_u, qid_u)")
    return tuple(value)


def _triple(value) -> tuple:
    if isinstance(value, list) and len(value) == 1:  # scikit-learn style: a list of one set
        value = value[0]
    if not isinstance(value, tuple | list) or len(value) != 3:
        raise ValueError("eval_set must be a triple (X_v, y_v, qid_v)")
    return tuple(value)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, PretrainedEncoder):
        return str(value.folder)
    return str(value)
