"""Why an encoder helps or not (issue 60, item 4): linear probe, finetuning, CKA to the oracle.

Per encoder of a folded sweep, what a linear probe, the finetuning and the oracle's
representation say.

For every pretraining of ``--sweep`` (``<sweep>/<data>/fold=<k>/pretrain/<method>[@<variant>]/
seed=<s>/encoder.pt``), the random-init encoder (``torch.manual_seed(seed)``, then
`build_encoder` with the first pretraining's architecture: pretrain/train.py seeds torch so
before its objective builds the encoder) and the oracle encoder (bench_oracle_encoder.py's: the
unit's ``resnet`` of ``--oracle-sweep`` trained on every train label, ``frac=1``; its
`oracle_encoder` finds it in ``<oracle-sweep>-oracle/`` or writes it there on first use), per
(fold, seed) unit at ``--fraction`` of the train QGs labeled:

1. linear probe: ridge regression (scikit-learn, for speed; not a LambdaRank head) of the labels
   on the frozen, standardised embeddings of the labeled train QGs, the QGs the unit's
   finetuning saw (its run's ``config.yaml`` through `prepare_data`: the same
   ``scarcity.fraction`` and seed), alpha chosen on vali NDCG@5 from `ALPHAS`; test NDCG@5 and
   the chosen alpha's vali NDCG@5 (core.metrics, the run's empty-QG policy);
2. the full finetuning's test NDCG@5: ``<method>+full`` of the sweep, ``scratch+full`` for the
   random init, ``oracle+full`` of ``<oracle-sweep>-oracle/`` for the oracle (blank if absent);
3. linear CKA (Kornblith et al. 2019) to the oracle's embeddings on up to ``--cka-items`` vali
   items, the same items for every encoder and unit of a fold (drawn with a fixed seed): over the
   items as they are, and within QGs (each QG's mean taken off both sides first, `within_qg`):
   NDCG compares the items of a QG only, so what an encoder writes about which QG an item is in
   (the between-QG share, 5.) no ranking can use, yet it can dominate the plain CKA; and the
   within-QG CKA of the *finetuned* encoder (``scratch+full``'s for the random init,
   ``<method>+full``'s for a pretraining): whether finetuning from that start ends closer to the
   oracle than finetuning from a fresh one;
4. the effective rank (pretrain.monitor) of the embeddings on those items;
5. the between-QG share of the embeddings' variance on every vali item (`between_qg_share`):
   how much of what the encoder writes says which QG an item is in rather than how it differs
   from its QG's other items (NDCG compares items within a QG only).

``--label-trained`` adds a row for the oracle sweep's ``resnet`` at ``--fraction``: a fresh
network trained on the unit's own labels (the same draw) with that sweep's lr grid, measured as
the encoders are (its "finetuning" is its own test NDCG@5): how close the labels alone bring an
encoder to the oracle, against what a pretraining brings before any label.

Each column is the mean ± std over units; a margin column is the paired margin over the random
init (``scratch+full`` for the finetuning), as `ohsumed_folds.paired` prints it.

The reading (`reading`): a margin is *up* (*down*) where its one-sided paired t-test over the
units gives p < 0.05 (`paired_greater`). An encoder *learned something* where the probe or the
within-QG CKA to the oracle is up over the random init, and *pays* where ``<method>+full`` is up
over ``scratch+full``. Learned and pays: "closer to the oracle and pays" (CKA up) or "a linear
signal that pays" (probe up alone); learned, not paying: "learned something the labels do not use";
neither up: "learned nothing (probe and CKA within the random init's spread)", or "below the
random init" where one of them is down; either adds whether finetuning pays or costs anyway
(``scratch+full`` over ``<method>+full``: down). Where no oracle is found the CKA is blank and
the probe alone reads "learned". Test chooses nothing: alpha is vali's; the probe's test
NDCG@5 serves the diagnosis only, never a model choice.

    nice -n 10 .venv/bin/python benchmarks/bench_encoder_diagnostics.py [--sweep runs/sweeps/
        yandex-recipe] [--data yandex] [--fraction 0.01] [--folds 1 2 3 4 5] [--seeds 0 1 2]
        [--oracle-sweep runs/sweeps/yandex-recipe] [--models simclr-rank ...] [--cka-items 5000]

The oracle needs ``resnet`` at ``frac=1`` of the oracle sweep; without it the oracle row and the
CKA columns are blank and the script prints the command that trains it:
``benchmarks/bench_oracle_encoder.py --data yandex --with-sweep``.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import bench_oracle_encoder
import numpy as np
import torch
from ohsumed_folds import FOLDED, ROOT, finished_report, fold_seed_units, paired, readout_parser
from ohsumed_folds import run_dir as cell
from sklearn.linear_model import Ridge

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.metrics import mean_ndcg
from scarce_ltr.core.run_config import read_config
from scarce_ltr.data.pipeline import PreparedData, prepare_data
from scarce_ltr.data.ranking_split import rows_of_groups
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.finetune.model import MODEL_FILE
from scarce_ltr.pretrain.checkpoint import ENCODER_FILE, load_pretrained_encoder
from scarce_ltr.pretrain.encoders import build_encoder
from scarce_ltr.pretrain.monitor import effective_rank
from scarce_ltr.reports.stats import paired_greater
from scarce_ltr.trees.lightgbm.hybrid.embedding_features import embed_split, load_encoder

ALPHAS = (1e3, 1e2, 1e1, 1.0, 1e-1, 1e-2)  # strongest first: a tie on vali keeps the stronger
CKA_SEED = 0
ITEM_BUDGET = 8192
RANDOM, ORACLE, SCRATCH = "random init", "oracle", "scratch+full"
# --label-trained's row: the oracle sweep's ``resnet`` at --fraction, a fresh network trained on
# the unit's own labels (the same draw: same seed and fraction) with its sweep's lr grid.
LABELS = "resnet"
# The probe's view of a split: [n, D] embeddings, [n] labels, [n_groups + 1] QG offsets.
Items = tuple[np.ndarray, np.ndarray, np.ndarray]


def linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA of ``[n, d1]`` and ``[n, d2]`` embeddings of the same n items (rows):
    ``||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)`` on column-centred features, in [0, 1];
    invariant to orthogonal maps and isotropic scaling of either side; NaN for a constant
    side. Example: x = [[1], [2], [3]], y = [[2], [4], [7]]: centred (-1, 0, 1) and
    (-2.33, -0.33, 2.67); 4.99^2 / (2 * 12.67) = 0.984 (the squared correlation)."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x, axis=0)
    y = np.asarray(y, dtype=np.float64) - np.mean(y, axis=0)
    scale = np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)
    if not scale > 0:
        return float("nan")
    return float(np.linalg.norm(y.T @ x) ** 2 / scale)


def within_qg(x: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``x [n_items, D]`` with the mean of its QG (``offsets [n_groups + 1]``) taken off every
    item: what is left is how the items of a QG differ, all a ranking of that QG can use.
    Example: items [[0], [2], [10], [13]] in QGs of two -> [[-1], [1], [-1.5], [1.5]]."""
    x = np.asarray(x, dtype=np.float64)
    sizes = np.diff(offsets)
    means = np.zeros((len(sizes), x.shape[1]))
    filled = sizes > 0
    means[filled] = np.add.reduceat(x, offsets[:-1][filled], axis=0) / sizes[filled, None]
    return x - np.repeat(means, sizes, axis=0)


