"""LightGBM as a tree backend (`trees.tree_run.TreeBackend`), and the paper's grid.

``gbdt.search=paper-grid`` (appendix A.2.3, the default): start from LightGBM's defaults
(num_leaves 31, min_data_in_leaf 20, feature_fraction 1.0) and vary one hyperparameter at a
time over its list. The paper counts 3 x 3 = 9 choices; three of them are the default point
itself, so 7 distinct points are trained. ``gbdt.grid=full``: every combination (27 with the
default lists). A strategy that draws its trials (``gbdt.search=optuna``, ...): the search
space of `trees.lightgbm.search`.

min_data_in_leaf is capped at `lightgbm_ranker.min_data_cap` (``n_items // 4``) of the
training set; points that the cap makes equal are trained once. Either search runs through the
tree pipeline's `trees.tree_run.search` (`trees.tuning`: each fit early-stops on vali
NDCG@5, the vali-best fit is kept); `run_search` gives its outcome as grid rows
(`PointResult`), with the phase and PCA size the LightGBM variants report.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import lightgbm as lgb
import numpy as np

from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.search.strategies import SEARCHES
from scarce_ltr.search.studies import StudyStore
from scarce_ltr.search.trials import TrialResult
from scarce_ltr.trees.lightgbm.config import GBDTOptions
from scarce_ltr.trees.lightgbm.lightgbm_ranker import (
    CENTRE,
    BoosterOptions,
    Fit,
    LeafSettings,
    RankingData,
    check_labels,
    fit,
)
from scarce_ltr.trees.lightgbm.search import LEAF_KEYS, defaults, lightgbm_choices, suggest
from scarce_ltr.trees.tree_run import Bundle, Report, search, trainer

BUNDLE_KIND = "lightgbm"  # a booster, with its PCA or encoder columns beside it


def grid_points(options: GBDTOptions) -> list[LeafSettings]:
    """The grid as configured, before any cap; the centre first for ``paper``."""
    if options.grid == "full":
        combos = itertools.product(
            options.num_leaves, options.min_data_in_leaf, options.feature_fraction
        )
        return _unique(LeafSettings(*combo) for combo in combos)
    points = [CENTRE]
    points += [_with(num_leaves=v) for v in options.num_leaves]
    points += [_with(min_data_in_leaf=v) for v in options.min_data_in_leaf]
    points += [_with(feature_fraction=v) for v in options.feature_fraction]
    return _unique(points)


def capped(points: list[LeafSettings], cap: int) -> list[tuple[LeafSettings, int]]:
    """``(point as trained, min_data_in_leaf asked for)``, duplicates after capping dropped."""
    out: dict[LeafSettings, int] = {}
    for point in points:
        trained = LeafSettings(
            point.num_leaves, min(point.min_data_in_leaf, cap), point.feature_fraction
        )
        out.setdefault(trained, point.min_data_in_leaf)
    return list(out.items())


class LightGBMBackend:
    """LightGBM LambdaMART as a `TreeBackend`. A search's backend holds the `RankingData` it
    fits on (binned once, reused by every fit; its size caps min_data_in_leaf); without data it
    checks labels, scores and bundles only."""

    name = "LightGBM"

    def __init__(
        self,
        options: GBDTOptions,
        training: BoosterOptions,
        data: RankingData | None = None,
        *,
        points: list[LeafSettings] | None = None,
    ) -> None:
        """``points``: the paper grid's points (default: ``grid_points(options)``)."""
        self.options, self.training, self.data = options, training, data
        self.n_trials = options.n_trials
        self.early_stopping_rounds = training.early_stopping_rounds
        self.points = grid_points(options) if points is None else points

    @property
    def cap(self) -> int:
        assert self.data is not None, "a search's backend holds its data"
        return self.data.cap

    @property
    def plan(self) -> list[tuple[LeafSettings, int]]:
        """The paper grid as trained on ``self.data``: (point, min_data_in_leaf asked for)."""
        return capped(self.points, self.cap)

    def check_labels(self, split: RankingSplit, what: str) -> None:
        check_labels(split, what)

    def suggest(self, trial: Any) -> dict:
        return suggest(trial, self.options, cap=self.cap)

    def first(self) -> dict:
        return defaults(self.options, self.training, cap=self.cap)

    def apart(self, choices: dict) -> str:
        """Fits of different label gains never train at once (``gbdt.n_jobs``): LightGBM keeps
        the gain table of its NDCG (lambdarank's and the metric's) in one process-wide table
        that each fit sets when it starts (``DCGCalculator``), so a linear-gain fit beside an
        exponential one would train with the other's gains."""
        return str(choices.get("label_gain", "exp"))

    def grid(self) -> list[dict]:
        """The paper-grid strategy's points, as trained (capped)."""
        return [asdict(leaves) for leaves, _ in self.plan]

    def fit(self, choices: dict, train: Any, vali: Any, report: Report | None) -> tuple:
        """``train`` and ``vali`` are not read: every fit of a search uses ``self.data``,
        binned from them once."""
        leaves, extra = lightgbm_choices(choices)
        # A linear label gain changes LightGBM's per-round NDCG too: its values are on another
        # scale than the other trials', so the median rule does not judge them.
        if choices.get("label_gain") == "linear":
            report = None
        trained = fit(leaves, self.training, self.data, extra=extra, report=report)
        return trained, trained.best_rounds, trained.seconds

    def predict(self, model: Fit, features: np.ndarray) -> np.ndarray:
        return model.predict(features, num_threads=self.training.num_threads)

    def bundle(self, model: Fit) -> Bundle:
        """The booster at its chosen rounds (``model.txt``); the PCA variants add theirs."""
        booster = model.booster.model_to_string(num_iteration=model.best_rounds)
        return {"kind": BUNDLE_KIND, "booster": "model.txt", "pca": None}, {
            "model.txt": booster.encode()
        }

    def describe(self) -> dict:
        return {"lightgbm": lgb.__version__, "num_threads": self.options.num_threads}

    def row(self, result: TrialResult, strategy: str, *, phase: str, pca: int) -> PointResult:
        """A trial as a grid row: a grid point with the min_data_in_leaf it asked for, a
        drawn trial with its number and other choices."""
        leaves, _ = lightgbm_choices(result.choices)
        asked, choices = leaves.min_data_in_leaf, {}
        if SEARCHES[strategy].grid:
            asked = self.plan[result.number][1]
        else:
            other = {key: v for key, v in result.choices.items() if key not in LEAF_KEYS}
            choices = {"trial": result.number, **other}
        return PointResult(
            phase=phase,
            pca_components=pca,
            leaves=leaves,
            min_data_in_leaf_asked=asked,
            best_rounds=result.rounds,
            vali_ndcg=result.vali_ndcg,
            seconds=result.seconds,
            choices=choices,
            pruned=result.pruned,
            vali_per_group=result.vali_per_group,
        )


