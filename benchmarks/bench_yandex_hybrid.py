"""The hybrid comparison on the Yandex folds (issue 46, item 3): configs/sweep/yandex-hybrid.yaml.

Per budget, over the (fold, seed) units where every single model finished: each model's test
NDCG@5 and CPU seconds a cell; the deep rankers and the ensembles paired against the vali-best
of the four trees in the unit (gbdt, gbdt-optuna, catboost, xgboost: the report's GBDT group),
`simclr-rank+full`, `resnet` and the pretrained seed ensemble paired against their from-scratch
twins (the same searched finetuning on a fresh encoder: what pretraining adds), and the model
vali chooses in each unit, among the seven single models and among all ten (`./run.sh
report`'s per-unit argmax), against the vali-best tree; then the deep rankers, the ensembles
and vali's picks against the one tree vali picks for the whole setting (the report's and
`select`'s bar). Test never chooses anything here.

``--taught scratch+full~catboost`` reads a taught network the sweep ran beside its ten models
(``models=[...]`` on its command line; docs/results.md gives it): paired against its untaught
twin and the trees, and ``topk:`` over the seven single models and it as one more ensemble, in
vali's picks among every model.

    ./run.sh sweep yandex-hybrid 'fractions=[0.01]' 'seeds=[0]' logger=none   (resumable)
    .venv/bin/python benchmarks/bench_yandex_hybrid.py [--sweep runs/sweeps/yandex-hybrid]
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from ohsumed_folds import fold_seed_units, paired, readout_parser, run_dir

from scarce_ltr.models.names import ModelName

TREES = ("gbdt", "gbdt-optuna", "catboost", "xgboost")
DEEP = ("resnet", "scratch+full", "simclr-rank+full")
TOPK = "topk:" + ",".join(TREES + DEEP)
ENSEMBLES = ("seed-ensemble:scratch+full", "seed-ensemble:simclr-rank+full", TOPK)
SCRATCH = "scratch+full"
# a model -> its from-scratch twin (what pretraining adds is the margin over it); main adds a
# taught model's: the same model untaught
TWIN = {
    "resnet": SCRATCH,
    "simclr-rank+full": SCRATCH,
    "seed-ensemble:simclr-rank+full": "seed-ensemble:scratch+full",
}


def cell(sweep: Path, model: str, fold: int, seed: int, fraction: float) -> Path:
    return run_dir(sweep, model, fold, seed, fraction, data="yandex")


def finished(folder: Path) -> dict | None:
    """A finished run's report.json (an ensemble's too); None before."""
    if not (folder / "DONE").is_file():
        return None
    return json.loads((folder / "report.json").read_text())


def unit_scores(
    sweep: Path, unit: tuple[int, int], fraction: float, extra: tuple[str, ...] = ()
) -> dict | None:
    """``{model: (vali, test, cpu seconds)}`` of one unit; None until every single model of
    the sweep's config finished (the ensembles and ``extra`` models are in it once they did)."""
    found = {}
    for model in TREES + DEEP + ENSEMBLES + extra:
        report = finished(cell(sweep, model, *unit, fraction))
        if report is None and model in TREES + DEEP:
            return None
        if report is not None:
            metrics = report["metrics"]
            found[model] = (
                metrics["vali"]["ndcg@5"],
                metrics["test"]["ndcg@5"],
                report.get("cpu_seconds", np.nan),
            )
    return found


def vali_best(scores: dict, models: tuple[str, ...]) -> str:
    present = [m for m in models if m in scores]  # an ensemble may not have run yet
    return max(present, key=lambda m: scores[m][0])  # the first listed on a tie


def main() -> None:
    parser = readout_parser(__doc__, "yandex-hybrid", seeds=(0, 1))
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.01, 0.03, 0.1])
    parser.add_argument(
        "--taught", nargs="+", default=[], help="taught models the sweep ran beside its own"
    )
    args = parser.parse_args()
    taught = tuple(args.taught)
    extra = taught + (f"{TOPK},{','.join(taught)}",) if taught else ()
    twins = TWIN | {m: str(ModelName.parse(m).student) for m in taught}
    units = fold_seed_units(args)
    for fraction in args.fractions:
        scores = {u: unit_scores(args.sweep, u, fraction, extra) for u in units}
        done = {u: s for u, s in scores.items() if s is not None}
        print(f"\n### Yandex, {fraction:g} of the train QGs labeled: {len(done)} unit(s) done\n")
        if not done:
            continue
        tree = {u: s[vali_best(s, TREES)][1] for u, s in done.items()}
        print("vali-best tree per unit: " + ", ".join(vali_best(s, TREES) for s in done.values()))
        print("| model | units | test NDCG@5 | CPU s a cell | minus the vali-best tree "
              "| minus its twin (from scratch; untaught) |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        print(f"| vali-best tree | {len(tree)} | {np.mean(list(tree.values())):.4f} | | | |")
        for model in TREES + DEEP + ENSEMBLES + extra:
            have = [u for u in done if model in done[u]]
            if not have:
                continue
            test = [done[u][model][1] for u in have]
            cpu = np.mean([done[u][model][2] for u in have])
            over_tree = paired(test, [tree[u] for u in have]) if model not in TREES else ""
            twin = twins.get(model)
            over_twin = ""
            if twin is not None and all(twin in done[u] for u in have):
                over_twin = paired(test, [done[u][twin][1] for u in have])
            print(f"| `{model}` | {len(have)} | {np.mean(test):.4f} | {cpu:.1f} | {over_tree} "
                  f"| {over_twin} |")  # fmt: skip
        per_unit, vali_picks = [], {}
        among_models = [("the seven single models", TREES + DEEP)]
        if taught:
            among_models.append(("the sweep config's ten", TREES + DEEP + ENSEMBLES))
        for among, models in (*among_models, ("every model", None)):
            picks = {u: vali_best(s, models or tuple(s)) for u, s in done.items()}
            chosen = [done[u][picks[u]][1] for u in done]
            vali_picks[f"vali's pick among {among}"] = chosen
            print(f"| vali's pick among {among} | {len(chosen)} | {np.mean(chosen):.4f} | | "
                  f"{paired(chosen, list(tree.values()))} | |")  # fmt: skip
            per_unit.append(f"vali's pick among {among}, per unit: " + ", ".join(picks.values()))
        print("\n" + "\n".join(per_unit))
        setting_tree_margins(done, vali_picks, DEEP + ENSEMBLES + extra)


def setting_tree_margins(
    done: dict, vali_picks: dict[str, list[float]], models: tuple[str, ...]
) -> None:
    """The other bar: the one tree vali picks for the whole setting (the best mean vali NDCG@5
    over the units, as `./run.sh report` and `select` pick a group's member). Either bar may be
    the stronger on test (at 10 % this one is: CatBoost); a margin is claimed against the
    stronger."""
    name = max(TREES, key=lambda m: np.mean([s[m][0] for s in done.values()]))
    bar = [s[name][1] for s in done.values()]
    print(f"\nthe setting's vali-best tree (mean vali NDCG@5 over the units): `{name}`, "
          f"test {np.mean(bar):.4f}\n")  # fmt: skip
    print(f"| model | units | minus `{name}` |\n|---|---|---|")
    rows = {f"`{m}`": [s.get(m, (0, np.nan))[1] for s in done.values()] for m in models}
    for label, test in (rows | vali_picks).items():
        have = [(x, y) for x, y in zip(test, bar, strict=True) if not np.isnan(x)]
        if have:
            print(f"| {label} | {len(have)} | {paired(*map(list, zip(*have, strict=True)))} |")


if __name__ == "__main__":
    main()
