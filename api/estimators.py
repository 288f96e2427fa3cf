"""Rankers with the conventions of LightGBM's, XGBoost's and scikit-learn's estimators.

    >>> ranker = PretrainedRanker("simclr-rank", "full", epochs=20, optimizer__lr=1e-4)
    >>> ranker.fit(X, y, qid, unlabeled=(X_u, qid_u), eval_set=(X_v, y_v, qid_v))
    >>> scores = ranker.predict(X_test, qid_test)       # [n_items], in the input order
    >>> ranker.score(X_test, y_test, qid_test)          # mean NDCG@5 (policy skip)
    >>> ranker.save("my-ranker")                        # the run's model bundle (+ columns)

One code path: `fit` composes each stage's config as ``./run.sh`` does (`stages.StageConfig`:
the stage's file, the keywords set as Python values; the argv recorded in ``commands_``) and
calls the stage's function on the arrays in memory (`pretrain.fit`, `finetune.fit`,
`baselines.fit`), the labeled QGs as a mask; `predict` scores with the model it returned.
Keywords are config keys (docs/estimators.md), and LightGBM's names for them
(`scarce_ltr.api.aliases`); both estimators are scikit-learn estimators (`base.Ranker`), and
every fitted attribute ends in ``_``.
"""

from __future__ import annotations

import json
import shutil
from numbers import Integral, Real
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from scarce_ltr import __version__, baselines, finetune
from scarce_ltr.api import aliases, lightgbm_face
from scarce_ltr.api.base import ESTIMATOR_FORMAT, NAN_TREES, PretrainedEncoder, Ranker, Workspace
from scarce_ltr.api.fit_data import FitData
from scarce_ltr.api.inputs import MISSING_POLICIES
from scarce_ltr.api.stages import StageConfig
from scarce_ltr.baselines.config import sections
from scarce_ltr.baselines.run import BASELINES
from scarce_ltr.core.bundle import BUNDLE_DIR, MANIFEST
from scarce_ltr.core.errors import UserError
from scarce_ltr.finetune.config import COMBINE, STRATEGIES
from scarce_ltr.pretrain.objectives import OBJECTIVES
from scarce_ltr.pretrain.presets import available_presets
from scarce_ltr.serving.ranker import ESTIMATOR_FILE, load_ranker

# A pretraining method, or a shipped preset of one (``simclr@released``, `pretrain.presets`).
PRETRAINING = StrOptions({*OBJECTIVES, *available_presets()})


class PretrainedRanker(Ranker):
    """A deep ranker: an encoder pretrained on every given QG (``method``, a pretraining method
    of ``./run.sh pretrain`` or a shipped preset such as ``simclr@released``; None: a fresh
    encoder), finetuned on the labeled QGs (``strategy``: ``lp``, ``mp`` or ``full``).
    ``pretrained=``: a `PretrainedEncoder` (``other.encoder_``), a fitted `PretrainedRanker` or
    a pretraining run folder, reused instead of pretraining. ``missing``: ``raise`` (default)
    or ``median``. Other keywords are config keys (``epochs=5``, ``optimizer__lr=1e-4``,
    ``pretrain__epochs=10``)."""

    _parameter_constraints: ClassVar[dict] = {
        **Ranker._parameter_constraints,
        "method": [PRETRAINING, None],
        "strategy": [StrOptions({s for s in STRATEGIES if s != COMBINE})],
    }

    def __init__(
        self,
        method: str | None = "simclr-rank",
        strategy: str = "full",
        *,
        pretrained: Any = None,
        missing: str = "raise",
        random_state: Any = None,
        work_dir: str | Path | None = None,
        verbose: bool | int = True,
        **config: Any,
    ) -> None:
        self.method = method
        self.strategy = strategy
        self.pretrained = pretrained
        self.missing = missing
        self.random_state = random_state
        self.work_dir = work_dir
        self.verbose = verbose
        self._set_config(config)

    def _missing_policy(self) -> str:
        if self.missing == "keep":
            raise ValueError("missing='keep' is for the trees; deep models take raise or median")
        return super()._missing_policy()

    def _stages(self, source: PretrainedEncoder | None) -> tuple[str, ...]:
        pretrains = source is None and self.method is not None
        return ("pretrain", "finetune") if pretrains else ("finetune",)

    def _run_stages(
        self,
        data: FitData,
        overrides: dict[str, list[tuple[str, Any]]],
        source: PretrainedEncoder | None,
        folder: Path | None,
    ) -> None:
        if source is None and self.method is not None:
            source = self._pretrain(str(self.method), data, overrides, folder)
        self.encoder_ = source
        self.pretrain_run_ = None if source is None else source.folder
        given = {"scarcity.fraction": data.fraction, "pretrained": _named(source)}
        step = StageConfig("finetune", self.strategy, given, overrides["finetune"])
        cfg, run = self._stage_config(step, folder)
        encoder = None if source is None else source.encoder  # None: cfg.pretrained's folder
        self._adopt(finetune.fit(cfg, data.splits, encoder, data.labeled, run=run), run)


