"""The one tree pipeline: a tree backend searched on vali, test scored once, the run written.

A backend (`TreeBackend`: LightGBM in `trees.lightgbm.search`, CatBoost, XGBoost) knows its
labels, its search space, one early-stopped fit, its predictions and its model files. This
module does the rest the same way for every backend:

- `prepare_tree_data`: the data and the checks every tree run makes (`trees.tree_fit`:
  the same of in-memory splits, with the labeled train QGs given as a mask);
- `search`: the run's search strategy (`search.strategies.SEARCHES`: ``optuna`` and every
  strategy drawing from a backend's space for every backend, ``paper-grid`` for a backend
  with a ``grid()``: LightGBM's), each fit scored with the project's NDCG@5 of the labeled
  vali QGs;
- `tree_report`: the ``report.json`` keys every tree run shares, written here only;
- `write_tree_run`: the bundle and the model files kept beside ``report.json``; it hands back
  the run's `Outcome` (`tree_outcome`), with which the command line writes ``report.json`` and
  ``DONE``.

`fit_backend` searches a backend on one feature set (CatBoost, XGBoost) and returns the
vali-best fit as a `trees.fitted.FittedTrees`, in memory;
`trees.tree_fit.fit_tree_backend` does so on in-memory splits
(`scarce_ltr.baselines.run.fit`), `run_tree_backend` on the data set of a run's config and
writes the run from the same object. LightGBM's own extras, more feature sets
(PCA) and a second search on pseudo-labels (`trees.lightgbm.train`) or on encoder embeddings
(`trees.lightgbm.hybrid.train`), run the same steps once per candidate and choose among the
candidates on vali.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import atomic_write_bytes
from scarce_ltr.core.runs import Outcome, Run
from scarce_ltr.data.bundling import write_run_bundle
from scarce_ltr.data.evaluation import (
    evaluation_report,
    save_scores,
    selection_rule,
    vali_selection_scores,
    write_trials,
)
from scarce_ltr.data.pipeline import (
    PreparedData,
    prepare_data,
    require_labeled_vali,
    require_relevant_labels,
)
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.search.strategies import SEARCHES
from scarce_ltr.search.studies import StudyStore
from scarce_ltr.search.trials import Searchable, SearchOutcome, TrainTrial, TrialResult
from scarce_ltr.trees.fitted import Bundle, FittedTrees


@dataclass(frozen=True)
class TreeRunConfig(CommonConfig):
    """What the pipeline reads of a baseline's config: the common keys, ``method``, and whether
    its trees take NaN. `baselines.config.BaselineConfig` extends it: that config imports the
    backends for their sections and they import this module, so the pipeline and the backends'
    ``main`` name their config by this base (a backend reads its own section through
    `section_of`) and never import the config."""

    method: str = "gbdt"

    @property
    def keeps_missing(self) -> bool:
        """Whether this method's trees take NaN as a missing value (`BaselineConfig` says)."""
        return False

    @property
    def nan_trees(self) -> tuple[str, ...]:
        """The methods whose trees take NaN as a missing value, for messages: `BaselineConfig`
        derives them from the registered backends, a layer above this module."""
        return ()


class SectionOptions(Protocol):
    """A tree method's options: a section of the baselines' config, named by ``section``
    (`SearchOptions`, LightGBM's `GBDTOptions`, gbdt-ssl's `EmbeddingOptions`)."""

    section: ClassVar[str]


Section = TypeVar("Section", bound=SectionOptions)


def section_of(cfg: TreeRunConfig, options: type[Section]) -> Section:
    """A tree method's section of ``cfg``: the field named by its options' ``section``
    (`BaselineConfig` holds one per backend, ``cfg.xgboost``). A backend's ``main`` takes its
    config as a `TreeRunConfig` and reads its own keys through this."""
    found = getattr(cfg, options.section, None)
    if not isinstance(found, options):
        kind = type(cfg).__name__
        raise TypeError(f"{kind} holds no {options.section}: section of {options.__name__}")
    return found


Report = Callable[[int, float], None]  # (round, the backend's vali NDCG@5); may raise Pruned