def between_qg_share(x: np.ndarray, offsets: np.ndarray) -> float:
    """The share of the total variance of ``x [n_items, D]`` (summed over dimensions) that lies
    between the QGs ``offsets [n_groups + 1]`` delimit: 0 when every QG has the same mean, 1
    when the items of each QG coincide. Example: items [[0], [2], [10], [12]] in QGs of two:
    QG means 1 and 11, between 2 * 25 + 2 * 25 = 100 of a total 104, share 0.96. The between
    part is the total less what is left within QGs (`within_qg`: 4 here)."""
    x = np.asarray(x, dtype=np.float64)
    total = float(((x - x.mean(axis=0)) ** 2).sum())
    return 1.0 - float((within_qg(x, offsets) ** 2).sum()) / total if total > 0 else 0.0


def ridge_scores(train_x: np.ndarray, train_y: np.ndarray, alpha: float, *others: np.ndarray):
    """Ridge of ``[n]`` labels on ``[n, D]`` embeddings, standardised on the train rows (a
    constant column stays 0); returns the ``[m]`` scores of each of ``others`` (``[m, D]``)."""
    mean, std = train_x.mean(axis=0), train_x.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    model = Ridge(alpha=alpha).fit((train_x - mean) / std, train_y)
    return [model.predict((x - mean) / std) for x in others]


