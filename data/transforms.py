"""Feature transforms, fit on the train split only and applied to every split.

- ``none``: features as they are.
- ``standardize``: ``(x - mean) / std`` with train statistics (constant features stay centred).
- ``log1p``: signed ``sign(x) * log1p(|x|)``, for raw counts and scores (qin2021).
- ``log1p-standardize``: signed log1p, then standardize; the default for raw-count data sets
  such as MSLR and Istella.
- ``qg-standardize``: standardize each feature within each query group (what the paper's
  published code did); needs no fit, and erases query-level shifts.

Optional ``clip``: after the transform, values are clipped to ``[-clip, clip]``.

Finite input gives finite output: statistics are summed in float64 around a reference row (no
cancellation for columns far from 0), a constant column (or a single item) is only centred, and
a result beyond float32's range (a vali value far outside a near-constant train column)
saturates at the float32 limit instead of becoming inf.

A missing value (NaN: a table's null, for the trees that take it) is left out of the statistics,
which are fitted on the finite values only (each column's mean and std over the rows it has), and
stays NaN through every transform; it never spreads to the rest of its column (or QG).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from scarce_ltr.data.ranking_split import RankingSplit

TRANSFORMS = ("none", "standardize", "log1p", "log1p-standardize", "qg-standardize")
_ROWS_PER_STEP = 1 << 18  # work through memory-mapped features in pieces
_ROWS_PER_BLOCK = 2048  # rows transformed at a time: float64 temporaries of ~2 MB
_ROWS_PER_THREAD = 1 << 16  # fewer rows than this per thread: one thread is faster
_MAX_THREADS = 8
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def signed_log1p(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.log1p(np.abs(x))


@dataclass(frozen=True)
class FeatureTransform:
    """A fitted transform. Build it with `fit_transform`; apply with `__call__`."""

    kind: str
    mean: np.ndarray | None = None  # [n_features] float64
    std: np.ndarray | None = None  # [n_features] float64
    clip: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in TRANSFORMS:
            raise ValueError(f"transform '{self.kind}' is not one of {', '.join(TRANSFORMS)}")
        if self.clip is not None and self.clip <= 0:
            raise ValueError(f"clip must be positive, got {self.clip}")

    def __call__(self, split: RankingSplit, *, out: np.ndarray | None = None) -> RankingSplit:
        """The split with transformed float32 features, in a new array or in the first rows of
        ``out`` (a float32 buffer reused across pieces); the source is untouched."""
        if out is None:
            out = np.empty(split.features.shape, dtype=np.float32)
        else:
            out = out[: split.n_items]
        if self.kind == "qg-standardize":
            out[:] = _standardize_within_groups(np.asarray(split.features), split.offsets)
            if self.clip is not None:
                np.clip(out, -self.clip, self.clip, out=out)
        else:
            self._pointwise_into(out, split.features)
        return split.with_features(out)

    def _pointwise_into(self, out: np.ndarray, features: np.ndarray) -> None:
        """``out[:] = transform(features)``, large inputs split over the CPU's threads (numpy
        releases the GIL; rows are independent, so the result does not depend on the split)."""
        n_items = len(features)
        workers = min(os.cpu_count() or 1, _MAX_THREADS, max(1, n_items // _ROWS_PER_THREAD))
        if workers == 1:
            self._pointwise_rows(out, features, 0, n_items)
            return
        bounds = np.linspace(0, n_items, workers + 1).astype(int)
        with ThreadPoolExecutor(workers) as pool:
            jobs = [
                pool.submit(self._pointwise_rows, out, features, int(a), int(b))
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)
            ]
            for job in jobs:
                job.result()

    def _pointwise_rows(self, out: np.ndarray, features: np.ndarray, first: int, last: int):
        """Rows ``first:last`` in float64 blocks of `_ROWS_PER_BLOCK` rows, in place:
        temporaries that stay in cache make it several times faster than whole-array
        expressions, with the same arithmetic (the same bits). Clipping in float64 before the
        cast gives what clipping the float32 result gives (rounding is monotone)."""
        width = features.shape[1]
        block = np.empty((min(last - first, _ROWS_PER_BLOCK), width))
        scratch = np.empty_like(block)
        for start in range(first, last, _ROWS_PER_BLOCK):
            stop = min(start + _ROWS_PER_BLOCK, last)
            x, tmp = block[: stop - start], scratch[: stop - start]
            x[...] = features[start:stop]
            if self.kind in ("log1p", "log1p-standardize"):  # sign(x) * log1p(|x|)
                np.log1p(np.abs(x, out=tmp), out=tmp)
                np.copysign(tmp, x, out=x)
                np.add(x, 0.0, out=x)  # -0.0 -> +0.0, as sign(-0.0) * 0.0 gives
            if self.kind in ("standardize", "log1p-standardize"):
                assert self.mean is not None and self.std is not None
                np.subtract(x, self.mean, out=x)
                np.divide(x, self.std, out=x)
            limit = _FLOAT32_MAX if self.clip is None else min(self.clip, _FLOAT32_MAX)
            np.clip(x, -limit, limit, out=x)
            out[start:stop] = x

    def to_bundle(self) -> tuple[dict, dict[str, np.ndarray]]:
        """``({"kind", "clip"}, arrays)``: what a model bundle keeps of the fitted transform."""
        arrays = {} if self.mean is None else {"mean": self.mean, "std": self.std}
        return {"kind": self.kind, "clip": self.clip}, arrays

    @classmethod
    def from_bundle(cls, info: dict, arrays: dict[str, np.ndarray]) -> FeatureTransform:
        return cls(info["kind"], mean=arrays.get("mean"), std=arrays.get("std"), clip=info["clip"])


def fit_transform(kind: str, train: RankingSplit, *, clip: float | None = None) -> FeatureTransform:
    """Fit `kind` on the train split's features."""
    if kind not in ("standardize", "log1p-standardize"):
        return FeatureTransform(kind, clip=clip)
    n = train.n_items
    total = np.zeros(train.n_features)
    total_sq = np.zeros(train.n_features)
    reference = np.zeros(train.n_features)
    counts: np.ndarray | int = n  # per column once a NaN is met: the finite values' count
    for start in range(0, n, _ROWS_PER_STEP):
        x = np.asarray(train.features[start : start + _ROWS_PER_STEP], dtype=np.float64)
        if kind == "log1p-standardize":
            x = signed_log1p(x)
        if start == 0 and len(x):
            # Sums of x - x[0]: E[x^2] - E[x]^2 would cancel to 0 (or below) for columns of
            # large values with a small spread.
            reference = _first_finite(x)
        x = x - reference
        nan = np.isnan(x)
        if nan.any():  # missing values add nothing and are not counted
            x[nan] = 0.0
            counts = counts - nan.sum(axis=0)
        total += x.sum(axis=0)
        total_sq += (x * x).sum(axis=0)
    counts = np.maximum(counts, 1)
    shifted_mean = total / counts
    var = np.maximum(total_sq / counts - shifted_mean**2, 0.0)
    mean = shifted_mean + reference
    std = np.sqrt(var)
    # A constant feature would divide by zero; leave it centred at 0 instead.
    std[std < 1e-12] = 1.0
    return FeatureTransform(kind, mean=mean, std=std, clip=clip)