class TreeBackend(Searchable, Protocol):
    """What a tree backend gives the pipeline, beyond what a strategy searches
    (`search.trials.Searchable`: ``name``, ``n_trials``, ``early_stopping_rounds``, ``options``,
    ``suggest``, ``first``). ``grid()`` (the fixed points of the ``paper-grid`` strategy) is
    optional: a backend without one is searched by the strategies that draw trials from
    ``suggest`` (``optuna``, ...). So is ``apart(choices)``, a key per trial: trials of different
    keys never train at once (``<section>.n_jobs``; LightGBM's label gain is process-wide)."""

    def check_labels(self, split: RankingSplit, what: str) -> None: ...

    def fit(
        self, choices: dict, train: RankingSplit, vali: RankingSplit, report: Report | None
    ) -> tuple[Any, int, float]:
        """``(model cut at its vali-best round, trees kept, seconds)``; ``report`` is ``None``
        when no pruner watches the fit (a grid point)."""
        ...

    def predict(self, model: Any, features: np.ndarray) -> np.ndarray:
        """``[n_items]`` float64 scores."""
        ...

    def bundle(self, model: Any) -> Bundle:
        """The model's part of the bundle: its description (``kind``) and files."""
        ...

    def describe(self) -> dict:
        """Report keys of the backend: versions, threads."""
        ...


def prepare_tree_data(
    cfg: TreeRunConfig, check_labels: Callable[[RankingSplit, str], None]
) -> PreparedData:
    """The prepared data of a tree run, after the checks every tree run makes: relevant labels,
    labeled vali QGs, and labels the backend's objective takes (its ``check_labels``); missing
    values (NaN) kept for the trees that split on them (`TreeRunConfig.keeps_missing`), refused
    for the others."""
    prepared = prepare_data(cfg, missing="keep" if cfg.keeps_missing else "raise")
    return checked_tree_data(prepared, check_labels)


def checked_tree_data(
    prepared: PreparedData, check_labels: Callable[[RankingSplit, str], None]
) -> PreparedData:
    """``prepared``, after the checks every tree run makes (see `prepare_tree_data`)."""
    require_relevant_labels(prepared)
    require_labeled_vali(prepared)
    check_labels(prepared.labels.labeled_train(), "train (labeled QGs)")
    check_labels(prepared.labels.labeled_vali(), "vali (labeled QGs)")
    return prepared


def trainer(
    backend: TreeBackend,
    train: Any,
    vali: Any,
    score_vali: Callable[[Any], tuple[float, np.ndarray]],
) -> TrainTrial:
    """One trial of a search: fit the choices, score the model with ``score_vali`` (the
    project's NDCG@5 of the labeled vali QGs, and per QG: `vali_selection_scores`)."""

    def train_trial(choices: dict, report: Report | None) -> tuple:
        model, rounds, seconds = backend.fit(choices, train, vali, report)
        value, per_group = score_vali(model)
        return model, rounds, value, seconds, per_group

    return train_trial


def search(
    backend: TreeBackend,
    strategy: str,
    *,
    seed: int,
    train: TrainTrial,
    on_trial: Callable[[TrialResult], None],
    study: StudyStore | None = None,
) -> SearchOutcome:
    """The vali-best fit of ``strategy`` (a name in `SEARCHES`) for ``backend``; ``study``:
    where its Optuna study is kept (`search.studies`; None: in memory)."""
    chosen = SEARCHES[strategy]  # the name is checked with the config
    if chosen.grid and getattr(backend, "grid", None) is None:
        offered = [name for name, other in SEARCHES.items() if not other.grid]
        offers = ", ".join(offered)
        raise UserError(f"{backend.name} has no search '{strategy}'; it offers {offers}")
    return chosen.search(backend, seed=seed, train=train, on_trial=on_trial, study=study)


def score_and_save(run: Run, fitted: FittedTrees) -> tuple[np.ndarray, np.ndarray]:
    """The chosen model's vali and test scores, saved (``scores.npz``) with its scores on every
    train item (for a later run that takes this one as its teacher), each on the columns the
    model reads (raw features, or with PCA or embedding columns)."""
    vali_scores, test_scores = fitted.scores("vali"), fitted.scores("test")
    train_scores = fitted.scores("train")
    save_scores(run.folder, fitted.prepared, vali_scores, test_scores, train=train_scores)
    return vali_scores, test_scores


