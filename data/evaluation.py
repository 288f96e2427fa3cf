"""The one evaluation path of every model, deep or GBDT.

A model hands over one score per item of the validation and test splits; this module turns them
into ``metrics.vali.*`` (on the validation QGs the scarcity setting labels, with the labels it
shows) and ``metrics.test.*`` (every test QG, graded labels, plus Outlier-NDCG), and keeps the
scores in ``scores.npz`` so that ensembles need no retraining.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scarce_ltr.core.files import atomic_write_bytes, npz_bytes
from scarce_ltr.core.metrics import evaluate_ranking
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import rows_of_groups

SELECTION_METRIC = "ndcg@5"  # every epoch, grid point and checkpoint is chosen on vali NDCG@5


def vali_metrics(prepared: PreparedData, vali_scores: np.ndarray, metrics_cfg) -> dict:
    """Metrics on the labeled validation QGs (``scarcity.val``)."""
    vali = prepared.vali
    _check_length(vali_scores, vali.n_items, "vali")
    labeled = prepared.labels.vali_labeled
    # Unlabeled vali QGs are left out by evaluating on the labeled ones only.
    keep = np.flatnonzero(labeled)
    sub = vali.subset(keep)
    sub_scores = np.asarray(vali_scores)[rows_of_groups(vali.offsets, keep)]
    return evaluate_ranking(
        sub_scores, sub.labels, sub.offsets, ks=metrics_cfg.ks, policy=metrics_cfg.policy
    )


def test_metrics(prepared: PreparedData, test_scores: np.ndarray, metrics_cfg) -> dict:
    test = prepared.test
    _check_length(test_scores, test.n_items, "test")
    return evaluate_ranking(
        test_scores,
        test.labels,
        test.offsets,
        ks=metrics_cfg.ks,
        policy=metrics_cfg.policy,
        outlier_groups=prepared.test_outliers,
    )


def evaluation_report(
    prepared: PreparedData, vali_scores: np.ndarray, test_scores: np.ndarray, metrics_cfg
) -> dict:
    """``{"vali": {...}, "test": {...}, "val_labels": full|same, "policy": ...}``."""
    return {
        "vali": vali_metrics(prepared, vali_scores, metrics_cfg),
        "test": test_metrics(prepared, test_scores, metrics_cfg),
        "val_labels": prepared.labels.config.val,
        "policy": metrics_cfg.policy,
        "outliers": prepared.outlier_info,
    }


def save_scores(run_dir: Path, prepared: PreparedData, vali: np.ndarray, test: np.ndarray) -> None:
    """Per-item scores with the QG structure they belong to, for ensembles."""
    data = npz_bytes(
        vali=np.asarray(vali, dtype=np.float64),
        test=np.asarray(test, dtype=np.float64),
        vali_offsets=prepared.vali.offsets,
        test_offsets=prepared.test.offsets,
        vali_qids=prepared.vali.qids,
        test_qids=prepared.test.qids,
    )
    atomic_write_bytes(run_dir / "scores.npz", data)


def _check_length(scores: np.ndarray, n_items: int, split: str) -> None:
    if len(scores) != n_items:
        raise ValueError(f"{split}: {len(scores)} scores for {n_items} items")