@dataclass
class PointResult:
    """One trained grid point and its score on the labeled vali QGs (``nan`` if undefined)."""

    phase: str  # "labeled" or "pseudo" (trained on labeled + pseudo-labeled QGs)
    pca_components: int  # 0: no PCA features
    leaves: LeafSettings
    min_data_in_leaf_asked: int
    best_rounds: int
    vali_ndcg: float
    seconds: float
    choices: dict = field(default_factory=dict)  # a search trial's other choices
    pruned: bool = False  # a search trial its pruner stopped: never chosen
    # vali_ndcg per labeled vali QG (None: pruned), for trials.npz (`search.trial_scores`)
    vali_per_group: np.ndarray | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        return {
            **self.choices,
            "phase": self.phase,
            "pca_components": self.pca_components,
            "num_leaves": self.leaves.num_leaves,
            "min_data_in_leaf": self.leaves.min_data_in_leaf,
            "min_data_in_leaf_asked": self.min_data_in_leaf_asked,
            "feature_fraction": self.leaves.feature_fraction,
            "rounds": self.best_rounds,
            "vali_ndcg@5": None if math.isnan(self.vali_ndcg) else self.vali_ndcg,
            "seconds": round(self.seconds, 3),
            **({"pruned": True} if self.pruned else {}),
        }


@dataclass
class GridOutcome:
    results: list[PointResult] = field(default_factory=list)
    best: int = -1  # index into results
    best_fit: Fit | None = None  # only the best booster is kept in memory

    @property
    def best_result(self) -> PointResult:
        return self.results[self.best]


def run_search(
    options: GBDTOptions,
    *,
    data: RankingData,
    training: BoosterOptions,
    score_vali: Callable[[Fit], tuple[float, np.ndarray]],
    phase: str,
    pca_components: int,
    on_point: Callable[[PointResult], None] = lambda result: None,
    points: list[LeafSettings] | None = None,
    study: StudyStore | None = None,
) -> GridOutcome:
    """The vali-best LightGBM fit of ``options.search`` on ``data``, as grid rows.

    Args:
        score_vali: a fit's NDCG@5 on the labeled vali QGs (the project's metric and policy),
            and per QG (`data.evaluation.vali_selection_scores`).
        on_point: called with each fit's row (progress bar, tracker).
        study: where an Optuna search keeps its study (`search.studies`; None: in memory).
    """
    backend = LightGBMBackend(options, training, data, points=points)
    outcome = GridOutcome()

    def on_trial(result: TrialResult) -> None:
        row = backend.row(result, options.search, phase=phase, pca=pca_components)
        outcome.results.append(row)
        on_point(row)

    searched = search(
        backend,
        options.search,
        seed=training.seed,
        train=trainer(backend, None, None, score_vali),
        on_trial=on_trial,
        study=study,
    )
    outcome.best, outcome.best_fit = searched.best, searched.best_model
    return outcome


def run_grid(points: list[LeafSettings], **search_args) -> GridOutcome:
    """`run_search` over the given paper-grid points (``data``, ``training``, ``score_vali``,
    ``phase``, ``pca_components``, ``on_point`` as there)."""
    return run_search(GBDTOptions(search="paper-grid"), points=points, **search_args)


def n_fits(options: GBDTOptions, cap: int) -> int:
    return len(capped(grid_points(options), cap))


def search_fits(options: GBDTOptions, cap: int) -> int:
    """How many fits one search makes (a progress bar's total)."""
    return n_fits(options, cap) if SEARCHES[options.search].grid else options.n_trials


def _with(**change) -> LeafSettings:
    values = {
        "num_leaves": CENTRE.num_leaves,
        "min_data_in_leaf": CENTRE.min_data_in_leaf,
        "feature_fraction": CENTRE.feature_fraction,
    }
    return LeafSettings(**{**values, **change})


def _unique(points) -> list[LeafSettings]:
    return list(dict.fromkeys(points))
