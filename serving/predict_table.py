"""Score a table (Parquet, a folder of Parquet parts, or ``.npz`` columns) with a model bundle:
``./run.sh predict <run> data.path=new.parquet`` and, from Python,

    >>> result = predict_table("my-ranker", "new.parquet")  # -> new.scores.parquet beside it

One row per item, in the table's order: ``qid``, ``position`` (0-based within its QG, in table
order), ``score``, ``rank`` (1 = the top of its QG; ties in table order), as ``predict`` writes
for LETOR files; Parquet out when Parquet comes in, CSV otherwise, written atomically. The
features are ``features=[...]``, else the columns a saved estimator was fit on
(``estimator.json``, matched by name), else every numeric column but the qid and the label, in
table order. When the table has the label column, the result holds every metric of
`scarce_ltr.core.metrics.METRICS`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import atomic_path, atomic_text_writer
from scarce_ltr.core.metrics import evaluate_ranking
from scarce_ltr.data.arrays import check_labels, check_values
from scarce_ltr.data.ranking_split import QidGroups, RankingSplit
from scarce_ltr.data.table_qids import integer_qids
from scarce_ltr.data.tables import Table, feature_matrix
from scarce_ltr.serving.ranker import ESTIMATOR_FILE, BundledRanker, load_ranker
from scarce_ltr.serving.rows import CSV_HEADER, positions_and_ranks, remove_orphans


def predict_table(
    run_or_bundle: str | Path | BundledRanker,
    path: str | Path,
    out: str | Path | None = None,
    *,
    qid: str = "qid",
    label: str = "label",
    features: list[str] | None = None,
    ks: tuple[int, ...] = (1, 3, 5, 10),
    policy: str = "skip",
) -> dict:
    """Score the table at ``path``; ``{"out": file, "n_items": n, "metrics": {...} | None}``."""
    ranker = run_or_bundle
    if not isinstance(ranker, BundledRanker):
        ranker = load_ranker(run_or_bundle)
    path = Path(path)
    table = Table.open(path)
    if qid not in table.names:
        raise UserError(f"{path}: no qid column '{qid}'; its columns: {', '.join(table.names)}")
    names = _feature_names(ranker, table, path, qid=qid, label=label, given=features)
    labeled = label in table.names
    if labeled and not table.numeric(label):
        raise UserError(
            f"{path}: the label column '{label}' holds {table.kind(label)}, not relevance grades "
            "(give label=<column>)"
        )
    table.load([qid, *names, *([label] if labeled else [])])
    qids = integer_qids(table.column(qid), path, qid)
    groups = QidGroups(qids)
    labels = np.zeros(len(qids), dtype=np.float32)
    if labeled:
        column = table.column(label).astype(np.float64)
        check_labels(column, f"{path} (column {label})")
        labels = column.astype(np.float32)[groups.order]
    columns = [table.column(c) for c in names]
    x = feature_matrix(columns, groups.order, len(qids))
    check_values(x, path, names, groups.order, columns)
    split = RankingSplit(x, labels, groups.offsets, groups.qids, "table")
    scores = ranker.score_split(split, source=path, names=names, rows=groups.order)
    position, rank = positions_and_ranks(groups.offsets, scores)
    back = groups.to_input_order
    rows = {"qid": qids, "position": back(position), "score": back(scores), "rank": back(rank)}
    target = Path(out) if out else path.with_name(f"{path.stem}.scores{table_suffix(path)}")
    remove_orphans(target)
    _write(rows, target)
    metrics = None
    if labeled:
        metrics = evaluate_ranking(scores, labels, groups.offsets, ks=ks, policy=policy)
    return {"out": target, "n_items": len(qids), "metrics": metrics}


def _feature_names(
    ranker: BundledRanker, table: Table, path: Path, *, qid: str, label: str, given
) -> list[str]:
    """The table's columns the model takes, in the model's order (see the module docstring)."""
    saved = ranker.folder / ESTIMATOR_FILE
    names = list(given or [])
    if not names and saved.is_file():
        names = json.loads(saved.read_text()).get("feature_names") or []
    if not names:
        names = list(ranker.manifest.get("feature_names") or [])
    if not names:
        names = [c for c in table.names if c not in (qid, label) and table.numeric(c)]
    absent = [c for c in names if c not in table.names]
    if absent:
        raise UserError(
            f"{path} lacks the column(s) {', '.join(map(repr, absent))} the ranker takes; its "
            f"columns: {', '.join(table.names)}"
        )
    bad = [c for c in names if not table.numeric(c)]
    if bad:
        raise UserError(
            f"{path}: column(s) {', '.join(map(repr, bad))} hold "
            f"{', '.join(table.kind(c) for c in bad)}, not numbers"
        )
    if len(names) != ranker.n_features:
        raise UserError(
            f"{path}: {len(names)} feature columns ({', '.join(names[:5])}, ...); the model of "
            f"{ranker.folder} takes {ranker.n_features} (give features=[...])"
        )
    return names


def table_suffix(path: Path) -> str:
    """Parquet out when Parquet comes in, CSV otherwise."""
    return ".parquet" if path.is_dir() or path.suffix in (".parquet", ".pq") else ".csv"


def _write(rows: dict[str, np.ndarray], target: Path) -> None:
    """Parquet or CSV by ``target``'s suffix, atomically (a temp file renamed into place)."""
    if target.suffix in (".parquet", ".pq"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        with atomic_path(target, key="out") as tmp:
            pq.write_table(pa.table(rows), tmp)
        return
    columns = (rows[k].tolist() for k in ("qid", "position", "score", "rank"))
    with atomic_text_writer(target, key="out") as f:
        f.write(CSV_HEADER)
        f.writelines(f"{q},{p},{s!r},{r}\n" for q, p, s, r in zip(*columns, strict=True))
