"""One LightGBM LambdaMART fit: datasets, parameters, early stopping on vali NDCG@5, prediction.

Labels must be integer relevance levels 0..30 (LightGBM's lambdarank gain table holds
``2^y - 1`` for y = 0..30, the project's gain): negative, non-integer or larger labels are
refused with a `UserError`, never silently mapped, since any mapping would change the gains the
metric is computed with.

Early stopping watches LightGBM's own NDCG@5 on the labeled vali QGs. LightGBM counts a QG
without a relevant item as 1 (policy ``one``); over a fixed set of QGs that is an increasing
affine map of the ``skip`` and ``zero`` means, so the best round is the same under every policy.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import lightgbm as lgb
import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.metrics import SELECTION_K
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.trees.lightgbm.config import MAX_LIGHTGBM_LABEL

DEFAULT_MIN_DATA_IN_BIN = 3  # LightGBM's default


@dataclass(frozen=True)
class LeafSettings:
    """Hyperparameters of one grid point, as LightGBM gets them."""

    num_leaves: int
    min_data_in_leaf: int
    feature_fraction: float


# LightGBM's defaults: the centre of the paper's one-at-a-time grid and the search's trial 0.
CENTRE = LeafSettings(num_leaves=31, min_data_in_leaf=20, feature_fraction=1.0)


@dataclass(frozen=True)
class BoosterOptions:
    """What every LightGBM fit of one run shares (a deep model's counterpart is
    `finetune.config.TrainOptions`)."""

    learning_rate: float
    rounds: int  # at most
    early_stopping_rounds: int
    num_threads: int
    seed: int
    objective: str = "lambdarank"
    params: dict[str, Any] = field(default_factory=dict)  # gbdt.params: in every fit, last

    @classmethod
    def from_config(cls, cfg) -> BoosterOptions:
        """From a baseline config: its ``gbdt`` options, ``epochs`` cap and seed."""
        return cls(
            learning_rate=cfg.gbdt.learning_rate,
            rounds=cfg.gbdt.rounds(cfg.epochs),
            early_stopping_rounds=cfg.gbdt.early_stopping_rounds,
            num_threads=cfg.gbdt.trial_threads(),  # gbdt.n_jobs fits share gbdt.num_threads
            seed=cfg.seed,
            objective=cfg.gbdt.objective,
            params=dict(cfg.gbdt.params),
        )


@dataclass
class Fit:
    booster: lgb.Booster
    best_rounds: int  # 1-based; predictions use the first best_rounds trees
    seconds: float
    # LightGBM's own vali NDCG@5 after each round (its convention for QGs without a relevant
    # item): the training curve that W&B and the dashboard show.
    vali_curve: list[float] = field(default_factory=list)

    def predict(self, features: np.ndarray, *, num_threads: int) -> np.ndarray:
        """``[n_items]`` float64 scores for ``[n_items, n_features]`` features."""
        if len(features) == 0:
            return np.zeros(0)
        return self.booster.predict(
            features, num_iteration=self.best_rounds, num_threads=num_threads
        )


def check_labels(split: RankingSplit, what: str) -> None:
    """Stop unless every label of ``split`` is an integer in 0..30 (LightGBM lambdarank)."""
    labels = np.asarray(split.labels, dtype=np.float64)
    if labels.size == 0:
        return
    bad = ~np.isfinite(labels) | (labels < 0) | (labels != np.round(labels))
    if bad.any():
        raise UserError(
            f"{what}: label {labels[bad][0]:g} is not a relevance level; LightGBM's lambdarank "
            f"needs integer labels 0..{MAX_LIGHTGBM_LABEL} (binarize real-valued feedback with "
            "scarcity.binary_tau or relabel the file)"
        )
    if labels.max() > MAX_LIGHTGBM_LABEL:
        raise UserError(
            f"{what}: label {labels.max():g} is above {MAX_LIGHTGBM_LABEL}; LightGBM's lambdarank "
            f"gain 2^y - 1 is defined for labels 0..{MAX_LIGHTGBM_LABEL} only (relabel the file)"
        )


def min_data_cap(n_items: int) -> int:
    """The largest min_data_in_leaf a grid point gets on ``n_items`` training items.

    ``max(1, n_items // 4)``: a tree can still grow at least 4 leaves. Without it the paper's
    grid (min_data_in_leaf up to 200) cannot split a single time on, e.g., 2 labeled QGs of
    120 items, and every such point would be a constant model.
    """
    return max(1, n_items // 4)


class RankingData:
    """LightGBM datasets of one feature set, binned once and reused by every grid point.

    ``feature_pre_filter=False`` lets min_data_in_leaf change between fits on one dataset;
    ``min_data_in_bin`` is lowered to the min_data_in_leaf cap on tiny data so that no bin
    needs more items than a leaf may hold.
    """

    def __init__(
        self,
        *,
        train: RankingSplit,
        vali: RankingSplit,
        num_threads: int,
        params: dict[str, Any] | None = None,
    ) -> None:
        """``train`` and ``vali`` hold only QGs whose labels the learner may see; ``params``
        (``gbdt.params``) reach the datasets too, since binning ones (max_bin, ...) cannot
        change after the datasets are built."""
        if train.n_groups == 0 or vali.n_groups == 0:
            raise ValueError("train and vali need at least one QG each")
        self.n_train_items = train.n_items
        self.cap = min_data_cap(train.n_items)
        self.dataset_params = {
            "feature_pre_filter": False,
            "min_data_in_bin": min(DEFAULT_MIN_DATA_IN_BIN, self.cap),
            "num_threads": num_threads,
            "verbosity": -1,
            **(params or {}),
        }
        self.train = lgb.Dataset(
            np.asarray(train.features),
            np.asarray(train.labels, dtype=np.float64),
            group=train.group_sizes,
            params=dict(self.dataset_params),
            free_raw_data=True,
        )
        self.vali = lgb.Dataset(
            np.asarray(vali.features),
            np.asarray(vali.labels, dtype=np.float64),
            group=vali.group_sizes,
            reference=self.train,
            free_raw_data=True,
        )
        with _quiet():  # bin now rather than inside the first fit: fit timings compare
            self.train.construct()
            self.vali.construct()


def lightgbm_params(
    leaves: LeafSettings, options: BoosterOptions, data: RankingData, extra: dict | None = None
) -> dict:
    """LightGBM's parameters for one fit; ``extra`` (a search trial's) and then the user's
    ``gbdt.params`` take precedence; every other parameter keeps LightGBM's default."""
    return {
        "objective": options.objective,
        "metric": "ndcg",
        "eval_at": [SELECTION_K],
        "learning_rate": options.learning_rate,
        "num_leaves": leaves.num_leaves,
        "min_data_in_leaf": leaves.min_data_in_leaf,
        "feature_fraction": leaves.feature_fraction,
        # Row-wise histograms always: LightGBM otherwise picks row- or column-wise by timing,
        # which makes results depend on the machine's load.
        "deterministic": True,
        "force_row_wise": True,
        "num_threads": options.num_threads,
        "seed": options.seed,
        "verbosity": -1,
        **data.dataset_params,
        **(extra or {}),
        **options.params,
    }


