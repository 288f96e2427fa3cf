"""The one evaluation path of every model, deep or GBDT.

A model hands over one score per item of the validation and test splits; this module turns them
into ``metrics.vali.*`` (on the validation QGs the scarcity setting labels, with the labels it
shows) and ``metrics.test.*`` (every test QG, graded labels, plus Outlier-NDCG), and keeps the
scores in ``scores.npz`` so that ensembles need no retraining. Each split gets every metric of
`core.metrics.METRICS` (NDCG@k, ERR@k, P@k, MRR, MAP), test also their outlier versions
(``outlier_ndcg@k``, ...); ERR's highest grade is the data set's (`max_grade`). Selection stays
on vali NDCG@5 (`core.metrics.SELECTION_METRIC`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scarce_ltr.core.files import atomic_write_bytes, npz_bytes
from scarce_ltr.core.metrics import (
    SELECTION_K,
    SELECTION_METRIC,
    evaluate_ranking,
    mean_ndcg,
    ndcg_per_group,
)
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import rows_of_groups
from scarce_ltr.search.trial_scores import write_trial_scores


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
        sub_scores,
        sub.labels,
        sub.offsets,
        ks=metrics_cfg.ks,
        policy=metrics_cfg.policy,
        max_grade=max_grade(prepared, "vali"),
    )


def vali_selection(prepared: PreparedData, vali_scores: np.ndarray, metrics_cfg) -> float:
    """What every epoch, grid point, trial and ensemble weight is chosen on: vali
    `SELECTION_METRIC` (NDCG@5) under the run's empty-QG policy.

    The mean of `vali_selection_per_group`: `vali_metrics`' ``ndcg@5`` bit for bit, without
    the other metrics (ERR, P, MRR, MAP) nor a copy of the vali features, which took 4 % of a
    searched finetuning's time on the Yandex folds (it runs after every epoch of every trial;
    benchmarks/LOG.md, "Where a search trial's time goes")."""
    return mean_ndcg(
        *_labeled_vali(prepared, vali_scores), k=SELECTION_K, policy=metrics_cfg.policy
    )


def vali_selection_per_group(
    prepared: PreparedData, vali_scores: np.ndarray, metrics_cfg
) -> np.ndarray:
    """``[n_labeled_vali_groups]`` vali `SELECTION_METRIC` of each labeled vali QG, in order
    (NaN for a QG without a relevant item under policy ``skip``): `vali_selection` is their
    mean. Cross-fitted choices (`search.crossfit`) split these QGs into folds."""
    scores, labels, offsets = _labeled_vali(prepared, vali_scores)
    return ndcg_per_group(scores, labels, offsets, k=SELECTION_K, policy=metrics_cfg.policy)


def _labeled_vali(
    prepared: PreparedData, vali_scores: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(scores, labels, offsets)`` of the labeled vali QGs alone, as `RankingSplit.subset`
    would give them (its features are not copied: no metric reads them)."""
    vali = prepared.vali
    _check_length(vali_scores, vali.n_items, "vali")
    keep = np.flatnonzero(prepared.labels.vali_labeled)
    rows = rows_of_groups(vali.offsets, keep)
    offsets = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(vali.group_sizes[keep], out=offsets[1:])
    return np.asarray(vali_scores)[rows], np.ascontiguousarray(vali.labels[rows]), offsets


def vali_selection_scores(
    prepared: PreparedData, vali_scores: np.ndarray, metrics_cfg
) -> tuple[float, np.ndarray]:
    """``(vali_selection, vali_selection_per_group)`` of one model's vali scores: what a search
    chooses its trial on, and what keeps the choice checkable (`search.trial_scores`)."""
    return (
        vali_selection(prepared, vali_scores, metrics_cfg),
        vali_selection_per_group(prepared, vali_scores, metrics_cfg),
    )


def labeled_vali_qids(prepared: PreparedData) -> np.ndarray:
    """The qids of the labeled vali QGs, in order: the columns of `vali_selection_per_group`."""
    return np.asarray(prepared.vali.qids)[np.flatnonzero(prepared.labels.vali_labeled)]


def write_trials(
    run_dir: Path, prepared: PreparedData, per_trial: Sequence[np.ndarray | None]
) -> None:
    """Every trial's `vali_selection_per_group` in the run folder (`search.trial_scores`: nothing
    for one trial)."""
    write_trial_scores(run_dir, labeled_vali_qids(prepared), per_trial)


def selection_rule(metrics_cfg) -> str:
    """The choice's rule as reports write it: ``vali ndcg@5, policy skip``."""
    return f"vali {SELECTION_METRIC}, policy {metrics_cfg.policy}"


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
        max_grade=max_grade(prepared, "test"),
    )


