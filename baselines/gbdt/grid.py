"""The GBDT hyperparameter grid, and choosing a point on validation NDCG@5 only.

``paper`` (appendix A.2.3): start from LightGBM's defaults (num_leaves 31, min_data_in_leaf 20,
feature_fraction 1.0) and vary one hyperparameter at a time over its list. The paper counts
3 x 3 = 9 choices; three of them are the default point itself, so 7 distinct points are trained.
``full``: every combination (27 with the default lists).

min_data_in_leaf is capped at `lightgbm_ranker.min_data_cap` (``n_items // 4``) of the
training set; points that the cap makes equal are trained once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from scarce_ltr.baselines.gbdt.config import GBDTOptions
from scarce_ltr.baselines.gbdt.lightgbm_ranker import (
    Fit,
    LeafSettings,
    RankingData,
    TrainingOptions,
    fit,
)
from scarce_ltr.core.selection import select_best

# LightGBM's defaults: the centre of the paper's one-at-a-time grid.
CENTRE = LeafSettings(num_leaves=31, min_data_in_leaf=20, feature_fraction=1.0)


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


def run_grid(
    points: list[LeafSettings],
    *,
    data: RankingData,
    training: TrainingOptions,
    score_vali: Callable[[Fit], float],
    phase: str,
    pca_components: int,
    on_point: Callable[[PointResult], None] = lambda result: None,
) -> GridOutcome:
    """Fit every point (min_data_in_leaf capped for ``data``); keep the vali-best one.

    Args:
        score_vali: a fit's NDCG@5 on the labeled vali QGs (the project's metric and policy).
        on_point: called with each fit's result (progress bar, tracker).
    """
    outcome = GridOutcome()
    for leaves, asked in capped(points, data.cap):
        trained = fit(leaves, training, data)
        result = PointResult(
            phase=phase,
            pca_components=pca_components,
            leaves=leaves,
            min_data_in_leaf_asked=asked,
            best_rounds=trained.best_rounds,
            vali_ndcg=score_vali(trained),
            seconds=trained.seconds,
        )
        outcome.results.append(result)
        if select_best([r.vali_ndcg for r in outcome.results]) == len(outcome.results) - 1:
            outcome.best, outcome.best_fit = len(outcome.results) - 1, trained
        on_point(result)
    return outcome


def n_fits(options: GBDTOptions, cap: int) -> int:
    return len(capped(grid_points(options), cap))


def _with(**change) -> LeafSettings:
    values = {
        "num_leaves": CENTRE.num_leaves,
        "min_data_in_leaf": CENTRE.min_data_in_leaf,
        "feature_fraction": CENTRE.feature_fraction,
    }
    return LeafSettings(**{**values, **change})


def _unique(points) -> list[LeafSettings]:
    return list(dict.fromkeys(points))
