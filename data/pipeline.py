"""From a config to what every stage trains and evaluates on.

load (cache) -> outlier QGs of test (on raw features, as the paper's histograms are)
-> feature transform fit on train -> label scarcity (labeled-QG masks, binary labels).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.outliers import detect_outlier_groups, histogram_bounds
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.scarcity import LabelSetting, apply_scarcity
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

    @property
    def n_features(self) -> int:
        return self.train.n_features


def prepare_data(cfg) -> PreparedData:
    """`cfg` is a `core.config.CommonConfig` (or a stage config extending it)."""
    raw = load_dataset(cfg.data)
    out_cfg = cfg.data.outliers
    # The knn detector works in the transformed space; the histogram one on raw values.
    transform = fit_transform(cfg.data.transform, raw["train"], clip=cfg.data.clip)
    train, vali, test = (transform(raw[s]) for s in ("train", "vali", "test"))
    reference = {
        "histogram": np.asarray(raw["vali"].features),
        "knn": train.features,
    }.get(out_cfg.method)
    try:
        test_outliers, outlier_info = detect_outlier_groups(
            method=out_cfg.method,
            reference=reference,
            split=raw["test"] if out_cfg.method == "histogram" else test,
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
    if out_cfg.method == "histogram":
        options = dict(n_bins=out_cfg.n_bins, max_tail_share=out_cfg.max_tail_share)
        lower, upper = histogram_bounds(reference, gap=outlier_info["gap"], **options)
        bounds = {"lower": lower, "upper": upper}
    labels = apply_scarcity(train, vali, cfg.scarcity, seed=cfg.seed)
    return PreparedData(
        train=labels.train,
        vali=labels.vali,
        test=test,
        labels=labels,
        test_outliers=test_outliers,
        outlier_info=outlier_info,
        transform=transform,
        outlier_bounds=bounds,
    )


def require_relevant_labels(prepared: PreparedData) -> None:
    """Stop when no labeled train QG has a relevant item: nothing to learn a ranking from."""
    labeled = prepared.labels.labeled_train()
    if not labeled.groups_with_relevant().any():
        raise UserError(
            f"scarcity setting {prepared.labels.config.tag} leaves "
            f"{labeled.n_groups} labeled train QGs and none has a relevant item; "
            "raise scarcity.fraction, lower scarcity.binary_tau or change seed"
        )


def require_labeled_vali(prepared: PreparedData) -> None:
    """Stop when no labeled vali QG has a relevant item: nothing to choose a model on."""
    labeled = prepared.labels.labeled_vali()
    if not labeled.groups_with_relevant().any():
        raise UserError(
            f"scarcity setting {prepared.labels.config.tag} leaves {labeled.n_groups} labeled "
            "vali QGs and none has a relevant item: nothing to choose a model, epoch or "
            "checkpoint on; use scarcity.val=full, raise scarcity.fraction or change seed"
        )
