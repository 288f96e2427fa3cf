"""``./run.sh baseline <name> [key=value ...]``: the one entry point of every baseline.

``BASELINES`` maps the command-line name (and config file name, ``configs/baseline/<name>.yaml``)
to the function that trains the baseline, ``main(cfg, out_dir) -> report``. This module does
what all of them share: refuse a ``method`` that does not match the config file, skip a finished
run directory, keep the resolved config next to the report.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from omegaconf import OmegaConf

from baselines import deep, gbdt, gbdt_ssl
from baselines.config import BaselineConfig
from core.errors import UserError
from core.rundir import atomic_write_text, default_run_dir, is_done


def main(cfg: BaselineConfig, out_dir: Path) -> dict | None:
    """Run ``cfg.method`` in ``out_dir``; ``None`` when the run was already finished."""
    if cfg.method not in BASELINES:
        raise UserError(f"unknown baseline method '{cfg.method}'; known: {', '.join(BASELINES)}")
    if cfg.run_dir is None and out_dir.name.startswith("seed="):
        expected = default_run_dir(cfg, stage="baseline", method=cfg.run_method(cfg.method))
        if expected.resolve() != out_dir.resolve():
            raise UserError(
                f"method={cfg.method} does not match the config file the run was started with; "
                f"run ./run.sh baseline {cfg.method} instead of overriding method"
            )
    if is_done(out_dir):
        print(f"{out_dir}: finished before (DONE present); skipped", file=sys.stderr)
        return None
    if not (out_dir / "config.yaml").is_file():  # the CLI writes it; direct calls may not
        atomic_write_text(out_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    return BASELINES[cfg.method](cfg, out_dir)


# Command-line name -> entry point. The config section of a family: `BaselineConfig`.
BASELINES: dict[str, Callable[[BaselineConfig, Path], dict]] = {
    "gbdt": gbdt.main,
    "gbdt-pseudo": gbdt.main,
    "gbdt-pca": gbdt.main,
    "gbdt-pca-pseudo": gbdt.main,
    "gbdt-ssl": gbdt_ssl.main,
    "resnet": deep.main,
    "deepfm": deep.main,
    "dcnv2": deep.main,
}
