"""``./run.sh baseline xgboost xgboost.objective=<rank:ndcg|rank:pairwise>``: XGBoost's rankers.

Trained on the labeled train QGs on the CPU (``hist`` trees, seeded), with
``xgboost.n_trials`` Optuna trials over learning rate, depth, min child weight, row and column
sampling and L1/L2. Each fit stops early on XGBoost's ``ndcg@5`` (exponential gain) of the
labeled vali QGs, which counts a QG without a relevant item as 1 (policy ``one``: the same best
round as the project's policies); the trial is chosen on the project's vali NDCG@5
(`trees.tree_run`). The bundle holds XGBoost's own UBJSON model (no pickle), cut at the
vali-best round.

A tree backend in one module (docs/architecture.md, "A tree backend"): its `NAME`, its options
(`XGBoostOptions`: the ``xgboost:`` section of the baseline config, checked), the backend the
tree pipeline searches (`XGBoostBackend`), the scorer of its bundles (`XGBoostScorer`), `main`,
`fit`, its family entry `FAMILY`, its package `EXTRA` and its registry entry `BACKEND` (its line
in `trees.backends.TREE_BACKENDS`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from scarce_ltr.core.bundle import bundle_path, read_model_bytes
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.extras import Extra
from scarce_ltr.core.families import ModelFamily, ScoringContext
from scarce_ltr.core.metrics import SELECTION_K
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.transforms import FeatureTransform
from scarce_ltr.trees.tree_fit import tree_entry_points
from scarce_ltr.trees.tree_run import Report
from scarce_ltr.trees.tuning import (
    SearchOptions,
    TreeBackendEntry,
    check_in_child,
    check_labels,
    require_backend,
)

# ./run.sh baseline xgboost, configs/baseline/xgboost.yaml and the config's xgboost: section
NAME = "xgboost"
OBJECTIVES = ("rank:ndcg", "rank:pairwise")
MAX_XGBOOST_LABEL = 30  # rank:ndcg's exponential gain 2^y - 1 (and its ndcg metric) stops at 31
# XGBoost parameters the project sets itself, and the key a user sets them with instead.
RESERVED_PARAMS = {
    "objective": "xgboost.objective",
    "eval_metric": "nothing: selection is the project's vali NDCG@5",
    "seed": "seed",
    "random_state": "seed",
    "nthread": "xgboost.num_threads",
    "n_jobs": "xgboost.num_threads",
    "eta": "the search (xgboost.n_trials)",
    "learning_rate": "the search (xgboost.n_trials)",
}
# XGBoost's aliases of the searched parameters: a user's fixed value takes the key out of the
# search.
ALIASES = {"reg_lambda": "lambda", "reg_alpha": "alpha", "min_split_loss": "gamma"}
EVAL_METRIC = f"ndcg@{SELECTION_K}"
MODEL_FILE = "model.ubj"
BUNDLE_KIND = "xgboost"  # written in its bundles' manifests: never renamed
# Its library, an optional package of the trees extra (`require_backend` names it when missing).
EXTRA = Extra("xgboost", "xgboost-cpu", "trees")


# The xgboost: section: the search's keys (`SearchOptions`) and the objective, ``rank:ndcg``
# (LambdaMART) or ``rank:pairwise`` (RankNet); the search (``n_trials`` Optuna trials over learning
# rate, depth, child weight, sampling and L1/L2) and the number of trees (early stopping) are
# chosen on the labeled vali QGs. (No docstring: --help shows the section's keys alone.)
@dataclass(frozen=True)
class XGBoostOptions(SearchOptions):
    section: ClassVar[str] = NAME
    library: ClassVar[str] = "XGBoost"
    integer_labels: ClassVar[bool] = True  # rank:ndcg and rank:pairwise read integer grades
    reserved_params: ClassVar[dict[str, str]] = RESERVED_PARAMS
    # Its methods whose trees split on NaN (a missing value takes a branch of its own): the
    # command line keeps NaN for them and refuses it for the others (`baselines.config`).
    missing_as_nan: ClassVar[tuple[str, ...]] = (NAME,)
    read_by: ClassVar[tuple[str, ...]] = (NAME,)  # the baselines that read this section

    objective: str = "rank:ndcg"  # rank:ndcg | rank:pairwise

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(
                f"xgboost.objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}"
            )
        super().__post_init__()

    @classmethod
    def known_params(cls) -> set[str] | None:
        return known_params()


@cache
def known_params() -> set[str] | None:
    """Every parameter XGBoost knows (None: not installed)."""
    try:
        import xgboost as xgb
    except ImportError:
        return None
    # XGBoost keeps unknown parameters with a warning only; its saved config names every
    # parameter it knows (the leaves of the JSON tree; nested sections are dicts).
    data = xgb.DMatrix(np.zeros((2, 1), dtype=np.float32), label=np.zeros(2))
    booster = xgb.Booster({"objective": "rank:ndcg", "verbosity": 0}, [data])
    known: set[str] = set()

    def leaves(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, dict | list):
                    leaves(value)
                else:
                    known.add(key)

    leaves(json.loads(booster.save_config()))
    return known


class XGBoostBackend:
    def __init__(self, options: XGBoostOptions, *, seed: int, epochs: int | None) -> None:
        self.xgb = require_backend(EXTRA)
        self.options, self.seed, self.rounds = options, seed, options.rounds(epochs)
        self.name = f"XGBoost {options.objective}"
        self.n_trials = options.n_trials
        self.early_stopping_rounds = options.early_stopping_rounds
        self.fixed = {ALIASES.get(k, k) for k in options.params}

    def check_labels(self, split: RankingSplit, what: str) -> None:
        integer = self.options.integer_labels
        check_labels(split, what, backend=self.name, integer=integer, max_label=MAX_XGBOOST_LABEL)

    def suggest(self, trial: Any) -> dict:
        space = {
            "eta": lambda: trial.suggest_float("eta", 0.01, 0.3, log=True),
            "max_depth": lambda: trial.suggest_int("max_depth", 2, 10),
            "min_child_weight": lambda: trial.suggest_float(
                "min_child_weight", 1e-2, 10.0, log=True
            ),
            "subsample": lambda: trial.suggest_float("subsample", 0.5, 1.0),
            "colsample_bytree": lambda: trial.suggest_float("colsample_bytree", 0.3, 1.0),
            "lambda": lambda: trial.suggest_float("lambda", 1e-3, 10.0, log=True),
            "alpha": lambda: trial.suggest_float("alpha", 1e-8, 10.0, log=True),
        }
        return {key: draw() for key, draw in space.items() if key not in self.fixed}

    def first(self) -> dict:
        """XGBoost's defaults (alpha 0 is below the log scale: 1e-8)."""
        first = {
            "eta": 0.3,
            "max_depth": 6,
            "min_child_weight": 1.0,
            "subsample": 1.0,
            "colsample_bytree": 1.0,
            "lambda": 1.0,
            "alpha": 1e-8,
        }
        return {k: v for k, v in first.items() if k not in self.fixed}

    def params(self, choices: dict) -> dict:
        return {
            "objective": self.options.objective,
            "eval_metric": EVAL_METRIC,
            "tree_method": "hist",
            "device": "cpu",
            "seed": self.seed,
            "nthread": self.options.trial_threads(),
            "verbosity": 0,
            **choices,
            **self.options.params,
        }

    def fit(
        self, choices: dict, train: RankingSplit, vali: RankingSplit, report: Report
    ) -> tuple[Any, int, float]:
        start = time.perf_counter()
        booster = self.xgb.train(
            self.params(choices),
            self._matrix(train),
            num_boost_round=self.rounds,
            evals=[(self._matrix(vali), "vali")],
            early_stopping_rounds=self.options.early_stopping_rounds,
            verbose_eval=False,
            callbacks=[_reporter(self.xgb, report)],
        )
        rounds = int(booster.best_iteration) + 1
        # Cut at the vali-best round: predictions and the bundle use exactly these trees.
        return booster[:rounds], rounds, time.perf_counter() - start

    def predict(self, model: Any, features: np.ndarray) -> np.ndarray:
        if len(features) == 0:
            return np.zeros(0)
        matrix = self.xgb.DMatrix(np.asarray(features, dtype=np.float32))
        return np.asarray(model.predict(matrix), dtype=np.float64)

    def bundle(self, model: Any) -> tuple[dict, dict[str, bytes]]:
        raw = bytes(model.save_raw(raw_format="ubj"))
        description = {
            "kind": BUNDLE_KIND,
            "model": MODEL_FILE,
            "objective": self.options.objective,
        }
        return description, {MODEL_FILE: raw}

    def describe(self) -> dict:
        return {
            "objective": self.options.objective,
            "xgboost": self.xgb.__version__,
            "num_threads": self.options.threads(),
        }

    def _matrix(self, split: RankingSplit):
        matrix = self.xgb.DMatrix(
            np.asarray(split.features, dtype=np.float32),
            label=np.asarray(split.labels, dtype=np.float64),
        )
        matrix.set_group(np.asarray(split.group_sizes))
        return matrix


