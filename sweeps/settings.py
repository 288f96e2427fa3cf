"""The settings a sweep repeats its cells over, besides the seed.

Its label settings (``fractions``, or ``binary_taus``: `label_settings`) and the folds of a data
set laid out as ``Fold<k>/`` (``folds``: `fold_overrides`), each with the overrides that select
it, and where a fold's runs and job keys go under the sweep (`fold_place`, `fold_tags`).
"""

from __future__ import annotations

import re

from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.scarcity import ScarcityConfig
from scarce_ltr.data.stage_config import CommonConfig


def label_settings(cfg) -> list[tuple[ScarcityConfig, list[str]]]:
    """Each label setting of the sweep with the overrides that select it."""
    settings = []
    for fraction in cfg.fractions if not cfg.binary_taus else [1.0]:
        overrides = [f"scarcity.fraction={fraction}", f"scarcity.val={cfg.val}"]
        taus = cfg.binary_taus or [None]
        for tau in taus:
            extra = [] if tau is None else [f"scarcity.binary_tau={tau}"]
            scarcity = ScarcityConfig(fraction=fraction, val=cfg.val, binary_tau=tau)
            settings.append((scarcity, overrides + extra))
    return settings


# A path component that is exactly Fold<n> (Fold1/train; not MyFold1/train).
FOLD_COMPONENT = re.compile(r"(?<![^/])Fold(\d+)(?![^/])")


def fold_overrides(cfg, dataset: str) -> dict[int | None, list[str]]:
    """``{fold: the overrides that select its split files}``; ``{None: []}`` without folds.

    The split stems are the preset's (``configs/data/<dataset>.yaml``, after the sweep's common
    ``data.*`` overrides), each with its ``Fold<n>`` folder replaced by ``Fold<k>``.
    """
    folds = list(cfg.folds)
    if not folds:
        return {None: []}
    data_overrides = [o for o in cfg.overrides.common if o.startswith("data.")]
    data_cfg, _ = load_config(CommonConfig, [f"data={dataset}", *data_overrides])
    splits = {split: stem for split, stem in data_cfg.data.splits.items() if stem}  # no carved vali
    missing = [split for split, stem in splits.items() if not FOLD_COMPONENT.search(stem)]
    if missing:
        listing = ", ".join(f"{split}: {stem}" for split, stem in splits.items())
        raise UserError(
            f"folds={folds}: data set '{dataset}' has splits {{{listing}}}, and "
            f"{', '.join(missing)} names no Fold<n> folder; folds need a data set whose split "
            "files lie in Fold<k>/ folders (data.splits such as Fold1/train, as the LETOR "
            "presets ohsumed, mq2007, mslr-web30k), or folds=[] for the data set's own splits"
        )
    return {
        fold: [
            f"data.splits.{split}={FOLD_COMPONENT.sub(f'Fold{fold}', stem)}"
            for split, stem in splits.items()
        ]
        for fold in folds
    }


def fold_place(dataset: str, fold: int | None) -> str:
    """Where a fold's runs and job keys go under the sweep: ``<dataset>[/fold=<k>]``."""
    return dataset if fold is None else f"{dataset}/fold={fold}"


def fold_tags(fold: int | None) -> list[str]:
    """The tags that name a job's fold (``fold=<k>``); none without folds."""
    return [] if fold is None else [f"fold={fold}"]
