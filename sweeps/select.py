"""``./run.sh select <sweep> [key=value ...]``: the validation-best model of each setting.

For every (data set, label setting) of a sweep's done cells, the one model, over all models and
groups, with the highest validation NDCG@``select_k`` averaged over its seeds; ties go to the
model with more seeds, then to the first name in alphabetical order. This is the rule by which the
report chooses each group's member (`sweeps.stats.choose_best`), applied to the whole setting.

Test metrics never enter the choice: a model picked on test would carry an optimistic test score,
and the choice must be one that could have been made before the test set was looked at. The test
NDCG@``k`` (mean and std over seeds) is written only for information.

In a sweep over folds (``folds:``) the replicate unit is (fold, seed): "seeds" above are these
units, and the choice is the best validation mean over all of them.

Beside each choice, for information: its paired margin against the validation-best tree of the
setting (the report's reference GBDT): the mean and std of the per-unit test differences over the
units both ran, their number, and the one-sided paired t-test p (`sweeps.stats.paired_greater`),
which says whether the chosen model beats the strongest tree on the same folds and label draws.

``rule=robust`` (``alpha=0.05``) chooses by `sweeps.choice.choose_robust` instead: the simpler
model unless a more complex one wins clearly on the vali QGs of every unit pooled (a seeded paired
bootstrap; simplicity levels from model names), for small validation sets where the argmax
favours the model whose vali score was maximised most; ``robust`` in each choice gives the
challenges, their mean vali differences and p-values.

``rule=crossfit`` chooses by `sweeps.choice.choose_crossfit`: the highest vali mean as above, but
each searched run (Optuna trials, a grid) scored with its choice among trials cross-fitted over 5
folds of the vali QGs (``trials.npz``), so a 30-trial search's vali maximum no longer outbids a
one-recipe model's plain vali score; ``crossfit`` in each choice gives every candidate's
cross-fitted vali mean and which were searched.

Writes ``best.json`` (``<sweep folder>/report/best.json``, or ``out=<file>``): per setting the
chosen model, its group, its validation mean and unit count, its test mean and std, the paired
margin against the tree, and per unit (fold, seed) the run folder and its model bundle
(``<run_dir>/bundle``; ``bundle_exists``: it holds ``bundle.json``). Prints a table and the file's
path.

A cell the manifest marks done whose run folder is gone or whose ``report.json`` is missing or
damaged is a hole the choice would be made around silently: ``select`` names such cells and
stops, or with ``allow_missing=true`` chooses without them, naming them on stderr and in
``best.json`` (``left_out``). Cells the sweep itself recorded as failed are no hole: the sweep
said so when it ran (``report`` counts them too).
"""

from __future__ import annotations

import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from scarce_ltr.core.bundle import BUNDLE_DIR, MANIFEST
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import write_json
from scarce_ltr.core.run_identity import runs_root as default_runs_root
from scarce_ltr.reports import choice, results, stats

BEST = "best.json"
RULE = (
    "highest mean validation NDCG@{select_k} over seeds (fold x seed units in a sweep over "
    "folds), over all models of the setting; ties: more units, then alphabetical; test metrics "
    "never enter"
)

ROBUST_RULE = (
    "the simpler model unless a more complex one wins clearly: the vali-best of each simplicity "
    "level (tree < deep ranker < built on other models < mix) "
    "challenges the incumbent, and takes over when a paired bootstrap over the vali QGs of all "
    "units (per-QG vali NDCG@{select_k}) gives one-sided p < {alpha}; test metrics never enter"
)

CROSSFIT_RULE = (
    "highest mean validation NDCG@5 over units, each searched run's choice among its trials "
    "cross-fitted over {folds} folds of the vali QGs (trials.npz; a run of one trial: its vali "
    "score); ties: more units, then alphabetical; test metrics never enter"
)


