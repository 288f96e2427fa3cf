"""What the estimators share: parameters, checked inputs, fit's folder and the bundle's scoring.

`Ranker.fit` checks every input (nothing is written before), writes the arrays as a
``data=arrays`` data set (`scarce_ltr.api.layout`) in a folder of its own (`Workspace`) and lets
the subclass run its stages (`scarce_ltr.api.stages`); `predict`, `score` and `save` use the run's
model bundle. `Ranker` is a scikit-learn `BaseEstimator` (tags, `clone`, ``repr``, parameter
validation, metadata routing of ``qid``: ``set_fit_request``/``set_score_request``); the config
keys are more parameters (``get_params`` lists them, as LightGBM's ``**kwargs``). Every fitted
attribute ends in ``_``, and a refit forgets all of them first.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import warnings
import weakref
from dataclasses import fields
from numbers import Integral
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.utils._param_validation import Interval, StrOptions

from scarce_ltr import __version__
from scarce_ltr.api import aliases, inputs, lgbm
from scarce_ltr.api.layout import holdout, train_split
from scarce_ltr.api.scoring import looks_across_qg
from scarce_ltr.api.stages import SCHEMAS, StageCall, leaves, route, run_stage
from scarce_ltr.baselines.config import MISSING_AS_NAN
from scarce_ltr.core.files import file_error, temp_folder_beside
from scarce_ltr.core.metrics import mean_ndcg
from scarce_ltr.data.arrays import write_arrays
from scarce_ltr.data.ranking_split import QidGroups, RankingSplit
from scarce_ltr.serving.ranker import ESTIMATOR_FILE, BundledRanker, load_ranker

# The form of estimator.json; `load_estimator` refuses a newer one. Raise it when a reader of
# this version would misread a new file (a key's meaning changes, a key it needs is added).
ESTIMATOR_FORMAT = 1
# Trees that take NaN as a missing value (the others' inputs pass through an encoder or PCA).
NAN_TREES = MISSING_AS_NAN  # one list: what the tree backends' options name (baselines/config.py)
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
            try:
                Path(work_dir).mkdir(parents=True, exist_ok=True)
                self.path = Path(tempfile.mkdtemp(prefix="fit-", dir=work_dir))
            except OSError as exc:  # named by the user's path, not the fit folder's random name
                raise path_error(
                    exc, "make the fit's folder in", f"work_dir={work_dir}", key="work_dir"
                ) from None
        self.temporary = work_dir is None

    def __deepcopy__(self, memo: dict) -> Workspace:
        return self


class Ranker(lgbm.LightGBMAttributes, BaseEstimator):
    """Parameters, inputs, fit's workspace and the bundle's scoring shared by the estimators."""

    _parameter_constraints: ClassVar[dict] = {
        "missing": [StrOptions(set(inputs.MISSING_POLICIES)), None],
        "work_dir": [str, os.PathLike, None],
        "verbose": ["verbose"],
        "random_state": [
            Interval(Integral, 0, 2**31 - 1, closed="both"),
            np.random.RandomState,
            np.random.Generator,
            None,
        ],
        "pretrained": "no_validation",
    }

    # ---- scikit-learn's parameter protocol, with the config keys as more parameters --------
    def _set_config(self, config: dict[str, Any]) -> None:
        self._config_keys: list[str] = []
        for name, value in config.items():
            self._set_config_key(name, value)

    def _set_config_key(self, name: str, value: Any) -> None:
        if name.startswith("_") or name.endswith("_") or hasattr(type(self), name):
            raise ValueError(
                f"{name!r} is not a parameter of {type(self).__name__} (nor a config key)"
            )
        if name not in self._config_keys:
            self._config_keys.append(name)
        setattr(self, name, value)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        params = super().get_params(deep=deep)
        return params | {name: getattr(self, name) for name in self._config_keys}

    def set_params(self, **params: Any) -> Ranker:
        explicit = set(self._get_param_names())
        nested: dict[str, dict[str, Any]] = {}
        for name, value in params.items():
            head, _, rest = name.partition("__")
            if name in explicit:
                setattr(self, name, value)
            elif rest and head in explicit and hasattr(getattr(self, head), "set_params"):
                nested.setdefault(head, {})[rest] = value
            else:
                self._set_config_key(name, value)
        for head, values in nested.items():
            getattr(self, head).set_params(**values)
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = self._missing_policy_or_none() in ("keep", "median")
        tags.input_tags.categorical = getattr(self, "method", None) in aliases.LIGHTGBM_RAW
        tags.target_tags.required = True
        tags.non_deterministic = False
        return tags

    def __sklearn_is_fitted__(self) -> bool:
        return getattr(self, "ranker_", None) is not None

    def config_params(self) -> dict[str, Any]:
        """The config keywords (LightGBM's names resolved, `scarce_ltr.api.aliases`) over the
        estimators' `DEFAULTS`."""
        config = {k: getattr(self, k) for k in self._config_keys}
        known = {head for stage in SCHEMAS.values() for head in _field_names(stage)}
        resolved = aliases.resolve(getattr(self, "method", None), config, known | set(SCHEMAS))
        seed = aliases.random_seed(getattr(self, "random_state", None))
        if seed is not None:
            if "seed" in resolved:
                raise ValueError("random_state and seed are both given: pass one")
            resolved["seed"] = seed
        explicit = self._alias_params()
        twice = sorted(set(explicit) & set(resolved))
        if twice:
            key = twice[0].replace("__", ".")
            raise ValueError(f"{key} is set twice: by an argument and by a keyword alias of it")
        return DEFAULTS | explicit | resolved

    def _alias_params(self) -> dict[str, Any]:
        """Config keys of the subclass's explicit LightGBM-named parameters."""
        return {}

    # ---- fit --------------------------------------------------------------------------------
    def fit(
        self,
        X,
        y,
        qid=None,
        *,
        group=None,
        unlabeled=None,
        eval_set=None,
        eval_group=None,
        eval_names=None,
        eval_at=None,
        eval_metric=None,
        sample_weight=None,
        eval_sample_weight=None,
        init_score=None,
        eval_init_score=None,
        init_model=None,
        feature_name="auto",
        categorical_feature="auto",
        callbacks=None,
        eval_X=None,
        eval_y=None,
    ) -> Ranker:
        """Train on the labeled rows ``(X, y, qid)`` (or LightGBM's ``group=`` sizes);
        ``unlabeled=(X_u, qid_u)``: more QGs without labels (pretraining and the
        semi-supervised trees use them); ``eval_set=(X_v, y_v, qid_v)`` (or LightGBM's
        ``[(X_v, y_v)]`` with ``eval_group=[sizes]``): every choice (epoch, grid point,
        checkpoint, rounds) is made on it (a seeded 20% of the labeled QGs when it is left
        out). The other arguments are LGBMRanker's (docs/estimators.md). Returns ``self``."""
        self._validate_params()
        lgbm.refuse_unsupported(
            sample_weight=sample_weight, eval_sample_weight=eval_sample_weight,
            init_score=init_score, eval_init_score=eval_init_score, init_model=init_model,
            eval_metric=eval_metric, feature_name=feature_name,
        )  # fmt: skip
        eval_set = lgbm.joined_eval_set(eval_set, eval_X, eval_y)
        ks = lgbm.eval_at(eval_at)
        chosen = lgbm.read_callbacks(callbacks)
        config = self.config_params()
        if chosen.early_stopping_rounds is not None:
            config = config | self._early_stopping(chosen.early_stopping_rounds)
        policy = self._missing_policy()
        labeled = inputs.as_features(X, arg="X")
        names, categories = labeled.names, labeled.categories
        pieces = {"X": labeled}
        sets = lgbm.eval_sets(eval_set, eval_group, eval_names)
        if unlabeled is not None:
            x_u, qid_u = _pair(unlabeled)
            pieces["unlabeled X"] = inputs.as_features(
                x_u, arg="unlabeled X", columns=names, categories=categories
            )
        if sets:
            pieces["eval_set X"] = inputs.as_features(
                sets[0].X, arg="eval_set X", columns=names, categories=categories
            )
        width = labeled.values.shape[1]
        for arg, piece in pieces.items():
            if piece.values.shape[1] != width:
                raise ValueError(f"{arg} has {piece.values.shape[1]} features; X has {width}")
        cat_columns = inputs.categorical_columns(categorical_feature, categories, names, width)
        if cat_columns:
            config = self._with_categorical(config, cat_columns)
        raw = [inputs.query_ids(qid, group, len(labeled.values))]
        if unlabeled is not None:
            raw.append(inputs.as_raw_qids(qid_u, len(pieces["unlabeled X"].values),
                                          arg="unlabeled qid"))  # fmt: skip
        qids = inputs.codes(*raw)
        integer = self._integer_labels()
        splits = {"train": _split(labeled, y, qids[0], "", integer=integer)}
        if unlabeled is not None:
            splits["unlabeled"] = _split(pieces["unlabeled X"], None, qids[1], "unlabeled ")
            _check_disjoint(raw, qids)
        if sets:
            v = sets[0]
            raw_v = inputs.query_ids(v.qid, v.group, len(pieces["eval_set X"].values),
                                     what="eval_set ")  # fmt: skip
            splits["vali"] = _split(pieces["eval_set X"], v.y, inputs.codes(raw_v)[0],
                                    "eval_set ", integer=integer)  # fmt: skip
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
        seed = int(config.get("seed", 0))
        if "vali" not in splits:
            splits["train"], splits["vali"] = holdout(splits["train"], seed=seed)
        for name in ("train", "vali"):
            if not splits[name].groups_with_relevant().any():
                what = "y" if name == "train" else "eval_set's y"
                raise ValueError(f"{what} has no label above 0: no QG has a relevant item")
        source = self._pretrained_source()
        overrides = route(config, self._stages(source))  # before anything is written
        self._reset()  # a refit keeps nothing of the fit before
        if config.get("logger") == "wandb" and self.work_dir is None:
            warnings.warn(
                "logger='wandb' without work_dir: the offline W&B run is written in the fit's "
                "temporary folder and removed with it; pass work_dir=<folder> to keep it (and "
                "sync it with `wandb sync`)",
                UserWarning,
                stacklevel=2,
            )
        self._config = config
        self.pretrained_source_ = source
        workspace = Workspace(self.work_dir)
        show = max(int(self.verbose), int(chosen.show_progress))  # 1 (True): progress
        try:
            train, fraction = train_split(splits["train"], splits.get("unlabeled"), seed=seed)
            data = workspace.path / "data"
            for name, split in (("train", train), ("vali", splits["vali"])):
                write_arrays(split, data / name, what=f"the fit's {name} data", key="work_dir")
            common = {"data.path": str(data), "data.splits.test": "vali"}  # data=arrays
            log = None if show >= 3 else workspace.path / "log.txt"  # 3: everything shown
            self._progress = show in (1, 2)
            self.commands_: list[list[str]] = []
            self._run_stages(workspace, common, overrides, fraction, log)
            drawn = ((self.report_ or {}).get("labels") or {}).get("train_labeled_groups")
            if drawn not in (None, splits["train"].n_groups):  # layout.train_split's promise
                raise RuntimeError(f"the run labeled {drawn} QGs, not {splits['train'].n_groups}")
            if workspace.temporary:  # the runs keep what they need; the copy of X goes
                shutil.rmtree(data, ignore_errors=True)
        except BaseException:
            shutil.rmtree(workspace.path, ignore_errors=True)
            self._reset()
            raise
        self.workspace_ = workspace
        self.ranker_ = load_ranker(self.run_)
        self.n_features_in_ = width
        if names is not None:
            self.feature_names_in_ = np.asarray(names, dtype=object)
        self.categories_ = categories
        self.missing_ = policy
        self.medians_ = medians
        self.n_labeled_groups_ = splits["train"].n_groups
        self._set_lightgbm_attributes(splits["vali"], sets, ks, chosen)
        return self

    def _reset(self) -> None:
        """Forget every fitted attribute (a refit, a failed fit)."""
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
            delattr(self, name)

    def _stage(self, log: Path | None, call: StageCall) -> dict | None:
        self.commands_.append(call.record)
        if self._progress:
            where = f" (output: {log})" if log is not None else ""
            print(f"{type(self).__name__}: ./run.sh {call.stage} {call.name}{where}",
                  file=sys.stderr, flush=True)  # fmt: skip
        with warnings.catch_warnings():  # LightGBM's C++ side reads it from the params
            warnings.filterwarnings("ignore", message="categorical_feature keyword has been")
            return run_stage(call, log, progress=self._progress)

    # ---- predict, score, save ---------------------------------------------------------------
    def predict(self, X, qid=None, *, group=None) -> np.ndarray:
        """``[n_items]`` float64 scores of raw ``X``, in the input order; ``qid`` (any
        hashable ids) in any order, or LightGBM's ``group`` sizes (neither: all rows are one
        QG, refused where a score depends on the QG: attention, qg-standardize). A
        DataFrame's columns are matched by name."""
        ranker = self._fitted()
        features = self._features(X)
        n = len(features)
        if qid is None and group is None:
            why = looks_across_qg(ranker)  # a tree or an MLP scores each item alone
            if why is not None:
                raise ValueError(
                    f"predict needs qid (or group): {why}, so all rows as one QG would be "
                    "silently wrong scores; pass the QG of each row"
                )
            qids = np.zeros(n, dtype=np.int64)
        else:
            qids = inputs.codes(inputs.query_ids(qid, group, n))[0]
        groups = QidGroups(qids)
        scores = ranker.predict(features[groups.order], groups.item_qids())
        return groups.to_input_order(scores)

    def score(self, X, y, qid=None, *, group=None, sample_weight=None) -> float:
        """Mean NDCG@5 over the QGs of ``(X, y, qid)`` (`scarce_ltr.core.metrics`: gain
        2^y - 1, QGs without a relevant item skipped unless ``metrics__policy`` says).
        ``qid`` is required: scikit-learn's tools pass it with metadata routing.
        ``sample_weight``: scikit-learn's score argument; None only (QGs count the same).
        When no QG has a relevant item and the policy skips them, there is no NDCG to average:
        a `ValueError`, never a NaN (GridSearchCV would rank it silently)."""
        self._fitted()
        if sample_weight is not None:
            raise ValueError("sample_weight is not supported: every QG counts the same in NDCG")
        n = self._features(X).shape[0]  # a sparse matrix has no len
        if qid is None and group is None:
            raise ValueError(
                f"score needs qid (or group): NDCG is a mean over QGs. In scikit-learn's tools "
                f"(GridSearchCV, cross_val_score, Pipeline) route it: sklearn.set_config("
                f"enable_metadata_routing=True) and {type(self).__name__}(...)"
                ".set_score_request(qid=True)"
            )
        labels = inputs.as_labels(y, n)
        qids = inputs.codes(inputs.query_ids(qid, group, n))[0]
        groups = QidGroups(qids)
        scores = self.predict(X, qids)[groups.order]
        config = getattr(self, "_config", None) or self.config_params()
        policy = dict(leaves(config)).get("metrics.policy", "skip")
        value = mean_ndcg(scores, labels[groups.order], groups.offsets, k=5, policy=policy)
        if np.isnan(value):  # policy skip, and every QG skipped: DESIGN.md's "no defined NDCG"
            raise ValueError(
                f"score: none of the {groups.n_groups} QGs of y has a relevant item (label > 0), "
                "so NDCG@5 is undefined for each and metrics__policy='skip' (the default) leaves "
                "every one out; score QGs that have one, or fit with metrics__policy='zero' "
                "(scikit-learn's ndcg_score: 0) or 'one' (LightGBM's: 1) to count them"
            )
        return value

    def save(self, path: str | Path) -> Path:
        """Write the run's model bundle to ``path`` (a new folder, or one an earlier `save`
        wrote, replaced as LightGBM's ``save_model`` and ``torch.save`` replace their file), with
        ``estimator.json``: `load_estimator` and `scarce_ltr.load_ranker` read it. Written
        beside ``path`` and renamed into place: a crash leaves the earlier save or the new one,
        never a mix or half of one."""
        self._fitted()
        path = Path(path)
        if path.exists() and not (path / ESTIMATOR_FILE).is_file():
            if not path.is_dir() or any(path.iterdir()):
                raise ValueError(f"{path} exists and holds no saved ranker; give a new folder")
        if not Path(self.ranker_.folder).is_dir():
            raise ValueError(
                f"the model's folder {self.ranker_.folder} is gone (a temporary fit folder "
                "removed); fit again, or save before it is removed"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = temp_folder_beside(path)
        except OSError as exc:
            raise path_error(exc, "save the ranker to", str(path), key="path") from None
        try:
            shutil.copytree(self.ranker_.folder, tmp, dirs_exist_ok=True)
            (tmp / ESTIMATOR_FILE).write_text(json.dumps(self._description(), indent=1) + "\n")
            _replace_folder(tmp, path)
        except OSError as exc:  # the temp folder's name is no concern of the user's
            shutil.rmtree(tmp, ignore_errors=True)
            raise path_error(exc, "save the ranker to", str(path), key="path") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path

    # ---- pickling: the bundle's files travel with the estimator -----------------------------
    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())  # object's is the instance's own __dict__
        ranker = state.get("ranker_")
        if ranker is not None:
            folder = Path(ranker.folder)
            state["ranker_"] = None
            state["_bundle_files"] = {
                str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()
            }
        return state

    def __setstate__(self, state: dict) -> None:
        files = state.pop("_bundle_files", None)
        super().__setstate__(state)
        if files is not None:
            workspace = Workspace(None)
            for name, data in files.items():
                target = workspace.path / "bundle" / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            self._bundle_workspace = workspace  # removed with the estimator
            self.ranker_ = load_ranker(workspace.path / "bundle")

    def _description(self) -> dict:
        names = getattr(self, "feature_names_in_", None)
        return {
            "format": ESTIMATOR_FORMAT,
            "version": __version__,
            "estimator": type(self).__name__,
            "params": {k: _jsonable(v) for k, v in self._saved_params().items()},
            "n_features": self.n_features_in_,
            "feature_names": None if names is None else [str(n) for n in names],
            "categories": {str(j): [_jsonable(c) for c in cats]
                           for j, cats in (getattr(self, "categories_", None) or {}).items()},
            "missing": self.missing_,
            "medians": None if self.medians_ is None else self.medians_.tolist(),
            "run": str(getattr(self, "run_", "")),
        }  # fmt: skip

    def _saved_params(self) -> dict[str, Any]:
        """The parameters ``estimator.json`` keeps: a numpy ``random_state`` as the seed it
        gave this fit."""
        params = self.get_params(deep=False)
        if "random_state" in params and not isinstance(params["random_state"], int | None):
            params["random_state"] = int(self._config["seed"])
        return params

    def _features(self, X) -> np.ndarray:
        names = getattr(self, "feature_names_in_", None)
        columns = None if names is None else [str(n) for n in names]
        features = inputs.as_features(
            X,
            arg="X",
            columns=columns if inputs.is_dataframe(X) else None,
            categories=getattr(self, "categories_", None) or {},
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
            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet: call 'fit' with "
                "appropriate arguments before using this estimator."
            )
        return ranker

    # ---- for the subclasses -----------------------------------------------------------------
    def _integer_labels(self) -> str | None:
        """The model, named for a message, when it takes integer labels only; None: real
        relevance grades are taken (the deep models' losses and NDCG's gain)."""
        return None

    def _missing_policy(self) -> str:
        return self.missing or "raise"

    def _missing_policy_or_none(self) -> str | None:
        try:
            return self._missing_policy()
        except ValueError:
            return None

    def _early_stopping(self, rounds: int) -> dict[str, Any]:
        raise ValueError(
            f"callbacks: early_stopping is for the trees; {type(self).__name__} takes patience="
        )

    def _with_categorical(self, config: dict, columns: list[int]) -> dict:
        raise ValueError(
            f"X: column(s) {columns} are categorical: only TreeRanker's LightGBM methods "
            f"({', '.join(aliases.LIGHTGBM_RAW)}) take categories; encode them first"
        )

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
        if not isinstance(given, str | os.PathLike):
            raise ValueError(
                f"pretrained= must be a PretrainedEncoder, a fitted ranker or a run folder, "
                f"got {type(given).__name__}"
            )
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

    def _stages(self, source: Path | None) -> tuple[str, ...]:
        """The stages fit runs (``source``: `_pretrained_source`)."""
        raise NotImplementedError

    def _run_stages(
        self,
        workspace: Workspace,
        common: dict[str, Any],
        overrides: dict[str, list[tuple[str, Any]]],
        fraction: float,
        log: Path | None,
    ) -> None:
        raise NotImplementedError


def _field_names(schema) -> set[str]:
    return {f.name for f in fields(schema)}


def _split(
    features: inputs.Features, y, qids: np.ndarray, what: str, *, integer: str | None = None
) -> RankingSplit:
    """Rows grouped stably by qid (numbered, `inputs.codes`; QGs by ascending qid) as a split;
    ``integer``: the model that takes integer labels only (`inputs.as_labels`)."""
    n = len(features.values)
    if y is None:
        labels = np.zeros(n, dtype=np.float32)
    else:
        labels = inputs.as_labels(y, n, arg=f"{what}y", integer=integer)
    groups = QidGroups(qids)
    return RankingSplit(
        features.values[groups.order], labels[groups.order], groups.offsets, groups.qids,
        "vali" if what == "eval_set " else "train",
    )  # fmt: skip


def path_error(exc: OSError, operation: str, where: str, *, key: str) -> OSError:
    """``exc`` as an `OSError` of its class and errno whose message is ``cannot <operation>
    <where>: <reason>``: the user's path (never a temp folder beside it) and, where the reason
    suggests it, what to do with the argument ``key`` (`core.files.file_error`'s words)."""
    return type(exc)(exc.errno, str(file_error(exc, operation, where, key=key)))


def _replace_folder(new: Path, path: Path) -> None:
    """Put the filled folder ``new`` at ``path``: the earlier folder there is renamed aside, not
    removed, until the new one is in place (a folder cannot be renamed onto a non-empty one),
    and is put back if that fails; a process killed between the two renames leaves it whole
    beside ``path`` (``.<name>.<random>.tmp``)."""
    old = None
    if path.exists():
        old = temp_folder_beside(path)
        try:
            os.replace(path, old)  # onto the empty folder: one rename
        except BaseException:
            old.rmdir()  # still empty: the earlier save stays where it was
            raise
    try:
        os.replace(new, path)
    except BaseException:
        if old is not None:
            os.replace(old, path)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _check_disjoint(raw: list[np.ndarray], numbers: list[np.ndarray]) -> None:
    both = np.intersect1d(numbers[0], numbers[1])
    if len(both):
        value = raw[0][int(np.flatnonzero(numbers[0] == both[0])[0])]
        raise ValueError(
            f"qid {value!r} is in both the labeled and the unlabeled rows: a QG is labeled or not"
        )


def _pair(value) -> tuple:
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise ValueError("unlabeled must be a pair (X_u, qid_u)")
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
    if hasattr(value, "item") and not isinstance(value, str):  # a numpy scalar
        return _jsonable(value.item())
    return str(value)
