"""Teachers on the Yandex folds (issue 46, item 5): the screen of configs/sweep/yandex-teachers.yaml
(the unlabeled train QGs on the supervised side).

At 1 % of the train QGs labeled, the network finetuned with the fixed recipe and taught on the
unlabeled train QGs (by the searched tree, `~gbdt-optuna`, or by itself under noise, `~self`;
docs/teachers.md), paired over the (fold, seed) units with its untaught twin: test NDCG@5 margin,
its spread, the one-sided paired p and n, and the vali margin beside it. Then every model against
the teacher tree, the bar a taught network must also clear. Test never chooses anything here.

    ./run.sh sweep yandex-teachers 'seeds=[0]' logger=none       (the runs; resumable)
    .venv/bin/python benchmarks/bench_yandex_teachers.py [--sweep runs/sweeps/yandex-teachers]
"""

from __future__ import annotations

from bench_flags_screen import row, scores_of
from ohsumed_folds import fold_seed_units, readout_parser

TREE = "gbdt-optuna"
# (model, the model it is paired against): what the teacher adds to each student
TAUGHT = (
    ("scratch+full~gbdt-optuna", "scratch+full"),
    ("scratch+full~self", "scratch+full"),
    ("simclr-rank+full~gbdt-optuna", "simclr-rank+full"),
    ("simclr-rank+full", "scratch+full"),
)
MODELS = ("scratch+full", "simclr-rank+full", "scratch+full~gbdt-optuna", "scratch+full~self",
          "simclr-rank+full~gbdt-optuna")  # fmt: skip


def main() -> None:
    parser = readout_parser(__doc__, "yandex-teachers")
    parser.add_argument("--fraction", type=float, default=0.01)
    args = parser.parse_args()
    units = fold_seed_units(args)
    scores = {m: scores_of(args.sweep, m, units, args.fraction) for m in (TREE, *MODELS)}
    header = (
        "| model | units | test NDCG@5 | test margin over {} | vali margin |\n|---|---|---|---|---|"
    )
    print(f"\n### Yandex, {args.fraction:g} of the train QGs labeled: what a teacher adds\n")
    print(header.format("the untaught twin"))
    for model, twin in TAUGHT:
        print(row(f"`{model}` - `{twin}`", scores[model], scores[twin]))
    print(f"\n{header.format(f'`{TREE}` (the teacher)')}")
    for model in MODELS:
        print(row(f"`{model}`", scores[model], scores[TREE]))


if __name__ == "__main__":
    main()