def _first_finite(x: np.ndarray) -> np.ndarray:
    """``[n_features]``: row 0 of ``x``, each NaN replaced by its column's first finite value
    (0 in a column without one)."""
    reference = x[0].copy()
    for j in np.flatnonzero(np.isnan(reference)):
        finite = x[:, j][~np.isnan(x[:, j])]
        reference[j] = finite[0] if len(finite) else 0.0
    return reference


def _standardize_within_groups(x: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``[n_items, n_features]`` standardized per QG (segment sums, no loop over QGs); a NaN
    (missing) is left out of its QG's statistics and stays NaN."""
    x = x.astype(np.float64)
    sizes = np.diff(offsets)
    nonempty = sizes > 0
    starts = offsets[:-1][nonempty]
    counts = sizes[nonempty][:, None]
    nan = np.isnan(x)
    if nan.any():
        finite = np.where(nan, 0.0, x)
        counts = np.maximum(np.add.reduceat((~nan).astype(np.int64), starts, axis=0), 1)
        mean = np.add.reduceat(finite, starts, axis=0) / counts
        mean_sq = np.add.reduceat(finite * finite, starts, axis=0) / counts
    else:
        mean = np.add.reduceat(x, starts, axis=0) / counts
        mean_sq = np.add.reduceat(x * x, starts, axis=0) / counts
    std = np.sqrt(np.maximum(mean_sq - mean**2, 0.0))
    std[std < 1e-12] = 1.0
    return (x - np.repeat(mean, sizes[nonempty], axis=0)) / np.repeat(std, sizes[nonempty], axis=0)
