"""Writes a five-fold folder shaped like LETOR 4.0's MQ2008, to run the held-out evaluation's
command on this machine (issue 30).

The held-out real data the project is judged on has LETOR 4.0's shape (about 470 train, 160 vali
and 160 test QGs a fold, 46 features normalised per query, grades 0-2, about a fifth of the
queries without a relevant document), which no data set here has: OHSUMED has 63 train QGs a
fold of about 150 documents. This writes that shape with a planted relevance signal, so that
``./run.sh sweep hybrid data=mq2008 ...`` runs end to end at 2-10 % labels (a label draw of 9
QGs, some without a relevant item; the outlier detector on query-normalised features) and its
cost can be measured. Its NDCG figures say nothing about real data: the relevance is a latent
variable of the features made here.

Per query: 5-121 documents (log-normal, median 16), a 4-dimensional latent item vector ``z``,
relevance ``z0 + z1 * z2 / 2`` cut at its query's 75th and 92nd percentiles (grades 1 and 2;
all 0 in a fifth of the queries), 40 features a fixed linear map of ``z`` plus noise and a query
shift, 6 constant ones, every feature then min-max scaled within its query (QueryLevelNorm).
Queries are dealt into five parts; ``Fold<k>`` trains on three, validates and tests on one each,
rotating as LETOR does.

    .venv/bin/python benchmarks/letor4_shaped.py /tmp/mq2008-shaped [--queries 784] [--seed 7]
    ./run.sh sweep hybrid 'datasets=[mq2008]' 'folds=[1,2,3,4,5]' 'fractions=[0.02,0.05,0.1]' \\
        'overrides.common=[data.path=/tmp/mq2008-shaped]' run_dir=runs/sweeps/hybrid-mq2008-shaped
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

N_FEATURES = 46
N_CONSTANT = 6  # features that never vary, as LETOR files have
N_LATENT = 4
SHARE_WITHOUT_RELEVANT = 0.2


def make_queries(n_queries: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(labels [n], features [n, 46])`` of each query, features scaled within the query."""
    rng = np.random.default_rng(seed)
    varying = N_FEATURES - N_CONSTANT
    mapping = rng.normal(size=(varying, N_LATENT))
    queries = []
    for _ in range(n_queries):
        n = int(np.clip(rng.lognormal(2.8, 0.5), 5, 121))
        z = rng.normal(size=(n, N_LATENT))
        relevance = z[:, 0] + 0.5 * z[:, 1] * z[:, 2]
        one, two = np.quantile(relevance, [0.75, 0.92])
        labels = (relevance > one).astype(np.int64) + (relevance > two)
        if rng.random() < SHARE_WITHOUT_RELEVANT:
            labels[:] = 0
        shift = rng.normal(size=varying)
        raw = z @ mapping.T + rng.normal(scale=1.5, size=(n, varying)) + shift
        low, span = raw.min(0), np.ptp(raw, axis=0)
        scaled = (raw - low) / np.where(span > 0, span, 1.0)
        features = np.hstack([scaled, np.zeros((n, N_CONSTANT))])
        queries.append((labels, features))
    return queries


def write_split(path: Path, queries: list, members: np.ndarray, first_qid: int) -> None:
    lines = []
    for i in np.sort(members):
        labels, features = queries[i]
        qid = first_qid + int(i)
        for doc, (label, row) in enumerate(zip(labels, features, strict=True)):
            values = " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(row))
            lines.append(f"{label} qid:{qid} {values} #docid = D{qid}-{doc}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder to write Fold1 ... Fold5 into")
    parser.add_argument("--queries", type=int, default=784, help="MQ2008 has 784")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    queries = make_queries(args.queries, args.seed)
    parts = np.array_split(np.random.default_rng(args.seed).permutation(len(queries)), 5)
    for k in range(5):
        train, vali, test = (
            np.concatenate([parts[(k + i) % 5] for i in range(3)]),
            parts[(k + 3) % 5],
            parts[(k + 4) % 5],
        )
        for name, members in (("train", train), ("vali", vali), ("test", test)):
            write_split(args.out / f"Fold{k + 1}" / f"{name}.txt", queries, members, 10000)
    sizes = [len(labels) for labels, _ in queries]
    print(f"{args.out}: 5 folds, {len(queries)} queries, {sum(sizes)} documents")


if __name__ == "__main__":
    main()