class TreeRanker(Ranker):
    """``lightgbm`` (the default): ``lightgbm.LGBMRanker`` itself, the same arguments training
    the same model (`scarce_ltr.api.lightgbm_face`). Any other method is a baseline of
    ``./run.sh baseline``, searched and early-stopped on vali: the trees ``gbdt`` (the paper's
    grid),
    ``gbdt-optuna``, ``catboost``, ``xgboost``, the hybrid ``gbdt-ssl`` (LightGBM on the
    features and a pretrained encoder's embeddings: ``pretrained=`` as for `PretrainedRanker`,
    else an encoder pretrained in fit with ``pretrain_method``) and the other baselines.
    ``missing``: the trees take NaN as missing (``keep``, their default), the others ``raise``
    or impute the train ``median``. The trees read raw features (``data__transform='none'``:
    trees do not need a monotone transform, and NaN stays NaN)."""

    _parameter_constraints: ClassVar[dict] = {
        **Ranker._parameter_constraints,
        "method": [StrOptions({lightgbm_face.METHOD, *BASELINES})],
        "verbose": [Interval(Integral, -1, None, closed="left"), "boolean"],  # -1: LightGBM's
        "pretrain_method": [PRETRAINING],
        "n_estimators": [Interval(Integral, 1, None, closed="left"), None],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), None],
        "n_jobs": [Integral, None],
        "importance_type": [StrOptions({"split", "gain"})],
    }

    def __init__(
        self,
        method: str = lightgbm_face.METHOD,
        *,
        n_estimators: int | None = None,
        learning_rate: float | None = None,
        n_jobs: int | None = None,
        random_state: Any = None,
        importance_type: str = "split",
        pretrained: Any = None,
        pretrain_method: str = "simclr-rank",
        missing: str | None = None,
        work_dir: str | Path | None = None,
        verbose: bool | int = True,
        **config: Any,
    ) -> None:
        self.method = method
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.importance_type = importance_type
        self.pretrained = pretrained
        self.pretrain_method = pretrain_method
        self.missing = missing
        self.work_dir = work_dir
        self.verbose = verbose
        self._set_config(config)

    def fit(
        self, X, y, qid=None, *, group=None, unlabeled=None, eval_set=None, eval_group=None,
        eval_names=None, eval_at=None, eval_metric=None, sample_weight=None,
        eval_sample_weight=None, init_score=None, eval_init_score=None, init_model=None,
        feature_name="auto", categorical_feature="auto", callbacks=None, eval_X=None, eval_y=None,
    ) -> TreeRanker:  # fmt: skip
        """LightGBM's ``LGBMRanker.fit`` for ``lightgbm`` (every argument as LightGBM takes it;
        ``qid=`` ids too); `Ranker.fit`, the stages, for the other methods."""
        given = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        if self.method != lightgbm_face.METHOD:
            return super().fit(**given)
        self._validate_params()
        model, taken, n_groups = lightgbm_face.fit(self, **given)
        self._reset()  # a refit keeps nothing of the fit before
        folder = None if self.work_dir is None else Workspace(self.work_dir).path
        try:
            lightgbm_face.adopt(self, model, taken, n_groups, folder)
        except BaseException:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            self._reset()
            raise
        return self

    def predict(self, X, qid=None, *, group=None) -> np.ndarray:
        """``[n_items]`` float64 scores in the input order (``lightgbm``: as
        ``LGBMRanker.predict`` gives them, the input's dtype kept)."""
        if self.method != lightgbm_face.METHOD:
            return super().predict(X, qid, group=group)
        return lightgbm_face.predict(self, X, qid, group)

    def _features(self, X):
        if self.method != lightgbm_face.METHOD:
            return super()._features(X)
        return lightgbm_face.predict_input(self, X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        if self.method == lightgbm_face.METHOD:
            tags.input_tags.categorical = True
        return tags

    def config_params(self) -> dict[str, Any]:
        if self.method == lightgbm_face.METHOD:  # LightGBM's parameters go to LGBMRanker
            return lightgbm_face.own_config(self)
        defaults = {"data__transform": "none"} if self.method in NAN_TREES else {}
        return defaults | super().config_params()

    def _alias_params(self) -> dict[str, Any]:
        """``n_estimators``, ``learning_rate``, ``n_jobs`` as the method family's keys."""
        given = {"n_estimators": self.n_estimators, "learning_rate": self.learning_rate}
        if self.n_jobs is not None:
            if self.n_jobs == 0:
                raise ValueError("n_jobs=0: give a number of threads (-1: every core)")
            given["n_jobs"] = aliases.threads(self.n_jobs)
        given = {k: v for k, v in given.items() if v is not None}
        if not given:
            return {}
        family = aliases.family_of(self.method)
        if family == "other":
            raise ValueError(
                f"{', '.join(given)}: boosting keywords; {self.method} is no tree (its config "
                "keys: epochs, optimizer__lr, ...)"
            )
        if family != "gbdt" and "learning_rate" in given:
            raise ValueError(f"learning_rate: {self.method}'s search chooses it ({family}__params)")
        return aliases.resolve(self.method, given, set())

    def _early_stopping(self, rounds: int) -> dict[str, Any]:
        family = aliases.family_of(self.method)
        if family == "other":
            return super()._early_stopping(rounds)
        return {f"{family}__early_stopping_rounds": rounds}

    def _with_categorical(self, config: dict, columns: list[int]) -> dict:
        if self.method not in aliases.LIGHTGBM_RAW:
            return super()._with_categorical(config, columns)
        params = dict(config.get("gbdt__params") or {})
        params.setdefault("categorical_feature", columns)
        return config | {"gbdt__params": params}

    def _integer_labels(self) -> str | None:
        """LightGBM's and XGBoost's ranking objectives take integer grades only (LGBMRanker
        stops at y=0.5: "label should be int type"); CatBoost and the deep baselines take
        real ones."""
        options = sections().get(aliases.family_of(self.method))  # its backend's section
        if not getattr(options, "integer_labels", False):
            return None
        return f"TreeRanker({self.method!r}) ({options.library})"

    def _missing_policy(self) -> str:
        if self.missing is None:
            return "keep" if self.method in (*NAN_TREES, lightgbm_face.METHOD) else "raise"
        if self.missing == "keep" and self.method not in NAN_TREES:
            raise ValueError(f"{self.method} needs every value: missing='raise' or 'median'")
        return self.missing

    def _pretrained_source(self) -> Path | None:
        if self.method != "gbdt-ssl":
            if self.pretrained is not None:
                raise ValueError(f"pretrained= is for gbdt-ssl, not {self.method}")
            return None
        return super()._pretrained_source()

    def _stages(self, source: PretrainedEncoder | None) -> tuple[str, ...]:
        pretrains = self.method == "gbdt-ssl" and source is None
        return ("pretrain", "baseline") if pretrains else ("baseline",)

    def _run_stages(
        self,
        data: FitData,
        overrides: dict[str, list[tuple[str, Any]]],
        source: PretrainedEncoder | None,
        folder: Path | None,
    ) -> None:
        given: dict[str, Any] = {"scarcity.fraction": data.fraction}
        if self.method == "gbdt-ssl":
            if source is None:
                source = self._pretrain(self.pretrain_method, data, overrides, folder)
            given["pretrained"] = _named(source)
        self.encoder_ = source
        self.pretrain_run_ = None if source is None else source.folder
        step = StageConfig("baseline", self.method, given, overrides["baseline"])
        cfg, run = self._stage_config(step, folder)
        encoder = None if source is None else source.encoder  # None: cfg.pretrained's folder
        fitted = baselines.fit(cfg, data.splits, labeled=data.labeled, run=run, encoder=encoder)
        self._adopt(fitted, run)


def _named(source: PretrainedEncoder | None) -> str:
    """``pretrained=`` of the finetuning or gbdt-ssl config: the encoder's folder, or none (one
    in memory is handed to `finetune.fit` or `baselines.fit`, which names it)."""
    return "none" if source is None or source.folder is None else str(source.folder)


def load_estimator(path: str | Path) -> Ranker:
    """A ranker `save` wrote, ready to `predict` and `score` (its columns matched by name).
    ``estimator.json`` is checked against the bundle beside it; a bad one is one `ValueError`
    naming the file and the key."""
    path = Path(path)
    file = path / ESTIMATOR_FILE
    if not path.is_dir():
        raise ValueError(f"{path}: not a folder that save() wrote (give the folder)")
    try:
        info = json.loads(file.read_text())
    except FileNotFoundError:
        if (path / MANIFEST).is_file() or (path / BUNDLE_DIR / MANIFEST).is_file():
            raise ValueError(
                f"{path}: a run's model bundle, not an estimator's save() folder (no "
                f"{ESTIMATOR_FILE}); score it with `./run.sh predict {path} data.path=<file>`, "
                f"or scarce_ltr.load_ranker({str(path)!r}).predict(X, qid) from Python"
            ) from None
        raise ValueError(f"{path}: no {ESTIMATOR_FILE}; not a folder that save() wrote") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{file}: not JSON ({exc})") from None
    classes = {"PretrainedRanker": PretrainedRanker, "TreeRanker": TreeRanker}
    if not isinstance(info, dict):
        raise ValueError(f"{file}: expected a JSON object, got {type(info).__name__}")
    _check_format(file, info)
    missing_keys = [k for k in ("estimator", "params", "n_features", "missing") if k not in info]
    if missing_keys:
        raise ValueError(f"{file}: no key {missing_keys[0]!r}")
    if info["estimator"] not in classes:
        raise ValueError(f"{file}: estimator {info['estimator']!r} is none of {', '.join(classes)}")
    if not isinstance(info["params"], dict):
        raise ValueError(f"{file}: params must be an object")
    params = {k: v for k, v in info["params"].items() if k not in ("pretrained", "work_dir")}
    try:
        estimator = classes[info["estimator"]](**params)
        estimator._validate_params()
        policy = estimator._missing_policy()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{file}: params: {exc}") from None
    try:
        ranker = load_ranker(path)
    except UserError as exc:
        raise ValueError(f"{path}: its model bundle does not load ({exc})") from None
    n_features = info["n_features"]
    if not isinstance(n_features, int) or isinstance(n_features, bool) or n_features < 1:
        raise ValueError(f"{file}: n_features must be a positive integer, got {n_features!r}")
    if n_features != ranker.n_features:
        raise ValueError(
            f"{file}: n_features is {n_features}; the bundle's model takes {ranker.n_features}"
        )
    if info["missing"] not in MISSING_POLICIES or info["missing"] != policy:
        raise ValueError(f"{file}: missing is {info['missing']!r}; its params give {policy!r}")
    medians = info.get("medians")
    if (medians is not None) != (policy == "median"):
        raise ValueError(f"{file}: medians are given exactly when missing is 'median'")
    if medians is not None:
        try:
            medians = np.asarray(medians, dtype=np.float32)
        except (TypeError, ValueError):
            medians = None
        if medians is None or medians.shape != (n_features,) or not np.isfinite(medians).all():
            raise ValueError(f"{file}: medians must be {n_features} numbers")
    names = info.get("feature_names")
    if names is not None and (
        not isinstance(names, list) or len(names) != n_features
        or not all(isinstance(n, str) for n in names) or len(set(names)) != n_features
    ):  # fmt: skip
        raise ValueError(f"{file}: feature_names must be {n_features} distinct strings")
    categories = info.get("categories") or {}
    if not isinstance(categories, dict) or not all(
        k.isdigit() and int(k) < n_features and isinstance(v, list) for k, v in categories.items()
    ):
        raise ValueError(f"{file}: categories must map column indices to lists")
    estimator.ranker_ = ranker
    estimator.n_features_in_ = n_features
    if names is not None:
        estimator.feature_names_in_ = np.asarray(names, dtype=object)
    estimator.categories_ = {int(k): v for k, v in categories.items()}
    estimator.missing_ = policy
    estimator.medians_ = medians
    return estimator


def _check_format(file: Path, info: dict) -> None:
    """Refuse an ``estimator.json`` of a format newer than this version reads (one without the
    key is format 1: written before the key existed)."""
    found = info.get("format", 1)
    if not isinstance(found, int) or isinstance(found, bool) or found < 1:
        raise ValueError(f"{file}: format must be a positive integer, got {found!r}")
    if found > ESTIMATOR_FORMAT:
        raise ValueError(
            f"{file}: format {found} (written by scarce-ltr {info.get('version', '?')}) is newer "
            f"than scarce-ltr {__version__} reads (format {ESTIMATOR_FORMAT}); upgrade scarce-ltr"
        )
