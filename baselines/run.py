"""``./run.sh baseline <name> [key=value ...]``: the one entry point of every baseline.

``BASELINES`` maps the command-line name (and config file name, ``configs/baseline/<name>.yaml``)
to the function that trains the baseline, ``main(cfg, run) -> report``. This module does
what all of them share: open the run (`scarce_ltr.core.runs.Run`), skip it when finished, keep
the resolved config next to the report. The command line refuses a ``method=`` override that
contradicts the name.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from omegaconf import OmegaConf

from scarce_ltr.baselines.catboost import train as catboost
from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.baselines.deep import train as deep
from scarce_ltr.baselines.gbdt import train as gbdt
from scarce_ltr.baselines.hybrid import train as gbdt_ssl
from scarce_ltr.baselines.xgboost import train as xgboost
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.runs import CONFIG, Run


def main(cfg: BaselineConfig, out_dir: Path | None = None) -> dict | None:
    """Run ``cfg.method`` in ``out_dir``; ``None`` when the run was already finished."""
    if cfg.method not in BASELINES:
        raise UserError(f"unknown baseline method '{cfg.method}'; known: {', '.join(BASELINES)}")
    run = Run.of(cfg, cfg.identity(), out_dir)
    if run.done:
        print(f"{run.folder}: finished before (DONE present); skipped", file=sys.stderr)
        return None
    if not (run.folder / CONFIG).is_file():  # the CLI writes it; direct calls may not
        run.start(OmegaConf.structured(cfg))
    try:
        return BASELINES[cfg.method](cfg, run)
    finally:
        run.close()


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