def _reporter(xgb, report: Report):
    """XGBoost's callback passing each round's vali NDCG@5 to the pruner (which may raise)."""

    class Reporter(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch: int, evals_log: dict) -> bool:
            report(epoch, float(evals_log["vali"][EVAL_METRIC][-1]))
            return False  # never stops training itself

    return Reporter()


# Load and score one row: XGBoost aborts the process on some damaged files (`check_in_child`).
_CHECK = (
    "import sys, numpy, xgboost; b = xgboost.Booster(); "
    "b.load_model(bytearray(open(sys.argv[1], 'rb').read())); "
    "b.predict(xgboost.DMatrix(numpy.zeros((1, b.num_features()), 'float32')))"
)


class XGBoostScorer:
    """An xgboost bundle's model (`ModelFamily.scorer`): what `XGBoostBackend.bundle` wrote."""

    def __init__(self, folder: Path, info: dict, context: ScoringContext) -> None:
        self.xgb = require_backend(EXTRA)
        self.booster = self.xgb.Booster()
        # XGBoost's UBJSON model: trees and parameters, no code.
        path = bundle_path(folder, info.get("model"), "model.model")
        check_in_child(_CHECK, path, "XGBoost")
        try:
            self.booster.load_model(bytearray(read_model_bytes(path)))
        except self.xgb.core.XGBoostError as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise UserError(f"{path}: not an XGBoost model ({first})") from None

    def score(self, raw: RankingSplit, transform: FeatureTransform) -> np.ndarray:
        features = np.asarray(transform(raw).features, dtype=np.float32)
        if len(features) == 0:
            return np.zeros(0)
        return np.asarray(self.booster.predict(self.xgb.DMatrix(features)), dtype=np.float64)


# ``main``: train, select on vali, evaluate once on test, write the run folder; ``fit``: the
# search of ``main`` on in-memory splits, the vali-best model (`baselines.run.fit`)
main, fit = tree_entry_points(XGBoostOptions, XGBoostBackend, __name__)


FAMILY = ModelFamily(
    names=(NAME,),
    stage="baseline",
    train=main,
    group="gbdt",
    bundle_kind=BUNDLE_KIND,
    scorer=XGBoostScorer,
)

# Its line in `trees.backends.TREE_BACKENDS`: the config's xgboost: section, its method, its fit.
BACKEND = TreeBackendEntry(options=XGBoostOptions, family=FAMILY, fit=fit, extra=EXTRA)
