"""A trained ranker loaded from its bundle: raw features in, one score per item out.

    >>> ranker = scarce_ltr.load_ranker("runs/synthetic/finetune/simclr-rank+full/frac=0.02/seed=0")
    >>> scores = ranker.predict(features, qids)      # [n_items, n_features] raw, [n_items] qids
    >>> split, scores = ranker.score_file("new.txt")  # a LETOR/SVMlight file

The bundle's fitted transform is applied first, then the model of its kind: a torch ranker
(finetuned encoder + head, a combination, or a deep baseline), a LightGBM booster (with its PCA
columns), or an ensemble of member bundles mixed per QG. Loading runs no code from a file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from scarce_ltr.core.bundle import (
    BUNDLE_DIR,
    bundle_folder,
    read_manifest,
    read_model_bytes,
    read_npz,
    read_tensors,
)
from scarce_ltr.core.checkpointing import load_module_state
from scarce_ltr.core.device import Runtime
from scarce_ltr.core.errors import UserError
from scarce_ltr.data import pieces
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.transforms import FeatureTransform

# Beside a saved estimator's bundle (`scarce_ltr.api`): its feature columns by name and its
# missing-value policy; `predict_table` matches a table's columns by these names.
ESTIMATOR_FILE = "estimator.json"


class BundledRanker:
    """The ranker of one bundle (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        self.n_features = int(self.manifest["n_features"])
        info = self.manifest["transform"]
        arrays = read_npz(self.folder, info["file"]) if info.get("file") else {}
        self.transform = FeatureTransform.from_bundle(info, arrays)
        # The run's histogram-detector bounds (raw features), read once: `outlier_groups`.
        outliers = (self.manifest.get("outliers") or {}).get("file")
        self.outlier_bounds = read_npz(self.folder, outliers) if outliers else None
        self.model = _build(self.folder, self.manifest["model"])

    @property
    def kind(self) -> str:
        return str(self.manifest["model"]["kind"])

    @property
    def model_name(self) -> str:
        """The kind, with a torch model's architecture (``torch/ranker``, ``torch/dasalc``)."""
        spec = self.manifest["model"].get("spec") or {}
        return f"{self.kind}/{spec['kind']}" if spec.get("kind") else self.kind

    def outlier_groups(self, raw: RankingSplit) -> np.ndarray | None:
        """``[n_groups]`` bool: the QGs of ``raw`` (raw features, the bundle's width) that the
        run's histogram detector names outliers (paper A.2.2, with the run's fitted bounds);
        None when the run used another detector (knn needs its train features, qids its QGs)."""
        if self.outlier_bounds is None:
            return None
        from scarce_ltr.data.outliers import outlier_groups_from_bounds

        return outlier_groups_from_bounds(
            raw, self.outlier_bounds["lower"], self.outlier_bounds["upper"]
        )

    def predict(
        self, features: np.ndarray, qids: np.ndarray | None = None, *, offsets=None
    ) -> np.ndarray:
        """``[n_items]`` scores of raw ``features`` ``[n_items, n_features]``; the items of a QG
        are consecutive, given by per-item ``qids`` or by QG ``offsets`` (default: one QG)."""
        features = np.asarray(features, dtype=np.float32)
        if features.ndim != 2:
            raise UserError(f"features must be [n_items, n_features], got shape {features.shape}")
        n = len(features)
        if offsets is None:
            offsets, group_ids = _offsets_of(qids, n)
        else:
            offsets = np.asarray(offsets, dtype=np.int64)
            group_ids = np.arange(len(offsets) - 1, dtype=np.int64)
        labels = np.zeros(n, dtype=np.float32)
        return self.score_split(RankingSplit(features, labels, offsets, group_ids, "input"))

    def score_split(self, split: RankingSplit) -> np.ndarray:
        """``[n_items]`` float64 scores of a split of raw features."""
        return self.model.score(self.check_width(split), self.transform)

    def score_file(self, path: str | Path) -> tuple[RankingSplit, np.ndarray]:
        """The parsed file (its raw features and labels) and the scores of its items."""
        from scarce_ltr.data.letor import read_letor

        split = read_letor(path)
        self.warn_if_narrower(path, split.n_features)
        return split, self.score_split(split)

    def warn_if_narrower(self, source: str | Path, width: int) -> None:
        """Training's warning (`scarce_ltr.data.datasets`) for a file whose highest feature index
        ``width`` is below the model's: SVMlight leaves out absent (zero) features, so the file is
        padded with zeros, but a file of another data set would look the same."""
        if width < self.n_features:
            print(
                f"warning: {source}: the highest feature indices differ (the file: {width}, the "
                f"model of {self.folder}: {self.n_features}); the narrower file is padded with "
                f"zero features to {self.n_features}",
                file=sys.stderr,
            )

    def check_width(self, split: RankingSplit, source: str = "the input") -> RankingSplit:
        """``split`` with the bundle's feature count: narrower SVMlight rows are padded with
        zeros (an absent feature is 0); wider ones are refused, naming both counts."""
        width = split.n_features
        if width > self.n_features:
            raise UserError(
                f"{source} has {width} features; the model of {self.folder} takes {self.n_features}"
            )
        if width == self.n_features:
            return split
        padded = np.zeros((split.n_items, self.n_features), dtype=np.float32)
        padded[:, :width] = split.features
        return split.with_features(padded)


def load_ranker(run_or_bundle: str | Path) -> BundledRanker:
    """The ranker a finished run (or its ``bundle/`` folder) left."""
    return BundledRanker(bundle_folder(run_or_bundle))


def run_folder_of(ranker: BundledRanker) -> Path:
    """The run folder a bundle sits in (the bundle folder itself when it was moved out)."""
    return ranker.folder.parent if ranker.folder.name == BUNDLE_DIR else ranker.folder


class _TorchModel:
    def __init__(self, folder: Path, info: dict) -> None:
        from scarce_ltr.families import torch_builders
        from scarce_ltr.finetune.model import build_model

        try:
            self.module = build_model(info["spec"], kinds=torch_builders())
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"{folder}: bad model description ({exc})") from None
        state = read_tensors(folder, info["weights"])
        load_module_state(self.module, state, path=folder, what="the bundle's weights")
        self.module.eval()
        self.item_budget = int(info["item_budget"])

    def score(self, raw: RankingSplit, transform: FeatureTransform) -> np.ndarray:
        from scarce_ltr.finetune.loop import predict

        runtime = Runtime(device=torch.device("cpu"))
        scores = np.zeros(raw.n_items, dtype=np.float64)
        buffer = None
        for rows, piece in pieces.pieces_of(raw, self.item_budget):
            buffer = pieces.piece_buffer(buffer, piece)
            split = transform(piece, out=buffer)
            scores[rows] = predict(
                self.module, split, runtime=runtime, item_budget=self.item_budget
            )
        return scores