@dataclass(frozen=True)
class SelectConfig:
    sweep: str | None = None  # required: a sweep name under runs/sweeps/, or a sweep folder
    runs_root: str | None = None  # default: $LTR_RUNS_DIR or ./runs
    out: str | None = None  # default: <sweep folder>/report/best.json
    k: int = 5  # test NDCG cutoff reported (for information only)
    select_k: int = 5  # validation NDCG cutoff that chooses
    # argmax: the highest vali mean | robust: the simpler model unless a more complex one wins
    # clearly on the vali QGs of every unit pooled (paired bootstrap; reports/choice.py) |
    # crossfit: the highest vali mean with each search's choice among trials cross-fitted
    rule: str = "argmax"
    alpha: float = 0.05  # rule=robust: the one-sided bootstrap p below which complexity wins
    # cells marked done whose folder or report.json is gone or damaged: false stops naming
    # them; true chooses without them, naming them (best.json's left_out)
    allow_missing: bool = False

    def __post_init__(self) -> None:
        if not self.sweep:
            raise ValueError("sweep is required: ./run.sh select <sweep> (a name or a folder)")
        if self.k < 1 or self.select_k < 1:
            raise ValueError("k and select_k must be >= 1")
        if self.rule not in choice.RULES:
            raise ValueError(f"rule must be one of {', '.join(choice.RULES)}, got {self.rule}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.rule == "crossfit" and self.select_k != choice.SELECTION_K:
            raise ValueError(
                f"rule=crossfit chooses on vali NDCG@{choice.SELECTION_K}: leave select_k at "
                f"{choice.SELECTION_K}"
            )


def main(cfg: SelectConfig, out_dir: Path | None = None) -> dict:
    """Choose, write ``best.json``, print the table; returns what was written."""
    root = Path(cfg.runs_root) if cfg.runs_root else default_runs_root()
    manifest = results.manifest_path(str(cfg.sweep), root)
    rows = results.rows_from_manifest(manifest, sorted({cfg.k, cfg.select_k}))
    left_out = _holes(cfg, rows)
    done = [r for r in rows if r.get("status") == "done"]
    if not done:
        raise UserError(f"sweep '{cfg.sweep}' ({manifest}) has no finished cell to choose from")
    best = {
        "sweep": cfg.sweep,
        "manifest": str(manifest),
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "k": cfg.k,
        "select_k": cfg.select_k,
        "rule": {"argmax": RULE, "robust": ROBUST_RULE, "crossfit": CROSSFIT_RULE}[cfg.rule].format(
            select_k=cfg.select_k, alpha=cfg.alpha, folds=choice.CROSSFIT_FOLDS
        ),
        "choices": choose(done, k=cfg.k, select_k=cfg.select_k, rule=cfg.rule, alpha=cfg.alpha),
        "left_out": left_out,
    }
    _warn_uncorrected(best["choices"])
    path = Path(cfg.out) if cfg.out else manifest.parent / "report" / BEST
    write_json(path, best)
    print(text_table(best))
    print(f"best models: {path}")
    return best


def _holes(cfg: SelectConfig, rows: list[dict]) -> list[dict]:
    """The cells marked done that have no usable report (`results.holes`): a `UserError` naming
    them, or with ``allow_missing=true`` a warning naming them; returns them."""
    holes = results.holes(rows)
    if not holes:
        return []
    shown = "; ".join(f"{h['id']} ({h['reason']})" for h in holes[:5])
    shown += f"; and {len(holes) - 5} more" if len(holes) > 5 else ""
    if not cfg.allow_missing:
        raise UserError(
            f"sweep '{cfg.sweep}': {len(holes)} cell(s) marked done have no usable report, and a "
            f"choice without them would be made over fewer runs: {shown}. Run the sweep again to "
            "rerun them (a cell whose report.json is damaged: move that file away first), or give "
            "allow_missing=true to choose without them"
        )
    print(
        f"warning: select: left out {len(holes)} cell(s) marked done that have no usable report "
        f"(allow_missing=true; best.json's left_out): {shown}",
        file=sys.stderr,
    )
    return holes


def _warn_uncorrected(choices: list[dict]) -> None:
    """rule=crossfit: name the models whose runs were searched before trials were kept."""
    models = sorted({m for c in choices for m in c.get("crossfit", {}).get("uncorrected", [])})
    if models:
        print(
            f"warning: rule=crossfit: runs of {', '.join(models)} chose among trials before "
            "searches kept trials.npz; their vali is not cross-fitted (delete those run folders "
            "and run the sweep again to cross-fit them)",
            file=sys.stderr,
        )


def choose(
    done: list[dict], *, k: int, select_k: int, rule: str = "argmax", alpha: float = 0.05
) -> list[dict]:
    """One choice per (data set, setting), in curve order; ``done``: the done rows of a sweep."""
    settings: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for entry in stats.model_table(done, k=k, select_k=select_k):
        settings[(entry["dataset"], entry["setting"])].append(entry)
    runs = {(r["dataset"], r["setting"], r["model"], stats.unit_of(r)): r for r in done}
    choices = []
    for (dataset, setting), entries in settings.items():
        entry, details = choice.select_entry(entries, runs, rule=rule, alpha=alpha, k=select_k)
        seeds = []
        units = zip(entry["units"], entry["vali"], entry["test"], strict=True)
        for (fold, seed), vali, test in units:
            run_dir = Path(runs[(dataset, setting, entry["model"], (fold, seed))]["run_dir"])
            bundle = run_dir / BUNDLE_DIR
            seeds.append(
                {
                    "seed": seed,
                    "fold": fold,
                    "run_dir": str(run_dir),
                    "bundle": str(bundle),
                    "bundle_exists": (bundle / MANIFEST).is_file(),
                    "vali": _number(vali),
                    "test": _number(test),
                }
            )
        choices.append(
            {
                "dataset": dataset,
                "setting": setting,
                "series": entry["series"],
                "x": entry["x"],
                "model": entry["model"],
                "group": entry["group"],
                "vali_mean": _number(entry["vali_mean"]),
                **(
                    {"vali_crossfit_mean": details["vali_crossfit"][entry["model"]]}
                    if rule == "crossfit"
                    else {}
                ),
                "n_seeds": len(stats.finite(entry["vali"])),  # the count that breaks ties
                "test_mean": _number(entry["test_mean"]),
                "test_std": _number(entry["test_std"]),
                "n_candidates": len(entries),
                **_against_tree(entry, entries),
                **({} if details is None else {rule: details}),
                "seeds": seeds,
            }
        )
    return sorted(choices, key=lambda c: (c["dataset"], c["series"], c["x"], c["setting"]))


def _against_tree(entry: dict, entries: list[dict]) -> dict:
    """The chosen entry's paired test margin against the validation-best tree of its setting
    (module docstring); nulls where the setting has no tree or the tree is the choice."""
    trees = [e for e in entries if e["group"] == stats.REFERENCE_GROUP]
    tree = stats.choose_best(trees) if trees else None
    out = {"reference": None if tree is None else tree["model"]}
    if tree is None or tree["model"] == entry["model"]:
        return (
            out
            | dict.fromkeys(("margin_test", "margin_test_std", "p_paired_test"), None)
            | {"n_pairs": 0}
        )
    margin, std, n, p = stats.paired_greater(
        stats.by_unit(entry, "test"), stats.by_unit(tree, "test")
    )
    return out | {
        "margin_test": _number(margin),
        "margin_test_std": _number(std),
        "n_pairs": n,
        "p_paired_test": _number(p),
    }


def text_table(best: dict) -> str:
    """The choices as plain text, one line per (data set, setting)."""
    k, select_k = best["k"], best["select_k"]
    crossfit = any("vali_crossfit_mean" in c for c in best["choices"])
    vali_name = f"vali NDCG@{select_k}" + (" (cross-fitted)" if crossfit else "")
    header = ["dataset", "setting", "model", "group", vali_name, "units"]
    extra = [f"test NDCG@{k}", "paired vs vali-best tree", "bundles"]
    table = [header + extra]
    for c in best["choices"]:
        std = "" if c["test_std"] is None else f" ± {c['test_std']:.4f}"
        test = "-" if c["test_mean"] is None else f"{c['test_mean']:.4f}{std}"
        shown = c.get("vali_crossfit_mean", c["vali_mean"])
        vali = "-" if shown is None else f"{shown:.4f}"
        bundles = f"{sum(s['bundle_exists'] for s in c['seeds'])}/{len(c['seeds'])}"
        table.append(
            [c["dataset"], c["setting"], c["model"], c["group"], vali, str(c["n_seeds"])]
            + [test, _paired_cell(c), bundles]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header) + len(extra))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table
    ]
    return f"Validation-best model per setting ({best['rule']})\n" + "\n".join(lines)


def _paired_cell(choice: dict) -> str:
    """``-0.0110 ± 0.0200 vs gbdt-optuna (p=0.030, n=15)``; ``-`` for the tree itself."""
    margin = choice.get("margin_test")
    if margin is None:
        return "-" if choice.get("reference") is None else f"(is {choice['reference']})"
    std = "" if choice["margin_test_std"] is None else f" ± {choice['margin_test_std']:.4f}"
    p = choice["p_paired_test"]
    p_text = "" if p is None else f"p={'<0.001' if p < 0.001 else f'{p:.3f}'}, "
    return f"{margin:+.4f}{std} vs {choice['reference']} ({p_text}n={choice['n_pairs']})"


def _number(value: float | None) -> float | None:
    """JSON has no NaN: an undefined mean or std (one seed) is null."""
    return float(value) if value is not None and math.isfinite(float(value)) else None
