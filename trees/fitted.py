"""A fitted tree ranker in memory: what `scarce_ltr.baselines.run.fit` returns for the tree
baselines (LightGBM and its variants, CatBoost, XGBoost, gbdt-ssl); the deep baselines return
finetuning's `scarce_ltr.finetune.fitted.FinetunedRanker`.

It scores raw features (a `RankingSplit`, or an ``[n_items, n_features]`` array with per-item
query ids) as the run scores its splits: the fitted transform, the columns the trees read
appended (PCA components, an encoder's embeddings), then the trees; `save` writes the model
bundle the run writes (`scarce_ltr.load_ranker` and ``./run.sh predict`` read it). The run of
``./run.sh baseline`` writes its scores and report from the same object (`scores`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scarce_ltr.core.metrics import SELECTION_METRIC
from scarce_ltr.data.bundling import write_model_bundle
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import RankingSplit, score_by_qid

Bundle = tuple[dict, dict[str, bytes]]  # the model's description (``kind``) and its files


def plain(split: RankingSplit) -> RankingSplit:
    """The columns of trees that read the features alone: the split as it is."""
    return split


@dataclass(eq=False)
class FittedTrees:
    """The vali-best trees of a tree baseline with the transform fitted on its train split.

    ``columns(split)``: a transformed split with the columns the trees read (the split itself
    for trees on the features alone); ``prepared_columns(name)``: the same of a prepared split
    (``train``, ``vali``, ``test``) as the search computed them (a hybrid's embeddings once);
    ``predict(matrix)``: ``[n_items]`` float64 scores; ``bundle()``: the model's part of the
    bundle; ``selected``: the chosen fit's row; ``outcome``: the pipeline's own search outcome
    (its candidates and trials), which the run's report reads."""

    method: str
    prepared: PreparedData  # its transform, outlier rule and label setting (for the bundle)
    predict_matrix: Callable[[np.ndarray], np.ndarray]
    bundle: Callable[[], Bundle]
    selected: dict
    vali_ndcg: float
    columns: Callable[[RankingSplit], RankingSplit] = plain
    prepared_columns: Callable[[str], RankingSplit] | None = None
    outcome: Any = field(default=None, repr=False)

    @property
    def n_features(self) -> int:
        return self.prepared.n_features

    @property
    def labels(self) -> dict:
        return self.prepared.labels.summary()

    def scores(self, name: str) -> np.ndarray:
        """``[n_items]`` scores of the prepared split ``name`` (``train``, ``vali``, ``test``):
        the run's ``scores.npz``."""
        if self.prepared_columns is not None:
            split = self.prepared_columns(name)
        else:
            split = self.columns(getattr(self.prepared, name))
        return self.predict_matrix(split.features)

    def score_split(self, raw: RankingSplit) -> np.ndarray:
        """``[n_items]`` float64 scores of a split of raw (untransformed) features."""
        if raw.n_features != self.n_features:
            raise ValueError(f"{raw.name}: {raw.n_features} features; the ranker takes "
                             f"{self.n_features}")  # fmt: skip
        return self.predict_matrix(self.columns(self.prepared.transform(raw)).features)

    def predict(self, features: np.ndarray, qids: np.ndarray | None = None) -> np.ndarray:
        """``[n_items]`` float64 scores of raw ``features`` ``[n_items, n_features]``, in their
        order; ``qids``: each item's query id (any order; None: all items one QG, which a
        transform per QG reads)."""
        return score_by_qid(self.score_split, features, qids)

    def save(self, folder: str | Path) -> Path:
        """``<folder>/bundle/``, the model bundle a run writes (replaced if there); returns it."""
        description, files = self.bundle()
        metrics = {"vali": {SELECTION_METRIC: self.vali_ndcg}}
        setting = self.prepared.labels.config.tag
        Path(folder).mkdir(parents=True, exist_ok=True)
        return write_model_bundle(
            Path(folder), self.prepared, metrics, description, files, setting=setting, run=None
        )
