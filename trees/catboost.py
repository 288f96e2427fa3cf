"""``./run.sh baseline catboost catboost.loss=<loss>``: CatBoost's ranking losses.

``<loss>``: YetiRank (default), YetiRankPairwise, StochasticRank or QueryRMSE.
Losses which lyzhin2023 finds stronger than LambdaMART on most LTR sets,
trained on the labeled train QGs on the CPU, seeded, with ``catboost.n_trials`` Optuna trials
over lyzhin2023's search space (learning rate, depth, L2 leaf regularisation; StochasticRank:
no L2, its model shrink rate). Each fit stops early on CatBoost's NDCG@5 (exponential gain) of
the labeled vali QGs; a QG without a relevant item counts 1 there (policy ``one``), an affine
map of the project's mean over a fixed set of QGs, so the best round is the same. The trial is
chosen on the project's vali NDCG@5 (`trees.tree_run`). The bundle holds CatBoost's own
``model.cbm`` (no pickle).

A tree backend in one module (docs/architecture.md, "A tree backend"): its `NAME`, its options
(`CatBoostOptions`: the ``catboost:`` section of the baseline config, checked), the backend the
tree pipeline searches (`CatBoostBackend`), the scorer of its bundles (`CatBoostScorer`), `main`,
`fit`, its family entry `FAMILY`, its package `EXTRA` and its registry entry `BACKEND` (its line
in `trees.backends.TREE_BACKENDS`).
"""

from __future__ import annotations

import inspect
import os
import tempfile
import time
from dataclasses import dataclass
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
from scarce_ltr.search.trials import Pruned
from scarce_ltr.trees.tree_fit import tree_entry_points
from scarce_ltr.trees.tree_run import Report
from scarce_ltr.trees.tuning import (
    SearchOptions,
    TreeBackendEntry,
    check_in_child,
    check_labels,
    require_backend,
)

# ./run.sh baseline catboost, configs/baseline/catboost.yaml and the config's catboost: section
NAME = "catboost"
EVAL_METRIC = f"NDCG:top={SELECTION_K};type=Exp"  # the project's gain 2^y - 1
MODEL_FILE = "model.cbm"
BUNDLE_KIND = "catboost"  # written in its bundles' manifests: never renamed
# Its library, an optional package of the trees extra (`require_backend` names it when missing).
EXTRA = Extra("catboost", "catboost", "trees")

# Command-line name -> CatBoost's loss_function. StochasticRank smooths the metric it is told
# to optimise: NDCG@5 with exponential gain, the project's selection metric.
LOSSES = {
    "YetiRank": "YetiRank",
    "YetiRankPairwise": "YetiRankPairwise",
    "StochasticRank": "StochasticRank:metric=NDCG;top=5;type=Exp",
    "QueryRMSE": "QueryRMSE",
}
# CatBoost parameters the project sets itself, and the key a user sets them with instead.
RESERVED_PARAMS = {
    "loss_function": "catboost.loss",
    "objective": "catboost.loss",
    "eval_metric": "nothing: selection is the project's vali NDCG@5",
    "iterations": "catboost.max_rounds",
    "n_estimators": "catboost.max_rounds",
    "num_boost_round": "catboost.max_rounds",
    "num_trees": "catboost.max_rounds",
    "early_stopping_rounds": "catboost.early_stopping_rounds",
    "od_wait": "catboost.early_stopping_rounds",
    "thread_count": "catboost.num_threads",
    "random_seed": "seed",
    "random_state": "seed",
    "learning_rate": "the search (catboost.n_trials)",
}


