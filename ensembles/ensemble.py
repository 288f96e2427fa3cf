"""``./run.sh ensemble runs=[<run>,...] [normalize=rank|zscore] [weights=grid|uniform|crossfit]``.

The saved per-item scores (``scores.npz``) of finished runs, deep or GBDT, are normalized within
each QG (`ensembles.score_fusion`) and mixed with one weight per run:

- ``weights=grid``: every vector of multiples of ``step`` summing to 1 (members may get 0) is
  scored on NDCG@5 of the labeled vali QGs, and the best is kept (a tie goes to the most even
  mix). Test never enters the choice; it is scored once, with the chosen weights;
- ``weights=uniform``: the plain average, e.g. the seed ensemble DASALC-ens of Qin et al. (2021):
  3-5 runs of one configuration that differ in their seed;
- ``weights=crossfit``: the grid chosen fold by fold over the labeled vali QGs
  (``crossfit_folds``), reporting the cross-fitted vali NDCG@5 (`ensembles.weighting`); with
  ``normalize=rank`` it is the sweep model ``stack:<model>,<model>,...``.

Members must come from the ensemble's data (name, files; each has its own transform) and the
same vali and test QGs (their ``scores.npz`` holds the QG offsets and qids), and must have seen
the same labels: the same label setting, and the same seed unless the setting labels every QG
(fraction 1, no binary feedback), for labels drawn with other seeds would enlarge the label
budget. The run directory gets ``report.json`` (metrics, chosen weights, every weight vector's
vali score, the members), ``scores.npz`` and ``DONE``; a finished run with the same settings is
skipped. ``scores.npz`` also mixes the members' scores on every train item with the chosen
weights when every member kept them, so that an ensemble can teach (`data.teachers`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from scarce_ltr.core.bundle import bundle_files, bundle_folder, bundle_path
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.families import ScoringContext
from scarce_ltr.core.run_config import without_free_keys
from scarce_ltr.core.runs import Outcome, Run, read_report, run_model
from scarce_ltr.data.bundling import write_run_bundle
from scarce_ltr.data.evaluation import (
    evaluation_report,
    read_train_scores,
    save_scores,
    selection_rule,
    write_trials,
)
from scarce_ltr.data.pipeline import PreparedData, prepare_data, require_labeled_vali
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.teachers import aligned_train_scores, check_scored_run
from scarce_ltr.data.transforms import FeatureTransform
from scarce_ltr.ensembles.config import EnsembleConfig
from scarce_ltr.ensembles.score_fusion import NORMALIZERS, mix
from scarce_ltr.ensembles.weighting import choose_weights
from scarce_ltr.models.names import model_group

SCORES = "scores.npz"
BUNDLE_KIND = "ensemble"  # member bundles and their weights
_SPLIT_KEYS = ("vali_offsets", "test_offsets", "vali_qids", "test_qids")


@dataclass(frozen=True)
class Member:
    run: str  # as given
    model: str  # as sweeps and reports name it
    group: str
    vali: np.ndarray  # [n_vali_items] scores
    test: np.ndarray  # [n_test_items] scores
    train: np.ndarray | None = None  # [n_train_items] scores; None from a run that kept none


def main(cfg: EnsembleConfig, run: Run) -> Outcome:
    """Mix the members' scores, choose the weights on vali, evaluate on test, finish ``run``."""
    _check_distinct(cfg.runs)
    for member in cfg.runs:  # before loading any data: a mismatch is named at once
        check_member(member, cfg)
    prepared = prepare_data(cfg, missing="keep")  # the members' scores, not features
    require_labeled_vali(prepared)
    members = [load_member(member, prepared) for member in cfg.runs]
    normalize = NORMALIZERS[cfg.normalize]
    vali = np.stack([normalize(m.vali, prepared.vali.offsets) for m in members])
    test = np.stack([normalize(m.test, prepared.test.offsets) for m in members])
    choice = choose_weights(cfg, prepared, vali)
    weights = choice.weights
    run.open_tracker(asdict(cfg))
    vali_scores, test_scores = choice.vali_scores, mix(test, weights)
    train_scores = _train_mix(members, weights, normalize, prepared.train.offsets)
    save_scores(run.folder, prepared, vali_scores, test_scores, train=train_scores)
    if choice.per_trial is not None:
        write_trials(run.folder, prepared, list(choice.per_trial))
    metrics = evaluation_report(prepared, vali_scores, test_scores, cfg.metrics)
    metrics["vali"] |= choice.vali_extra
    report = {
        "method": run.identity.model,
        "metrics": metrics,
        "weights": {m.run: float(w) for m, w in zip(members, weights, strict=True)},
        "normalize": cfg.normalize,
        "weighting": cfg.weights,
        "selection": selection_rule(cfg.metrics),
        "tried": choice.tried,
        **choice.report,
        "members": [{"run": m.run, "model": m.model, "group": m.group} for m in members],
        "runs": [str(Path(m.run).resolve()) for m in members],
        "identity": _identity(cfg),
    }
    pairs = enumerate(zip(members, weights, strict=True))
    named = {f"{i}:{m.model}": float(w) for i, (m, w) in pairs}  # seed ensembles repeat names
    summary = {"metrics": report["metrics"], "weights": named, "method": run.identity.model}
    _write_bundle(run, prepared, report["metrics"], cfg, weights)
    return Outcome(report, summary)


def _train_mix(members: list[Member], weights, normalize, offsets) -> np.ndarray | None:
    """The members' train scores mixed like vali and test, so that the ensemble can be a
    teacher; None when a member kept no train scores (a run made before they were kept)."""
    if any(m.train is None for m in members):
        return None
    return mix(np.stack([normalize(m.train, offsets) for m in members]), weights)


