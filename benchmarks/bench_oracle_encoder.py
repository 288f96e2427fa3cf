"""The most a better encoder could add at scarce labels on OHSUMED (issue 30, item 5), Yandex
(issue 46, item 2) or the synthetic default.

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

``--data yandex`` asks the same on the Yandex web-search folds: ``configs/sweep/yandex-recipe.yaml``
(``--sweep`` defaults to its ``runs/sweeps/yandex-recipe``, fractions 1 / 3 / 10 %). With
``--with-sweep`` (either data set) the benchmark first runs the sweep jobs each unit needs, one
(fold, seed) unit at a time, seed by seed (every fold at the first seed before the second):
``resnet`` at ``frac=1``, the oracle finetunings on its encoder, then the pretraining,
``scratch+full`` and ``simclr-rank+full`` at the benchmark's fractions (not the sweep's whole
cross product); ``--jobs`` is then the sweep's workers. A stopped run resumes (finished runs are
skipped), and the report pairs the units finished so far:

    nice -n 19 .venv/bin/python benchmarks/bench_oracle_encoder.py --data yandex --with-sweep

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
from ohsumed_folds import (
    ROOT,
    finetune_args,
    finished_report,
    paired,
    run_finetuning,
    run_sweep,
    units_needed,
    units_needed_t,
)

from scarce_ltr.pretrain.checkpoint import ENCODER_FILE, save_encoder
from scarce_ltr.pretrain.encoders import EncoderConfig
from scarce_ltr.trees.lightgbm.hybrid.embedding_features import load_encoder

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
# Per data set: its sweep (runs/sweeps/<sweep> by default), fractions and seeds; --synthetic's
# sweep is bench_scratch_synthetic.py's quick one.
DEFAULTS = {
    "ohsumed": ("ohsumed-recipe", [0.05, 0.2], [0, 1, 2]),
    "yandex": ("yandex-recipe", [0.01, 0.03, 0.1], [0, 1, 2]),
    "synthetic": ("quick-scratch", [0.02, 0.1, 0.5], [0, 1, 2, 3, 4, 5]),
}


def oracle_root(sweep: Path) -> Path:
    return sweep.parent / f"{sweep.name}-oracle"


def cell_dir(args, root: Path, model: str, fold: int | None, seed: int, fraction: float) -> Path:
    """A run folder of the sweep at ``root``: a five-fold set's per fold, the synthetic one
    without."""
    if fold is not None:
        return ohsumed_folds.run_dir(root, model, fold, seed, fraction, args.data)
    stage = "baseline" if model == "resnet" else "finetune"
    return root / "synthetic" / stage / model / f"frac={fraction:g}" / f"seed={seed}"


def cell_args(
    args, fold: int | None, seed: int, fraction: float, pretrained: Path | str
) -> list[str]:
    """The sweep's ``finetune full`` job of a cell (lr 2e-4, vali fully labeled)."""
    if fold is not None:
        return finetune_args(fold, seed, fraction, pretrained, args.data)
    return ["finetune", "full", *SYNTHETIC, f"seed={seed}", f"scarcity.fraction={fraction}",
            "scarcity.val=full", f"pretrained={pretrained}", "optimizer.lr=2.0e-4"]  # fmt: skip


def fully_labeled_resnet(args, fold: int | None, seed: int) -> Path:
    """The unit's ``resnet`` at ``frac=1``: a five-fold set's sweep has it (run here first with
    ``--with-sweep``); for the synthetic data it is trained here (the quick sweep's data and
    keys)."""
    if fold is not None:
        source = cell_dir(args, args.sweep, "resnet", fold, seed, 1.0)
        if args.with_sweep:
            run_sweep(args.sweep_name, args, folds=[fold], seeds=[seed], fractions=[1.0],
                      models=["resnet"])  # fmt: skip
        if finished_report(source) is None:
            raise SystemExit(
                f"{source}: not finished; run ./run.sh sweep {args.sweep_name} first "
                "(or this benchmark with --with-sweep)"
            )
        return source
    source = cell_dir(args, oracle_root(args.sweep), "resnet", None, seed, 1.0)
    command = ["baseline", "resnet", *SYNTHETIC, f"seed={seed}", "scarcity.fraction=1.0"]
    run_finetuning(source, [*command, "scarcity.val=full"], f"resnet seed {seed}", wait_for=None)
    return source


