"""``./run.sh baseline gbdt|gbdt-pseudo|gbdt-pca|gbdt-pca-pseudo``: LightGBM LambdaMART baselines.

- ``gbdt``: trained on the labeled train QGs of the scarcity setting only;
- ``gbdt-pseudo``: that model pseudo-labels the unlabeled train QGs (31 levels, see
  `trees.lightgbm.semi_supervised`), then a new grid is trained on labeled + pseudo-labeled QGs;
- ``gbdt-pca``: the first k components of a PCA of all train features are appended to the
  train, vali and test features, k in ``gbdt.pca_components`` ({5, 10, 15});
- ``gbdt-pca-pseudo``: PCA features, then pseudo-labeling, for every k;
- ``gbdt.teacher=<run dir>`` (the pseudo variants): a finished run's scores on the unlabeled train
  QGs (`data.teachers`; a deep ranker, an ensemble, another tree) are binned instead of those of
  the GBDT of the labeled QGs, which is then not trained; the run is named
  ``gbdt-pseudo~<teacher model>``.

Every choice (grid point, number of rounds, k, the pseudo-labeling teacher) is made on NDCG@5 of
the labeled vali QGs (``scarcity.val``); test is scored once, by the chosen model, through
`data.evaluation`. The run directory gets ``report.json``, ``scores.npz``, ``model.txt`` (the
chosen booster), ``pca.npz`` (PCA variants) and ``DONE``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.progress import progress_bar
from scarce_ltr.core.runs import Outcome, Run, run_model
from scarce_ltr.core.tracking import Tracker
from scarce_ltr.data.evaluation import vali_selection_scores
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import RankingSplit, rows_of_groups
from scarce_ltr.data.teachers import (
    no_teacher,
    pseudo_labels,
    teacher_train_scores,
    with_pseudo_labels,
)
from scarce_ltr.search.studies import StudyStore
from scarce_ltr.trees.fitted import Bundle, FittedTrees
from scarce_ltr.trees.lightgbm.config import (
    LIGHTGBM_METHODS,
    PCA_METHODS,
    PSEUDO_METHODS,
    GBDTOptions,
)
from scarce_ltr.trees.lightgbm.fitted import (
    Features,
    LightGBMOutcome,
    fitted_lightgbm,
    save_chosen,
    with_pca,
)
from scarce_ltr.trees.lightgbm.grid import (
    GridOutcome,
    LightGBMBackend,
    PointResult,
    run_search,
    search_fits,
)
from scarce_ltr.trees.lightgbm.lightgbm_ranker import (
    BoosterOptions,
    Fit,
    RankingData,
    check_labels,
    min_data_cap,
)
from scarce_ltr.trees.tree_fit import prepare_tree_splits, tree_study
from scarce_ltr.trees.tree_run import (
    TreeRunConfig,
    prepare_tree_data,
    search_store,
    section_of,
    tree_report,
    write_tree_run,
)

# A LightGBM run keeps its booster beside report.json too (tools and tests read it there).
KEPT_FILES = ("model.txt",)


@dataclass(frozen=True)
class Variant:
    pca: bool
    pseudo: bool


@dataclass
class Candidate:
    """The outcome of one feature set (one PCA size, or none)."""

    k: int  # PCA components appended; 0 for none
    outcome: GridOutcome  # the final model's grid (the student's when pseudo-labeling)
    teacher: GridOutcome | None = None
    pseudo: dict | None = None  # what the pseudo-labels look like


@dataclass(frozen=True)
class RunTeacher:
    """``gbdt.teacher``: a finished run and its scores on every train item."""

    run: str
    model: str
    scores: np.ndarray  # [n_train_items]


def main(cfg: TreeRunConfig, run: Run) -> Outcome:
    """The data set of ``cfg``, `fit_prepared`, then the run: vali and test scored once by the
    chosen model, the run directory written."""
    start = time.perf_counter()
    _check_method(cfg)
    prepared = prepare_lightgbm_data(cfg)
    tracker = run.open_tracker(asdict(cfg))
    study = search_store(gbdt_of(cfg), run, "gbdt")
    fitted = fit_prepared(cfg, prepared, tracker=tracker, study=study)
    outcome: LightGBMOutcome = fitted.outcome
    scores = save_chosen(run, fitted)
    report = _report(cfg, prepared, outcome.backend, outcome.candidates, outcome.chosen, scores)
    if (teacher := outcome.teacher) is not None:
        report["teacher"] = {"run": str(Path(teacher.run).resolve()), "model": teacher.model}
    log_rounds(tracker, report["rounds_vali_ndcg@5"])
    return write_tree_run(run, prepared, report, fitted.bundle(), keep=KEPT_FILES, start=start)


def fit(
    cfg: TreeRunConfig,
    splits: Mapping[str, RankingSplit],
    *,
    labeled: np.ndarray | None = None,
    run: Run | None = None,
) -> FittedTrees:
    """`main`'s search on in-memory splits (`baselines.run.fit`); ``gbdt.teacher`` still names
    a finished run (its train scores are read from its folder)."""
    _check_method(cfg)
    check_rounds(cfg)
    prepared = prepare_tree_splits(cfg, splits, labeled, check_labels)
    study = tree_study(gbdt_of(cfg), run, "gbdt")
    return fit_prepared(cfg, prepared, tracker=Tracker(), study=study)


def fit_prepared(
    cfg: TreeRunConfig, prepared: PreparedData, *, tracker: Tracker, study: StudyStore | None
) -> FittedTrees:
    """Every candidate's search (one per PCA size; with pseudo-labels, the teacher's, then
    the student's), each fit logged to ``tracker``; the vali-best of them all."""
    variant = VARIANTS[cfg.method]
    teacher = _run_teacher(cfg, prepared)
    ks = list(dict.fromkeys(gbdt_of(cfg).pca_components)) if variant.pca else []
    features = Features(prepared, ks, seed=cfg.seed)
    training = BoosterOptions.from_config(cfg)
    backend = LightGBMBackend(gbdt_of(cfg), training)
    fit_args = (training, variant, tracker, teacher)
    candidates = _fit_all(cfg, prepared, features, ks or [0], *fit_args, study=study)

    def bundle(chosen: Candidate) -> Bundle:
        return with_pca(backend.bundle(chosen.outcome.best_fit), features.pca, chosen.k)

    return fitted_lightgbm(
        cfg, prepared, backend, features, candidates, bundle=bundle, teacher=teacher
    )


