"""Writes a five-fold folder shaped like LETOR 4.0's MQ2008, to run the held-out evaluation's
command on this machine (issue 30).

The held-out real data the project is judged on has LETOR 4.0's shape (about 470 train, 160 vali
and 160 test QGs a fold, 46 features normalised per query, grades 0-2, about a fifth of the
queries without a relevant document), which no data set here has: OHSUMED has 63 train QGs a
fold of about 150 documents. This draws that shape from the project's synthetic generator
(`data.synthetic`: latent relevance, LETOR-like feature kinds, query-constant features), caps
the grades at 2, scales every feature min-max within its query (LETOR's QueryLevelNorm) and
writes it with `data.letor.write_letor`, so that ``./run.sh sweep hybrid data=mq2008 ...`` runs
end to end at 2-10 % labels (a label draw of about 10 QGs, some without a relevant item; the
outlier detector on query-normalised features) and its cost can be measured. Its NDCG figures
say nothing about real data: the relevance is the generator's.

The queries are dealt into five parts; ``Fold<k>`` trains on three, validates and tests on one
each, rotating as LETOR does.

    .venv/bin/python benchmarks/letor4_shaped.py /tmp/mq2008-shaped [--queries 784] [--seed 7]
    ./run.sh sweep hybrid 'datasets=[mq2008]' 'folds=[1,2,3,4,5]' 'fractions=[0.02,0.05,0.1]' \\
        'overrides.common=[data.path=/tmp/mq2008-shaped]' run_dir=runs/sweeps/hybrid-mq2008-shaped
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from scarce_ltr.data.letor import write_letor
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.synthetic import SyntheticSpec, generate

TOP_GRADE = 2  # LETOR 4.0 grades 0-2


def mq2008_shaped(n_queries: int, seed: int) -> RankingSplit:
    """``n_queries`` QGs of MQ2008's shape: 46 features, 5-121 documents (mean 19.4), grades 0-2,
    about a fifth without a relevant document, every feature min-max scaled within its QG."""
    spec = SyntheticSpec(
        n_train_groups=n_queries,
        n_vali_groups=1,  # the generator draws three splits; only train is used
        n_test_groups=1,
        n_features=46,
        mean_group_size=19.4,
        min_group_size=5,
        max_group_size=121,
        group_size_sigma=0.6,
        frac_relevant=0.25,
        frac_groups_without_relevant=0.2,
        outlier_group_rate=0.0,  # far values would be scaled away within their query anyway
        seed=seed,
    )
    split = generate(spec)["train"]
    low = np.minimum.reduceat(split.features, split.offsets[:-1])
    span = np.maximum.reduceat(split.features, split.offsets[:-1]) - low
    group = split.group_index
    scaled = (split.features - low[group]) / np.where(span > 0, span, 1.0)[group]
    return RankingSplit(
        scaled.astype(np.float32),
        np.minimum(split.labels, TOP_GRADE),
        split.offsets,
        split.qids,
        "all",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder to write Fold1 ... Fold5 into")
    parser.add_argument("--queries", type=int, default=784, help="MQ2008 has 784")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    queries = mq2008_shaped(args.queries, args.seed)
    parts = np.array_split(np.random.default_rng(args.seed).permutation(queries.n_groups), 5)
    for k in range(5):
        rotation = [parts[(k + i) % 5] for i in range(5)]
        members = {"train": np.concatenate(rotation[:3]), "vali": rotation[3], "test": rotation[4]}
        for name, groups in members.items():
            path = args.out / f"Fold{k + 1}" / f"{name}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_letor(queries.subset(np.sort(groups)), path)
    print(f"{args.out}: 5 folds, {queries.n_groups} queries, {queries.n_items} documents")


if __name__ == "__main__":
    main()