def tree_report(
    cfg: TreeRunConfig,
    prepared: PreparedData,
    scores: tuple[np.ndarray, np.ndarray],
    *,
    selected: dict,
    trials: tuple[str, list[dict]],
    n_features: int,
    n_trees: int,
    seconds_fitting: float,
    search: str | None,
    **extra: Any,
) -> dict:
    """The keys every tree run's ``report.json`` shares; ``extra`` are the backend's and the
    variant's. ``trials``: the name of the list (``grid``, ``trials``) and its rows;
    ``search=None`` (the hybrid, which searches several candidates) leaves ``search`` and the
    train sizes out."""
    labels = prepared.labels
    report = {
        "method": cfg.method,
        "metrics": evaluation_report(prepared, *scores, cfg.metrics),
        "selected": selected,
        trials[0]: trials[1],
        "selection": selection_rule(cfg.metrics),
    }
    if search is not None:
        report |= {
            "search": search,
            "n_train_items": prepared.train.n_items,
            "n_train_labeled_items": labels.labeled_train().n_items,
        }
    return report | {
        "n_train_labeled_groups": int(labels.train_labeled.sum()),
        "n_vali_labeled_groups": int(labels.vali_labeled.sum()),
        "n_features": n_features,
        "n_trees": n_trees,
        "seconds_fitting": round(seconds_fitting, 3),
        **extra,
    }


def write_tree_run(
    run: Run, prepared: PreparedData, report: dict, bundle: Bundle, *, keep: tuple = (), start
) -> Outcome:
    """The bundle, the files of it named in ``keep`` also beside ``report.json`` (LightGBM's
    ``model.txt``: tools read it there); the run's outcome."""
    description, files = bundle
    for name in keep:
        atomic_write_bytes(run.folder / name, files[name])
    write_run_bundle(run, prepared, report["metrics"], description, files)
    return tree_outcome(report, start=start)


def tree_outcome(report: dict, *, start: float) -> Outcome:
    """A tree run's report (with its seconds) and its summary, which the run finishes with."""
    report["seconds"] = round(time.perf_counter() - start, 3)
    summary = {k: report[k] for k in ("metrics", "selected", "seconds", "n_trees")}
    return Outcome(report, summary)


def search_store(options: Any, run: Run, section: str) -> StudyStore | None:
    """Where the search of a backend's ``section`` (``options``: its ``storage`` and
    ``study_name``) records its study for ``run`` (its folder and identity name it); None: in
    memory only."""
    return StudyStore.of(options.storage, options.study_name, run, key=f"{section}.storage")


def fit_backend(
    cfg: TreeRunConfig,
    prepared: PreparedData,
    backend: TreeBackend,
    strategy: str,
    *,
    study: StudyStore | None,
    on_trial: Callable[[TrialResult], None] = lambda result: None,
) -> FittedTrees:
    """Search with ``strategy`` on the labeled train QGs of ``prepared``; the vali-best fit
    (its search `outcome` kept for the run's report)."""
    labels = prepared.labels
    train, labeled_vali = labels.labeled_train(), labels.labeled_vali()

    def score_vali(model: Any) -> tuple[float, np.ndarray]:
        scores = backend.predict(model, prepared.vali.features)
        return vali_selection_scores(prepared, scores, cfg.metrics)

    outcome = search(
        backend,
        strategy,
        seed=cfg.seed,
        train=trainer(backend, train, labeled_vali, score_vali),
        on_trial=on_trial,
        study=study,
    )
    model, best = outcome.best_model, outcome.best_result
    return FittedTrees(
        method=cfg.method,
        prepared=prepared,
        predict_matrix=lambda features: backend.predict(model, features),
        bundle=lambda: backend.bundle(model),
        selected=best.as_dict(),
        vali_ndcg=best.vali_ndcg,
        outcome=outcome,
    )


def run_tree_backend(cfg: TreeRunConfig, run: Run, backend: TreeBackend, strategy: str) -> Outcome:
    """The data set of ``cfg``, `fit_backend`, then the run: vali and test scored once,
    the trials, report and bundle written (see the module docstring)."""
    start = time.perf_counter()
    prepared = prepare_tree_data(cfg, backend.check_labels)
    tracker = run.open_tracker(asdict(cfg))
    fitted = fit_backend(
        cfg,
        prepared,
        backend,
        strategy,
        study=search_store(backend.options, run, backend.options.section),
        on_trial=lambda result: tracker.log({"trial": result.as_dict()}),
    )
    outcome = fitted.outcome
    write_trials(run.folder, prepared, [result.vali_per_group for result in outcome.results])
    scores = score_and_save(run, fitted)
    report = tree_report(
        cfg,
        prepared,
        scores,
        selected=fitted.selected,
        trials=("trials", [result.as_dict() for result in outcome.results]),
        n_features=prepared.n_features,
        n_trees=outcome.best_result.rounds,
        seconds_fitting=sum(r.seconds for r in outcome.results),
        search=strategy,
        **backend.describe(),
    )
    return write_tree_run(run, prepared, report, fitted.bundle(), start=start)