# The catboost: section: the search's keys (`SearchOptions`) and the loss, one of lyzhin2023's
# (`LOSSES`); the search (``n_trials`` Optuna trials over learning rate, depth and L2 leaf
# regularisation, lyzhin2023's appendix A) and the number of trees (early stopping) are chosen on
# the labeled vali QGs. (No docstring: --help shows the section's keys alone.)
@dataclass(frozen=True)
class CatBoostOptions(SearchOptions):
    section: ClassVar[str] = NAME
    library: ClassVar[str] = "CatBoost"
    reserved_params: ClassVar[dict[str, str]] = RESERVED_PARAMS
    # Its methods whose trees split on NaN (a missing value takes a branch of its own): the
    # command line keeps NaN for them and refuses it for the others (`baselines.config`).
    missing_as_nan: ClassVar[tuple[str, ...]] = (NAME,)
    read_by: ClassVar[tuple[str, ...]] = (NAME,)  # the baselines that read this section

    loss: str = "YetiRank"  # YetiRank | YetiRankPairwise | StochasticRank | QueryRMSE

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"catboost.loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        super().__post_init__()

    @classmethod
    def known_params(cls) -> set[str] | None:
        try:
            import catboost
        except ImportError:
            return None
        # The ranker's constructor names every CatBoost parameter and alias it accepts.
        return set(inspect.signature(catboost.CatBoostRanker.__init__).parameters) - {"self"}


class CatBoostBackend:
    def __init__(self, options: CatBoostOptions, *, seed: int, epochs: int | None) -> None:
        self.catboost = require_backend(EXTRA)
        self.options, self.seed, self.rounds = options, seed, options.rounds(epochs)
        self.name = f"CatBoost {options.loss}"
        self.n_trials = options.n_trials
        self.early_stopping_rounds = options.early_stopping_rounds
        self.stochastic = options.loss == "StochasticRank"

    def check_labels(self, split: RankingSplit, what: str) -> None:
        integer = self.options.integer_labels
        check_labels(split, what, backend=self.name, integer=integer, max_label=None)

    def suggest(self, trial: Any) -> dict:
        fixed = self.options.params
        choices = {"learning_rate": trial.suggest_float("learning_rate", 0.005, 0.5, log=True)}
        if "depth" not in fixed:
            choices["depth"] = trial.suggest_int("depth", 4, 10 if self.stochastic else 8)
        if self.stochastic:  # lyzhin2023: no L2 for StochasticRank, its shrink rate instead
            if "model_shrink_rate" not in fixed:
                rate = trial.suggest_float("model_shrink_rate", 1e-5, 1e-2, log=True)
                choices["model_shrink_rate"] = rate
        elif "l2_leaf_reg" not in fixed:
            choices["l2_leaf_reg"] = trial.suggest_float("l2_leaf_reg", 1e-3, 100.0, log=True)
        return choices

    def first(self) -> dict:
        """CatBoost's defaults (depth 6, L2 3) at a learning rate of 0.05."""
        first = {"learning_rate": 0.05, "depth": 6}
        first |= {"model_shrink_rate": 1e-5} if self.stochastic else {"l2_leaf_reg": 3.0}
        return {k: v for k, v in first.items() if k not in self.options.params}

    def params(self, choices: dict) -> dict:
        l2 = {"l2_leaf_reg": 0.0} if self.stochastic else {}
        return {
            "loss_function": LOSSES[self.options.loss],
            "eval_metric": EVAL_METRIC,
            "iterations": self.rounds,
            "random_seed": self.seed,
            "thread_count": self.options.trial_threads(),
            "task_type": "CPU",
            "allow_writing_files": False,  # no catboost_info/ in the working directory
            "verbose": False,
            **l2,
            **choices,
            **self.options.params,
        }

    def fit(
        self, choices: dict, train: RankingSplit, vali: RankingSplit, report: Report
    ) -> tuple[Any, int, float]:
        watcher = _Watcher(report)
        model = self.catboost.CatBoost(self.params(choices))
        start = time.perf_counter()
        model.fit(
            self._pool(train),
            eval_set=self._pool(vali),
            early_stopping_rounds=self.options.early_stopping_rounds,
            use_best_model=True,  # the model keeps the trees up to its vali-best round
            callbacks=[watcher],
        )
        if watcher.pruned is not None:
            raise watcher.pruned
        return model, int(model.tree_count_), time.perf_counter() - start

    def predict(self, model: Any, features: np.ndarray) -> np.ndarray:
        if len(features) == 0:
            return np.zeros(0)
        pool = self.catboost.Pool(np.asarray(features, dtype=np.float32))
        scores = model.predict(pool, prediction_type="RawFormulaVal", thread_count=1)
        return np.asarray(scores, dtype=np.float64)

    def bundle(self, model: Any) -> tuple[dict, dict[str, bytes]]:
        return {"kind": BUNDLE_KIND, "model": MODEL_FILE, "loss": self.options.loss}, {
            MODEL_FILE: model_bytes(model)
        }

    def describe(self) -> dict:
        return {
            "loss": self.options.loss,
            "catboost": self.catboost.__version__,
            "num_threads": self.options.threads(),
        }

    def _pool(self, split: RankingSplit):
        group_id = np.repeat(np.arange(split.n_groups), split.group_sizes)
        return self.catboost.Pool(
            np.asarray(split.features, dtype=np.float32),
            label=np.asarray(split.labels, dtype=np.float64),
            group_id=group_id,
        )