def linear_probe(
    train: tuple[np.ndarray, np.ndarray],
    vali: Items,
    test: Items,
    *,
    alphas=ALPHAS,
    policy: str = "skip",
    k: int = 5,
) -> dict:
    """``{"alpha", "vali", "test"}``: the ridge probe (`ridge_scores`) fit on ``train``'s
    ``([n, D] embeddings, [n] labels)``, alpha the first of ``alphas`` with the best vali
    NDCG@k, and that alpha's vali and test NDCG@k; NaN throughout for non-finite embeddings."""
    if not all(np.isfinite(x).all() for x in (train[0], vali[0], test[0])):
        return {"alpha": float("nan"), "vali": float("nan"), "test": float("nan")}
    best = None
    for alpha in alphas:
        vali_s, test_s = ridge_scores(*train, alpha, vali[0], test[0])
        score = mean_ndcg(vali_s, vali[1], vali[2], k=k, policy=policy)
        if best is None or score > best["vali"]:
            test_ndcg = mean_ndcg(test_s, test[1], test[2], k=k, policy=policy)
            best = {"alpha": alpha, "vali": score, "test": test_ndcg}
    assert best is not None
    return best


def direction(x: dict, y: dict, *, alpha: float = 0.05) -> str | None:
    """``up`` / ``down`` / ``level``: x over y by the one-sided paired test over their common
    units (``{unit: value}``); None under two pairs."""
    _, _, n, p_up = paired_greater(x, y)
    if n < 2:
        return None
    if p_up < alpha:
        return "up"
    return "down" if paired_greater(y, x)[3] < alpha else "level"


def reading(probe: str | None, cka: str | None, finetune: str | None) -> str:
    """The row's reading from the directions (`direction`) of its probe and CKA over the random
    init and of its finetuning over scratch+full (the module docstring's rule)."""
    if probe is None:
        return "too few units to read"
    if "up" not in (probe, cka):
        costs = {"up": ", yet finetuning pays", "down": "; finetuning costs"}.get(finetune, "")
        if "down" in (probe, cka):
            return "below the random init (probe or CKA down)" + costs
        return "learned nothing (probe and CKA within the random init's spread)" + costs
    if finetune is None:
        return "learned something; no finetuning to read"
    if finetune == "up":
        return "closer to the oracle and pays" if cka == "up" else "a linear signal that pays"
    costs = " (finetuning costs)" if finetune == "down" else ""
    return "learned something the labels do not use" + costs


def pretrained_models(args) -> list[str]:
    """``--models``, else every ``pretrain/*`` folder of the sweep's folds, sorted."""
    if args.models:
        return args.models
    found = set()
    for fold in args.folds:
        stage = args.sweep / args.data / f"fold={fold}" / "pretrain"
        found |= {p.name for p in stage.glob("*") if p.is_dir()}
    return sorted(found)


def unit_data(args, fold: int, seed: int, models: list[str]) -> tuple[PreparedData, str]:
    """The unit's data as its finetuning saw it (the labeled train QGs above all) and the empty-QG
    policy: from the config of its ``scratch+full`` or ``<model>+full`` run at ``--fraction``,
    else of a pretraining with ``scarcity.fraction`` set to it."""
    runs = [cell(args.sweep, m, fold, seed, args.fraction, args.data)
            for m in [SCRATCH, *(f"{m}+full" for m in models)]]  # fmt: skip
    runs += [args.sweep / args.data / f"fold={fold}" / "pretrain" / m / f"seed={seed}"
             for m in models]  # fmt: skip
    for folder in runs:
        if (folder / "config.yaml").is_file():
            cfg = read_config(folder, CommonConfig)
            if folder.parts[-3] == "pretrain":
                scarcity = dataclasses.replace(cfg.scarcity, fraction=args.fraction)
                cfg = dataclasses.replace(cfg, scarcity=scarcity)
            return prepare_data(cfg), cfg.metrics.policy
    raise SystemExit(f"fold {fold} seed {seed}: no run with a config.yaml in {args.sweep}")