class _LightGBMModel:
    def __init__(self, folder: Path, info: dict) -> None:
        import lightgbm as lgb

        from scarce_ltr.baselines.gbdt.semi_supervised import Projection

        path = folder / info["booster"]
        try:
            self.booster = lgb.Booster(model_str=read_model_bytes(path).decode())
        except (lgb.basic.LightGBMError, UnicodeDecodeError) as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise UserError(f"{path}: not a LightGBM model ({first})") from None
        self.pca, self.k = None, 0
        if info.get("pca"):
            self.pca = Projection(**read_npz(folder, info["pca"]["file"]))
            self.k = int(info["pca"]["k"])
        self.embedding = _Embedding(folder, info["embedding"]) if info.get("embedding") else None

    def score(self, raw: RankingSplit, transform: FeatureTransform) -> np.ndarray:
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
        from scarce_ltr.baselines.gbdt.semi_supervised import Projection
        from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder

        config = dict(info["encoder"])
        n_features = int(config.pop("n_features"))
        try:
            self.encoder = build_encoder(EncoderConfig(**config), n_features=n_features)
        except (TypeError, ValueError) as exc:
            raise UserError(f"{folder}: bad encoder description ({exc})") from None
        state = read_tensors(folder, info["weights"])
        load_module_state(self.encoder, state, path=folder, what="the bundle's encoder")
        self.encoder.eval()
        self.item_budget = int(info["item_budget"])
        self.pca, self.k = None, 0
        if info.get("pca"):
            self.pca = Projection(**read_npz(folder, info["pca"]["file"]))
            self.k = int(info["pca"]["k"])

    def __call__(self, split: RankingSplit) -> np.ndarray:
        from scarce_ltr.baselines.hybrid.embedding_features import embed_split

        embedding = embed_split(self.encoder, split, item_budget=self.item_budget)
        return embedding if self.pca is None else self.pca(embedding)[:, : self.k]


