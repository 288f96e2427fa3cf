"""From a config to what every stage trains and evaluates on.

load (cache) -> outlier QGs of test (on raw features, as the paper's histograms are)
-> feature transform fit on train -> label scarcity (labeled-QG masks, binary labels).

Missing values (NaN in a table or in ``features.npy``; LETOR text has none: a ``nan`` token is
refused at its line) stop here unless the stage takes them: ``missing="raise"`` (the default:
pretraining, finetuning, the deep baselines, the hybrid and PCA trees) names the file, the
column, the first row and the count; ``missing="keep"`` (the trees that split on NaN, an
ensemble, data-info) passes them on, through a transform fitted on the finite values, as NaN.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.data.datasets import LoadedData, load_data, split_file
from scarce_ltr.data.outliers import detect_outlier_groups
from scarce_ltr.data.outliers.histogram import histogram_bounds
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.scarcity import LabelSetting, apply_scarcity
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.data.transforms import FeatureTransform, fit_transform


@dataclass(frozen=True)
class PreparedData:
    """Transformed splits; train and vali labels as the scarcity setting shows them."""

    train: RankingSplit
    vali: RankingSplit
    test: RankingSplit  # graded labels, always
    labels: LabelSetting
    test_outliers: np.ndarray  # [n_test_groups] bool
    outlier_info: dict
    transform: FeatureTransform
    # The histogram detector's per-feature raw bounds (``lower``, ``upper``), for bundles: a
    # new file's QGs are outliers by the same rule. None for the other detectors.
    outlier_bounds: dict[str, np.ndarray] | None = None
    # The file each split was read from ("train", "vali"; none for the synthetic data), for
    # messages about its labels.
    files: dict[str, str] = field(default_factory=dict)
    # A table's feature columns (data=table), kept in the bundle: predict matches them by name.
    feature_names: list[str] | None = None

    @property
    def n_features(self) -> int:
        return self.train.n_features


MISSING = ("raise", "keep")


def prepare_data(cfg: CommonConfig, *, missing: str = "raise") -> PreparedData:
    """``cfg``: a stage's config (every stage's extends `CommonConfig`);
    ``missing``: ``raise`` refuses a missing feature value, ``keep`` keeps it as NaN (see the
    module docstring). The data set ``cfg.data`` names, read, then `prepare_splits`."""
    if missing not in MISSING:
        raise ValueError(f"missing must be one of {', '.join(MISSING)}, got {missing!r}")
    loaded = load_data(cfg.data)
    check_missing(loaded, missing=missing, outliers=cfg.data.outliers.method)
    files = {s: str(path) for s in ("train", "vali") if (path := split_file(cfg.data, s))}
    return prepare_splits(cfg, loaded.splits, files=files, feature_names=loaded.feature_names)


def prepare_splits(
    cfg: CommonConfig,
    splits: Mapping[str, RankingSplit],
    *,
    labeled: np.ndarray | None = None,
    files: dict[str, str] | None = None,
    feature_names: list[str] | None = None,
) -> PreparedData:
    """In-memory splits as a stage trains on them: ``splits`` holds raw ``train`` and ``vali``
    (and ``test``: without one, vali stands in and no QG is an outlier); ``labeled``
    (``[n_train_groups]`` bool): the labeled train QGs, None: ``cfg.scarcity``'s seeded draw.
    The missing values are the caller's to check (`check_missing` for a data set's files)."""
    absent = [s for s in ("train", "vali") if s not in splits]
    if absent:
        raise ValueError(f"data needs a {absent[0]} split (a RankingSplit); got {sorted(splits)}")
    raw = dict(splits)
    out_cfg = cfg.data.outliers
    method = out_cfg.method
    if "test" not in raw:
        raw["test"], method = replace(raw["vali"], name="test"), "none"
    # The knn detector works in the transformed space; the histogram one on raw values.
    transform = fit_transform(cfg.data.transform, raw["train"], clip=cfg.data.clip)
    train, vali, test = (transform(raw[s]) for s in ("train", "vali", "test"))
    reference = {
        "histogram": np.asarray(raw["vali"].features),
        "knn": train.features,
    }.get(method)
    try:
        test_outliers, outlier_info = detect_outlier_groups(
            method=method,
            reference=reference,
            split=raw["test"] if method == "histogram" else test,
            target_share=out_cfg.target_share,
            gap=out_cfg.gap,
            qids=out_cfg.qids,
            n_bins=out_cfg.n_bins,
            max_tail_share=out_cfg.max_tail_share,
            k=out_cfg.knn_k,
            seed=cfg.seed,
        )
    except ValueError as exc:
        raise UserError(f"data.outliers: {exc}") from None
    bounds = None
    if method == "histogram":
        options = dict(n_bins=out_cfg.n_bins, max_tail_share=out_cfg.max_tail_share)
        lower, upper = histogram_bounds(reference, gap=outlier_info["gap"], **options)
        bounds = {"lower": lower, "upper": upper}
    labels = apply_scarcity(train, vali, cfg.scarcity, seed=cfg.seed, labeled=labeled)
    return PreparedData(
        train=labels.train,
        vali=labels.vali,
        test=test,
        labels=labels,
        test_outliers=test_outliers,
        outlier_info=outlier_info,
        transform=transform,
        outlier_bounds=bounds,
        files=files or {},
        feature_names=feature_names,
    )


# The baselines whose trees take NaN as a missing value, named in the refusal of a missing value:
# `baselines.config.MISSING_AS_NAN` derives them from the tree backends' options, a layer above
# this one; tests/test_tree_backends.py holds the two equal.
TREES_TAKING_NAN = ("gbdt", "gbdt-optuna", "gbdt-pseudo", "catboost", "xgboost")

# The splits whose values each outlier detector measures: a NaN there has no bin, no distance.
_DETECTOR_SPLITS = {"histogram": ("vali",), "knn": ("train", "test")}


def check_missing(loaded: LoadedData, *, missing: str, outliers: str) -> None:
    """Refuse missing feature values where they cannot go: into a model that needs every value
    (``missing="raise"``), or into the outlier detector's measure."""
    for split in ("train", "vali", "test"):
        where = loaded.missing.get(split)
        if where is None or not where.any:
            continue
        j, row = where.first
        count = sum(where.counts)
        column = loaded.missing_column(split, j)
        found = (
            f"{loaded.files[split]}: column {column} is missing (null or NaN) at row {row} "
            f"({count} missing value{'s' if count > 1 else ''} in the {split} split)"
        )
        if missing == "raise":
            raise UserError(
                f"{found}; this model needs every value: fill them in, or leave the column out; "
                f"the trees (baseline {', '.join(TREES_TAKING_NAN)}) take NaN as a missing value"
            )
        if split in _DETECTOR_SPLITS.get(outliers, ()):
            raise UserError(
                f"{found}; data.outliers.method={outliers} measures every value of the "
                f"{' and '.join(_DETECTOR_SPLITS[outliers])} features: give "
                "data.outliers.method=none (or qids), or fill the missing values in"
            )


