"""A trained ranker loaded from its bundle: raw features in, one score per item out.

    >>> ranker = scarce_ltr.load_ranker("runs/synthetic/finetune/simclr-rank+full/frac=0.02/seed=0")
    >>> scores = ranker.predict(features, qids)      # [n_items, n_features] raw, [n_items] qids
    >>> split, scores = ranker.score_file("new.txt")  # a LETOR/SVMlight file

The bundle's fitted transform is applied first, then the model of its kind, loaded by the scorer
its family names (`ModelFamily.scorer`, collected by `scarce_ltr.families.scorers`): a torch
ranker (finetuned encoder + head, a combination, or a deep baseline), a LightGBM booster (with its
PCA or encoder columns), a CatBoost or XGBoost model, or an ensemble of member bundles mixed per
QG. Loading runs no code from a file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from scarce_ltr.core.bundle import BUNDLE_DIR, MANIFEST, bundle_folder, read_manifest, read_npz
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.families import ScoringContext
from scarce_ltr.data.letor.parsed import MAX_FEATURE_INDEX
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
        self.n_features = self.manifest["n_features"]
        if not 1 <= self.n_features <= MAX_FEATURE_INDEX:
            raise UserError(
                f"{self.folder / MANIFEST}: n_features={self.n_features} is not in "
                f"1..{MAX_FEATURE_INDEX}"
            )
        info = self.manifest["transform"]
        arrays = read_npz(self.folder, info["file"]) if info.get("file") else {}
        _check_widths(self.folder, arrays, self.n_features)
        try:
            self.transform = FeatureTransform.from_bundle(info, arrays)
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"{self.folder / MANIFEST}: bad transform ({exc})") from None
        # The run's histogram-detector bounds (raw features), read once: `outlier_groups`.
        outliers = (self.manifest.get("outliers") or {}).get("file")
        self.outlier_bounds = read_npz(self.folder, outliers) if outliers else None
        if self.outlier_bounds is not None:
            _check_widths(self.folder, self.outlier_bounds, self.n_features)
        self.model = _build(self.folder, self.manifest["model"])
        self._check_parts()

    def _check_parts(self) -> None:
        """Score one zero item: a part whose width disagrees with the others (the transform,
        PCA columns, a booster's features, a member) is one message at load, not at predict."""
        probe = np.zeros((1, self.n_features), dtype=np.float32)
        one = np.array([0, 1], dtype=np.int64)
        split = RankingSplit(probe, np.zeros(1, np.float32), one, one[:1], "probe")
        try:
            self.model.score(split, self.transform)
        except UserError:
            raise
        except Exception as exc:  # whatever the part's library raises on a width it did not expect
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise UserError(
                f"{self.folder}: the bundle's parts do not fit together ({first})"
            ) from None

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

    def score_split(
        self,
        split: RankingSplit,
        *,
        source: object = "the input",
        names: list[str] | None = None,
        rows: np.ndarray | None = None,
    ) -> np.ndarray:
        """``[n_items]`` float64 scores of a split of raw features. Nothing NaN is scored: an
        item the model gives NaN (a missing value, where this model needs every value) stops
        with a `UserError` naming ``source``, the column (``names[j]``, else the 1-based
        feature index) and the row (``rows[i]``, the source's row of item ``i``, else ``i``)."""
        scores = self.model.score(self.check_width(split), self.transform)
        nan = np.flatnonzero(np.isnan(scores))
        if len(nan):
            raise UserError(self._nan_message(split, int(nan[0]), len(nan), source, names, rows))
        return scores

    def _nan_message(self, split, item: int, count: int, source, names, rows) -> str:
        row = item if rows is None else int(rows[item])
        values = np.asarray(split.features[item], dtype=np.float64)
        missing = np.flatnonzero(np.isnan(values))
        what = f"the model of {self.folder} ({self.model_name}) scores {count} item(s) NaN"
        if len(missing):
            j = int(missing[0])
            column = repr(names[j]) if names is not None else f"feature {j + 1}"
            return (
                f"{source}: column {column} is missing (NaN) at row {row}: {what}, as it needs "
                "every value; fill the missing values in, or score with a tree (gbdt, catboost, "
                "xgboost take NaN as missing)"
            )
        stats = [a for a in (self.transform.mean, self.transform.std) if a is not None]
        if any(np.isnan(a).any() for a in stats):
            return (
                f"{source}: {what}: its transform's statistics are NaN (the run was trained on "
                "missing values before this version fitted them on finite values only); "
                "train the run again"
            )
        return f"{source}: row {row}: {what} (its features are finite); no score is written"

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


def _build(folder: Path, info: dict):
    """The model of a bundle's manifest entry, by the scorer its family names for its kind."""
    from scarce_ltr.families import scorers, torch_builders

    kinds = scorers()
    kind = info.get("kind")
    if kind not in kinds:
        raise UserError(f"{folder}: model kind {kind!r}; this version scores {', '.join(kinds)}")
    context = ScoringContext(torch_builders=torch_builders(), load_bundle=BundledRanker)
    return kinds[kind](folder, info, context)


def _check_widths(folder: Path, arrays: dict[str, np.ndarray], n_features: int) -> None:
    """Per-feature arrays (a transform's mean and std, a detector's bounds) of the bundle's
    width."""
    for key, array in arrays.items():
        if key in ("mean", "std", "lower", "upper") and array.shape != (n_features,):
            raise UserError(
                f"{folder}: {key} has shape {array.shape}, the bundle's n_features is {n_features}"
            )


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
