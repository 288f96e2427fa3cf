"""``./run.sh baseline <name> [key=value ...]``: the one entry point of every baseline.

``BASELINES`` maps the command-line name (and config file name, ``configs/baseline/<name>.yaml``)
to the function that trains the baseline, ``main(cfg, run) -> report``, both from the entries of
the baseline families (``FAMILY`` of ``<family>/family.py``, or the entry of a registered tree
backend, `trees.backends.TREE_BACKENDS`: `BASELINE_FAMILIES`); `main` hands it the run
the command line started (`core.runs.Run.execute`: lock, config, the skip of a finished run).
The command line refuses a ``method=`` override that contradicts the name.

`fit` trains the same on in-memory splits, the labeled train QGs given as a mask, and returns
the fitted ranker (`trees.fitted.FittedTrees` for the trees, finetuning's
`FinetunedRanker` for the deep baselines: each scores raw features and ``save``s the bundle a
run writes); no file is written unless ``run=`` is given (gbdt-ssl's encoder comes as
``encoder=``, in memory, or from the run folder ``pretrained=`` names). What still needs files:
a taught run's teacher (``gbdt.teacher=``, ``teacher=``: a finished run's scores), and a search
kept in storage (``<section>.storage``) needs ``run=``; the deep baselines' search
(``deep.search.n_trials``) runs as a command only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.baselines.deep import train as deep
from scarce_ltr.baselines.deep.family import FAMILY as DEEP
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.families import ModelFamily
from scarce_ltr.core.runs import Outcome, Run
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.finetune.fitted import FinetunedRanker
from scarce_ltr.pretrain.checkpoint import Encoder
from scarce_ltr.trees.backends import TREE_BACKENDS
from scarce_ltr.trees.fitted import FittedTrees
from scarce_ltr.trees.lightgbm import train as lightgbm
from scarce_ltr.trees.lightgbm.family import FAMILY as LIGHTGBM
from scarce_ltr.trees.lightgbm.hybrid import train as hybrid
from scarce_ltr.trees.lightgbm.hybrid.family import FAMILY as HYBRID


def main(cfg: BaselineConfig, run: Run) -> Outcome:
    """Train ``cfg.method`` in ``run``; its report."""
    _check_method(cfg)
    return BASELINES[cfg.method](cfg, run)


def fit(
    cfg: BaselineConfig,
    splits: Mapping[str, RankingSplit],
    *,
    labeled: np.ndarray | None = None,
    run: Run | None = None,
    encoder: Encoder | None = None,
) -> FittedTrees | FinetunedRanker:
    """Train ``cfg.method`` on in-memory splits: ``splits`` holds raw ``train`` and ``vali``
    `RankingSplit`s (``test`` optional: without one, nothing is an outlier), transformed as
    ``cfg.data.transform`` says (fit on train); ``labeled``: the labeled train QGs,
    ``[n_groups]`` bool (None: ``cfg.scarcity``'s seeded draw). The vali-best model of the
    method's search, nothing scored on test; the same config, splits and labels give the
    command's model, bit for bit. ``run``: a started `core.runs.Run` whose folder keeps what
    the search keeps there (a deep grid's checkpoints, a stored study's default name); its
    report and bundle are the caller's. ``encoder``: gbdt-ssl's pretrained `Encoder` in memory
    (`pretrain.fit`'s), in place of ``cfg.pretrained``. See the module docstring for what needs
    files."""
    _check_method(cfg)
    if encoder is None:
        return FITS[cfg.method](cfg, splits, labeled=labeled, run=run)
    if cfg.method not in HYBRID.names:
        raise ValueError(
            f"encoder: only {', '.join(HYBRID.names)} embeds with an encoder, not {cfg.method}"
        )
    return hybrid.fit(cfg, splits, labeled=labeled, run=run, encoder=encoder)


def _check_method(cfg: BaselineConfig) -> None:
    if cfg.method not in BASELINES:
        raise UserError(f"unknown baseline method '{cfg.method}'; known: {', '.join(BASELINES)}")


# Every baseline family, in the order messages and --help list their names: LightGBM's, then
# each registered tree backend's (CatBoost, XGBoost), then the deep rankers'.
TREES = tuple(TREE_BACKENDS.values())
BASELINE_FAMILIES: tuple[ModelFamily, ...] = (
    LIGHTGBM,
    HYBRID,
    *(backend.family for backend in TREES),
    DEEP,
)
# Command-line name -> entry point. The config section of a family: `BaselineConfig`.
BASELINES: dict[str, Callable[[BaselineConfig, Run], dict]] = {
    name: family.train for family in BASELINE_FAMILIES for name in family.names
}
# Command-line name -> its training on in-memory splits (`fit`).
FITS: dict[str, Callable[..., Any]] = {
    name: train
    for family, train in (
        (LIGHTGBM, lightgbm.fit),
        (HYBRID, hybrid.fit),
        *((backend.family, backend.fit) for backend in TREES),
        (DEEP, deep.fit),
    )
    for name in family.names
}