def unit_encoders(args, fold: int, seed: int, models: list[str]) -> dict:
    """``{name: (encoder, n_features)}`` (CPU, eval mode) of the unit: its finished
    pretrainings, the random init of their architecture, the oracle where it can be had and, with
    ``--label-trained``, the network trained on the unit's labels (`LABELS`) where finished."""
    encoders, config = {}, None
    for model in models:
        folder = args.sweep / args.data / f"fold={fold}" / "pretrain" / model / f"seed={seed}"
        if (folder / ENCODER_FILE).is_file():
            encoder, info = load_pretrained_encoder(folder)
            encoders[model] = encoder, info["n_features"]
            config = config or (info["encoder_config"], info["n_features"])
    if config is not None:
        torch.manual_seed(seed)  # as the pretraining stage, before it builds its encoder
        encoders[RANDOM] = build_encoder(config[0], n_features=config[1]).eval(), config[1]
    oracle = oracle_folder(args, fold, seed)
    if oracle is not None:
        encoder, info = load_pretrained_encoder(oracle)
        encoders[ORACLE] = encoder, info["n_features"]
    labeled = result_cell(args, LABELS, fold, seed)
    if args.label_trained and finished_report(labeled) is not None:
        encoder, info = load_encoder(labeled)
        encoders[LABELS] = encoder, info["n_features"]
    return encoders


def finetuned_encoders(args, fold: int, seed: int, names) -> dict:
    """``{name: encoder}`` (CPU, eval mode) of the unit's finished full finetunings: the encoder
    of ``scratch+full`` for the random init, of ``<name>+full`` for a pretraining."""
    encoders = {}
    for name in names:
        folder = result_cell(args, name, fold, seed)
        if finished_report(folder) is not None and (folder / MODEL_FILE).is_file():
            encoders[name] = load_encoder(folder)[0]
    return encoders


def oracle_folder(args, fold: int, seed: int) -> Path | None:
    """bench_oracle_encoder's oracle encoder of the unit (written there from the finished
    ``resnet`` at ``frac=1`` on first use); None where that run is missing."""
    oracle_args = argparse.Namespace(sweep=args.oracle_sweep, data=args.data, with_sweep=False,
                                     sweep_name=args.oracle_sweep.name)  # fmt: skip
    try:
        return bench_oracle_encoder.oracle_encoder(oracle_args, fold, seed)
    except SystemExit:
        return None


