"""One run of a tuned tree backend (CatBoost, XGBoost): search on vali, test scored once, bundle.

A backend (`TreeBackend`) knows its labels, search space, one early-stopped fit and its model
files; this module does the rest the same way for every backend: the data and its checks, the
Optuna search on the labeled train QGs with the project's NDCG@5 of the labeled vali QGs
(`baselines.tuning`), the chosen model's vali and test scores (``scores.npz``), ``report.json``,
the model bundle and ``DONE``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, Protocol

import numpy as np

from scarce_ltr.baselines.gbdt.train import finish_run
from scarce_ltr.baselines.tuning import optuna_search
from scarce_ltr.core.runs import Run
from scarce_ltr.data.bundling import write_run_bundle
from scarce_ltr.data.evaluation import (
    evaluation_report,
    save_scores,
    selection_rule,
    vali_selection,
)
from scarce_ltr.data.pipeline import prepare_data, require_labeled_vali, require_relevant_labels
from scarce_ltr.data.ranking_split import RankingSplit

Report = Callable[[int, float], None]  # (round, the backend's vali NDCG@5); may raise Pruned


class TreeBackend(Protocol):
    """What a tuned tree backend gives `run_tree_backend`."""

    name: str  # as a message names it: "CatBoost YetiRank"
    n_trials: int
    early_stopping_rounds: int

    def check_labels(self, split: RankingSplit, what: str) -> None: ...

    def suggest(self, trial: Any) -> dict: ...

    def first(self) -> dict:
        """Trial 0: the backend's defaults."""
        ...

    def fit(
        self, choices: dict, train: RankingSplit, vali: RankingSplit, report: Report
    ) -> tuple[Any, int, float]:
        """``(model cut at its vali-best round, trees kept, seconds)``."""
        ...

    def predict(self, model: Any, features: np.ndarray) -> np.ndarray:
        """``[n_items]`` float64 scores."""
        ...

    def bundle(self, model: Any) -> tuple[dict, dict[str, bytes]]:
        """The model's part of the bundle: its description (``kind``) and files."""
        ...

    def describe(self) -> dict:
        """Report keys: versions, threads."""
        ...


def run_tree_backend(cfg, run: Run, backend: TreeBackend) -> dict:
    """Search, choose on vali, score vali and test once, write the run (see module docstring)."""
    start = time.perf_counter()
    prepared = prepare_data(cfg)
    require_relevant_labels(prepared)
    require_labeled_vali(prepared)
    labels = prepared.labels
    train, labeled_vali = labels.labeled_train(), labels.labeled_vali()
    backend.check_labels(train, "train (labeled QGs)")
    backend.check_labels(labeled_vali, "vali (labeled QGs)")
    tracker = run.open_tracker(asdict(cfg))

    def train_trial(choices: dict, report: Report) -> tuple[Any, int, float, float]:
        model, rounds, seconds = backend.fit(choices, train, labeled_vali, report)
        scores = backend.predict(model, prepared.vali.features)
        return model, rounds, vali_selection(prepared, scores, cfg.metrics), seconds

    outcome = optuna_search(
        n_trials=backend.n_trials,
        seed=cfg.seed,
        suggest=backend.suggest,
        train=train_trial,
        first=backend.first(),
        warmup_steps=backend.early_stopping_rounds,
        on_trial=lambda result: tracker.log({"trial": result.as_dict()}),
    )
    model, best = outcome.best_model, outcome.best_result
    vali_scores = backend.predict(model, prepared.vali.features)
    test_scores = backend.predict(model, prepared.test.features)
    save_scores(run.folder, prepared, vali_scores, test_scores)
    report = {
        "method": cfg.method,
        "metrics": evaluation_report(prepared, vali_scores, test_scores, cfg.metrics),
        "selected": best.as_dict(),
        "trials": [result.as_dict() for result in outcome.results],
        "selection": selection_rule(cfg.metrics),
        "search": "optuna",
        "n_train_items": prepared.train.n_items,
        "n_train_labeled_items": train.n_items,
        "n_train_labeled_groups": int(labels.train_labeled.sum()),
        "n_vali_labeled_groups": int(labels.vali_labeled.sum()),
        "n_features": prepared.n_features,
        "n_trees": best.rounds,
        "seconds_fitting": round(sum(r.seconds for r in outcome.results), 3),
        **backend.describe(),
    }
    write_run_bundle(run, prepared, report["metrics"], *backend.bundle(model))
    return finish_run(run, report, start=start)
