"""A LETOR/SVMlight file as a stream of `RankingSplit` pieces of whole query groups.

`scarce_ltr.data.letor.read_letor` holds a whole file in memory; scoring a file needs only one
piece at a time. `stream_letor` parses the file block by block with the same parser (and the
same messages naming file and line) and yields pieces of consecutive whole QGs, each as wide as
the caller's model: a QG cut by a block boundary waits for the next block. Memory is bounded by
a block's items and the largest QG, not by the file. The file's own width (its highest feature
index, what `read_letor` would make it) is counted on the way (`StreamStats`), for a caller that
warns about a narrower file as training does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import DataFormatError
from scarce_ltr.data.letor import split_name
from scarce_ltr.data.letor.blocks import parse_chunks
from scarce_ltr.data.letor.groups import check_query_total, groups_from_qids, query_sizes
from scarce_ltr.data.letor.parsed import EXPECTED
from scarce_ltr.data.ranking_split import RankingSplit


@dataclass
class _Items:
    """Items waiting to be emitted: dense features and their line bookkeeping."""

    features: np.ndarray  # [n, n_features] float32
    labels: np.ndarray  # [n] float32
    qids: np.ndarray  # [n] int64 (per line; empty without qid)
    lines: np.ndarray  # [n] int64, 1-based line numbers

    @classmethod
    def empty(cls, n_features: int) -> _Items:
        return cls(
            np.zeros((0, n_features), np.float32),
            np.zeros(0, np.float32),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
        )

    def __len__(self) -> int:
        return len(self.labels)

    def join(self, other: _Items) -> _Items:
        return _Items(
            np.concatenate([self.features, other.features]),
            np.concatenate([self.labels, other.labels]),
            np.concatenate([self.qids, other.qids]),
            np.concatenate([self.lines, other.lines]),
        )

    def cut(self, n: int) -> tuple[_Items, _Items]:
        first = _Items(self.features[:n], self.labels[:n], self.qids[:n], self.lines[:n])
        rest = _Items(self.features[n:], self.labels[n:], self.qids[n:], self.lines[n:])
        return first, rest


@dataclass
class StreamStats:
    """What `stream_letor` has read so far."""

    width: int = 0  # the file's highest feature index (1-based), before padding


def stream_letor(
    path: str | Path,
    *,
    n_features: int,
    too_wide: str,
    progress=None,
    stats: StreamStats | None = None,
) -> Iterator[RankingSplit]:
    """Pieces of whole QGs of ``path``, in file order, ``n_features`` wide (absent features 0).

    Args:
        n_features: the width of every piece; a feature index beyond it is an error whose
            message names the line and ends with ``too_wide`` (what the width is).
        progress: optional; its ``update(n)`` gets the bytes of each block parsed.
        stats: optional; updated as blocks are parsed (the file's width when the stream ends).
    """
    path = Path(path)
    name = split_name(path)
    pending = _Items.empty(n_features)
    seen_qids: set[int] = set()
    groups: _SizedGroups | None = None  # lines without qid: sizes from the .query file
    n_items = 0
    on_block = None if progress is None else progress.update
    for parsed in parse_chunks(path, on_block):
        if not parsed.has_qid and groups is None:
            groups = _SizedGroups(path, name)
        items = _dense(parsed, n_features, path, too_wide)
        if stats is not None and len(parsed.cols):
            stats.width = max(stats.width, int(parsed.cols.max()) + 1)
        n_items += len(items)
        pending = pending.join(items)
        if groups is None:
            ready, pending = _before_last_group(pending)
            piece = _qid_piece(ready, path, name, seen_qids) if len(ready) else None
        else:
            piece, pending = groups.take(pending)
        if piece is not None:
            yield piece
    if n_items == 0:
        raise DataFormatError(path, None, f"no data lines found ({EXPECTED})")
    if groups is not None:
        groups.finish(n_items)
    elif len(pending):
        yield _qid_piece(pending, path, name, seen_qids)


def total_bytes(path: str | Path) -> int | None:
    """The size of the text to parse when it is known without reading it (None for gzip)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
        return None if gzipped else path.stat().st_size
    except OSError as exc:  # as the parser says it (`blocks._read_blocks`)
        raise DataFormatError(path, None, f"cannot be read ({exc})") from None


def _dense(parsed, n_features: int, path: Path, too_wide: str) -> _Items:
    wide = parsed.cols >= n_features
    if np.any(wide):
        at = int(np.flatnonzero(wide)[0])
        line = int(parsed.line_numbers[parsed.rows[at]])
        raise DataFormatError(
            path, line, f"feature index {int(parsed.cols[at]) + 1} is beyond {too_wide}"
        )
    features = np.zeros((len(parsed.labels), n_features), dtype=np.float32)
    features[parsed.rows, parsed.cols] = parsed.values
    qids = parsed.qids.astype(np.int64) if parsed.has_qid else np.zeros(0, np.int64)
    return _Items(features, parsed.labels.astype(np.float32), qids, parsed.line_numbers)


def _before_last_group(items: _Items) -> tuple[_Items, _Items]:
    """The items before the last QG's first line, and that QG (it may go on in the next block)."""
    changes = np.flatnonzero(items.qids[1:] != items.qids[:-1])
    return items.cut(int(changes[-1]) + 1 if len(changes) else 0)


def _qid_piece(items: _Items, path: Path, name: str, seen: set[int]) -> RankingSplit:
    offsets, qids = groups_from_qids(items.qids, items.lines, path)
    for group, qid in enumerate(qids.tolist()):
        if qid in seen:  # within the piece, groups_from_qids checked already
            raise DataFormatError(
                path,
                int(items.lines[offsets[group]]),
                f"qid {qid} appears again after other qids "
                "(the items of a query group must be on consecutive lines)",
            )
    seen.update(qids.tolist())
    return RankingSplit(items.features, items.labels, offsets, qids, name)


class _SizedGroups:
    """QGs of a file without ``qid:``: sizes from its ``.query`` file, qids 0, 1, ..."""

    def __init__(self, path: Path, name: str) -> None:
        self.path, self.name = path, name
        self.sizes = query_sizes(path)
        self.ends = np.cumsum(self.sizes)
        self.done_groups = 0
        self.done_items = 0

    def take(self, items: _Items) -> tuple[RankingSplit | None, _Items]:
        """A piece of the whole QGs among ``items`` (None if none is whole) and the rest."""
        reach = self.done_items + len(items)
        n_whole = int(np.searchsorted(self.ends, reach, side="right")) - self.done_groups
        if n_whole <= 0:
            return None, items
        stop = self.done_groups + n_whole
        ends = self.ends[self.done_groups : stop] - self.done_items
        ready, rest = items.cut(int(ends[-1]))
        offsets = np.concatenate(([0], ends)).astype(np.int64)
        qids = np.arange(self.done_groups, stop, dtype=np.int64)
        self.done_groups, self.done_items = stop, self.done_items + len(ready)
        return RankingSplit(ready.features, ready.labels, offsets, qids, self.name), rest

    def finish(self, n_items: int) -> None:
        check_query_total(self.path, int(self.sizes.sum()), n_items)