class _Watcher:
    """CatBoost's per-iteration callback: the vali NDCG@5 goes to the pruner; a prune stops
    the fit here (an exception would not cross CatBoost's C++ loop cleanly) and is raised after."""

    def __init__(self, report: Report) -> None:
        self.report, self.pruned = report, None

    def after_iteration(self, info) -> bool:
        values = info.metrics.get("validation", {}).get(EVAL_METRIC)
        if not values:
            return True
        try:
            self.report(info.iteration, float(values[-1]))
        except Pruned as stop:
            self.pruned = stop
            return False
        return True


def model_bytes(model: Any) -> bytes:
    """CatBoost's own binary model format, read back from the file it writes."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / MODEL_FILE
        model.save_model(os.fspath(path), format="cbm")
        return path.read_bytes()


# Load and score one row: CatBoost crashes the process on some damaged files (`check_in_child`).
_CHECK = (
    "import sys, numpy, catboost; m = catboost.CatBoost(); "
    "m.load_model(blob=open(sys.argv[1], 'rb').read()); "
    "m.predict(catboost.Pool(numpy.zeros((1, len(m.feature_names_)), 'float32')), "
    "prediction_type='RawFormulaVal', thread_count=1)"
)


class CatBoostScorer:
    """A catboost bundle's model (`ModelFamily.scorer`): what `CatBoostBackend.bundle` wrote."""

    def __init__(self, folder: Path, info: dict, context: ScoringContext) -> None:
        catboost = require_backend(EXTRA)
        self.pool = catboost.Pool
        self.model = catboost.CatBoost()
        # CatBoost's own binary format: trees and borders, no code.
        path = bundle_path(folder, info.get("model"), "model.model")
        check_in_child(_CHECK, path, "CatBoost")
        try:
            self.model.load_model(blob=read_model_bytes(path))
        except catboost.CatBoostError as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise UserError(f"{path}: not a CatBoost model ({first})") from None

    def score(self, raw: RankingSplit, transform: FeatureTransform) -> np.ndarray:
        features = np.asarray(transform(raw).features, dtype=np.float32)
        if len(features) == 0:
            return np.zeros(0)
        scores = self.model.predict(
            self.pool(features), prediction_type="RawFormulaVal", thread_count=1
        )
        return np.asarray(scores, dtype=np.float64)


# ``main``: train, select on vali, evaluate once on test, write the run folder; ``fit``: the
# search of ``main`` on in-memory splits, the vali-best model (`baselines.run.fit`)
main, fit = tree_entry_points(CatBoostOptions, CatBoostBackend, __name__)


FAMILY = ModelFamily(
    names=(NAME,),
    stage="baseline",
    train=main,
    group="gbdt",
    bundle_kind=BUNDLE_KIND,
    scorer=CatBoostScorer,
)

# Its line in `trees.backends.TREE_BACKENDS`: the config's catboost: section, its method, its fit.
BACKEND = TreeBackendEntry(options=CatBoostOptions, family=FAMILY, fit=fit, extra=EXTRA)