def gbdt_of(cfg: TreeRunConfig) -> GBDTOptions:
    """``cfg.gbdt``: the LightGBM methods take the baselines' config as the pipeline's
    `TreeRunConfig` (that config, a layer above, imports their options) and read their section
    through this."""
    return section_of(cfg, GBDTOptions)


def _check_method(cfg: TreeRunConfig) -> None:
    if cfg.method not in VARIANTS:
        raise UserError(f"'{cfg.method}' is not a GBDT baseline; known: {', '.join(VARIANTS)}")


def log_rounds(tracker: Tracker, curve: list[float]) -> None:
    """The chosen model's vali NDCG@5 after each boosting round, as a W&B curve."""
    for i, value in enumerate(curve):
        tracker.log({"round/index": i + 1, "round/vali_ndcg@5": value})


def _run_teacher(cfg: TreeRunConfig, prepared: PreparedData) -> RunTeacher | None:
    """``gbdt.teacher``'s train scores, checked against this run's data and labels."""
    if no_teacher(gbdt_of(cfg).teacher):
        return None
    path = gbdt_of(cfg).teacher
    scores = teacher_train_scores(path, cfg, prepared, key="gbdt.teacher")
    return RunTeacher(run=path, model=run_model(path) or Path(path).name, scores=scores)


def prepare_lightgbm_data(cfg: TreeRunConfig) -> PreparedData:
    """The tree pipeline's prepared data, once ``epochs`` is known to leave a boosting round."""
    check_rounds(cfg)
    return prepare_tree_data(cfg, check_labels)


def check_rounds(cfg: TreeRunConfig) -> None:
    if gbdt_of(cfg).rounds(cfg.epochs) < 1:
        raise UserError(f"epochs={cfg.epochs} leaves the GBDT no boosting round")


def _fit_all(
    cfg: TreeRunConfig,
    prepared: PreparedData,
    features: Features,
    ks: list[int],
    training: BoosterOptions,
    variant: Variant,
    tracker: Tracker,
    teacher: RunTeacher | None = None,
    *,
    study: StudyStore | None = None,
) -> list[Candidate]:
    """One candidate per PCA size (``[0]``: none), each chosen on vali within its feature set;
    ``study``: where an Optuna search keeps its studies (one per search: ``<name>/pca=<k>``,
    ``.../pseudo``)."""
    with progress_bar(
        total=_total_fits(cfg, prepared, variant, len(ks), teacher), desc=cfg.method, unit="fit"
    ) as progress:

        def on_point(result: PointResult) -> None:
            tracker.log({"grid": result.as_dict()}, step=progress.n)
            progress.update()

        args = (training, variant, on_point, teacher)
        return [_fit_features(cfg, prepared, features, k, *args, study=study) for k in ks]


