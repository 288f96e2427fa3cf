"""What the parse cache's freshness check costs: hashing the whole source against parsing it
and against opening the cached arrays.

`data.cache` keys a cached parse on a SHA-256 of the source's bytes (issue 25: size + mtime
served stale data after ``cp -p`` or ``rsync -t``), so every `load_split` reads and hashes the
whole file. This script writes an MSLR-shaped synthetic file with `bench_parse.make_file` (default
1M items x 136 features, ~1.2 GB of text), then times, on the warm page cache, best of
``--repeat``: the hash (SHA-256 as shipped, and other hashlib algorithms for comparison), the old
size + mtime check (a stat), `read_letor` (the parse), `load_split`'s first call (hash, parse,
write the cache) and its cached reload (hash, lock, memory-map), and the reload without the hash.

    .venv/bin/python benchmarks/bench_cache_check.py [--items 1000000] [--features 136]
        [--repeat 3] [--keep DIR]  (write the file once into DIR and reuse it)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_parse import make_file  # noqa: E402

from scarce_ltr.data import cache  # noqa: E402
from scarce_ltr.data.cache import content_hash, load_split  # noqa: E402
from scarce_ltr.data.letor import read_letor  # noqa: E402


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def hash_with(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=136)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="reuse the file in this folder")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    files = args.keep or work
    files.mkdir(parents=True, exist_ok=True)
    try:
        path = files / f"train-{args.items}x{args.features}.txt"
        if not path.exists():
            start = time.perf_counter()
            make_file(path, args.items, args.features)
            print(f"wrote the file in {time.perf_counter() - start:.0f} s")
        size_mb = path.stat().st_size / 1e6
        cores = len(os.sched_getaffinity(0))
        print(
            f"{args.items:,} items x {args.features} features, {size_mb:.0f} MB; "
            f"{cpu_model()}, {cores} cores, Python {platform.python_version()}, "
            f"load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M')}"
        )
        content_hash(path)  # the file into the page cache
        root = work / "cache"
        rows = [
            ("size + mtime check (the old stamp: one stat)", best_of(args.repeat, path.stat)),
            (
                "SHA-256 of the whole file (as shipped)",
                best_of(args.repeat, lambda: content_hash(path)),
            ),
        ]
        for algorithm in ("sha1", "blake2b", "md5"):
            seconds = best_of(args.repeat, lambda a=algorithm: hash_with(path, a))
            rows.append((f"{algorithm} of the whole file (for comparison)", seconds))
        parse = best_of(min(args.repeat, 2), lambda: read_letor(path))
        rows.append(("read_letor: the parse", parse))
        first = best_of(1, lambda: load_split(path, name="train", cache_root=root))
        rows.append(("load_split, first call (hash + parse + write cache)", first))
        reload = best_of(args.repeat, lambda: load_split(path, name="train", cache_root=root))
        rows.append(("load_split, cached reload (hash + lock + memory-map)", reload))
        entry = cache.cache_dir_for(path.resolve(), root)
        unhashed = best_of(args.repeat, lambda: cache._open(entry, "train"))
        rows.append(("opening the cached arrays alone (memory-map)", unhashed))
        print(f"{'step':<58}{'seconds':>9}{'MB/s':>8}")
        for name, seconds in rows:
            rate = f"{size_mb / seconds:>8.0f}" if seconds > 1e-3 else f"{'-':>8}"
            print(f"{name:<58}{seconds:>9.3f}{rate}")
        print(f"hash / parse: {rows[1][1] / parse:.1%}; load {os.getloadavg()[0]:.1f} at the end")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
