"""``./run.sh baseline <name> [key=value ...]``: the one entry point of every baseline.

``BASELINES`` maps the command-line name (and config file name, ``configs/baseline/<name>.yaml``)
to the function that trains the baseline, ``main(cfg, run) -> report``, both from the entries of
the baseline families (``FAMILY`` of ``<family>/family.py``, or of a tree backend's one module,
``xgboost.py``: `BASELINE_FAMILIES`); `main` hands it the run
the command line started (`core.runs.Run.execute`: lock, config, the skip of a finished run).
The command line refuses a ``method=`` override that contradicts the name.
"""

from __future__ import annotations

from collections.abc import Callable

from scarce_ltr.baselines.catboost import FAMILY as CATBOOST
from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.baselines.deep.family import FAMILY as DEEP
from scarce_ltr.baselines.gbdt.family import FAMILY as LIGHTGBM
from scarce_ltr.baselines.hybrid.family import FAMILY as HYBRID
from scarce_ltr.baselines.xgboost import FAMILY as XGBOOST
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.families import ModelFamily
from scarce_ltr.core.runs import Outcome, Run


def main(cfg: BaselineConfig, run: Run) -> Outcome:
    """Train ``cfg.method`` in ``run``; its report."""
    if cfg.method not in BASELINES:
        raise UserError(f"unknown baseline method '{cfg.method}'; known: {', '.join(BASELINES)}")
    return BASELINES[cfg.method](cfg, run)


# Every baseline family, in the order messages and --help list their names.
BASELINE_FAMILIES: tuple[ModelFamily, ...] = (LIGHTGBM, HYBRID, CATBOOST, XGBOOST, DEEP)
# Command-line name -> entry point. The config section of a family: `BaselineConfig`.
BASELINES: dict[str, Callable[[BaselineConfig, Run], dict]] = {
    name: family.train for family in BASELINE_FAMILIES for name in family.names
}
