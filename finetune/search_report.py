"""The deep search's report and progress: `summary` (the report's ``search``: every trial's
params and vali score, and the one kept), `trial_seconds` and `progress_line`, one line per
trial on stderr, as the tree search's.
"""

from __future__ import annotations

import sys

from scarce_ltr.core.progress import duration
from scarce_ltr.finetune.grid import BEST_VALI, PRUNED, TrainedPoint
from scarce_ltr.finetune.search_config import Portfolio
from scarce_ltr.finetune.search_space import Space


def summary(
    results: list[dict],
    chosen: TrainedPoint,
    *,
    seed: int,
    space: Space,
    portfolio: Portfolio | None = None,
) -> dict:
    """The report's ``search``: every trial's params and vali score, and the one kept; a
    portfolio's run also its strategy, file and the recipes' hash."""
    rows = [
        {
            "trial": r["trial"],
            **r["params"],
            BEST_VALI: r[BEST_VALI],
            "best_epoch": r["best_epoch"],
            "epochs_trained": r["epochs_trained"],
            "seconds": trial_seconds(r),
            **({PRUNED: True} if r.get(PRUNED) else {}),
        }
        for r in results
    ]
    recipe_from = space.config.recipe_from
    pruner = space.config.pruner
    sampler = f"the recipe {recipe_from} chose" if recipe_from else f"optuna TPE, seed {seed}"
    drawn_from: dict[str, str] = {}
    if portfolio is not None:
        sampler = "the portfolio's recipes, in file order"
        drawn_from = {
            "strategy": "portfolio",
            "portfolio": str(portfolio.path.resolve()),
            "portfolio_hash": portfolio.digest,
        }
    return {
        "n_trials": len(results),
        "sampler": sampler,
        **drawn_from,
        **(
            {"pruner": pruner, "n_pruned": sum(bool(r.get(PRUNED)) for r in results)}
            if pruner != "none" and not recipe_from
            else {}
        ),
        "searched": list(space.keys) + list(space.choices),
        "chosen_trial": chosen.result["trial"],
        "chosen_params": chosen.result["params"],
        "trials": rows,
    }


def trial_seconds(result: dict) -> float:
    """A trial's training and vali scoring time (every epoch, the initial model's one too)."""
    return round(result["seconds_per_epoch"] * max(result["epochs_trained"], 1), 3)


def progress_line(
    desc: str, number: int, total: int, result: dict, best: dict, seconds: float
) -> None:
    """One line per trial, as the tree search's: its params, vali score, the best so far."""
    params = " ".join(f"{k}={_short(v)}" for k, v in result["params"].items())
    value, top = result[BEST_VALI], best[BEST_VALI]
    name = BEST_VALI.removeprefix("best_vali_")
    score = f"{value:.4f}"
    if result.get(PRUNED):
        score = f"pruned after epoch {result['epochs_trained']}"
    print(
        f"{desc} trial {number} ({number + 1}/{total}): {params} vali {name}"
        f" {score} (best {top:.4f}, trial {best['trial']}) {duration(seconds)}",
        file=sys.stderr,
        flush=True,
    )


def _short(value) -> str:
    if isinstance(value, dict):  # a portfolio recipe's encoder options
        return "{" + ",".join(f"{k}={_short(v)}" for k, v in value.items()) + "}"
    return f"{value:.3g}" if isinstance(value, float) else str(value)