def _write_bundle(run: Run, prepared: PreparedData, metrics: dict, cfg, weights) -> None:
    """The members' bundles, nested, with the normalization and the weights; none (with a
    warning) when a member has no bundle (a run made before bundles existed)."""
    files: dict[str, bytes] = {}
    members = []
    for i, member in enumerate(cfg.runs):
        try:
            folder = bundle_folder(member)
        except UserError as exc:
            print(f"warning: no bundle for this ensemble: {exc}", file=sys.stderr)
            return
        files |= bundle_files(folder, f"members/{i}/")
        members.append(f"members/{i}")
    description = {
        "kind": BUNDLE_KIND,
        "members": members,
        "weights": [float(w) for w in weights],
        "normalize": cfg.normalize,
    }
    write_run_bundle(run, prepared, metrics, description, files)


class EnsembleScorer:
    """An ensemble bundle's model (`ModelFamily.scorer`): its member bundles, each loaded by
    ``context.load_bundle`` (whatever their kind), mixed per QG as `_write_bundle` says."""

    def __init__(self, folder: Path, info: dict, context: ScoringContext) -> None:
        if info["normalize"] not in NORMALIZERS:
            raise UserError(f"{folder}: unknown normalization {info['normalize']!r}")
        members, weights = info.get("members"), info.get("weights")
        if not isinstance(members, list) or not isinstance(weights, list) or not members:
            raise UserError(f"{folder}: an ensemble needs lists of members and weights")
        if len(weights) != len(members):
            raise UserError(f"{folder}: {len(weights)} weights for {len(members)} members")
        try:
            self.weights = np.asarray(weights, dtype=np.float64)
        except (TypeError, ValueError):
            raise UserError(f"{folder}: the ensemble's weights are not numbers") from None
        if self.weights.ndim != 1 or not np.isfinite(self.weights).all():
            raise UserError(f"{folder}: the ensemble's weights are not finite numbers")
        # Inside the bundle and never the bundle itself: a member cannot hold its ensemble.
        self.members = [
            context.load_bundle(bundle_path(folder, member, "an ensemble member"))
            for member in members
        ]
        self.normalize = NORMALIZERS[info["normalize"]]

    def score(self, raw: RankingSplit, transform: FeatureTransform) -> np.ndarray:
        # Each member applies its own fitted transform to the raw features (a DASALC member
        # its log1p, a member of another family its own).
        scores = [self.normalize(m.score_split(raw), raw.offsets) for m in self.members]
        return mix(np.stack(scores), self.weights)


def check_member(run: str, cfg: EnsembleConfig) -> None:
    """Stop unless ``run`` finished with saved scores on the ensemble's data and labels."""
    check_scored_run(
        run,
        cfg,
        key="runs",
        role="an ensemble takes",
        who="this ensemble",
        use="mixing them",
        remedy="for a seed ensemble, fix the labels: run every member and the ensemble with the "
        "same scarcity.seed=<n>",
    )


def load_member(run: str, prepared: PreparedData) -> Member:
    """A checked run's scores (on the ensemble's vali and test QGs) and model name."""
    path = Path(run)
    vali, test = _read_scores(run, path / SCORES, prepared)
    model, group = _name(run, path)
    train = _read_train(run, path / SCORES, prepared)
    return Member(run=run, model=model, group=group, vali=vali, test=test, train=train)


def _read_scores(run: str, path: Path, prepared: PreparedData) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as stored:
            arrays = {k: stored[k] for k in ("vali", "test", *_SPLIT_KEYS)}
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"runs: {run}: {path.name} is not a scores file ({exc})") from None
    for split in ("vali", "test"):
        mine = getattr(prepared, split)
        same = np.array_equal(arrays[f"{split}_offsets"], mine.offsets) and np.array_equal(
            arrays[f"{split}_qids"], mine.qids
        )
        if not same or len(arrays[split]) != mine.n_items:
            raise UserError(
                f"runs: {run}: its {split} scores belong to other {split} QGs than this "
                "ensemble's data (another data set, split or file)"
            )
        if not np.isfinite(arrays[split]).all():
            raise UserError(f"runs: {run}: its {split} scores are not all finite")
    return arrays["vali"], arrays["test"]


def _read_train(run: str, path: Path, prepared: PreparedData) -> np.ndarray | None:
    """A member's scores on every train item, or None where its run kept none."""
    stored = read_train_scores(path)
    if stored is None:
        return None
    return aligned_train_scores(run, stored, prepared, key="runs", who="this ensemble's")


def _name(run: str, path: Path) -> tuple[str, str]:
    report, model = read_report(path), run_model(path)
    if report is None or model is None:
        raise UserError(f"runs: {run}: no readable report.json")
    return model, str(report.get("group") or model_group(model, strict=False))


def _check_distinct(runs: list[str]) -> None:
    seen: dict[Path, str] = {}
    for run in runs:
        key = Path(run).resolve()
        if key in seen:
            raise UserError(f"runs: {run} is listed twice (also as {seen[key]})")
        seen[key] = run


def _identity(cfg: EnsembleConfig) -> str:
    """The ensemble's settings as one JSON string, kept in its report (its members resolved)."""
    settings = without_free_keys(asdict(cfg))
    settings.pop("epochs")  # an ensemble trains nothing
    settings["runs"] = [str(Path(r).resolve()) for r in cfg.runs]
    return json.dumps(settings, sort_keys=True, default=str)
