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

``--synthetic`` asks the same on the synthetic default, where pretraining does pay under this
recipe: the quick sweep of ``benchmarks/bench_scratch_synthetic.py`` (``--sweep`` defaults to
its ``runs/sweeps/quick-scratch``, seeds 0-5, fractions 2 / 10 / 50 %); the ``resnet`` with
every train QG labeled, which that sweep lacks, is trained here first, in ``<sweep>-oracle/``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import ohsumed_folds
from ohsumed_folds import ROOT, finetune_args, finished_report, paired, run_finetuning

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
# The quick sweep's settings (configs/sweep/quick.yaml) for --synthetic.
SYNTHETIC = ["data=synthetic", "logger=none"]


def oracle_root(sweep: Path) -> Path:
    return sweep.parent / f"{sweep.name}-oracle"


def cell_dir(root: Path, model: str, fold: int | None, seed: int, fraction: float) -> Path:
    """A run folder of the sweep at ``root``: OHSUMED's per fold, the synthetic one without."""
    if fold is not None:
        return ohsumed_folds.run_dir(root, model, fold, seed, fraction)
    stage = "baseline" if model == "resnet" else "finetune"
    return root / "synthetic" / stage / model / f"frac={fraction:g}" / f"seed={seed}"


def cell_args(fold: int | None, seed: int, fraction: float, pretrained: Path | str) -> list[str]:
    """The sweep's ``finetune full`` job of a cell (lr 2e-4, vali fully labeled)."""
    if fold is not None:
        return finetune_args(fold, seed, fraction, pretrained)
    return ["finetune", "full", *SYNTHETIC, f"seed={seed}", f"scarcity.fraction={fraction}",
            "scarcity.val=full", f"pretrained={pretrained}", "optimizer.lr=2.0e-4"]  # fmt: skip


def fully_labeled_resnet(args, fold: int | None, seed: int) -> Path:
    """The unit's ``resnet`` at ``frac=1``: OHSUMED's sweep has it; for the synthetic data it
    is trained here (the quick sweep's data and keys)."""
    if fold is not None:
        source = cell_dir(args.sweep, "resnet", fold, seed, 1.0)
        if finished_report(source) is None:
            raise SystemExit(f"{source}: not finished; run ./run.sh sweep ohsumed-recipe first")
        return source
    source = cell_dir(oracle_root(args.sweep), "resnet", None, seed, 1.0)
    command = ["baseline", "resnet", *SYNTHETIC, f"seed={seed}", "scarcity.fraction=1.0"]
    run_finetuning(source, [*command, "scarcity.val=full"], f"resnet seed {seed}", wait_for=None)
    return source


def oracle_encoder(args, fold: int | None, seed: int) -> Path:
    """``<sweep>-oracle/<data>/[fold=<k>/]encoder-seed=<s>/oracle/``, written from the unit's
    ``resnet`` at ``frac=1`` on first use (the folder's name is the finetuned runs' encoder:
    ``oracle+full``)."""
    data = "synthetic" if fold is None else f"ohsumed/fold={fold}"
    folder = oracle_root(args.sweep) / data / f"encoder-seed={seed}" / "oracle"
    if (folder / ENCODER_FILE).is_file():
        return folder
    encoder, info = load_encoder(fully_labeled_resnet(args, fold, seed))
    folder.mkdir(parents=True, exist_ok=True)
    save_encoder(
        folder,
        encoder,
        method="oracle",
        n_features=int(info["n_features"]),
        encoder_config=EncoderConfig(**info["encoder_config"]),
        data={"name": data.split("/")[0], "transform": info["transform"]},
        epochs=0,
    )
    return folder


def train(unit: tuple[int | None, int], args) -> None:
    """Every fraction of one (fold, seed) unit, on its oracle encoder."""
    fold, seed = unit
    encoder = oracle_encoder(args, fold, seed)
    for fraction in args.fractions:
        out = cell_dir(oracle_root(args.sweep), ORACLE, fold, seed, fraction)
        label = f"{ORACLE} fold {fold} seed {seed} frac {fraction:g}"
        run_finetuning(out, cell_args(fold, seed, fraction, encoder), label, wait_for=None)


def test_ndcg(args, key: str, unit: tuple[int | None, int], fraction: float) -> float | None:
    root = oracle_root(args.sweep) if key == "o" else args.sweep
    report = finished_report(cell_dir(root, MODELS[key], *unit, fraction))
    return None if report is None else report["_test"]


def report(args, units: list[tuple[int | None, int]]) -> None:
    for fraction in args.fractions:
        scores = {k: {u: test_ndcg(args, k, u, fraction) for u in units} for k in MODELS}
        print(f"\n### {fraction:.0%} labeled train QGs ({len(units)} units)\n")
        print("| model | test NDCG@5 (mean ± std) |\n|---|---|")
        for key, model in MODELS.items():
            done = [v for v in scores[key].values() if v is not None]
            if len(done) > 1:
                print(f"| ({key}) {model} | {np.mean(done):.3f} ± {np.std(done, ddof=1):.3f} |")
        print("\n| paired margin | what it isolates | test NDCG@5 |\n|---|---|---|")
        for first, second, what in MARGINS:
            both = [u for u in units if None not in (scores[first][u], scores[second][u])]
            x = [scores[first][u] for u in both]
            y = [scores[second][u] for u in both]
            print(f"| ({first}) - ({second}) | {what} | {paired(x, y)} |")


def main() -> None:
    parser = ohsumed_folds.parser(__doc__, "ohsumed-recipe")  # --no-sweep: always
    parser.add_argument("--synthetic", action="store_true")
    args = parser.parse_args()
    if args.synthetic:
        if args.sweep == ROOT / "runs" / "sweeps" / "ohsumed-recipe":
            args.sweep = ROOT / "runs" / "sweeps" / "quick-scratch"
        if args.seeds == [0, 1, 2]:
            args.seeds = [0, 1, 2, 3, 4, 5]
        if args.fractions == [0.05, 0.2]:
            args.fractions = [0.02, 0.1, 0.5]
    folds = [None] if args.synthetic else args.folds
    units = [(fold, seed) for fold in folds for seed in args.seeds]
    if not args.report_only:  # the sweep's runs are the input: this never runs the sweep
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda unit: train(unit, args), units))
    report(args, units)


if __name__ == "__main__":
    main()
