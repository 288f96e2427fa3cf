"""What one model's deep search varies (`Space`: its keys of `finetune.search_config.SearchConfig`,
its own categorical choices and the fixed recipe's points as the first trials, clipped into the
ranges) and the recipe another run's search chose (`chosen_recipe`, for ``recipe_from``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scarce_ltr.core.errors import UserError
from scarce_ltr.finetune.search_config import (
    INTEGER_KEYS,
    LOG_SCALE,
    OPTIONAL_KEYS,
    SearchConfig,
)


@dataclass(frozen=True)
class Space:
    """What one model searches: the keys of ``SearchConfig`` it has (and a non-empty range),
    categorical ``choices`` of its own (DCNv2's cross layers), and the fixed recipe's points."""

    config: SearchConfig
    keys: tuple[str, ...]
    choices: dict[str, list]
    first: list[dict]  # the fixed recipe's points, enqueued as the first trials
    # the fixed recipe's first point as it trains (unclipped), over the keys and choices
    base: dict = field(default_factory=dict)
    # keys a portfolio recipe may set beyond the searched ones, kept only where it names them
    # (a fresh encoder's `search_config.ENCODER_KEY`); never drawn by Optuna
    recipe_keys: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        config: SearchConfig,
        keys: Sequence[str],
        *,
        fixed: Sequence[dict],
        choices: dict[str, list] | None = None,
        recipe_keys: Sequence[str] = (),
    ) -> Space:
        """``keys``: what the model can vary; ``fixed``: the recipe's values at each of its
        points, clipped into the ranges (a value outside a categorical list is drawn);
        ``recipe_keys``: what a portfolio recipe may set beside them."""
        searched = tuple(k for k in keys if getattr(config, k))
        choices = {k: list(v) for k, v in (choices or {}).items() if len(v) > 1}
        first = []
        base = {k: fixed[0][k] for k in [*searched, *choices] if k in fixed[0]} if fixed else {}
        for point in fixed:
            start = {k: _clip(config, k, point[k]) for k in searched if k in point}
            if "loss" in start and start["loss"] is None:
                del start["loss"]
            for key in OPTIONAL_KEYS:
                if key in start:
                    start[f"{key}_on"] = point[key] != 0
                    if point[key] == 0:
                        del start[key]
            start |= {k: point[k] for k in choices if point.get(k) in choices[k]}
            if start not in first:
                first.append(start)
        return cls(config, searched, choices, first, base, tuple(recipe_keys))

    def fixed_trials(self, recipes: list[dict]) -> list[dict]:
        """Each recipe as a trial's params: its values of the keys this model searches (the
        others dropped, as a search never draws them), the fixed recipe's where it names none,
        and its `recipe_keys` where it names them."""
        return [
            {k: recipe.get(k, v) for k, v in self.base.items()}
            | {k: recipe[k] for k in self.recipe_keys if k in recipe}
            for recipe in recipes
        ]

    def suggest(self, trial) -> dict:
        """One trial's params, in a fixed order (the sampler's draws depend on it)."""
        params: dict = {}
        for key in self.keys:
            span = getattr(self.config, key)
            if key == "loss":
                params[key] = trial.suggest_categorical(key, list(span))
            elif key in OPTIONAL_KEYS and not trial.suggest_categorical(f"{key}_on", [False, True]):
                params[key] = 0.0
            elif key in INTEGER_KEYS:
                params[key] = trial.suggest_int(key, span[0], span[1], log=key in LOG_SCALE)
            else:
                low, high = float(span[0]), float(span[1])
                params[key] = trial.suggest_float(key, low, high, log=key in LOG_SCALE)
        for key, values in self.choices.items():
            params[key] = trial.suggest_categorical(key, values)
        return params


def _clip(config: SearchConfig, key: str, value):
    span = getattr(config, key)
    if key == "loss":
        return value if value in span else None
    clipped = min(max(value, span[0]), span[1])
    return int(clipped) if key in INTEGER_KEYS else float(clipped)


def chosen_recipe(space: Space) -> dict:
    """The params the search of run ``space.config.recipe_from`` chose: what this run trains.
    `UserError` naming the folder when it is no finished searched run of the same keys."""
    folder = Path(space.config.recipe_from).expanduser()
    try:
        report = json.loads((folder / "report.json").read_text())
    except (OSError, ValueError):
        report = None
    params = report.get("search", {}).get("chosen_params") if isinstance(report, dict) else None
    if not (folder / "DONE").is_file() or not isinstance(params, dict):
        raise UserError(
            f"recipe_from={folder}: not a finished run whose search chose a recipe (it needs "
            f"DONE and report.json with search.chosen_params; run it with search.n_trials first)"
        )
    wanted = set(space.keys) | set(space.choices)
    if set(params) - set(space.recipe_keys) != wanted:
        raise UserError(
            f"recipe_from={folder}: its search chose {sorted(params)}, this run searches "
            f"{sorted(wanted)}; give the folder of a run of the same model and search keys"
        )
    return params
