"""A LightGBM bundle's scorer (`BUNDLE_KIND` ``lightgbm``): the booster of gbdt and its variants,
with the PCA columns of gbdt-pca and the encoder columns of gbdt-ssl (``trees/lightgbm/hybrid/``)
made from the transformed features the way training made them.

The family entries of both name `LightGBMScorer` (``lightgbm/family.py``,
``lightgbm/hybrid/family.py``).
"""

from __future__ import annotations

from pathlib import Path

import lightgbm as lgb
import numpy as np

from scarce_ltr.core.bundle import bundle_path, read_model_bytes, read_npz, read_tensors
from scarce_ltr.core.checkpointing import load_module_state
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.families import ScoringContext
from scarce_ltr.data import pieces
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.transforms import FeatureTransform
from scarce_ltr.trees.lightgbm.model_text import checked_model_text
from scarce_ltr.trees.lightgbm.semi_supervised import Projection


class LightGBMScorer:
    """The booster, read from its text model, and the extra columns it reads."""

    def __init__(self, folder: Path, info: dict, context: ScoringContext) -> None:
        path = bundle_path(folder, info.get("booster"), "model.booster")
        # Checked first: LightGBM's parser aborts the process on some damaged texts.
        text = checked_model_text(read_model_bytes(path), path)
        try:
            self.booster = lgb.Booster(model_str=text)
        except (lgb.basic.LightGBMError, ValueError) as exc:  # ValueError: its params' JSON
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise UserError(f"{path}: not a LightGBM model ({first})") from None
        self.pca, self.k = _projection(folder, info)
        self.embedding = _Embedding(folder, info["embedding"]) if info.get("embedding") else None

    def score(self, raw: RankingSplit, transform: FeatureTransform) -> np.ndarray:
        """``[n_items]`` float64 scores of raw features, transformed and scored piece by piece."""
        scores = np.zeros(raw.n_items, dtype=np.float64)
        budget = self.embedding.item_budget if self.embedding is not None else pieces.PIECE_ITEMS
        buffer = None
        for rows, piece in pieces.pieces_of(raw, budget):
            buffer = pieces.piece_buffer(buffer, piece)
            split = transform(piece, out=buffer)
            features = split.features
            if self.pca is not None:
                extra = self.pca(features)[:, : self.k]
                features = np.ascontiguousarray(np.hstack([features, extra]))
            if self.embedding is not None:
                features = np.ascontiguousarray(np.hstack([features, self.embedding(split)]))
            scores[rows] = self.booster.predict(features)
        return scores


class _Embedding:
    """gbdt-ssl's extra columns: a pretrained encoder's item embeddings of the transformed
    features, whole or as the first k components of their PCA."""

    def __init__(self, folder: Path, info: dict) -> None:
        from scarce_ltr.finetune.scorer import built_like
        from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder

        config = dict(info["encoder"])
        n_features = int(config.pop("n_features"))
        state = read_tensors(folder, info["weights"])
        try:  # checked against the weights without memory first, as a torch bundle's model
            self.encoder = built_like(
                lambda: build_encoder(EncoderConfig(**config), n_features=n_features), state
            )
        except (TypeError, ValueError, RuntimeError) as exc:
            raise UserError(f"{folder}: bad encoder description ({exc})") from None
        load_module_state(self.encoder, state, path=folder, what="the bundle's encoder")
        self.encoder.eval()
        self.item_budget = int(info["item_budget"])
        self.pca, self.k = _projection(folder, info)

    def __call__(self, split: RankingSplit) -> np.ndarray:
        from scarce_ltr.trees.lightgbm.hybrid.embedding_features import embed_split

        embedding = embed_split(self.encoder, split, item_budget=self.item_budget)
        return embedding if self.pca is None else self.pca(embedding)[:, : self.k]


def _projection(folder: Path, info: dict) -> tuple[Projection | None, int]:
    """The fitted PCA an ``info`` entry names and how many of its components are columns
    (``(None, 0)`` without one): the booster's PCA columns, or the embeddings' reduction."""
    if not info.get("pca"):
        return None, 0
    return Projection(**read_npz(folder, info["pca"]["file"])), int(info["pca"]["k"])
