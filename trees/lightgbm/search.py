"""LightGBM's search space for ``gbdt.search=optuna`` and every other strategy that draws its
trials (`search.strategies`): what a trial draws, trial 0, and how a trial's choices reach
LightGBM.

``gbdt.n_trials`` trials of a seeded study (run by the tree pipeline `trees.tree_run.search`
through `grid.LightGBMBackend`) over the objective,
learning rate, tree size, regularisation, bagging and the LambdaMART knobs lyzhin2023 tunes;
trials are pruned on LightGBM's per-round vali NDCG@5 and trial 0 is LightGBM's defaults. A
parameter fixed in ``gbdt.params`` is left out of the search.
"""

from __future__ import annotations

from collections.abc import Callable

from scarce_ltr.trees.lightgbm.config import (
    MAX_LIGHTGBM_LABEL,
    GBDTOptions,
    lightgbm_param_names,
)
from scarce_ltr.trees.lightgbm.lightgbm_ranker import CENTRE, BoosterOptions, LeafSettings

LEAF_KEYS = ("num_leaves", "min_data_in_leaf", "feature_fraction")
LEARNING_RATES = (0.01, 0.3)  # the search's range (log scale)


def suggest(trial, options: GBDTOptions, *, cap: int) -> dict:
    """One trial's choices; keys fixed in ``gbdt.params`` are not searched."""
    fixed = fixed_params(options)
    choices: dict = {}

    def pick(key: str, draw: Callable[[], object]) -> None:
        if key not in fixed:
            choices[key] = draw()

    choices["objective"] = trial.suggest_categorical("objective", list(options.objectives))
    pick("learning_rate", lambda: trial.suggest_float("learning_rate", *LEARNING_RATES, log=True))
    pick("num_leaves", lambda: trial.suggest_int("num_leaves", 4, 256, log=True))
    pick(
        "min_data_in_leaf",
        lambda: trial.suggest_int("min_data_in_leaf", 1, min(200, cap), log=True),
    )
    pick(
        "min_sum_hessian_in_leaf",
        lambda: trial.suggest_float("min_sum_hessian_in_leaf", 1e-4, 10.0, log=True),
    )
    pick("feature_fraction", lambda: trial.suggest_float("feature_fraction", 0.3, 1.0))
    pick("bagging_freq", lambda: trial.suggest_categorical("bagging_freq", [0, 1, 5]))
    if choices.get("bagging_freq", 0) > 0:
        pick("bagging_fraction", lambda: trial.suggest_float("bagging_fraction", 0.5, 1.0))
    pick("lambda_l1", lambda: trial.suggest_float("lambda_l1", 1e-8, 10.0, log=True))
    pick("lambda_l2", lambda: trial.suggest_float("lambda_l2", 1e-8, 10.0, log=True))
    if choices["objective"] == "lambdarank":
        pick(
            "lambdarank_truncation_level",
            lambda: trial.suggest_int("lambdarank_truncation_level", 5, 60),
        )
        pick("sigmoid", lambda: trial.suggest_float("sigmoid", 0.5, 2.0, log=True))
    # exp: LightGBM's 2^y - 1 (the project's NDCG gain); linear: y, which lyzhin2023 finds
    # sometimes trains better. LightGBM's early-stopping NDCG uses the same table.
    pick("label_gain", lambda: trial.suggest_categorical("label_gain", ["exp", "linear"]))
    return choices


def defaults(options: GBDTOptions, training: BoosterOptions, *, cap: int) -> dict:
    """Trial 0: LightGBM's defaults at the configured learning rate (the paper grid's centre),
    less the keys ``gbdt.params`` fixes."""
    low, high = LEARNING_RATES
    first = {
        "objective": options.objectives[0],
        "learning_rate": min(max(training.learning_rate, low), high),
        "num_leaves": CENTRE.num_leaves,
        "min_data_in_leaf": min(CENTRE.min_data_in_leaf, cap),
        "min_sum_hessian_in_leaf": 1e-3,
        "feature_fraction": CENTRE.feature_fraction,
        "bagging_freq": 0,
        "lambda_l1": 1e-8,  # the log scale cannot hold LightGBM's 0
        "lambda_l2": 1e-8,
        "lambdarank_truncation_level": 30,
        "sigmoid": 1.0,
        "label_gain": "exp",
    }
    return {k: v for k, v in first.items() if k not in fixed_params(options)}


def lightgbm_choices(choices: dict) -> tuple[LeafSettings, dict]:
    """A trial's (or grid point's) choices as the grid's leaf settings and LightGBM's other
    parameters."""
    extra = {k: v for k, v in choices.items() if k not in LEAF_KEYS}
    if extra.get("label_gain") == "linear":
        extra["label_gain"] = list(range(MAX_LIGHTGBM_LABEL + 1))
    else:
        extra.pop("label_gain", None)
    leaves = LeafSettings(
        num_leaves=choices.get("num_leaves", CENTRE.num_leaves),
        min_data_in_leaf=choices.get("min_data_in_leaf", CENTRE.min_data_in_leaf),
        feature_fraction=choices.get("feature_fraction", CENTRE.feature_fraction),
    )
    return leaves, extra


def fixed_params(options: GBDTOptions) -> set[str]:
    """LightGBM's main names of the parameters ``gbdt.params`` fixes."""
    return set(lightgbm_param_names(options.params).values())
