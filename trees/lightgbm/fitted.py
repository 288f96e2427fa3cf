"""The LightGBM baselines' chosen model: their feature sets with the columns a booster reads,
the choice among candidates as a `trees.fitted.FittedTrees`, and what a run writes of it.

A candidate is one feature set (gbdt-pca: one PCA size; gbdt-ssl: one embedding) with its
search's outcome; `fitted_lightgbm` keeps the vali-best of every candidate's final search
together (`search.selection.select_best`), `save_chosen` writes a run's ``trials.npz``,
``scores.npz`` and ``pca.npz`` from it. gbdt and its variants (`trees.lightgbm.train`) and
gbdt-ssl (`trees.lightgbm.hybrid.train`) share them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import atomic_write_bytes, npz_bytes
from scarce_ltr.core.runs import Run
from scarce_ltr.data.evaluation import write_trials
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.search.selection import select_best
from scarce_ltr.trees.fitted import Bundle, FittedTrees, plain
from scarce_ltr.trees.lightgbm.grid import LightGBMBackend
from scarce_ltr.trees.lightgbm.semi_supervised import PCAFeatures
from scarce_ltr.trees.tree_run import TreeRunConfig, score_and_save


class Features:
    """The splits' features with the first ``k`` PCA components appended (k = 0: as they are)."""

    def __init__(self, prepared: PreparedData, ks: list[int], *, seed: int) -> None:
        self.prepared, self.pca, self.projections = prepared, None, {}
        if ks:
            n_items, n_features = prepared.train.features.shape
            if max(ks) > min(n_items, n_features):
                raise UserError(
                    f"gbdt.pca_components asks for {max(ks)} components; the data has "
                    f"{n_features} features and {n_items} train items"
                )
            self.pca = PCAFeatures(prepared.train.features, max_components=max(ks), seed=seed)
            for name in ("train", "vali", "test"):
                split = getattr(prepared, name)
                self.projections[name] = self.pca.projection(split.features)

    def split(self, name: str, k: int) -> RankingSplit:
        split = getattr(self.prepared, name)
        if k == 0:
            return split
        return self.pca.append(split, k, self.projections[name])

    def columns(self, k: int) -> Callable[[RankingSplit], RankingSplit]:
        """What `split` makes of a prepared split, for any transformed split (a new file's)."""
        if k == 0 or self.pca is None:
            return plain
        pca = self.pca
        return lambda split: pca.append(split, k)


@dataclass
class LightGBMOutcome:
    """What a LightGBM baseline's run reports beyond the chosen model: every candidate (each
    with ``k`` and its search's ``outcome``), the chosen one, the feature sets (``split``,
    ``pca``) and the backend; ``teacher``: gbdt.teacher's run (None: none)."""

    candidates: list
    chosen: Any
    features: Any
    backend: LightGBMBackend
    teacher: Any = None


def fitted_lightgbm(
    cfg: TreeRunConfig,
    prepared: PreparedData,
    backend: LightGBMBackend,
    features: Any,
    candidates: list,
    *,
    bundle: Callable[[Any], Bundle],
    selected: Callable[[Any], dict] = lambda chosen: {},
    teacher: Any = None,
) -> FittedTrees:
    """The vali-best of every candidate's final search together, as a ranker: it reads the
    chosen candidate's columns (``features.columns(k)``; ``features.split(name, k)`` of the
    prepared splits); ``bundle(chosen)``: its bundle; ``selected(chosen)``: keys the chosen
    fit's row starts with (gbdt-ssl's embedding)."""
    chosen = candidates[select_best([c.outcome.best_result.vali_ndcg for c in candidates])]
    model, best = chosen.outcome.best_fit, chosen.outcome.best_result
    outcome = LightGBMOutcome(candidates, chosen, features, backend, teacher)
    return FittedTrees(
        method=cfg.method,
        prepared=prepared,
        predict_matrix=lambda matrix: backend.predict(model, matrix),
        bundle=lambda: bundle(chosen),
        selected=selected(chosen) | best.as_dict(),
        vali_ndcg=best.vali_ndcg,
        columns=features.columns(chosen.k),
        prepared_columns=lambda name: features.split(name, chosen.k),
        outcome=outcome,
    )


def save_chosen(run: Run, fitted: FittedTrees) -> tuple[np.ndarray, np.ndarray]:
    """The chosen model's ``(vali, test)`` scores, saved, with every candidate's trials' per-QG
    vali scores (``trials.npz``); with PCA columns, the chosen PCA beside them (``pca.npz``)."""
    outcome: LightGBMOutcome = fitted.outcome
    per_trial = [r.vali_per_group for c in outcome.candidates for r in c.outcome.results]
    write_trials(run.folder, fitted.prepared, per_trial)
    scores = score_and_save(run, fitted)
    k = outcome.chosen.k
    if k:
        pca = outcome.features.pca.pca
        data = npz_bytes(mean=pca.mean_, components=pca.components_[:k])
        atomic_write_bytes(run.folder / "pca.npz", data)
    return scores


def with_pca(bundle: Bundle, pca: PCAFeatures | None, k: int | None) -> Bundle:
    """A LightGBM bundle with the PCA whose first ``k`` components the booster reads after the
    features (none when ``k`` is 0)."""
    description, files = bundle
    if k and pca is not None:
        description["pca"] = {"file": "pca.npz", "k": int(k)}
        files["pca.npz"] = npz_bytes(**pca.projector.to_arrays())
    return description, files