def _fit_features(
    cfg: TreeRunConfig,
    prepared: PreparedData,
    features: Features,
    k: int,
    training: BoosterOptions,
    variant: Variant,
    on_point: Callable[[PointResult], None],
    teacher: RunTeacher | None = None,
    *,
    study: StudyStore | None = None,
) -> Candidate:
    """The grid on one feature set; with pseudo-labeling, the teacher's grid (none with a run as
    ``teacher``), then the student's."""
    train, vali = features.split("train", k), features.split("vali", k)
    labels = prepared.labels
    labeled_vali = vali.subset(np.flatnonzero(labels.vali_labeled))

    def score_vali(model: Fit) -> tuple[float, np.ndarray]:
        scores = model.predict(vali.features, num_threads=training.num_threads)
        return vali_selection_scores(prepared, scores, cfg.metrics)

    grid = dict(training=training, score_vali=score_vali, pca_components=k, on_point=on_point)
    unlabeled = rows_of_groups(train.offsets, np.flatnonzero(~labels.train_labeled))
    if teacher is not None and len(unlabeled):
        outcome = None  # the run teaches: no GBDT of the labeled QGs
        scores = teacher.scores[unlabeled]
    else:
        data = RankingData(
            train=train.subset(np.flatnonzero(labels.train_labeled)),
            vali=labeled_vali,
            num_threads=training.num_threads,
            params=training.params,
        )
        labeled = _part(study, k, "")
        outcome = run_search(gbdt_of(cfg), data=data, phase="labeled", study=labeled, **grid)
        if not variant.pseudo:
            return Candidate(k=k, outcome=outcome)
        if labels.train_labeled.all():
            print(
                f"{cfg.method}: every train QG is labeled; nothing to pseudo-label", file=sys.stderr
            )
            return Candidate(k=k, outcome=outcome, teacher=outcome, pseudo={"n_items": 0})
        del data  # the teacher's LightGBM datasets
        scores = outcome.best_fit.predict(
            train.features[unlabeled], num_threads=gbdt_of(cfg).num_threads
        )
    student_train, pseudo = _pseudo_labeled(cfg, train, labels.train_labeled, scores)
    data = RankingData(
        train=student_train,
        vali=labeled_vali,
        num_threads=training.num_threads,
        params=training.params,
    )
    pseudo_study = _part(study, k, "pseudo")
    student = run_search(gbdt_of(cfg), data=data, phase="pseudo", study=pseudo_study, **grid)
    return Candidate(k=k, outcome=student, teacher=outcome, pseudo=pseudo)


def _pseudo_labeled(
    cfg: TreeRunConfig, train: RankingSplit, labeled: np.ndarray, scores: np.ndarray
) -> tuple[RankingSplit, dict]:
    """Every train QG, the unlabeled ones with the levels of the teacher's ``scores`` (of their
    items, in train order); a summary of the levels."""
    unlabeled = np.flatnonzero(~labeled)
    options = gbdt_of(cfg)
    levels = pseudo_labels(scores, levels=options.pseudo_levels, binning=options.pseudo_binning)
    counts = np.bincount(levels.astype(np.int64), minlength=options.pseudo_levels)
    summary = {"n_items": len(levels), "n_groups": len(unlabeled), "level_counts": counts.tolist()}
    return with_pseudo_labels(train, labeled, levels), summary


def _part(study: StudyStore | None, k: int, phase: str) -> StudyStore | None:
    """The study of one search of the run: its feature set (``pca=<k>``) and phase."""
    if study is None:
        return None
    return study.part("/".join(([f"pca={k}"] if k else []) + ([phase] if phase else [])))


def _total_fits(
    cfg: TreeRunConfig,
    prepared: PreparedData,
    variant: Variant,
    n_feature_sets: int,
    teacher: RunTeacher | None = None,
) -> int:
    labeled = prepared.labels.labeled_train().n_items
    everything = prepared.labels.train_labeled.all()
    per_set = (
        0
        if teacher is not None and not everything
        else search_fits(gbdt_of(cfg), min_data_cap(labeled))
    )
    if variant.pseudo and not everything:
        per_set += search_fits(gbdt_of(cfg), min_data_cap(prepared.train.n_items))
    return per_set * n_feature_sets


def _report(
    cfg: TreeRunConfig,
    prepared: PreparedData,
    backend: LightGBMBackend,
    candidates: list[Candidate],
    chosen: Candidate,
    scores: tuple[np.ndarray, np.ndarray],
) -> dict:
    best = chosen.outcome.best_result
    model = chosen.outcome.best_fit
    return tree_report(
        cfg,
        prepared,
        scores,
        selected=best.as_dict(),
        trials=("grid", [result.as_dict() for c in candidates for result in _all(c)]),
        n_features=prepared.n_features + chosen.k,
        n_trees=best.best_rounds,
        seconds_fitting=sum(r.seconds for c in candidates for r in _all(c)),
        search=gbdt_of(cfg).search,
        teacher=chosen.teacher.best_result.as_dict() if chosen.teacher else None,
        pseudo_labels=chosen.pseudo,
        **{"rounds_vali_ndcg@5": model.vali_curve},  # LightGBM's per-round vali NDCG@5
        objective=best.choices.get("objective", gbdt_of(cfg).objective),
        n_leaves=int(sum(t["num_leaves"] for t in _trees(model))),
        **backend.describe(),
    )


def _trees(model: Fit) -> list[dict]:
    return model.booster.dump_model(num_iteration=model.best_rounds)["tree_info"]


def _all(candidate: Candidate) -> Iterator[PointResult]:
    """Every grid point of a candidate: the teacher's, then the final model's."""
    if candidate.teacher is not None and candidate.teacher is not candidate.outcome:
        yield from candidate.teacher.results
    yield from candidate.outcome.results


# Command-line name -> what the method adds to the plain GBDT.
# gbdt-optuna: gbdt with configs/baseline/gbdt-optuna.yaml's search
VARIANTS: dict[str, Variant] = {
    method: Variant(pca=method in PCA_METHODS, pseudo=method in PSEUDO_METHODS)
    for method in LIGHTGBM_METHODS
}