def max_grade(prepared: PreparedData, split: str) -> float:
    """ERR's highest grade for ``split``: the data set's highest label over its three splits,
    or 1 for vali labels that are implicit binary feedback (their scale is 0/1)."""
    if split == "vali" and prepared.labels.config.binary_tau is not None:
        return 1.0
    splits = (prepared.train, prepared.vali, prepared.test)
    return max(float(np.max(s.labels)) if s.n_items else 0.0 for s in splits)


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


def save_scores(
    run_dir: Path,
    prepared: PreparedData,
    vali: np.ndarray,
    test: np.ndarray,
    *,
    train: np.ndarray | None = None,
) -> None:
    """Per-item scores with the QG structure they belong to, for ensembles; with ``train``
    (every train item, labeled QGs or not) a later run can take this one as its teacher
    without loading its model (`read_train_scores`)."""
    arrays = {}
    if train is not None:
        _check_length(train, prepared.train.n_items, "train")
        arrays = {
            "train": np.asarray(train, dtype=np.float64),
            "train_offsets": prepared.train.offsets,
            "train_qids": prepared.train.qids,
        }
    data = npz_bytes(
        **arrays,
        vali=np.asarray(vali, dtype=np.float64),
        test=np.asarray(test, dtype=np.float64),
        vali_offsets=prepared.vali.offsets,
        test_offsets=prepared.test.offsets,
        vali_qids=prepared.vali.qids,
        test_qids=prepared.test.qids,
        # The report's per-QG view scores each test QG of two runs without loading the data.
        test_labels=np.asarray(prepared.test.labels, dtype=np.float32),
        test_outliers=np.asarray(prepared.test_outliers, dtype=bool),
        # Per-QG vali NDCG as the run's choice saw it (sweeps.choice): the vali labels as the
        # label setting shows them (binary under binary_tau) and which vali QGs it labels.
        vali_labels=np.asarray(prepared.vali.labels, dtype=np.float32),
        vali_labeled=np.asarray(prepared.labels.vali_labeled, dtype=bool),
    )
    atomic_write_bytes(run_dir / "scores.npz", data)


def read_train_scores(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(train, train_offsets, train_qids)`` of a ``scores.npz``, or None for a file written
    before train scores were kept (such a run cannot be a teacher; vali and test still read)."""
    with np.load(path, allow_pickle=False) as stored:
        if "train" not in stored.files:
            return None
        return stored["train"], stored["train_offsets"], stored["train_qids"]


def read_test_per_group(path: Path, *, k: int, policy: str) -> dict[str, np.ndarray] | None:
    """Each test QG of a ``scores.npz`` with its NDCG@k under ``policy`` (NaN where undefined),
    as arrays: ``qids``, ``ndcg``, ``outlier`` (the paper's flag), ``items`` (its size) and
    ``relevant`` (its share of items with label > 0). None for a file that is missing, broken
    or written before test labels were kept; the report's per-QG views then leave the run out."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            if "test_labels" not in stored.files:
                return None
            scores, labels = stored["test"], stored["test_labels"]
            offsets, qids = stored["test_offsets"], stored["test_qids"]
            outlier = np.asarray(stored["test_outliers"], dtype=bool)
    except (OSError, ValueError, KeyError):
        return None
    sizes = np.diff(offsets)
    relevant = np.add.reduceat(labels > 0, offsets[:-1]) / np.maximum(sizes, 1)
    ndcg = ndcg_per_group(scores, labels, offsets, k=k, policy=policy)
    return {"qids": qids, "ndcg": ndcg, "outlier": outlier, "items": sizes, "relevant": relevant}


class TestGroupReader:
    """`read_test_per_group` of a run folder's ``scores.npz``, each folder read once: a report's
    dashboard and its "where" section read the same member runs."""

    def __init__(self, *, k: int, policy: str) -> None:
        self.k, self.policy = k, policy
        self._loaded: dict[str, dict[str, np.ndarray] | None] = {}

    def __call__(self, run_dir: Path | str) -> dict[str, np.ndarray] | None:
        key = str(run_dir)
        if key not in self._loaded:
            path = Path(run_dir) / "scores.npz"
            self._loaded[key] = read_test_per_group(path, k=self.k, policy=self.policy)
        return self._loaded[key]


def _check_length(scores: np.ndarray, n_items: int, split: str) -> None:
    if len(scores) != n_items:
        raise ValueError(f"{split}: {len(scores)} scores for {n_items} items")
