"""LightGBM's parameter names and the project's keys they stand for.

LightGBM's own alias table (`main_names`: ``n_estimators``, ``num_boost_round``, ... ->
``num_iterations``), the parameters the project sets itself and the key it sets each with
(`RESERVED`), LightGBM's defaults of the three the paper's grid varies (`GRID_DEFAULTS`) and the
keys of the searched backends' sections that LightGBM's names stand for (`SEARCH_KEYS`). Read by
the gbdt section's check of ``gbdt.params`` (`config.lightgbm_param_names`) and by the
estimators, which take LightGBM's keywords (`scarce_ltr.api.aliases.resolve`). Keys are the
config's dotted keys (``gbdt.max_rounds``).
"""

from __future__ import annotations

# LightGBM's main parameter name -> the config key the project sets it with.
RESERVED = {
    "num_iterations": "gbdt.max_rounds",
    "learning_rate": "gbdt.learning_rate",
    "num_threads": "gbdt.num_threads",
    "early_stopping_round": "gbdt.early_stopping_rounds",
    "objective": "gbdt.objective",
    "seed": "seed",
}
# LightGBM's defaults of the three parameters the paper's grid varies (its centre,
# `lightgbm_ranker.CENTRE`).
GRID_DEFAULTS = {"num_leaves": 31, "min_data_in_leaf": 20, "feature_fraction": 1.0}
# LightGBM's main name -> the key of CatBoost's and XGBoost's sections (`tuning.SearchOptions`)
# it stands for.
SEARCH_KEYS = {
    "num_iterations": "max_rounds",
    "num_threads": "num_threads",
    "early_stopping_round": "early_stopping_rounds",
}


def main_names() -> dict[str, str]:
    """Every LightGBM parameter name and alias -> its main name (LightGBM's own table)."""
    import lightgbm as lgb

    aliases = lgb.basic._ConfigAliases._get_all_param_aliases()
    return {alias: main for main, names in aliases.items() for alias in names}
