"""How a LightGBM baseline searches its hyperparameters: the paper's grid or an Optuna search.

``gbdt.search=paper-grid`` (the default, the paper's baseline): `grid.run_grid` over
`grid.grid_points`. ``gbdt.search=optuna``: ``gbdt.n_trials`` trials of a seeded TPE study over
`suggest` (objective, learning rate, tree size, regularisation, bagging and the LambdaMART knobs
lyzhin2023 tunes), trials pruned on LightGBM's per-round vali NDCG@5; trial 0 is LightGBM's
defaults. Either way each fit early-stops on vali NDCG@5 and the vali-best fit is kept
(`baselines.tuning`); a parameter fixed in ``gbdt.params`` is left out of the search.
"""

from __future__ import annotations

from collections.abc import Callable

from scarce_ltr.baselines.gbdt.config import (
    MAX_LIGHTGBM_LABEL,
    GBDTOptions,
    lightgbm_param_names,
)
from scarce_ltr.baselines.gbdt.grid import (
    CENTRE,
    GridOutcome,
    PointResult,
    grid_points,
    n_fits,
    run_grid,
)
from scarce_ltr.baselines.gbdt.lightgbm_ranker import (
    Fit,
    LeafSettings,
    RankingData,
    TrainingOptions,
    fit,
)
from scarce_ltr.baselines.tuning import TrialResult, optuna_search

LEAF_KEYS = ("num_leaves", "min_data_in_leaf", "feature_fraction")
LEARNING_RATES = (0.01, 0.3)  # the search's range (log scale)


def run_search(
    options: GBDTOptions,
    *,
    data: RankingData,
    training: TrainingOptions,
    score_vali: Callable[[Fit], float],
    phase: str,
    pca_components: int,
    on_point: Callable[[PointResult], None] = lambda result: None,
) -> GridOutcome:
    """The vali-best LightGBM fit of ``options.search`` on ``data`` (see the module docstring)."""
    common = dict(data=data, training=training, score_vali=score_vali, phase=phase)
    if options.search == "paper-grid":
        return run_grid(
            grid_points(options), pca_components=pca_components, on_point=on_point, **common
        )
    return run_optuna(options, pca_components=pca_components, on_point=on_point, **common)


def search_fits(options: GBDTOptions, cap: int) -> int:
    """How many fits one search makes (a progress bar's total)."""
    return options.n_trials if options.search == "optuna" else n_fits(options, cap)


def suggest(trial, options: GBDTOptions, *, cap: int) -> dict:
    """One trial's choices; keys fixed in ``gbdt.params`` are not searched."""
    fixed = _fixed(options)
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


def defaults(options: GBDTOptions, training: TrainingOptions, *, cap: int) -> dict:
    """Trial 0: LightGBM's defaults at the configured learning rate (the paper grid's centre)."""
    low, high = LEARNING_RATES
    return {
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


def lightgbm_choices(choices: dict) -> tuple[LeafSettings, dict]:
    """A trial's choices as the grid's leaf settings and LightGBM's other parameters."""
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


def run_optuna(
    options: GBDTOptions,
    *,
    data: RankingData,
    training: TrainingOptions,
    score_vali: Callable[[Fit], float],
    phase: str,
    pca_components: int,
    on_point: Callable[[PointResult], None] = lambda result: None,
) -> GridOutcome:
    """``options.n_trials`` Optuna trials; the outcome in the grid's terms."""

    def train(choices: dict, report) -> tuple[Fit, int, float, float]:
        leaves, extra = lightgbm_choices(choices)
        # A linear label gain changes LightGBM's per-round NDCG too: its values are on another
        # scale than the other trials', so the median rule does not judge them.
        linear = choices.get("label_gain") == "linear"
        trained = fit(leaves, training, data, extra=extra, report=None if linear else report)
        return trained, trained.best_rounds, score_vali(trained), trained.seconds

    outcome = GridOutcome()

    def on_trial(result: TrialResult) -> None:
        outcome.results.append(point_result(result, phase=phase, pca_components=pca_components))
        on_point(outcome.results[-1])

    first = defaults(options, training, cap=data.cap)
    searched = optuna_search(
        n_trials=options.n_trials,
        seed=training.seed,
        suggest=lambda trial: suggest(trial, options, cap=data.cap),
        train=train,
        first={k: v for k, v in first.items() if k not in _fixed(options)},
        warmup_steps=training.early_stopping_rounds,
        on_trial=on_trial,
    )
    outcome.best, outcome.best_fit = searched.best, searched.best_model
    return outcome


def point_result(result: TrialResult, *, phase: str, pca_components: int) -> PointResult:
    leaves, _ = lightgbm_choices(result.choices)
    other = {k: v for k, v in result.choices.items() if k not in LEAF_KEYS}
    return PointResult(
        phase=phase,
        pca_components=pca_components,
        leaves=leaves,
        min_data_in_leaf_asked=leaves.min_data_in_leaf,
        best_rounds=result.rounds,
        vali_ndcg=result.vali_ndcg,
        seconds=result.seconds,
        choices={"trial": result.number, **other},
        pruned=result.pruned,
    )


def _fixed(options: GBDTOptions) -> set[str]:
    """LightGBM's main names of the parameters ``gbdt.params`` fixes."""
    return set(lightgbm_param_names(options.params).values())
