"""scarce-ltr: learning to rank when labels are scarce (Hou et al., 2024).

The repository root is this package (``pyproject.toml`` maps ``scarce_ltr`` to it), so its
folders are the subpackages: ``scarce_ltr.core`` (shared basics), ``.data``, ``.pretrain``,
``.finetune``, ``.baselines``, ``.ensembles``, ``.serving``, ``.sweeps`` and the command line
``.cli``.
docs/architecture.md says what each may import.
"""

from __future__ import annotations

import os

# OpenMP threads spin while they wait by default; on cores other processes share, that makes
# runs 2-3x slower (benchmarks/LOG.md, "Thread settings in the package"). The OpenMP runtime reads
# the policy once, when torch or LightGBM load it, so it is set here, before any part of the
# package imports them; a value the user set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

from importlib.metadata import PackageNotFoundError, version  # noqa: E402
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scarce_ltr.serving.ranker import BundledRanker

try:
    __version__ = version("scarce-ltr")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"


def load_ranker(run_or_bundle: str | Path) -> BundledRanker:
    """The trained ranker of a finished run: ``scarce_ltr.load_ranker(run).predict(X, qids)``.
    The import happens here, so that ``import scarce_ltr`` stays light."""
    from scarce_ltr.serving.ranker import load_ranker as load

    return load(run_or_bundle)


_ESTIMATORS = ("PretrainedRanker", "TreeRanker", "PretrainedEncoder", "load_estimator")


def __getattr__(name: str):
    """``scarce_ltr.PretrainedRanker`` and the other estimators of `scarce_ltr.api`, imported on
    first use (they import every stage)."""
    if name in _ESTIMATORS:
        from scarce_ltr import api

        return getattr(api, name)
    raise AttributeError(f"module 'scarce_ltr' has no attribute {name!r}")
