"""Large splits scored piece by piece: consecutive whole QGs at a time through a reused buffer.

A bundle's scorer (the torch rankers', LightGBM's) transforms and scores a large input in
pieces of about `PIECE_ITEMS` items rather than copying the whole of it at once; the pieces are
cut where a scoring batch ends, so that the scores are the same bits as the whole split's.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from scarce_ltr.data.batching import QueryGroupBatcher
from scarce_ltr.data.ranking_split import RankingSplit

PIECE_ITEMS = 1 << 17  # items transformed at a time: a reused buffer, not a copy of the input


def pieces_of(split: RankingSplit, item_budget: int) -> Iterator[tuple[slice, RankingSplit]]:
    """``(rows, piece)``: consecutive whole QGs of ``split`` (views, no copy) of about
    `PIECE_ITEMS` items, cut where a scoring batch of ``item_budget`` items ends, so that each
    piece packs into exactly the batches the whole split packs into (the scores are the same
    bits as scoring the whole split at once)."""
    if split.n_items <= PIECE_ITEMS:
        yield slice(0, split.n_items), split
        return
    offsets = split.offsets
    first, items = 0, 0
    for batch in QueryGroupBatcher(split, item_budget=item_budget).plan():
        last = int(batch[-1]) + 1
        items = int(offsets[last] - offsets[first])
        if items >= PIECE_ITEMS:
            yield _piece(split, first, last)
            first = last
    if first < split.n_groups:
        yield _piece(split, first, split.n_groups)


def _piece(split: RankingSplit, first: int, last: int) -> tuple[slice, RankingSplit]:
    a, b = int(split.offsets[first]), int(split.offsets[last])
    piece = RankingSplit(
        split.features[a:b],
        split.labels[a:b],
        split.offsets[first : last + 1] - a,
        split.qids[first:last],
        split.name,
    )
    return slice(a, b), piece


def piece_buffer(buffer: np.ndarray | None, piece: RankingSplit) -> np.ndarray:
    """A float32 buffer with room for the piece (grown when a piece is larger)."""
    if buffer is None or len(buffer) < piece.n_items:
        return np.empty((max(piece.n_items, PIECE_ITEMS), piece.n_features), dtype=np.float32)
    return buffer
