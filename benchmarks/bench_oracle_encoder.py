"""The most a better encoder could add at scarce labels on OHSUMED (issue 30, item 5).

Pretraining can only help finetuning through the encoder it hands over. This benchmark asks how
much any encoder could add under the same finetuning: for each (fold, seed) unit of
``configs/sweep/ohsumed-recipe.yaml`` it takes the encoder of that unit's ``resnet`` (the same
encoder architecture, trained as a whole network with its lr grid, vali-best epoch) trained on
*every* labeled train QG (``frac=1``), writes it as an ``encoder.pt`` (method ``oracle``: it
has seen all the train labels, which no pretraining may), and finetunes it with
the unit's 5 % and 20 % labels exactly as ``simclr-rank+full`` and ``scratch+full`` are
(``full``, lr 2e-4, `ohsumed_folds.finetune_args`). Then, paired over the 15 units:

- (o) - (s), oracle encoder minus fresh encoder: the ceiling, what an encoder that already
  ranks well adds when the head and the whole network are finetuned on the few labels;
- (p) - (s), SimCLR-Rank minus fresh encoder: what pretraining captures of it.

A small ceiling says the scarce labels, not the representation, limit the finetuned ranker
there; a large one, that pretraining leaves most of it on the table. Test is reported only.
(``scratch+full`` at ``frac=1`` would not do as the source: its vali-best epoch lies in the
head-only phase in every unit, so its encoder is the fresh one it started from.)
The oracle runs live in ``<sweep>-oracle/`` beside the sweep, so the sweep's report never
reads them.

    nice -n 10 .venv/bin/python benchmarks/bench_oracle_encoder.py
        [--sweep runs/sweeps/ohsumed-recipe] [--folds 1 2 3 4 5] [--seeds 0 1 2]
        [--fractions 0.05 0.2] [--jobs 2] [--report-only]
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import ohsumed_folds
from ohsumed_folds import finetune_args, finished_report, paired, run_dir, run_finetuning

from scarce_ltr.baselines.hybrid.embedding_features import load_encoder
from scarce_ltr.pretrain.checkpoint import ENCODER_FILE, save_encoder
from scarce_ltr.pretrain.encoders import EncoderConfig

ORACLE = "oracle+full"
MODELS = {"o": ORACLE, "p": "simclr-rank+full", "s": "scratch+full", "r": "resnet"}
MARGINS = [
    ("o", "s", "the ceiling: an encoder trained on all train labels, minus a fresh one"),
    ("p", "s", "what SimCLR-Rank pretraining adds"),
    ("o", "p", "what pretraining leaves of the ceiling"),
    ("o", "r", "the oracle encoder finetuned, minus resnet"),
]


def oracle_root(sweep: Path) -> Path:
    return sweep.parent / f"{sweep.name}-oracle"


def oracle_encoder(sweep: Path, fold: int, seed: int) -> Path:
    """``<sweep>-oracle/ohsumed/fold=<k>/encoder-seed=<s>/oracle/``, written from the unit's
    ``resnet`` at ``frac=1`` on first use (the folder's name is the finetuned runs' encoder:
    ``oracle+full``)."""
    folder = oracle_root(sweep) / "ohsumed" / f"fold={fold}" / f"encoder-seed={seed}" / "oracle"
    if (folder / ENCODER_FILE).is_file():
        return folder
    source = run_dir(sweep, "resnet", fold, seed, 1.0)
    if finished_report(source) is None:
        raise SystemExit(f"{source}: not finished; run ./run.sh sweep ohsumed-recipe first")
    encoder, info = load_encoder(source)
    folder.mkdir(parents=True, exist_ok=True)
    save_encoder(
        folder,
        encoder,
        method="oracle",
        n_features=int(info["n_features"]),
        encoder_config=EncoderConfig(**info["encoder_config"]),
        data={"name": "ohsumed", "transform": info["transform"]},
        epochs=0,
    )
    return folder


def train(cell: tuple[int, int, float], args) -> None:
    fold, seed, fraction = cell
    encoder = oracle_encoder(args.sweep, fold, seed)
    out = run_dir(oracle_root(args.sweep), ORACLE, fold, seed, fraction)
    label = f"{ORACLE} fold {fold} seed {seed} frac {fraction:g}"
    run_finetuning(out, finetune_args(fold, seed, fraction, encoder), label, wait_for=None)


def test_ndcg(args, key: str, fold: int, seed: int, fraction: float) -> float | None:
    root = oracle_root(args.sweep) if key == "o" else args.sweep
    report = finished_report(run_dir(root, MODELS[key], fold, seed, fraction))
    return None if report is None else report["_test"]


def report(args) -> None:
    for fraction in args.fractions:
        cells = [(f, s) for f in args.folds for s in args.seeds]
        scores = {k: {c: test_ndcg(args, k, *c, fraction) for c in cells} for k in MODELS}
        print(f"\n### {fraction:.0%} labeled train QGs ({len(cells)} (fold, seed) units)\n")
        print("| model | test NDCG@5 (mean ± std) |\n|---|---|")
        for key, model in MODELS.items():
            done = [v for v in scores[key].values() if v is not None]
            if len(done) > 1:
                print(f"| ({key}) {model} | {np.mean(done):.3f} ± {np.std(done, ddof=1):.3f} |")
        print("\n| paired margin | what it isolates | test NDCG@5 |\n|---|---|---|")
        for first, second, what in MARGINS:
            both = [c for c in cells if None not in (scores[first][c], scores[second][c])]
            x = [scores[first][c] for c in both]
            y = [scores[second][c] for c in both]
            print(f"| ({first}) - ({second}) | {what} | {paired(x, y)} |")


def main() -> None:
    args = ohsumed_folds.parser(__doc__, "ohsumed-recipe").parse_args()  # --no-sweep: always
    if not args.report_only:  # the sweep's frac=1 runs are the input: never runs the sweep
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda cell: train(cell, args), ohsumed_folds.units(args)))
    report(args)


if __name__ == "__main__":
    main()
