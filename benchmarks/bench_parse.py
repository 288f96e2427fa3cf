"""Parsing speed: this project's LETOR reader against scikit-learn's load_svmlight_file.

Writes a synthetic SVMlight file (default 1M items x 136 features, MSLR-shaped), then times, in
one run on the same file: sklearn's `load_svmlight_file(..., query_id=True)`, our `read_letor`
(first parse), our cached path (parse + write cache) and the memory-mapped cached reload.

    .venv/bin/python benchmarks/bench_parse.py [--items 1000000] [--features 136]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from scarce_ltr.data.cache import load_split  # noqa: E402
from scarce_ltr.data.letor import read_letor, write_letor  # noqa: E402
from scarce_ltr.data.ranking_split import RankingSplit  # noqa: E402


def make_file(path: Path, n_items: int, n_features: int) -> None:
    rng = np.random.default_rng(0)
    sizes = np.clip(rng.lognormal(np.log(100), 0.6, size=n_items // 60), 1, 1000).astype(np.int64)
    sizes = sizes[np.cumsum(sizes) <= n_items]
    sizes = np.append(sizes, n_items - sizes.sum()) if sizes.sum() < n_items else sizes
    # MSLR-like: many counts (integers), some scores, some zeros.
    features = rng.lognormal(1.0, 1.5, size=(n_items, n_features)).astype(np.float32)
    features[:, ::3] = np.floor(features[:, ::3])
    features[rng.random(features.shape) < 0.2] = 0
    split = RankingSplit(
        features,
        rng.integers(0, 5, n_items).astype(np.float32),
        np.concatenate(([0], np.cumsum(sizes))).astype(np.int64),
        np.arange(len(sizes), dtype=np.int64),
        "bench",
    )
    write_letor(split, path, precision=6)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=136)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-parse-"))
    try:
        path = work / "train.txt"
        seconds, _ = timed(lambda: make_file(path, args.items, args.features))
        size_mb = path.stat().st_size / 1e6
        shape = f"{args.items} items x {args.features} features"
        print(f"wrote {shape}, {size_mb:.0f} MB, {seconds:.0f} s")
        from sklearn.datasets import load_svmlight_file

        t_sk, (x_sk, y_sk, q_sk) = timed(lambda: load_svmlight_file(str(path), query_id=True))
        t_ours, split = timed(lambda: read_letor(path))
        assert np.allclose(x_sk.toarray()[:1000], split.features[:1000], rtol=1e-6)
        del x_sk
        cache = work / "cache"
        t_cache, _ = timed(lambda: load_split(path, name="train", cache_root=cache))
        t_reload, again = timed(lambda: load_split(path, name="train", cache_root=cache))
        t_touch, _ = timed(lambda: float(np.asarray(again.features[::1000]).sum()))
        print(f"machine: {platform.processor() or platform.machine()}, {platform.python_version()}")
        print(f"{'reader':<44}{'seconds':>10}{'MB/s':>10}")
        for name, t in [
            ("sklearn load_svmlight_file(query_id=True)", t_sk),
            ("read_letor (parse only)", t_ours),
            ("load_split, first call (parse + cache)", t_cache),
            ("load_split, cached reload (memory-mapped)", t_reload),
        ]:
            print(f"{name:<44}{t:>10.2f}{size_mb / t:>10.0f}")
        print(
            f"speed-up over sklearn: {t_sk / t_ours:.2f}x; reading 1/1000 rows of the memmap: "
            f"{t_touch:.3f} s"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
