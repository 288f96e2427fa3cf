"""Pruning a deep search's trials (``search.pruner``; `finetune.search` runs the search):
Optuna's pruner of the configured rule, a trial's per-epoch reports to it (`Reporter`), and the
same rule inside a child process that trains a trial of a batch (`ReplicaPruner`,
``search.n_jobs``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from scarce_ltr.core.extras import require
from scarce_ltr.search.selection import nan_low


class Space(Protocol):
    """What the pruner reads of a search's space (`finetune.search_space.Space` is one): its
    ``config``, whose ``pruner``, ``prune_warmup``, ``prune_startup`` and, for Hyperband's
    largest budget, ``head_epochs`` and ``full_epochs`` (`finetune.search_config.SearchConfig`)."""

    config: Any


def make_pruner(space: Space):
    """``search.pruner``'s Optuna pruner: no trial stopped before ``prune_warmup`` epochs."""
    optuna, config = _optuna(), space.config
    warmup = config.prune_warmup
    if config.pruner == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=config.prune_startup, n_warmup_steps=warmup
        )
    if config.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=warmup, reduction_factor=3)
    most = max(config.head_epochs or [0]) + max(config.full_epochs or [0])
    return optuna.pruners.HyperbandPruner(
        min_resource=warmup, max_resource=max(most, warmup), reduction_factor=3
    )


@dataclass
class ReplicaPruner:
    """A child's pruner (`finetune.trial_pool`): ``search.pruner`` over a study in the child
    that holds the trials ``finished`` before the batch, in which the trial reports its epochs
    (`Reporter`). The median rule reads only finished trials, so it decides there as in the
    parent's study; the parent reports the trial's epochs to its own trial afterwards."""

    space: Space
    finished: list
    protected: bool
    reporter: Reporter | None = None

    def __call__(self, history: list[dict]) -> bool:
        if self.reporter is None:
            optuna = _optuna()
            study = optuna.create_study(direction="maximize", pruner=make_pruner(self.space))
            study.add_trials(self.finished)
            self.reporter = Reporter(study.ask(), protected=self.protected)
        return self.reporter(history)


class Reporter:
    """A trial's `finetune.fit_state.Prune`: each new epoch's best vali NDCG@5 so far (NaN while
    none is finite) reported at step = its epoch, then the pruner asked, epoch by epoch, also for a
    trial read back or resumed (successive halving and Hyperband record the rungs a trial passed
    when asked, and later trials compete against them). A ``protected`` trial (the fixed
    recipe's) is asked too but never stopped."""

    def __init__(self, trial, *, protected: bool) -> None:
        self.trial, self.protected = trial, protected
        self.reported, self.best = 0, -math.inf

    def __call__(self, history: list[dict]) -> bool:
        prune = False
        for row in history[self.reported :]:
            if "vali_ndcg@5" not in row:  # an epoch vali was not scored after (vali_every)
                continue
            self.best = max(self.best, nan_low(row["vali_ndcg@5"]))
            value = self.best if math.isfinite(self.best) else math.nan
            self.trial.report(value, row["epoch"])
            prune = self.trial.should_prune()
        self.reported = len(history)
        return prune and not self.protected


def _optuna():
    optuna = require("optuna", "search.n_trials")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna
