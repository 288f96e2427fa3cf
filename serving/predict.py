"""``./run.sh predict <run> data.path=<file or folder> [out=<file or folder>]``: score new items.

The run's bundle (`scarce_ltr.serving.ranker`) scores every item of a LETOR/SVMlight file (plain
or ``.gz``, with or without ``qid:``, ``.query`` files beside it), or of every split file of a
folder (``train``, ``vali``/``valid``, ``test``). Per file it writes a CSV, one row per item in
file order: ``qid``, ``position`` (0-based, within its QG), ``score``, ``rank`` (1 = the top of its
QG; ties keep file order, as the project's NDCG does). When the file has labels it prints NDCG@k,
ERR@k, MRR and MAP with the project's conventions (`core.metrics`, as training reports them;
ERR's highest grade is ``max_grade``, by default the file's highest label), and their outlier
versions over the QGs that the run's histogram detector (its fitted raw bounds, in the bundle)
names outliers. Files stream through in pieces of whole QGs (`scarce_ltr.data.letor.stream`)
with a progress bar, so memory does not grow with the file's features. The CSV is written
atomically: an error leaves no half file.

Nothing is silent: a label outside the relevance grades ``0..30`` stops the file as training
stops (`check_label_range`, naming file and line) before its CSV is kept (any error leaves no
CSV, a label above ``max_grade=`` too); two inputs that would write one CSV (``test.txt`` and
``test.txt.gz``) are refused; a file narrower than the model gets training's padding warning.
``out=`` is one file when its name ends in ``.csv`` (a table's predictions: ``.parquet`` or ``.pq``
too), else a folder of them: one that exists, a name ending in ``/``, or a new name without a
suffix (said on stderr); a name of another suffix (``scores.txt``) or an existing file of another
kind is refused, never taken as a folder to make. An ``out=`` that is the input file, inside the
bundle or inside a run's own files (`serving.targets`) is refused, and so is a target that is no
regular file (a link, a FIFO, a device: `core.files.refuse_foreign_target`). Temp files of an
earlier, killed predict of the same CSV are removed (those of a predict still writing are locked,
and kept: `remove_stale_temps`). Errors advise ``out=``, the key for where predict writes.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scarce_ltr.core.config_fields import POLICIES
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import atomic_text_writer, refuse_special_input, special_kind
from scarce_ltr.core.metrics import METRICS, evaluate_ranking
from scarce_ltr.core.progress import progress_bar
from scarce_ltr.data.datasets import check_label_range
from scarce_ltr.data.formats import FORMATS, letor, table
from scarce_ltr.data.letor.stream import StreamStats, stream_letor, total_bytes
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.serving.predict_table import predict_table, table_suffix
from scarce_ltr.serving.ranker import BundledRanker, load_ranker, run_folder_of
from scarce_ltr.serving.rows import CSV_HEADER, positions_and_ranks, remove_orphans
from scarce_ltr.serving.targets import refuse_run_files

SPLIT_STEMS = ("train", "vali", "valid", "test")
SUFFIXES = ("", ".txt", ".txt.gz", ".gz")


@dataclass(frozen=True)
class PredictInput:
    path: str | None = None  # a LETOR file, a folder of split files, or a Parquet/.npz table
    qid: str = "qid"  # a table's column of query ids
    label: str = "label"  # a table's column of labels (metrics when present)
    features: list[str] = field(default_factory=list)  # a table's feature columns; []: by name


@dataclass(frozen=True)
class PredictConfig:
    run: str | None = None  # a finished run folder (or its bundle/ folder)
    data: PredictInput = field(default_factory=PredictInput)
    # a .csv (or, for a table, .parquet) file for one input, or a folder (one that exists, a
    # name ending in /, or a new name without a suffix); default <run>/predictions
    out: str | None = None
    ks: list[int] = field(default_factory=lambda: [1, 3, 5, 10])
    policy: str = "skip"  # a QG without a relevant item: skip | one | zero (NDCG convention)
    # ERR@k's highest grade; None: the file's highest label (training uses the data set's)
    max_grade: float | None = None

    def __post_init__(self) -> None:
        if not self.run:
            raise ValueError("predict needs a run: ./run.sh predict <run folder> data.path=<file>")
        if not self.data.path:
            raise ValueError("predict needs data.path=<LETOR file or folder of split files>")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}")
        if not self.ks or min(self.ks) < 1:
            raise ValueError("ks must be a non-empty list of positive integers")
        if self.max_grade is not None and not self.max_grade > 0:
            raise ValueError(f"max_grade must be > 0 (null: the file's), got {self.max_grade}")


def main(cfg: PredictConfig, out_dir: Path | None = None) -> dict:
    """Score every input file; ``{file: {"out": csv, "metrics": {...} or None}}``. The input's
    format is the first of `PREDICTORS` whose `DataFormat.predicts` claims it."""
    ranker = load_ranker(cfg.run)
    source = Path(str(cfg.data.path))
    name = next(name for name in PREDICTORS if FORMATS[name].predicts(source))
    return PREDICTORS[name](cfg, ranker, source)


def _predict_letor(cfg: PredictConfig, ranker: BundledRanker, source: Path) -> dict:
    """A LETOR file, or the split files of a folder: a CSV each (`predict_file`)."""
    inputs = input_files(source)
    targets = output_paths(cfg, ranker, inputs)
    results = {}
    for path, target in zip(inputs, targets, strict=True):
        remove_orphans(target)
        results[str(path)] = predict_file(cfg, ranker, path, target)
        print(f"predictions: {target}", file=sys.stderr)
    return results


def _predict_table(cfg: PredictConfig, ranker: BundledRanker, source: Path) -> dict:
    """A Parquet or ``.npz`` table: its scores beside its qids, Parquet out when Parquet came
    in (`serving.predict_table`); by default in ``<run>/predictions/``."""
    name = source.name.removesuffix(source.suffix) + table_suffix(source)
    target = run_folder_of(ranker) / "predictions" / name
    if cfg.out:
        given, one_file = out_place(cfg.out, TABLE_OUT_SUFFIXES)
        target = given if one_file else given / name
    refuse_target(target, [source], ranker)
    columns = dict(qid=cfg.data.qid, label=cfg.data.label, features=cfg.data.features or None)
    result = predict_table(ranker, source, target, ks=tuple(cfg.ks), policy=cfg.policy, **columns)
    print(f"{source}: {result['n_items']} items" + _shown(cfg, result["metrics"]))
    print(f"predictions: {target}", file=sys.stderr)
    return {str(source): {"out": str(target), "metrics": result["metrics"]}}


def predict_file(cfg: PredictConfig, ranker: BundledRanker, path: Path, target: Path) -> dict:
    """Stream ``path`` through the ranker piece by piece (whole QGs), writing the CSV as it
    goes; the metrics (when the file has labels) from the scores and labels kept on the way
    (12 bytes per item: features are never held whole)."""
    too_wide = f"the {ranker.n_features} features the model of {ranker.folder} takes"
    kept = _Kept()
    size = total_bytes(path)
    stats = StreamStats()
    with (
        atomic_text_writer(target, key="out") as out,
        _ByteProgress(size, f"predict {path.name}") as progress,
    ):
        out.write(CSV_HEADER)
        pieces = stream_letor(
            path, n_features=ranker.n_features, too_wide=too_wide, progress=progress, stats=stats
        )
        for piece in pieces:
            # Training's check, inside the block: a bad label leaves no CSV.
            check_label_range(piece.labels, path, first_item=kept.n_items)
            scores = ranker.score_split(piece)  # never NaN: a NaN score is refused
            out.write(predictions_rows(piece, scores))
            kept.add(piece, scores, ranker.outlier_groups(piece))
        try:  # still inside the block: an error leaves no CSV
            metrics = kept.metrics(cfg) if kept.has_labels else None
        except ValueError as exc:  # a label above max_grade=
            raise UserError(f"{path}: {exc}") from None
    ranker.warn_if_narrower(path, stats.width)
    print(f"{path}: {kept.n_groups} QGs, {kept.n_items} items" + _shown(cfg, metrics))
    return {"out": str(target), "metrics": metrics}


class _Kept:
    """Scores, labels, QG sizes and outlier flags of the pieces scored so far."""

    def __init__(self) -> None:
        self.scores: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []
        self.sizes: list[np.ndarray] = []
        self.outliers: list[np.ndarray] | None = []

    def add(self, piece: RankingSplit, scores: np.ndarray, outliers: np.ndarray | None) -> None:
        self.scores.append(scores)
        self.labels.append(np.asarray(piece.labels, dtype=np.float32))
        self.sizes.append(np.diff(piece.offsets))
        if outliers is None or self.outliers is None:
            self.outliers = None
        else:
            self.outliers.append(outliers)

    @property
    def n_items(self) -> int:
        return int(sum(len(s) for s in self.scores))

    @property
    def n_groups(self) -> int:
        return int(sum(len(s) for s in self.sizes))

    @property
    def has_labels(self) -> bool:
        return any(np.any(labels != 0) for labels in self.labels)

    def metrics(self, cfg: PredictConfig) -> dict:
        sizes = np.concatenate(self.sizes)
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        outliers = None if self.outliers is None else np.concatenate(self.outliers)
        return evaluate_ranking(
            np.concatenate(self.scores),
            np.concatenate(self.labels),
            offsets,
            ks=cfg.ks,
            policy=cfg.policy,
            outlier_groups=outliers,
            max_grade=cfg.max_grade,
        )


def _shown(cfg: PredictConfig, metrics: dict | None) -> str:
    """The metrics of a labeled file, one line per kind, each ``Name value`` (4 decimals)."""
    if metrics is None:
        return " (no labels)"
    # A line per metric with a cutoff (each k), those without on the last line.
    cut = [m for m in METRICS.values() if m.cutoff]
    lines = [", ".join(f"{m.title(k)} {metrics[m.key(k)]:.4f}" for k in cfg.ks) for m in cut]
    whole = [
        f"{m.title(None)} {metrics[m.key(None)]:.4f}" for m in METRICS.values() if not m.cutoff
    ]
    lines[-1] += "; " + ", ".join(whole)
    if "n_outlier_groups" not in metrics:
        lines.append("Outlier-NDCG: the run's outlier detector needs its own data")
    elif not metrics["n_outlier_groups"]:
        lines.append("Outlier-NDCG: no outlier QG by the run's histogram bounds")
    else:
        k = 5 if 5 in cfg.ks else cfg.ks[0]
        shown = ", ".join(
            f"Outlier-{m.title(k)} {metrics[f'outlier_{m.key(k)}']:.4f}" for m in METRICS.values()
        )
        lines.append(f"{shown} (n={metrics['n_outlier_groups']})")
    return "".join(f"\n  {line}" for line in lines)


class _ByteProgress:
    """A progress bar over the megabytes of a file (of its items when gzip hides the size)."""

    def __init__(self, size: int | None, desc: str) -> None:
        self.total = max(1, -(-size // MB)) if size else 0
        self.bar = progress_bar(total=self.total, desc=desc, unit="MB")
        self.seen = 0

    def update(self, n_bytes: int) -> None:
        before = self.seen // MB
        self.seen += n_bytes
        self.bar.update(min(self.seen // MB, self.total or self.seen) - before)

    def __enter__(self) -> _ByteProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()


def input_files(path: Path) -> list[Path]:
    """The file itself, or the split files of a folder."""
    refuse_special_input(path, "a LETOR file or a folder of split files")
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise UserError(f"data.path={path}: no such file or folder")
    found = [
        path / f"{stem}{suffix}"
        for stem in SPLIT_STEMS
        for suffix in SUFFIXES
        if (path / f"{stem}{suffix}").is_file()
    ]
    if not found:
        raise UserError(
            f"data.path={path}: a folder holds no split file ({', '.join(SPLIT_STEMS)}, "
            "as .txt, .txt.gz or without extension); give a file instead"
        )
    return found


def output_paths(cfg: PredictConfig, ranker: BundledRanker, inputs: list[Path]) -> list[Path]:
    """The CSV of each input; a `UserError` when two inputs would write one CSV, or when
    ``out=`` names one CSV for the several files of a folder."""
    given, one_file = out_place(cfg.out, (".csv",)) if cfg.out else (None, False)
    if len(inputs) > 1 and one_file:
        raise UserError(
            f"out={cfg.out} names one file, but data.path={cfg.data.path} holds {len(inputs)} "
            f"files ({', '.join(p.name for p in inputs)}); give out=<folder> for their CSVs"
        )
    folder = run_folder_of(ranker) / "predictions" if given is None else given
    targets = [given if one_file else folder / csv_name(path) for path in inputs]
    first: dict[Path, Path] = {}
    for source, target in zip(inputs, targets, strict=True):
        if target in first:
            raise UserError(
                f"data.path={cfg.data.path}: {first[target]} and {source} would both be written "
                f"to {target}; move one of them out of the folder, or give data.path=<one file>"
            )
        first[target] = source
        refuse_target(target, inputs, ranker)
    return targets


def out_place(out: str, suffixes: tuple[str, ...]) -> tuple[Path, bool]:
    """Where ``out=`` puts predictions: ``(path, True)`` for one file (a name ending in one of
    ``suffixes``), ``(folder, False)`` for a folder (one that exists, a name ending in ``/``, or
    a new name without a suffix, said on stderr). A `UserError` for an existing file that is no
    such file, a name of another suffix (``scores.txt``: a file meant, not a folder), and one
    inside a run's own files (`serving.targets`)."""
    given = Path(out)
    if out.endswith(("/", os.sep)) or given.is_dir():
        return given, False
    kinds = "/".join(suffixes)
    if given.suffix in suffixes:
        return given, True
    # Before naming a wrong kind or suffix: a run's file is the run's (`refuse_target` checks
    # each file put in place, the bundle first).
    refuse_run_files(given, command="predict", default="predictions")
    if given.exists() or given.is_symlink():
        kind = special_kind(given) or "a file"
        raise UserError(
            f"out={out} is {kind}, neither a {kinds} file nor a folder; left as it was: give "
            f"out=<name>{suffixes[0]} for one file of predictions, or out=<folder>/ for a folder"
        )
    if given.suffix:
        raise UserError(
            f"out={out}: a {given.suffix} name is neither a {kinds} file nor a folder; give "
            f"out={given.with_suffix(suffixes[0])} for one file of predictions, or out={out}/ "
            "for a folder of them"
        )
    print(f"out={out} names a folder (no {kinds} at its end); predictions go into it",
          file=sys.stderr)  # fmt: skip
    return given, False


def refuse_target(target: Path, inputs: list[Path], ranker: BundledRanker) -> None:
    """Refuse an ``out=`` that is an input file (it was overwritten by its own predictions),
    inside the bundle (which holds what training wrote, nothing else) or inside a run's own
    files (`serving.targets`)."""
    where = target.resolve()
    for source in inputs:
        if where == source.resolve():
            raise UserError(
                f"out={target} is the input file {source}: predict never overwrites its input; "
                "give out=<another file or folder>"
            )
    bundle = Path(ranker.folder).resolve()
    if where == bundle or bundle in where.parents:
        raise UserError(
            f"out={target} is inside the bundle {bundle}, which holds what training wrote; "
            "give out=<a file or folder outside it>"
        )
    refuse_run_files(target, command="predict", default="predictions")


def csv_name(source: Path) -> str:
    """The CSV of an input file in a folder of predictions: ``test.txt.gz`` -> ``test.csv``."""
    return source.name.removesuffix(".gz").removesuffix(".txt") + ".csv"


# The files predict writes for a table: CSV, or Parquet (`serving.predict_table`).
TABLE_OUT_SUFFIXES = (".csv", ".parquet", ".pq")


MB = 1 << 20

# How predict reads each data format it reads (`scarce_ltr.data.formats.FORMATS`), tried in this
# order: the first whose `DataFormat.predicts` claims ``data.path`` (LETOR, the last, claims
# any file or folder and names what it lacks). A format missing here (arrays) is not read.
PREDICTORS = {table.NAME: _predict_table, letor.NAME: _predict_letor}


def predictions_rows(split: RankingSplit, scores: np.ndarray) -> str:
    """``qid,position,score,rank`` per item of a piece of whole QGs, in file order (the rows
    under `CSV_HEADER`)."""
    position, rank = positions_and_ranks(split.offsets, scores)
    qids = np.repeat(split.qids, np.diff(split.offsets))
    rows = zip(qids.tolist(), position.tolist(), scores.tolist(), rank.tolist(), strict=True)
    return "".join(f"{q},{p},{v!r},{r}\n" for q, p, v, r in rows)
