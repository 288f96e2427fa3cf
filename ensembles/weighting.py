"""How an ensemble chooses its members' weights on vali (``weights=grid|uniform|crossfit|topk``).

- ``uniform``: the plain average;
- ``grid``: every simplex-grid vector is scored on vali NDCG@5 and the best is kept;
- ``crossfit``: the same grid, chosen fold by fold over the labeled vali QGs
  (`search.crossfit`): the final weights are the mean of the fold choices, and the vali
  scores the run keeps (``scores.npz``, ``metrics.vali``) are out of fold: each QG that counts
  is scored by the weights chosen without it. Its vali NDCG@5 is then the cross-fitted
  estimate, which is what sweeps and ``select`` compare, and ``metrics.vali.in_sample_ndcg@5``
  keeps what ``grid`` would have reported. Out-of-fold vali scores also keep an ensemble that
  takes this one as a member from choosing on an optimistic member.
- ``topk``: equal weights on the vali-best k members, k cross-fitted (`search.topk`); its
  vali scores are out of fold in the same way, one level up.

Test never enters: it is scored once, with the final weights, by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.metrics import SELECTION_METRIC
from scarce_ltr.data.evaluation import (
    vali_selection,
    vali_selection_per_group,
    vali_selection_scores,
)
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import rows_of_groups
from scarce_ltr.ensembles.config import EnsembleConfig
from scarce_ltr.ensembles.score_fusion import mix, simplex_grid
from scarce_ltr.search.crossfit import crossfit, group_means
from scarce_ltr.search.selection import select_best
from scarce_ltr.search.topk import top_k, weights_of

IN_SAMPLE_KEY = f"in_sample_{SELECTION_METRIC}"  # metrics.vali key of a cross-fitted ensemble


@dataclass(frozen=True)
class WeightChoice:
    weights: np.ndarray  # [n_members] the final weights (test is mixed with these)
    vali_scores: np.ndarray  # [n_vali_items] the vali scores the run reports and keeps
    tried: list[dict]  # every vector with its (in-sample) vali NDCG@5
    report: dict = field(default_factory=dict)  # extra report keys (crossfit: its folds)
    vali_extra: dict = field(default_factory=dict)  # extra metrics.vali keys
    # grid: every vector's per-QG vali NDCG@5, kept as the run's trials (`search.trial_scores`),
    # since its vali score is the in-sample best of them; None where the score is honest already
    per_trial: np.ndarray | None = None


def choose_weights(cfg: EnsembleConfig, prepared: PreparedData, vali: np.ndarray) -> WeightChoice:
    """The weights of ``vali [n_members, n_vali_items]`` (normalized scores) under
    ``cfg.weights``; ``cfg`` is an `EnsembleConfig`."""
    n = len(vali)
    if cfg.weights == "topk":
        return _choose_top_k(cfg, prepared, vali)
    if cfg.weights == "uniform":
        grid = np.full((1, n), 1.0 / n)
    else:
        grid = simplex_grid(n, cfg.step)
    if cfg.weights != "crossfit":
        scored = [vali_selection_scores(prepared, mix(vali, w), cfg.metrics) for w in grid]
        tried = [value for value, _ in scored]
        weights = grid[select_best(tried)]
        per_trial = np.stack([per_group for _, per_group in scored]) if len(grid) > 1 else None
        chosen = mix(vali, weights)
        return WeightChoice(weights, chosen, _tried(grid, tried), per_trial=per_trial)
    per_group = np.stack(
        [vali_selection_per_group(prepared, mix(vali, w), cfg.metrics) for w in grid]
    )
    try:
        fit = crossfit(per_group, n_folds=cfg.crossfit_folds, seed=cfg.seed)
    except ValueError as exc:
        raise UserError(f"weights=crossfit: {exc}; use weights=grid") from None
    weights = grid[fit.fold_choices].mean(axis=0)
    fold_weights = [grid[choice] for choice in fit.fold_choices]
    vali_scores = _out_of_fold(prepared, vali, weights, fold_weights, fit.fold_of_group)
    in_sample = vali_selection(prepared, mix(vali, grid[fit.in_sample_choice]), cfg.metrics)
    report = {
        "crossfit": {
            "folds": fit.n_folds,
            "fold_weights": [grid[c].tolist() for c in fit.fold_choices],
            f"vali_{SELECTION_METRIC}": _number(fit.estimate),
            "in_sample_weights": grid[fit.in_sample_choice].tolist(),
            f"in_sample_vali_{SELECTION_METRIC}": _number(in_sample),
            f"final_weights_in_sample_vali_{SELECTION_METRIC}": _number(
                vali_selection(prepared, mix(vali, weights), cfg.metrics)
            ),
        }
    }
    tried = group_means(per_group)
    return WeightChoice(
        weights, vali_scores, _tried(grid, tried), report, {IN_SAMPLE_KEY: _number(in_sample)}
    )


def _choose_top_k(cfg: EnsembleConfig, prepared: PreparedData, vali: np.ndarray) -> WeightChoice:
    """``weights=topk``: the vali-best k members averaged, k and the reported vali score
    cross-fitted over the labeled vali QGs (`search.topk`)."""
    n = len(vali)
    per_member = np.stack([vali_selection_per_group(prepared, v, cfg.metrics) for v in vali])

    def mix_per_group(members: tuple[int, ...]) -> np.ndarray:
        return vali_selection_per_group(prepared, mix(vali, weights_of(members, n)), cfg.metrics)

    try:
        fit = top_k(per_member, mix_per_group, n_folds=cfg.crossfit_folds, seed=cfg.seed)
    except ValueError as exc:
        raise UserError(f"weights=topk: {exc}; use weights=grid") from None
    weights = weights_of(fit.members, n)
    fold_weights = [weights_of(members, n) for members in fit.fold_members]
    vali_scores = _out_of_fold(prepared, vali, weights, fold_weights, fit.fold_of_group)
    order = list(fit.members) + [i for i in range(n) if i not in fit.members]
    report = {
        "topk": {
            "folds": len(fit.fold_members),
            "k": fit.k,
            "members": list(fit.members),
            "fold_members": [list(members) for members in fit.fold_members],
            f"held_out_vali_{SELECTION_METRIC}_by_k": [_number(v) for v in fit.held_out_by_k],
            f"vali_{SELECTION_METRIC}": _number(fit.estimate),
            f"in_sample_vali_{SELECTION_METRIC}": _number(fit.in_sample),
        }
    }
    tried_weights = np.stack([weights_of(tuple(order[:k]), n) for k in range(1, n + 1)])
    return WeightChoice(
        weights,
        vali_scores,
        _tried(tried_weights, fit.held_out_by_k),
        report,
        {IN_SAMPLE_KEY: _number(fit.in_sample)},
    )


def _out_of_fold(prepared, vali, weights, fold_weights, fold_of_group) -> np.ndarray:
    """The vali scores a cross-fitted choice reports: each labeled QG of fold ``f`` mixed
    with ``fold_weights[f]``, chosen without it; every other QG with the final ``weights``."""
    vali_scores = mix(vali, weights)  # QGs outside the folds (unlabeled, no relevant item)
    labeled = np.flatnonzero(prepared.labels.vali_labeled)
    for fold, fold_weight in enumerate(fold_weights):
        rows = rows_of_groups(prepared.vali.offsets, labeled[fold_of_group == fold])
        vali_scores[rows] = mix(vali[:, rows], fold_weight)
    return vali_scores


def _tried(grid: np.ndarray, tried: list[float]) -> list[dict]:
    return [
        {"weights": w.tolist(), f"vali_{SELECTION_METRIC}": _number(v)}
        for w, v in zip(grid, tried, strict=True)
    ]


def _number(value: float) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)