def require_relevant_labels(prepared: PreparedData) -> None:
    """Stop when no labeled train QG has a relevant item: nothing to learn a ranking from."""
    if not prepared.labels.labeled_train().groups_with_relevant().any():
        raise UserError(_no_relevant_message(prepared, "train", "nothing to learn a ranking from"))


def require_labeled_vali(prepared: PreparedData) -> None:
    """Stop when no labeled vali QG has a relevant item: nothing to choose a model on."""
    if not prepared.labels.labeled_vali().groups_with_relevant().any():
        why = "nothing to choose a model, epoch or checkpoint on"
        raise UserError(_no_relevant_message(prepared, "vali", why))


def _no_relevant_message(prepared: PreparedData, split: str, why: str) -> str:
    """What is wrong and only the advice that applies: a file whose labels are all 0 needs
    other labels, not a larger label fraction; a fraction of 1 cannot be raised."""
    labels = prepared.labels
    config = labels.config
    whole = labels.train if split == "train" else labels.vali
    source = prepared.files.get(split, f"the {split} split")
    labeled = labels.labeled_train() if split == "train" else labels.labeled_vali()
    if not whole.groups_with_relevant().any():
        if config.binary_tau is not None:
            return (
                f"the implicit labels of scarcity.binary_tau={config.binary_tau:g} leave "
                f"{labeled.n_groups} labeled {split} QGs and none has a relevant item, nor any "
                f"of the {whole.n_groups} QGs of {source}: {why}; lower scarcity.binary_tau"
            )
        return (
            f"every label of {source} is 0, so none of its {whole.n_groups} QGs has a relevant "
            f"item: {why}; relevant items need a label above 0 in the first column of their "
            "line (relevance grades 0..30)"
        )
    advice = []
    if split == "vali" and config.val == "same":
        advice.append("use scarcity.val=full")
    if config.fraction < 1:
        advice.append("raise scarcity.fraction")
    if config.binary_tau is not None:
        advice.append("lower scarcity.binary_tau")
    advice.append("change seed" if config.seed is None else "change scarcity.seed")
    return (
        f"scarcity setting {config.tag} leaves {labeled.n_groups} labeled {split} QGs and "
        f"none has a relevant item ({source}): {why}; {', '.join(advice[:-1])}"
        f"{' or ' if len(advice) > 1 else ''}{advice[-1]}"
    )