def fit(
    leaves: LeafSettings,
    options: BoosterOptions,
    data: RankingData,
    *,
    history: dict | None = None,
    extra: dict | None = None,
    report: Callable[[int, float], None] | None = None,
) -> Fit:
    """Boost up to ``options.rounds`` trees, keep the round with the best vali NDCG@5.

    ``history``, when given, receives LightGBM's per-round ``{"vali": {"ndcg@5": [...]}}``;
    ``extra`` overrides parameters (a search trial's); ``report(round, vali ndcg@5)`` is called
    after every round (a search's pruner, which may raise to stop the fit).
    """
    params = lightgbm_params(leaves, options, data, extra)
    callbacks = [
        lgb.early_stopping(options.early_stopping_rounds, first_metric_only=True, verbose=False)
    ]
    if report is not None:
        callbacks.append(_reporter(report))
    history = history if history is not None else {}
    callbacks.append(lgb.record_evaluation(history))
    start = time.perf_counter()
    with _quiet():
        booster = lgb.train(
            params,
            data.train,
            num_boost_round=options.rounds,
            valid_sets=[data.vali],
            valid_names=["vali"],
            callbacks=callbacks,
        )
    best = booster.best_iteration or booster.current_iteration()
    curve = [float(v) for v in history.get("vali", {}).get(f"ndcg@{SELECTION_K}", [])]
    seconds = time.perf_counter() - start
    return Fit(booster=booster, best_rounds=int(best), seconds=seconds, vali_curve=curve)


def _reporter(report: Callable[[int, float], None]) -> Callable:
    """A LightGBM callback passing the round and its vali NDCG@5 on (Optuna's LightGBM pruning
    callback does the same; the project's search keeps its own, backend-neutral report)."""

    def callback(env: lgb.callback.CallbackEnv) -> None:
        for _, name, value, _ in env.evaluation_result_list:
            if name == f"ndcg@{SELECTION_K}":
                report(env.iteration, float(value))

    callback.order = 40  # after early stopping's bookkeeping (order 30)
    return callback


@contextmanager
def _quiet() -> Iterator[None]:
    """LightGBM warns whenever the vali set takes over the train set's parameters, as it
    should on every fit here (verbosity=-1 does not reach this Python-side warning)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Overriding the parameters from Reference")
        yield