def measure_unit(args, fold: int, seed: int, models: list[str]) -> dict[str, dict]:
    """``{encoder: {probe_test, probe_vali, alpha, cka, cka_qg, tuned_cka_qg, rank, qg_share,
    finetune}}`` of one unit."""
    encoders = unit_encoders(args, fold, seed, models)
    if not encoders:
        return {}
    prepared, policy = unit_data(args, fold, seed, models)
    train = prepared.labels.labeled_train()
    labeled = np.flatnonzero(prepared.labels.vali_labeled)
    vali_rows, vali = rows_of_groups(prepared.vali.offsets, labeled), prepared.vali.subset(labeled)
    # The same vali items for every encoder and seed of a fold.
    rng = np.random.default_rng(CKA_SEED)
    sample = np.sort(rng.permutation(prepared.vali.n_items)[: args.cka_items])
    embedded = {}
    for name, (encoder, n_features) in encoders.items():
        if n_features != prepared.n_features:
            raise SystemExit(f"{name}, fold {fold} seed {seed}: the encoder takes {n_features} "
                             f"features, the data has {prepared.n_features}")  # fmt: skip
        embedded[name] = [embed_split(encoder, s, item_budget=ITEM_BUDGET)
                          for s in (train, prepared.vali, prepared.test)]  # fmt: skip
    offsets = prepared.vali.offsets
    oracle = embedded[ORACLE][1] if ORACLE in embedded else None
    oracle_within = None if oracle is None else within_qg(oracle, offsets)

    def cka(vali_x: np.ndarray, *, within: bool) -> float | None:
        """Linear CKA to the oracle on the sampled vali items, within QGs or as they are."""
        if oracle is None:
            return None
        if within:
            return linear_cka(within_qg(vali_x, offsets)[sample], oracle_within[sample])
        return linear_cka(vali_x[sample], oracle[sample])

    tuned = finetuned_encoders(args, fold, seed, [n for n in embedded if n not in (ORACLE, LABELS)])
    tuned_vali = {
        n: embed_split(e, prepared.vali, item_budget=ITEM_BUDGET) for n, e in tuned.items()
    }
    out = {}
    for name, (train_x, vali_x, test_x) in embedded.items():
        probe = linear_probe(
            (train_x, train.labels),
            (vali_x[vali_rows], vali.labels, vali.offsets),
            (test_x, prepared.test.labels, prepared.test.offsets),
            policy=policy,
        )
        out[name] = {
            "probe_test": probe["test"],
            "probe_vali": probe["vali"],
            "alpha": probe["alpha"],
            "cka": cka(vali_x, within=False),
            "cka_qg": cka(vali_x, within=True),
            "tuned_cka_qg": cka(tuned_vali[name], within=True) if name in tuned_vali else None,
            "rank": effective_rank(vali_x[sample]),
            "qg_share": between_qg_share(vali_x, offsets),
            "finetune": finetuned(args, name, fold, seed),
        }
    return out


def result_cell(args, name: str, fold: int, seed: int) -> Path:
    """The run at ``--fraction`` that an encoder's finetuning column reads: ``<name>+full`` of
    the sweep, ``scratch+full`` for the random init, ``oracle+full`` of the oracle's folder, and
    for `LABELS` that network's own run in the oracle sweep."""
    if name == ORACLE:
        root, model = bench_oracle_encoder.oracle_root(args.oracle_sweep), "oracle+full"
    elif name == LABELS:
        root, model = args.oracle_sweep, LABELS
    else:
        root, model = args.sweep, SCRATCH if name == RANDOM else f"{name}+full"
    return cell(root, model, fold, seed, args.fraction, args.data)


def finetuned(args, name: str, fold: int, seed: int) -> float | None:
    """Test NDCG@5 of `result_cell` (None: not finished)."""
    report = finished_report(result_cell(args, name, fold, seed))
    return None if report is None else report["_test"]


def column(per_unit: dict, name: str, key: str) -> dict:
    """``{unit: value}`` of one encoder's measure where it has one."""
    values = {u: m[name].get(key) for u, m in per_unit.items() if name in m}
    return {u: v for u, v in values.items() if v is not None and np.isfinite(v)}


def mean_std(values: dict, digits: int = 3) -> str:
    if not values:
        return ""
    spread = f" ± {np.std(list(values.values()), ddof=1):.{digits}f}" if len(values) > 1 else ""
    return f"{np.mean(list(values.values())):.{digits}f}{spread}"


def margin(x: dict, y: dict) -> str:
    both = [u for u in x if u in y]
    return paired([x[u] for u in both], [y[u] for u in both]) if both else ""


