"""The tree pipeline on in-memory splits (`scarce_ltr.baselines.run.fit`): the splits prepared
as `trees.tree_run.prepare_tree_data` prepares a data set's (`prepare_tree_splits`, NaN
refused where a run refuses it), a search's study kept in storage without a run folder
(`tree_study`), and a searched backend's vali-best fit (`fit_tree_backend`: CatBoost, XGBoost;
the LightGBM baselines search their candidates in `trees.lightgbm.train` and
`trees.lightgbm.hybrid.train` with the first two).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.runs import Outcome, Run
from scarce_ltr.data.pipeline import _DETECTOR_SPLITS, PreparedData, prepare_splits
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.search.studies import StudyStore
from scarce_ltr.trees.fitted import FittedTrees
from scarce_ltr.trees.tree_run import (
    TreeBackend,
    TreeRunConfig,
    checked_tree_data,
    fit_backend,
    run_tree_backend,
    search_store,
    section_of,
)


def prepare_tree_splits(
    cfg: TreeRunConfig,
    splits: Mapping[str, RankingSplit],
    labeled: np.ndarray | None,
    check_labels: Callable[[RankingSplit, str], None],
) -> PreparedData:
    """In-memory raw splits (``train``, ``vali``, ``test`` optional) as `prepare_tree_data`
    prepares a data set's, ``labeled`` (``[n_train_groups]`` bool; None: ``cfg.scarcity``'s
    draw) the labeled train QGs; NaN refused where `prepare_tree_data` refuses it."""
    refuse_missing(cfg, splits)
    return checked_tree_data(prepare_splits(cfg, splits, labeled=labeled), check_labels)


def refuse_missing(cfg: TreeRunConfig, splits: Mapping[str, RankingSplit]) -> None:
    """`data.pipeline.check_missing` for in-memory splits: a NaN feature is refused unless the
    trees split on it, and where the outlier detector measures it (only with a ``test`` split:
    without one no QG is an outlier)."""
    method = cfg.data.outliers.method
    # the splits each detector measures: data.pipeline's one table (`check_missing` reads it)
    measured = _DETECTOR_SPLITS.get(method, ()) if "test" in splits else ()
    for name, split in splits.items():
        bad = np.isnan(np.asarray(split.features, dtype=np.float32))
        if not bad.any():
            continue
        row, column = (int(i[0]) for i in np.nonzero(bad))
        found = f"data: {name} has a missing value (NaN) at item {row}, feature {column}"
        if not cfg.keeps_missing:
            raise ValueError(
                f"{found}; {cfg.method} needs every value (fill them in, or use a tree that "
                f"splits on NaN: {', '.join(cfg.nan_trees)})"
            )
        if name in measured:
            raise ValueError(
                f"{found}; data.outliers.method={method} measures every value of the "
                f"{' and '.join(measured)} features: give data.outliers.method=none (or qids), "
                "or fill the missing values in"
            )


def tree_study(options: Any, run: Run | None, section: str) -> StudyStore | None:
    """`search_store` of an in-memory fit: the run's when ``run`` is given; else a study kept
    in storage is named by ``<section>.study_name`` (a run folder names it by default) and owned
    by the in-memory fits, so that a fit of that name again continues it as a run's rerun
    does (`search.studies`)."""
    if run is not None:
        return search_store(options, run, section)
    if not options.storage:
        return None
    if not options.study_name:
        raise UserError(
            f"{section}.storage: a stored study is named after its run folder; give "
            f"{section}.study_name=<name>, or run= (or run ./run.sh baseline)"
        )
    key = f"{section}.storage"
    return StudyStore(options.storage, options.study_name, owner=IN_MEMORY, key=key)


IN_MEMORY = "an in-memory fit"  # the owner of a stored study that no run folder owns


def fit_tree_backend(
    cfg: TreeRunConfig,
    splits: Mapping[str, RankingSplit],
    backend: TreeBackend,
    strategy: str,
    *,
    labeled: np.ndarray | None,
    run: Run | None,
) -> FittedTrees:
    """`fit_backend` on in-memory splits (see `prepare_tree_splits`); no file written unless
    ``run`` is given (a study kept in storage is named after it)."""
    prepared = prepare_tree_splits(cfg, splits, labeled, backend.check_labels)
    study = tree_study(backend.options, run, backend.options.section)
    return fit_backend(cfg, prepared, backend, strategy, study=study)


def tree_entry_points(options_type: type, backend_type: Callable[..., TreeBackend], module: str):
    """Tree backend ``module``'s ``main(cfg, run)`` and ``fit(cfg, splits, *, labeled, run)``:
    its options read from the config's section (`section_of`), its backend built from them
    with the run's seed and epochs, and the tree pipeline run on a run folder
    (`run_tree_backend`: train, select on vali, evaluate once on test) or on in-memory splits
    (`fit_tree_backend`: the vali-best model, `baselines.run.fit`). Both are named as the
    module's own (``main, fit = tree_entry_points(..., __name__)``), so that pickle finds them
    there by reference, as a Ray task or a child process needs."""

    def backend_of(cfg: TreeRunConfig) -> tuple[TreeBackend, str]:
        options = section_of(cfg, options_type)
        return backend_type(options, seed=cfg.seed, epochs=cfg.epochs), options.search

    def main(cfg: TreeRunConfig, run: Run) -> Outcome:
        return run_tree_backend(cfg, run, *backend_of(cfg))

    def fit(
        cfg: TreeRunConfig,
        splits: Mapping[str, RankingSplit],
        *,
        labeled: np.ndarray | None = None,
        run: Run | None = None,
    ) -> FittedTrees:
        backend, strategy = backend_of(cfg)
        return fit_tree_backend(cfg, splits, backend, strategy, labeled=labeled, run=run)

    for function in (main, fit):
        function.__module__, function.__qualname__ = module, function.__name__
    return main, fit
