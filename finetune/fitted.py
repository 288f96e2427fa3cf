"""A finetuned ranker in memory: what `scarce_ltr.finetune.train.fit` returns.

It scores raw features (a `RankingSplit`, or an ``[n_items, n_features]`` array with per-item
query ids) as the run's model bundle scores them (`finetune.scorer.score_raw`: the fitted
transform, then the model on the CPU in pieces of ``item_budget`` items), and `save` writes that
bundle (`scarce_ltr.load_ranker` and ``./run.sh predict`` read it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch import nn

from scarce_ltr.core.metrics import SELECTION_METRIC
from scarce_ltr.data.bundling import write_model_bundle
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import RankingSplit, score_by_qid
from scarce_ltr.finetune.model import torch_bundle
from scarce_ltr.finetune.scorer import score_raw


@dataclass(eq=False)
class FinetunedRanker:
    """The vali-best model of a finetuning (on the CPU, in eval mode), with the transform
    fitted on its train split. ``result``: the chosen point's (rate, ``best_vali_ndcg@5``,
    epochs, history); ``labels``: the label setting's summary (labeled QGs, relevant ones)."""

    model: nn.Module
    spec: dict
    prepared: PreparedData  # its transform, outlier rule and label setting (for the bundle)
    item_budget: int
    result: dict
    source: dict  # where the encoder came from: {"pretrained": folder or None, "method": ...}

    def __post_init__(self) -> None:
        self.model.cpu().eval()

    @property
    def n_features(self) -> int:
        return self.prepared.n_features

    @property
    def labels(self) -> dict:
        return self.prepared.labels.summary()

    def score_split(self, raw: RankingSplit) -> np.ndarray:
        """``[n_items]`` float64 scores of a split of raw (untransformed) features."""
        if raw.n_features != self.n_features:
            raise ValueError(f"{raw.name}: {raw.n_features} features; the ranker takes "
                             f"{self.n_features}")  # fmt: skip
        return score_raw(self.model, raw, self.prepared.transform, item_budget=self.item_budget)

    def predict(self, features: np.ndarray, qids: np.ndarray | None = None) -> np.ndarray:
        """``[n_items]`` float64 scores of raw ``features`` ``[n_items, n_features]``, in their
        order; ``qids``: each item's query id (any order; None: all items one QG)."""
        return score_by_qid(self.score_split, features, qids)

    def save(self, folder: str | Path) -> Path:
        """``<folder>/bundle/``, the model bundle a run writes (replaced if there); returns it."""
        metrics = {"vali": {SELECTION_METRIC: self.result.get(f"best_vali_{SELECTION_METRIC}")}}
        model, files = torch_bundle(self.model, self.spec, self.item_budget)
        setting = self.prepared.labels.config.tag
        Path(folder).mkdir(parents=True, exist_ok=True)
        return write_model_bundle(
            Path(folder), self.prepared, metrics, model, files, setting=setting, run=None
        )