class _CatBoostModel:
    def __init__(self, folder: Path, info: dict) -> None:
        from scarce_ltr.baselines.tuning import require_backend

        catboost = require_backend("catboost", "catboost")
        self.pool = catboost.Pool
        self.model = catboost.CatBoost()
        # CatBoost's own binary format: trees and borders, no code.
        self.model.load_model(blob=read_model_bytes(folder / info["model"]))

    def score(self, raw: RankingSplit, transform: FeatureTransform) -> np.ndarray:
        features = np.asarray(transform(raw).features, dtype=np.float32)
        if len(features) == 0:
            return np.zeros(0)
        scores = self.model.predict(
            self.pool(features), prediction_type="RawFormulaVal", thread_count=1
        )
        return np.asarray(scores, dtype=np.float64)


class _XGBoostModel:
    def __init__(self, folder: Path, info: dict) -> None:
        from scarce_ltr.baselines.tuning import require_backend

        self.xgb = require_backend("xgboost", "xgboost-cpu")
        self.booster = self.xgb.Booster()
        # XGBoost's UBJSON model: trees and parameters, no code.
        self.booster.load_model(bytearray(read_model_bytes(folder / info["model"])))

    def score(self, raw: RankingSplit, transform: FeatureTransform) -> np.ndarray:
        features = np.asarray(transform(raw).features, dtype=np.float32)
        if len(features) == 0:
            return np.zeros(0)
        return np.asarray(self.booster.predict(self.xgb.DMatrix(features)), dtype=np.float64)


class _Ensemble:
    def __init__(self, folder: Path, info: dict) -> None:
        from scarce_ltr.ensembles.score_fusion import NORMALIZERS

        if info["normalize"] not in NORMALIZERS:
            raise UserError(f"{folder}: unknown normalization {info['normalize']!r}")
        self.members = [BundledRanker(folder / member) for member in info["members"]]
        self.weights = np.asarray(info["weights"], dtype=np.float64)
        self.normalize = NORMALIZERS[info["normalize"]]

    def score(self, raw: RankingSplit, transform: FeatureTransform) -> np.ndarray:
        from scarce_ltr.ensembles.score_fusion import mix

        # Each member applies its own fitted transform to the raw features (a DASALC member
        # its log1p, a member of another family its own).
        scores = [self.normalize(m.score_split(raw), raw.offsets) for m in self.members]
        return mix(np.stack(scores), self.weights)


# A bundle's model kind (each family's `ModelFamily.bundle_kind`) -> the scorer that loads it.
SCORERS = {
    "torch": _TorchModel,
    "lightgbm": _LightGBMModel,
    "catboost": _CatBoostModel,
    "xgboost": _XGBoostModel,
    "ensemble": _Ensemble,
}


def _build(folder: Path, info: dict):
    kind = info.get("kind")
    if kind not in SCORERS:
        raise UserError(f"{folder}: model kind {kind!r}; this version scores {', '.join(SCORERS)}")
    return SCORERS[kind](folder, info)


def _offsets_of(qids: np.ndarray | None, n_items: int) -> tuple[np.ndarray, np.ndarray]:
    """QG offsets and ids from per-item qids (one QG without); a QG must be consecutive."""
    if qids is None:
        return np.array([0, n_items], dtype=np.int64), np.zeros(1, dtype=np.int64)
    qids = np.asarray(qids)
    if qids.shape != (n_items,):
        raise UserError(f"qids must give one id per item ({n_items}), got shape {qids.shape}")
    starts = np.flatnonzero(np.r_[True, qids[1:] != qids[:-1]]) if n_items else np.zeros(0, int)
    group_ids = qids[starts]
    if len(np.unique(group_ids)) != len(group_ids):
        raise UserError("the items of a QG must be consecutive: a qid appears in two runs")
    return np.r_[starts, n_items].astype(np.int64), group_ids.astype(np.int64)