def table_row(per_unit: dict, name: str) -> str:
    """One encoder's Markdown row: its measures, paired margins over the random init (the
    finetuning's over scratch+full) and its reading."""
    keys = ("probe_test", "probe_vali", "finetune", "cka", "cka_qg", "tuned_cka_qg", "rank",
            "qg_share")  # fmt: skip
    get = {key: column(per_unit, name, key) for key in keys}
    base = {key: column(per_unit, RANDOM, key) for key in keys}
    units = sum(name in m for m in per_unit.values())
    margins = {k: "" if name == RANDOM else margin(get[k], base[k]) for k in keys}
    if name in (RANDOM, ORACLE, LABELS):
        read = {RANDOM: "the reference", ORACLE: "has seen every train label",
                LABELS: "what the labels alone teach a fresh network"}[name]  # fmt: skip
        if name == ORACLE:  # its CKA is 1 by definition
            margins.update(cka="", cka_qg="", tuned_cka_qg="")
    else:
        read = reading(*(direction(get[k], base[k]) for k in ("probe_test", "cka_qg", "finetune")))
    label = {RANDOM: "random init", ORACLE: "oracle (resnet, frac=1)",
             LABELS: "`resnet` on the unit's labels"}.get(name, f"`{name}`")  # fmt: skip
    cells = [label, str(units), mean_std(get["probe_test"]), mean_std(get["probe_vali"]),
             margins["probe_test"], mean_std(get["finetune"]), margins["finetune"],
             mean_std(get["cka"]), margins["cka"], mean_std(get["cka_qg"]), margins["cka_qg"],
             mean_std(get["tuned_cka_qg"]), margins["tuned_cka_qg"], mean_std(get["rank"], 1),
             mean_std(get["qg_share"]), read]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| encoder | units | probe test NDCG@5 | probe vali NDCG@5 | probe - random init "
    "| full finetuning test NDCG@5 | - scratch+full | CKA to the oracle | CKA - random init "
    "| CKA within QGs | - random init | finetuned: CKA within QGs | - scratch+full's "
    "| effective rank (vali) | between-QG share (vali) | reading |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def oracle_advice(args) -> str:
    """Where the oracle columns come from, and the command that makes them."""
    return (f"No oracle encoder in {args.oracle_sweep} (its `resnet` at frac=1): the oracle "
            "row and the CKA columns are blank. Train it (and its finetunings) first with:\n"
            f"    nice -n 19 .venv/bin/python benchmarks/bench_oracle_encoder.py --data "
            f"{args.data} --with-sweep --sweep {args.oracle_sweep} --fractions {args.fraction:g}"
            f" --folds {' '.join(map(str, args.folds))} --seeds "
            f"{' '.join(map(str, args.seeds))}")  # fmt: skip


def parse_args():
    parser = readout_parser(__doc__, "yandex-recipe")
    parser.add_argument("--data", choices=list(FOLDED), default="yandex")
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--oracle-sweep", type=Path, default=None,
                        help="where the oracle's resnet frac=1 runs are (default: "
                        "bench_oracle_encoder's sweep of --data)")  # fmt: skip
    parser.add_argument("--models", nargs="+", default=None,
                        help="pretrain/<name> folders (default: every one found)")  # fmt: skip
    parser.add_argument("--cka-items", type=int, default=5000)
    parser.add_argument("--label-trained", action="store_true",
                        help="a row for the oracle sweep's resnet at --fraction: a fresh network "
                        "trained on the unit's labels")  # fmt: skip
    args = parser.parse_args()
    if args.oracle_sweep is None:
        name = bench_oracle_encoder.DEFAULTS[args.data][0]
        args.oracle_sweep = ROOT / "runs" / "sweeps" / name
    return args


def main() -> None:
    args = parse_args()
    models = pretrained_models(args)
    if not models:
        raise SystemExit(f"{args.sweep / args.data}: no fold=<k>/pretrain/<method> folders")
    try:
        per_unit = {u: measure_unit(args, *u, models) for u in fold_seed_units(args)}
    except UserError as exc:
        raise SystemExit(f"error: {exc}") from None
    per_unit = {u: m for u, m in per_unit.items() if m}
    print(f"\n### {args.data}, {args.fraction:g} of the train QGs labeled: {len(per_unit)} "
          f"(fold, seed) units of {args.sweep}\n")  # fmt: skip
    if not any(ORACLE in m for m in per_unit.values()):
        print(oracle_advice(args) + "\n")
    print(HEADER)
    for name in [RANDOM, *models, LABELS, ORACLE]:
        if any(name in m for m in per_unit.values()):
            print(table_row(per_unit, name))


if __name__ == "__main__":
    main()