def oracle_encoder(args, fold: int | None, seed: int) -> Path:
    """``<sweep>-oracle/<data>/[fold=<k>/]encoder-seed=<s>/oracle/``, written from the unit's
    ``resnet`` at ``frac=1`` on first use (the folder's name is the finetuned runs' encoder:
    ``oracle+full``)."""
    data = "synthetic" if fold is None else f"{args.data}/fold={fold}"
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
    """Every fraction of one (fold, seed) unit, on its oracle encoder; with ``--with-sweep``, the
    unit's sweep jobs first (its fresh and pretrained finetunings after the oracle's)."""
    fold, seed = unit
    encoder = oracle_encoder(args, fold, seed)
    for fraction in args.fractions:
        out = cell_dir(args, oracle_root(args.sweep), ORACLE, fold, seed, fraction)
        label = f"{ORACLE} fold {fold} seed {seed} frac {fraction:g}"
        run_finetuning(out, cell_args(args, fold, seed, fraction, encoder), label, wait_for=None)
    if args.with_sweep:
        run_sweep(args.sweep_name, args, folds=[fold], seeds=[seed],
                  models=[MODELS["s"], MODELS["p"]])  # fmt: skip


def test_ndcg(args, key: str, unit: tuple[int | None, int], fraction: float) -> float | None:
    root = oracle_root(args.sweep) if key == "o" else args.sweep
    report = finished_report(cell_dir(args, root, MODELS[key], *unit, fraction))
    return None if report is None else report["_test"]


def mean_std(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f} (n={len(values)})"


def report(args, units: list[tuple[int | None, int]]) -> None:
    root = oracle_root(args.sweep) if args.synthetic else args.sweep
    sources = [finished_report(cell_dir(args, root, "resnet", *u, 1.0)) for u in units]
    sources = [r["_test"] for r in sources if r is not None]
    if len(sources) > 1:
        print(f"resnet with every train QG labeled (the oracle's source): {mean_std(sources)}")
    for fraction in args.fractions:
        scores = {k: {u: test_ndcg(args, k, u, fraction) for u in units} for k in MODELS}
        print(f"\n### {fraction:.0%} labeled train QGs ({len(units)} units)\n")
        print("| model | test NDCG@5 (mean ± std) |\n|---|---|")
        for key, model in MODELS.items():
            done = [v for v in scores[key].values() if v is not None]
            if len(done) > 1:
                print(f"| ({key}) {model} | {mean_std(done)} |")
        print("\n| paired margin | what it isolates | test NDCG@5 |\n|---|---|---|")
        for first, second, what in MARGINS:
            both = [u for u in units if None not in (scores[first][u], scores[second][u])]
            x = [scores[first][u] for u in both]
            y = [scores[second][u] for u in both]
            print(f"| ({first}) - ({second}) | {what} | {paired(x, y)} |")
        detectable(scores, units)


def detectable(scores: dict[str, dict], units: list[tuple[int | None, int]]) -> None:
    """The units a one-sided paired test at 0.05 with 80 % power needs to detect the measured
    ceiling (o) - (s) and half of it, at its measured paired std (`units_needed`)."""
    both = [u for u in units if None not in (scores["o"][u], scores["s"][u])]
    if len(both) < 2:
        return
    diffs = np.array([scores["o"][u] - scores["s"][u] for u in both])
    mean, std = float(diffs.mean()), float(diffs.std(ddof=1))
    whole, half = units_needed(mean, std), units_needed(mean / 2, std)
    exact = units_needed_t(mean, std), units_needed_t(mean / 2, std)
    print(
        f"\nUnits to detect the ceiling (one-sided paired, 0.05, 80 % power; sd {std:.3f} over "
        f"{len(both)} units): {whole:.0f} for all of it ({mean:+.3f}), {half:.0f} for half "
        f"(((1.645 + 0.84) sd / margin)^2); with Student's t {exact[0]} and {exact[1]}."
    )


def parse_args():
    """The options; ``--data`` (or ``--synthetic``) picks the defaults of --sweep, --fractions
    and --seeds (`DEFAULTS`), which the command line overrides."""
    parser = ohsumed_folds.parser(__doc__, "ohsumed-recipe")  # --no-sweep: always
    parser.add_argument("--data", choices=list(ohsumed_folds.FOLDED), default="ohsumed")
    parser.add_argument("--synthetic", action="store_true")
    parser.add_argument("--with-sweep", action="store_true", help="run the units' sweep jobs too")
    chosen, _ = parser.parse_known_args()
    sweep, fractions, seeds = DEFAULTS["synthetic" if chosen.synthetic else chosen.data]
    parser.set_defaults(sweep=ROOT / "runs" / "sweeps" / sweep, fractions=fractions, seeds=seeds)
    args = parser.parse_args()
    if args.synthetic and args.with_sweep:
        parser.error("--with-sweep runs a five-fold sweep; --synthetic reads the quick one")
    args.sweep_name = sweep
    return args


def main() -> None:
    args = parse_args()
    folds = [None] if args.synthetic else args.folds
    units = [(fold, seed) for seed in args.seeds for fold in folds]  # every fold at seed 0 first
    if args.report_only:
        pass
    elif args.with_sweep:  # one sweep process at a time: its folder is locked while it runs
        for unit in units:
            train(unit, args)
    else:  # the sweep's runs are the input
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda unit: train(unit, args), units))
    report(args, units)


if __name__ == "__main__":
    main()
