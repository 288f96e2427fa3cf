"""The paper's released pretraining recipe taken apart on the Yandex folds (issue 60, item 1):
the screen of configs/sweep/yandex-released.yaml.

Each pretraining of that sweep, finetuned with the fixed recipe at 1 % of the train QGs labeled,
paired over the (fold, seed) units with the same finetuning from a fresh encoder
(``scratch+full``): test NDCG@5, the margin with its spread, the one-sided paired p and n, and
the vali margin beside it. Then each ``released-*`` variant, which takes one difference of the
released recipe back to SimCLR-Rank's default, paired against ``simclr@released`` itself: what
that one difference is worth (a negative margin: the released setting was the better one).
Test chooses nothing here.

    ./run.sh sweep yandex-released 'seeds=[0]' logger=none      (the runs; resumable)
    .venv/bin/python benchmarks/bench_released_ablation.py --sweep <runs>/sweeps/yandex-released
"""

from __future__ import annotations

from bench_flags_screen import row, scores_of
from ohsumed_folds import fold_seed_units, readout_parser

SCRATCH = "scratch+full"
RELEASED = "simclr@released+full"
# model -> the one difference it takes back from the released recipe
ABLATIONS = {
    "simclr-rank@released-b256+full": "in-QG negatives (eq. 3) instead of batch-wide (eq. 2)",
    "simclr@released-noise+full": "Gaussian noise 1.0 instead of same-QG swaps p 0.8",
    "simclr@released-tau0.1+full": "temperature 0.1 instead of 0.07",
    "simclr@released-proj128+full": "projection 128 wide (the encoder's) instead of 16",
    "simclr@released-b1024+full": "1,024-item batches (1/4 of the steps) instead of 256",
    "simclr@released-e60+full": "60 pretraining epochs instead of 20",
    "simclr@released-e100+full": "100 pretraining epochs instead of 20",
}
START = "simclr-rank@noise1+full"  # today's SimCLR-Rank default: the starting point
# Tests of why the recipe works (each against simclr@released): with 80 % of an item's entries
# from other items of its own QG, both views look like the QG, so batch-wide negatives may teach
# the encoder to tell QGs apart; donors from any QG of the batch take that away.
WHY = {"simclr@released-global+full": "swap donors from the whole batch instead of the QG"}


def main() -> None:
    parser = readout_parser(__doc__, "yandex-released")
    parser.add_argument("--fraction", type=float, default=0.01)
    args = parser.parse_args()
    units = fold_seed_units(args)

    def scores(model: str) -> dict:
        return scores_of(args.sweep, model, units, args.fraction)

    scratch, released = scores(SCRATCH), scores(RELEASED)
    header = "| units | test NDCG@5 | test margin | vali margin |"
    print(f"\n### Yandex, {args.fraction:g} of the train QGs labeled, fixed recipe\n")
    print(f"| pretraining + `full` (against {SCRATCH}) {header}\n|---|---|---|---|---|")
    for model in (RELEASED, START, *ABLATIONS, *WHY):
        print(row(f"`{model}`", scores(model), scratch))
    print(f"\n| one difference taken back (against {RELEASED}) {header}\n|---|---|---|---|---|")
    for model, change in {**ABLATIONS, **WHY}.items():
        print(row(f"{change} (`{model}`)", scores(model), released))


if __name__ == "__main__":
    main()
