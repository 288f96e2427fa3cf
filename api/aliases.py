"""LightGBM's and scikit-learn's parameter names as the config keys of the stages.

`TreeRanker(n_estimators=100, n_jobs=2, random_state=0, num_leaves=63, reg_lambda=1.0)` means
what `lightgbm.LGBMRanker` means by them: `resolve` turns each such keyword into the config key
of the method's family (``gbdt.max_rounds``, ``gbdt.num_threads``, ``seed``, ...). For the
LightGBM methods any name in LightGBM's own alias table is taken (LightGBM's names and what they
stand for: `scarce_ltr.trees.lightgbm.aliases`): the ones the project sets
itself go to their keys (`RESERVED`; ``objective`` to the one of ``gbdt.objectives`` for a search
that draws its trials), the three the paper's grid searches (num_leaves,
min_data_in_leaf, feature_fraction) fix the grid to one point, LightGBM's model (the ones not
given at LightGBM's defaults; `gbdt-optuna` searches the others), every other one goes to
``gbdt.params``. Keys that are already config keys pass through unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from scarce_ltr.baselines.config import SEARCHED_TREES
from scarce_ltr.trees.lightgbm.aliases import GRID_DEFAULTS, RESERVED, SEARCH_KEYS, main_names
from scarce_ltr.trees.lightgbm.config import RAW_METHODS, GBDTOptions

# The LightGBM methods that read raw features (they take pandas categories, too).
LIGHTGBM_RAW = RAW_METHODS
LIGHTGBM = GBDTOptions.read_by  # every method training LightGBM (gbdt-ssl too)
REFUSED = {
    "metric": "selection is the project's vali NDCG@5 (eval_at names what evals_result_ holds)",
    "eval_at": "pass eval_at= to fit",
}
SKLEARN_ONLY = ("importance_type",)  # read by the estimator itself


def family_of(method: Any) -> str:
    if method in LIGHTGBM:
        return "gbdt"
    if method in SEARCHED_TREES:
        return str(method)
    return "other"


def random_seed(random_state: Any) -> int | None:
    """LGBMRanker's reading of ``random_state``: an int as it is; a numpy ``RandomState`` or
    ``Generator``: an int drawn from it; None: the config's seed."""
    if random_state is None:
        return None
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(np.iinfo(np.int32).max))
    return int(random_state)


def threads(n_jobs: int) -> int:
    """joblib's reading of a negative ``n_jobs`` (-1: every core), as LightGBM's."""
    if n_jobs < 0:
        return max(1, (os.cpu_count() or 1) + 1 + n_jobs)
    return n_jobs


def resolve(method: Any, config: Mapping[str, Any], known: set[str]) -> dict[str, Any]:
    """``config`` with LightGBM's names turned into config keys; ``known``: the heads of the
    config keys of the stages (a keyword whose head is one passes through)."""
    family = family_of(method)
    out: dict[str, Any] = {}
    params: dict[str, Any] = {}
    main_of = main_names() if family != "other" else {}
    # a search that draws its trials takes fixed values in gbdt.params and searches the rest
    drawn = method == "gbdt-optuna" or config.get("gbdt__search", "paper-grid") != "paper-grid"
    fixed: dict[str, tuple[str, Any]] = {}
    for key, value in config.items():
        if key == "class_weight":
            raise ValueError("class_weight: a ranker has no classes (LGBMRanker ignores it)")
        head = key.partition("__")[0]
        if head in known or key not in main_of:
            _put(out, key, value, key)
            continue
        main = main_of[key]
        if main in REFUSED:
            raise ValueError(f"{key}: {REFUSED[main]}")
        if family in SEARCHED_TREES:
            if main == "seed":
                _put(out, "seed", value, key)
            elif main in SEARCH_KEYS:
                _put(out, f"{family}__{SEARCH_KEYS[main]}", value, key)
            else:
                raise ValueError(
                    f"{key}: a LightGBM parameter; {method} takes {family}__params "
                    f"(its own names) or the {family}__* keys"
                )
        elif main == "objective" and drawn:  # such a search draws it from gbdt.objectives
            _put(out, "gbdt__objectives", [value], key)
        elif main in RESERVED:
            _put(out, RESERVED[main].replace(".", "__"), value, key)
        elif main in GRID_DEFAULTS and not drawn:
            fixed[main] = (key, value)
        else:
            params[key] = value
    if fixed:  # LightGBM's model: the three fixed (LightGBM's defaults for those not given)
        for main, default in GRID_DEFAULTS.items():
            given, value = fixed.get(main, (main, default))
            _put(out, f"gbdt__{main}", [value], given)
        _put(out, "gbdt__grid", "full", next(iter(fixed.values()))[0])
    if params:
        given = dict(out.get("gbdt__params") or {})
        for key in params:
            if key in given:
                raise ValueError(f"{key} is given twice: as a keyword and in gbdt__params")
        out["gbdt__params"] = given | params
    return out


def _put(out: dict[str, Any], key: str, value: Any, given: str) -> None:
    if key in out:
        raise ValueError(f"{given} sets {key.replace('__', '.')}, which another keyword sets too")
    out[key] = value
