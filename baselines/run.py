"""``./run.sh baseline <name> [key=value ...]``: the one entry point of every baseline.

``BASELINES`` maps the command-line name (and config file name, ``configs/baseline/<name>.yaml``)
to the function that trains the baseline, ``main(cfg, run) -> report``; `main` hands it the run
the command line started (`core.runs.Run.execute`: lock, config, the skip of a finished run).
The command line refuses a ``method=`` override that contradicts the name.
"""

from __future__ import annotations

from collections.abc import Callable

from scarce_ltr.baselines.catboost import train as catboost
from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.baselines.deep import train as deep
from scarce_ltr.baselines.gbdt import train as gbdt
from scarce_ltr.baselines.hybrid import train as gbdt_ssl
from scarce_ltr.baselines.xgboost import train as xgboost
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.runs import Run


def main(cfg: BaselineConfig, run: Run) -> dict:
    """Train ``cfg.method`` in ``run``; its report."""
    if cfg.method not in BASELINES:
        raise UserError(f"unknown baseline method '{cfg.method}'; known: {', '.join(BASELINES)}")
    return BASELINES[cfg.method](cfg, run)


# Command-line name -> entry point. The config section of a family: `BaselineConfig`.
BASELINES: dict[str, Callable[[BaselineConfig, Run], dict]] = {
    "gbdt": gbdt.main,
    "gbdt-optuna": gbdt.main,
    "gbdt-pseudo": gbdt.main,
    "gbdt-pca": gbdt.main,
    "gbdt-pca-pseudo": gbdt.main,
    "gbdt-ssl": gbdt_ssl.main,
    "catboost": catboost.main,
    "xgboost": xgboost.main,
    "resnet": deep.main,
    "deepfm": deep.main,
    "dcnv2": deep.main,
    "dasalc": deep.main,
}
