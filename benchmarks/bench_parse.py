"""Parsing speed: this project's LETOR reader against LightGBM's C++ text loader (the anchor)
and scikit-learn's load_svmlight_file.

Writes a synthetic SVMlight file (default 1M items x 136 features, MSLR-shaped), then times, in
one run on the same file: LightGBM's `Dataset(file).construct()` on as many threads as cores
(with ``two_round`` false and true; the faster is the anchor), sklearn's
`load_svmlight_file(..., query_id=True)`, our `read_letor` (its forked workers, and in one
process), our cached path (parse + write cache) and the memory-mapped cached reload.

LightGBM's LibSVM parser refuses ``qid:`` tokens ("Input format error when parsing as LibSVM"),
so it reads a copy of the file with them removed and the group sizes in ``<copy>.query`` (its
own convention); the copy is ~1 % smaller, which favours LightGBM slightly. LightGBM's time
includes binning the features (it has no parse-only entry point). Each reader runs ``--repeat``
times, alternating, and the best time counts (the page cache is warm for all of them).

    .venv/bin/python benchmarks/bench_parse.py [--items 1000000] [--features 136] [--repeat 2]
        [--keep DIR]  (write the files once into DIR and reuse them)
        [--readers-only]  (LightGBM and read_letor only: no scikit-learn or cache passes)
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from scarce_ltr.data.cache import load_split  # noqa: E402
from scarce_ltr.data.letor import blocks, read_letor, write_letor  # noqa: E402
from scarce_ltr.data.ranking_split import RankingSplit  # noqa: E402


def make_split(n_items: int, n_features: int) -> RankingSplit:
    """MSLR-shaped: QGs of ~100 items, many counts (integers), some scores, 20 % zeros."""
    rng = np.random.default_rng(0)
    sizes = np.clip(rng.lognormal(np.log(100), 0.6, size=n_items // 60), 1, 1000).astype(np.int64)
    sizes = sizes[np.cumsum(sizes) <= n_items]
    sizes = np.append(sizes, n_items - sizes.sum()) if sizes.sum() < n_items else sizes
    features = rng.lognormal(1.0, 1.5, size=(n_items, n_features)).astype(np.float32)
    features[:, ::3] = np.floor(features[:, ::3])
    features[rng.random(features.shape) < 0.2] = 0
    return RankingSplit(
        features,
        rng.integers(0, 5, n_items).astype(np.float32),
        np.concatenate(([0], np.cumsum(sizes))).astype(np.int64),
        np.arange(len(sizes), dtype=np.int64),
        "bench",
    )


def make_file(path: Path, n_items: int, n_features: int) -> None:
    write_letor(make_split(n_items, n_features), path, precision=6)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def strip_qids(path: Path, out: Path) -> None:
    """A copy of ``path`` without its ``qid:`` tokens, and ``<out>.query`` of group sizes."""
    sizes, last = [], None
    with open(path, "rb") as src, open(out, "wb") as dst:
        for line in src:
            label, qid, rest = line.split(b" ", 2)
            dst.write(label + b" " + rest)
            if qid != last:
                sizes.append(0)
                last = qid
            sizes[-1] += 1
    Path(f"{out}.query").write_text("".join(f"{s}\n" for s in sizes))


def lightgbm_seconds(path: Path, threads: int, two_round: bool) -> float:
    import lightgbm

    params = {"num_threads": threads, "verbosity": -1, "two_round": two_round}
    seconds, _ = timed(lambda: lightgbm.Dataset(str(path), params=params).construct())
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=136)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None, help="reuse the files in this folder")
    parser.add_argument(
        "--readers-only", action="store_true", help="skip scikit-learn and the cache passes"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-parse-"))
    files = args.keep or work
    files.mkdir(parents=True, exist_ok=True)
    try:
        path = files / f"train-{args.items}x{args.features}.txt"
        bare = files / f"train-{args.items}x{args.features}.noqid.txt"
        if not path.exists():
            seconds, _ = timed(lambda: make_file(path, args.items, args.features))
            strip_qids(path, bare)
            print(f"wrote the files in {seconds:.0f} s")
        size_mb = path.stat().st_size / 1e6
        print(f"{args.items} items x {args.features} features, {size_mb:.0f} MB")
        threads = len(os.sched_getaffinity(0))
        from sklearn.datasets import load_svmlight_file

        best: dict[str, float] = {}

        def ours(count: int | None) -> float:
            """Seconds of read_letor on ``count`` parse processes (None: as it decides)."""
            saved = blocks._worker_count
            if count is not None:
                blocks._worker_count = lambda _path: count
            try:
                return timed(lambda: read_letor(path))[0]
            finally:
                blocks._worker_count = saved

        shipped = "read_letor (parse only; workers if cores are idle)"
        readers = {
            f"LightGBM Dataset.construct(), {threads} threads, two_round=false": lambda: (
                lightgbm_seconds(bare, threads, False)
            ),
            f"LightGBM Dataset.construct(), {threads} threads, two_round=true": lambda: (
                lightgbm_seconds(bare, threads, True)
            ),
            shipped: lambda: ours(None),
            f"read_letor, {threads} forked workers": lambda: ours(threads),
            "read_letor, one process": lambda: ours(1),
        }
        for _ in range(args.repeat):
            for name, run in readers.items():
                seconds = run()
                best[name] = min(best.get(name, float("inf")), seconds)
                print(f"  {name}: {seconds:.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
        anchor = min(t for name, t in best.items() if name.startswith("LightGBM"))
        if args.readers_only:
            print(f"read_letor / LightGBM: {best[shipped] / anchor:.2f}x as shipped")
            return
        t_sk, (x_sk, y_sk, q_sk) = timed(lambda: load_svmlight_file(str(path), query_id=True))
        split = read_letor(path)
        assert np.array_equal(x_sk.toarray()[:1000].astype(np.float32), split.features[:1000])
        del x_sk
        cache = work / "cache"
        t_cache, _ = timed(lambda: load_split(path, name="train", cache_root=cache))
        t_reload, again = timed(lambda: load_split(path, name="train", cache_root=cache))
        t_touch, _ = timed(lambda: float(np.asarray(again.features[::1000]).sum()))
        print(
            f"machine: {platform.processor() or platform.machine()}, {threads} cores, "
            f"Python {platform.python_version()}, load {os.getloadavg()}"
        )
        rows = [*best.items(), ("sklearn load_svmlight_file(query_id=True)", t_sk)]
        rows += [
            ("load_split, first call (parse + cache)", t_cache),
            ("load_split, cached reload (memory-mapped)", t_reload),
        ]
        print(f"{'reader':<62}{'seconds':>9}{'MB/s':>8}")
        for name, t in rows:
            print(f"{name:<62}{t:>9.2f}{size_mb / t:>8.0f}")
        print(
            f"read_letor / LightGBM: {best[shipped] / anchor:.2f}x the anchor's time as shipped, "
            f"{min(best[n] for n in readers if n.startswith('read_letor')) / anchor:.2f}x at best "
            f"(target <= 1.5x); {t_sk / best[shipped]:.2f}x faster than sklearn; reading 1/1000 "
            f"rows of the memmap: {t_touch:.3f} s"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
