"""What the estimators share: parameters, checked inputs, the stages run in memory, scoring.

`Ranker.fit` checks every input (`api.fit_data`: nothing runs before), composes each stage's
config as ``./run.sh`` does (`api.stages.StageConfig`) and lets the subclass call the stages'
functions on the arrays (`pretrain.fit`, `finetune.fit`, `baselines.fit`): no file is written
unless ``work_dir`` is given (then each stage's run folder under ``<work_dir>/fit-*``). The model
stays in memory (`api.fitted.InMemory`); `predict`, `score` and `save` use it as a bundle
(`api.saving`). `Ranker` is a scikit-learn `BaseEstimator` (tags, `clone`, ``repr``, parameter
validation, metadata routing of ``qid``: ``set_fit_request``/``set_score_request``); the config
keys are more parameters (``get_params`` lists them, as LightGBM's ``**kwargs``). Every fitted
attribute ends in ``_``, and a refit forgets all of them first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import warnings
from dataclasses import fields
from numbers import Integral
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.utils._param_validation import Interval, StrOptions

from scarce_ltr import pretrain
from scarce_ltr.api import aliases, fit_data, inputs, lgbm
from scarce_ltr.api.fitted import InMemory
from scarce_ltr.api.saving import ESTIMATOR_FORMAT, Saving, Workspace
from scarce_ltr.api.scoring import Scores
from scarce_ltr.api.stages import SCHEMAS, StageConfig, route
from scarce_ltr.baselines.config import MISSING_AS_NAN
from scarce_ltr.core.metrics import SELECTION_METRIC
from scarce_ltr.core.runs import Run
from scarce_ltr.serving.ranker import BundledRanker

__all__ = ["ESTIMATOR_FORMAT", "PretrainedEncoder", "Ranker", "Workspace"]
# Trees that take NaN as a missing value (the others' inputs pass through an encoder or PCA).
NAN_TREES = MISSING_AS_NAN  # one list: what the tree backends' options name (baselines/config.py)
# What the estimators set unless a keyword says otherwise: no tracker; no Outlier-NDCG (fit
# scores no test split).
DEFAULTS = {"logger": "none", "data__outliers__method": "none"}


class PretrainedEncoder:
    """A pretrained encoder: ``pretrained=`` of other estimators finetunes the same encoder
    (pretrain once, finetune for each label budget). ``encoder``: `pretrain.fit`'s, in memory;
    ``folder``: its run folder (a fit with ``work_dir``, or a ``./run.sh pretrain`` run).
    `copy.deepcopy` and `sklearn.base.clone` share it."""

    def __init__(self, folder: str | Path | None = None, *, encoder: Any = None) -> None:
        if folder is None and encoder is None:
            raise ValueError("PretrainedEncoder needs a run folder or an encoder")
        self.folder = None if folder is None else Path(folder)
        self.encoder = encoder

    def __deepcopy__(self, memo: dict) -> PretrainedEncoder:
        return self

    def __getstate__(self) -> dict:  # a folder travels as its name; in memory, the encoder
        return {"folder": self.folder, "encoder": self.encoder if self.folder is None else None}

    def __repr__(self) -> str:
        if self.folder is None:
            return f"PretrainedEncoder(<in memory: {self.encoder.method}>)"
        return f"PretrainedEncoder({str(self.folder)!r})"


class Ranker(Scores, Saving, lgbm.LightGBMAttributes, BaseEstimator):
    """Parameters, inputs, the stages' calls and the model's scoring shared by the estimators."""

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
        sets = lgbm.eval_sets(eval_set, eval_group, eval_names)
        data = fit_data.read(self, X, y, qid, group, unlabeled, sets, categorical_feature, config)
        source = self._pretrained_source()
        overrides = route(data.config, self._stages(source))  # before anything runs
        self._reset()  # a refit keeps nothing of the fit before
        if data.config.get("logger") not in (None, "none") and self.work_dir is None:
            warnings.warn(
                f"logger={data.config['logger']!r} without work_dir: the stages run in memory "
                "and log nothing; pass work_dir=<folder> to keep each stage's run (and its log)",
                UserWarning,
                stacklevel=2,
            )
        self._config = data.config
        show = max(int(self.verbose), int(chosen.show_progress))  # 1 (True): progress
        self._progress = show in (1, 2)
        self._terminal = sys.stderr  # the progress lines, past the stages' redirected output
        self.commands_: list[list[str]] = []
        folder = None if self.work_dir is None else Workspace(self.work_dir).path
        try:
            with _output(folder, show, progress=self._progress):
                self._run_stages(data, overrides, source, folder)
        except BaseException:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            self._reset()
            raise
        finally:
            del self._terminal  # a stream: no part of the estimator (nor of its pickle)
        self.n_features_in_ = data.train.n_features
        if data.names is not None:
            self.feature_names_in_ = np.asarray(data.names, dtype=object)
        self.categories_ = data.categories
        self.missing_ = data.policy
        self.medians_ = data.medians
        self.n_labeled_groups_ = data.n_labeled
        self._set_lightgbm_attributes(data.vali, sets, ks, chosen)
        return self

    def _reset(self) -> None:
        """Forget every fitted attribute (a refit, a failed fit)."""
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
            delattr(self, name)

    def _stage_config(self, step: StageConfig, folder: Path | None) -> tuple[Any, Run | None]:
        """``step``'s config, recorded in ``commands_``, and its run (``<folder>/<stage>``,
        started: ``config.yaml`` written) when fit keeps runs (``work_dir``); started as
        ``./run.sh`` starts one, with the stage's defaults (a folder saved before a key existed,
        or under a key's old name, `core.run_config.KEY_ALIASES`, is no other setting)."""
        self.commands_.append(step.record)
        if self._progress:
            print(f"{type(self).__name__}: {step.stage} {step.name}", file=self._terminal,
                  flush=True)  # fmt: skip
        cfg, resolved = step.compose()
        if folder is None:
            return cfg, None
        run = Run(cfg.identity(), folder / step.stage, logger=cfg.logger)
        run.start(resolved, defaults=step.defaults())
        return cfg, run

    def _pretrain(self, method: str, data: fit_data.FitData, overrides: dict,
                  folder: Path | None) -> PretrainedEncoder:  # fmt: skip
        """``./run.sh pretrain <method>``'s encoder on every given QG (`pretrain.fit`)."""
        step = StageConfig("pretrain", method, {}, overrides["pretrain"])
        cfg, run = self._stage_config(step, folder)
        encoder = pretrain.fit(cfg, data.splits, labeled=data.labeled, run=run)
        return PretrainedEncoder(None if run is None else run.folder, encoder=encoder)

    def _adopt(self, fitted: Any, run: Run | None) -> None:
        """The fitted attributes of the stage's ranker: its model (saved as ``bundle/`` in
        its run folder when there is one) and ``report_``, what it chose on vali."""
        if run is not None:
            fitted.save(run.folder)
        self.ranker_ = InMemory(fitted)
        self.run_ = None if run is None else run.folder
        chosen = getattr(fitted, "selected", None) or getattr(fitted, "result", {})
        best = f"best_vali_{SELECTION_METRIC}"
        vali = getattr(fitted, "vali_ndcg", None)
        vali = chosen.get(best) if vali is None else vali
        self.report_ = {
            "labels": fitted.labels,
            "metrics": {"vali": {SELECTION_METRIC: vali}},
            "selected": {k: v for k, v in chosen.items() if k != "history"},
        }
        if hasattr(fitted, "method"):
            self.report_["method"] = fitted.method

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

    def _pretrained_source(self) -> PretrainedEncoder | None:
        """The encoder that ``pretrained=`` names (None: pretrain in fit, or no encoder)."""
        given = self.pretrained
        if given is None or given in ("none",):
            return None
        if isinstance(given, PretrainedEncoder):
            return given
        if isinstance(given, Ranker):
            encoder = getattr(given, "encoder_", None)
            if encoder is None:
                raise ValueError(
                    "pretrained= is a ranker without a pretrained encoder (not fitted, or a copy "
                    "clone() made): pass its encoder_, or a pretraining run folder"
                )
            return encoder
        if not isinstance(given, str | os.PathLike):
            raise ValueError(
                f"pretrained= must be a PretrainedEncoder, a fitted ranker or a run folder, "
                f"got {type(given).__name__}"
            )
        folder = Path(given)
        if not (folder / "config.yaml").is_file():
            raise ValueError(f"pretrained={given}: not a run folder (no config.yaml)")
        return PretrainedEncoder(folder)

    def _stages(self, source: PretrainedEncoder | None) -> tuple[str, ...]:
        """The stages fit runs (``source``: `_pretrained_source`)."""
        raise NotImplementedError

    def _run_stages(
        self,
        data: fit_data.FitData,
        overrides: dict[str, list[tuple[str, Any]]],
        source: PretrainedEncoder | None,
        folder: Path | None,
    ) -> None:
        """Run the stages on ``data`` with the routed keywords; set ``ranker_`` (`_adopt`)."""
        raise NotImplementedError


def _field_names(schema) -> set[str]:
    return {f.name for f in fields(schema)}


@contextlib.contextmanager
def _output(folder: Path | None, show: int, *, progress: bool):
    """The stages' output: all of it shown at ``verbose=3``; else stdout (and stderr, unless
    ``progress`` keeps the progress bars and warnings on the terminal) into ``<folder>/log.txt``
    when fit keeps its runs, or nowhere."""
    with warnings.catch_warnings():  # LightGBM's C++ side reads it from the params
        warnings.filterwarnings("ignore", message="categorical_feature keyword has been")
        if show >= 3:
            yield
            return
        target = os.devnull if folder is None else folder / "log.txt"
        with open(target, "a") as out, contextlib.redirect_stdout(out), \
                contextlib.ExitStack() as stack:  # fmt: skip
            if not progress:
                stack.enter_context(contextlib.redirect_stderr(out))
            try:
                yield
            finally:
                out.flush()
                sys.stdout.flush()
