"""Choosing among a sweep's models on small validation sets: the vali argmax beside the robust
rule (`search.robust_choice.keep_simpler`) and the cross-fitted rule, and what each picks on test.

Simplicity levels, from model names (`simplicity`), lowest first:

0. a single tree (``gbdt``, ``gbdt-optuna``, ``catboost``, ``xgboost``, ``gbdt-pseudo``): the
   project's reference, the strongest tree being the vali-best of them;
1. a single deep ranker, from scratch or pretrained (``resnet``, ``simclr-rank+full``: far more
   parameters, its epoch and learning rate chosen on vali);
2. a model built on other models' output (``gbdt-ssl+<method>``, a taught ``<model>~<teacher>``,
   ``<method>+<method>+combine``);
3. a mix of models (``ensemble:``, ``stack:``, ``seed-ensemble:``), whose weights come on top of
   its members' own choices.

The order follows how much a model can fit and how many choices were made on the same vali QGs:
the more of a vali edge can be capacity and selection noise, the more the edge must show. Trees
share a level: the issue's goal compares everything with the strongest tree (the vali-best of
the trees), which is what the rule falls back to. A first version put the Optuna-searched trees
above the fixed-grid ``gbdt`` (more configurations tried on vali); on OHSUMED at 20 % that kept
the plain ``gbdt``, the weakest tree on test, and was dropped.

Per-QG vali NDCG@5 comes from each run's ``scores.npz`` (vali scores, ``vali_labels``,
``vali_labeled``, offsets) through `core.metrics.ndcg_per_group` under the run's empty-QG
policy; a run whose ``scores.npz`` predates ``vali_labels`` is left out (named in ``left_out``).

The cross-fitted rule (``crossfit``) takes the argmax of scores that a search's own choice did
not see. A searched run (Optuna trials, a paper grid, a learning-rate grid) reports the vali
score of its vali-best trial, the maximum of many noisy means: with 21 vali QGs, the more trials
a model's search ran, the further its vali score lies above its test score, and the argmax
follows the most-searched model. Each searched run keeps every trial's per-QG vali NDCG@5
(``trials.npz``, `search.trial_scores`); its cross-fitted vali is the choice among its trials
cross-fitted over `CROSSFIT_FOLDS` folds of the vali QGs (`search.crossfit.crossfit`, the
folds drawn from the unit's seed): each QG scored by the trial chosen without it. An ensemble
with ``weights=grid`` keeps each weight vector's per-QG vali the same way (its vali score is the
in-sample best vector's). A run of one trial (a fixed recipe, uniform weights) or whose vali
score is cross-fitted already (``weights=crossfit``, ``topk:``) keeps its plain per-QG vali;
so does a run searched before searches kept their trials, which the choice names
(``uncorrected``). What stays in every score alike: each trial's epoch or number of rounds is
chosen on all vali QGs (early stopping), which the trials file does not undo.

`unit_study` chooses per unit (data set, setting, fold, seed) among all the unit's models by the
three rules and pairs each pick's test NDCG@5 with the unit's vali-best tree (level 0);
`setting_summary` averages over the units of each setting. `choose_robust` is ``select``'s
``rule=robust``: the same rule over the QGs of every unit of a setting, pooled; `choose_crossfit`
is ``rule=crossfit``: the highest cross-fitted vali mean over the units.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from scarce_ltr.core.metrics import PRIMARY, SELECTION_K, ndcg_per_group
from scarce_ltr.core.runs import read_report
from scarce_ltr.data.ranking_split import rows_of_groups
from scarce_ltr.models.names import COMBINED, ModelName
from scarce_ltr.reports import stats
from scarce_ltr.search.crossfit import crossfit
from scarce_ltr.search.robust_choice import ALPHA, N_RESAMPLES, keep_simpler
from scarce_ltr.search.selection import select_best
from scarce_ltr.search.trial_scores import read_trial_scores

LEVELS = ("single tree", "deep ranker", "built on other models", "mix of models")
TREE_LEVELS = (0,)
SCORES = "scores.npz"
CROSSFIT_FOLDS = 5  # as ensembles' crossfit_folds
# how a run's vali enters rule=crossfit (`crossfit_per_group`)
CROSS_FITTED, PLAIN, UNCORRECTED = "cross-fitted", "plain", "uncorrected"


def simplicity(model: str) -> int:
    """The model's simplicity level (module docstring; lower is simpler)."""
    name = ModelName.parse(model)
    if name.ensembles:
        return 3
    if name.teacher is not None or name.kind == COMBINED:
        return 2
    group = name.group(strict=False)
    if group == "hybrid":
        return 2
    return 0 if group == "gbdt" else 1


def vali_per_group(
    run_dir: str | Path, *, policy: str = "skip", k: int = SELECTION_K
) -> tuple[np.ndarray, np.ndarray]:
    """``(qids, values)`` of the labeled vali QGs of a run: their qids and per-QG vali NDCG@k
    (NaN for an undefined QG under ``skip``). ValueError when ``scores.npz`` is missing or
    predates ``vali_labels``."""
    path = Path(run_dir) / SCORES
    try:
        with np.load(path, allow_pickle=False) as stored:
            if "vali_labels" not in stored.files:
                raise ValueError(f"{path}: written before vali_labels were kept")
            arrays = {k: stored[k] for k in ("vali", "vali_labels", "vali_labeled")}
            arrays |= {k: stored[k] for k in ("vali_offsets", "vali_qids")}
    except OSError as exc:
        raise ValueError(f"{path}: {exc}") from None
    offsets = np.asarray(arrays["vali_offsets"], dtype=np.int64)
    labeled = np.flatnonzero(arrays["vali_labeled"])
    rows = rows_of_groups(offsets, labeled)
    sizes = np.diff(offsets)[labeled]
    sub_offsets = np.concatenate([[0], np.cumsum(sizes)])
    values = ndcg_per_group(
        arrays["vali"][rows], arrays["vali_labels"][rows], sub_offsets, k=k, policy=policy,
    )  # fmt: skip
    return np.asarray(arrays["vali_qids"])[labeled], values


def crossfit_per_group(
    row: dict, plain: tuple[np.ndarray, np.ndarray], *, n_folds: int = CROSSFIT_FOLDS
) -> tuple[np.ndarray, str]:
    """``(values, how)``: a done row's per-QG vali NDCG@5 with its search's choice among trials
    cross-fitted (module docstring; ``how`` is `CROSS_FITTED`), else ``plain`` (its
    `vali_per_group`): `PLAIN` for a run of one trial or too few QGs to cross-fit,
    `UNCORRECTED` for a run that chose among several trials but keeps no ``trials.npz`` on its
    vali QGs (made before searches kept them: its vali is the in-sample best)."""
    trials = read_trial_scores(row["run_dir"])
    if trials is None:
        return plain[1], UNCORRECTED if searched_without_trials(row["run_dir"]) else PLAIN
    if not np.array_equal(trials[0], plain[0]):
        return plain[1], UNCORRECTED
    try:
        fitted = crossfit(trials[1], n_folds=n_folds, seed=stats.unit_of(row)[1])
    except ValueError:  # fewer than two QGs with a defined value
        return plain[1], PLAIN
    return fitted.held_out, CROSS_FITTED


def searched_without_trials(run_dir: str | Path) -> bool:
    """Whether a run's report lists several trials, grid points or weight vectors chosen on
    vali in sample (not ``weights=crossfit``/``topk``, which report an honest vali score)."""
    report = read_report(run_dir) or {}
    if report.get("weighting") in ("crossfit", "topk"):
        return False
    search = report.get("search")
    listed = report.get("trials") or report.get("grid") or report.get("tried") or []
    if isinstance(search, dict):
        listed = search.get("trials") or listed
    return isinstance(listed, list) and len(listed) > 1


def unit_study(
    done: list[dict], *, alpha: float = ALPHA, n_resamples: int = N_RESAMPLES, seed: int = 0
) -> list[dict]:
    """Per unit of the done rows: the argmax pick, the robust pick, the cross-fitted pick and the
    vali-best tree, with their test NDCG@5. Units without a tree or without two candidates are
    left out."""
    test_key = f"test_{PRIMARY.key(SELECTION_K)}"
    units: dict[tuple, list[dict]] = defaultdict(list)
    for row in done:
        units[(row["dataset"], row["setting"], *stats.unit_of(row))].append(row)
    out = []
    for (dataset, setting, fold, unit_seed), rows in sorted(units.items(), key=_unit_key):
        rows = sorted(rows, key=lambda r: r["model"])
        loaded, left_out, qids = _load(rows)
        if len(loaded) < 2 or not any(simplicity(r["model"]) in TREE_LEVELS for r, _ in loaded):
            continue
        means = [_mean(values) for _, values in loaded]
        levels = [simplicity(r["model"]) for r, _ in loaded]
        robust = keep_simpler(
            [v for _, v in loaded], levels, alpha=alpha, n_resamples=n_resamples, seed=seed
        )
        trees = [i for i, level in enumerate(levels) if level in TREE_LEVELS]
        tree = trees[select_best([means[i] for i in trees])]
        argmax = select_best(means)
        fitted = [crossfit_per_group(r, (qids, v)) for r, v in loaded]
        crossfitted = select_best([_mean(values) for values, _ in fitted])
        picks = (("argmax", argmax), ("robust", robust.chosen), ("crossfit", crossfitted))
        pick = {name: loaded[i][0] for name, i in picks} | {"tree": loaded[tree][0]}
        entry = {"dataset": dataset, "setting": setting, "fold": fold, "seed": unit_seed}
        for name, row in pick.items():
            test_value = finite_or_none(row.get(test_key))
            entry |= {f"{name}_model": row["model"], f"{name}_test": test_value}
        entry |= {
            "n_candidates": len(loaded),
            "n_groups": robust.n_groups,
            "left_out": left_out,
            **{
                key: [
                    r["model"]
                    for (r, _), (_, how) in zip(loaded, fitted, strict=True)
                    if how == wanted
                ]
                for key, wanted in (("searched", CROSS_FITTED), ("uncorrected", UNCORRECTED))
            },  # fmt: skip
            "challenges": [_challenge(c, loaded) for c in robust.challenges],
        }
        out.append(entry)
    return out


def choose_robust(
    entries: list[dict],
    runs: dict[tuple, dict],
    *,
    alpha: float = ALPHA,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    k: int = SELECTION_K,
) -> tuple[dict, dict]:
    """``(chosen entry, details)``: the robust choice among the `sweeps.stats.model_table`
    entries of one setting, on the vali QGs of all its units pooled. ``runs`` maps
    ``(dataset, setting, model, unit)`` to the done row. Candidates lacking a unit's per-QG vali
    are left out; with fewer than two left, the argmax (`stats.choose_best`) stands.

    The seeds of one fold score the same vali QGs, so their values are not independent draws:
    each distinct (fold, QG) enters the bootstrap once, with its mean over the fold's units
    (`_by_query`); resampling the pooled units instead would count a QG once per seed and
    overstate the evidence."""
    units = sorted({u for e in entries for u in map(tuple, e["units"])}, key=_order)
    pooled, left_out, reference = [], [], None
    for entry in sorted(entries, key=lambda e: e["model"]):
        rows = [runs.get((entry["dataset"], entry["setting"], entry["model"], u)) for u in units]
        per_unit = [_read(row, k) for row in rows]
        if any(p is None for p in per_unit):
            left_out.append(entry["model"])
            continue
        qids = [q for q, _ in per_unit]  # type: ignore[misc]
        reference = qids if reference is None else reference
        if any(not np.array_equal(a, b) for a, b in zip(qids, reference, strict=True)):
            left_out.append(entry["model"])
            continue
        pooled.append((entry, _by_query(units, per_unit)))  # type: ignore[arg-type]
    argmax = stats.choose_best(entries)
    if len(pooled) < 2:
        fallback = "argmax (fewer than two candidates with per-QG vali)"
        return argmax, {"rule": fallback, "left_out": left_out}
    levels = [simplicity(e["model"]) for e, _ in pooled]
    robust = keep_simpler(
        [v for _, v in pooled], levels, alpha=alpha, n_resamples=n_resamples, seed=seed
    )
    names = [e["model"] for e, _ in pooled]
    details = {
        "rule": "robust",
        "alpha": alpha,
        "n_groups": robust.n_groups,
        "argmax": argmax["model"],
        "left_out": left_out,
        "challenges": [
            {
                "incumbent": names[c.incumbent],
                "challenger": names[c.challenger],
                "mean_diff": c.mean_diff,
                "p": c.p,
                "switched": c.switched,
            }
            for c in robust.challenges
        ],
    }
    return pooled[robust.chosen][0], details


def choose_crossfit(
    entries: list[dict], runs: dict[tuple, dict], *, n_folds: int = CROSSFIT_FOLDS
) -> tuple[dict, dict]:
    """``(chosen entry, details)``: the argmax (`stats.choose_best`, its tie rule) of the
    entries' cross-fitted vali NDCG@5 means over their units (`crossfit_per_group`). A unit whose
    per-QG vali does not read keeps the vali score its run reported; ``uncorrected`` names the
    models with a run searched before trials were kept (their vali stays the in-sample best)."""
    scored, searched, plain, uncorrected = [], set(), set(), set()
    for entry in entries:
        values = []
        for unit, reported in zip(entry["units"], entry["vali"], strict=True):
            row = runs[(entry["dataset"], entry["setting"], entry["model"], tuple(unit))]
            per_group = _read(row)
            if per_group is None:
                plain.add(entry["model"])
                values.append(reported)
                continue
            fitted, how = crossfit_per_group(row, per_group, n_folds=n_folds)
            values.append(_mean(fitted))
            if how == CROSS_FITTED:
                searched.add(entry["model"])
            elif how == UNCORRECTED:
                uncorrected.add(entry["model"])
        scored.append(entry | {"vali": values, "vali_mean": _mean(np.array(values, dtype=float))})
    chosen = stats.choose_best(scored)
    details = {
        "rule": "crossfit",
        "n_folds": n_folds,
        "argmax": stats.choose_best(entries)["model"],
        "vali_crossfit": {e["model"]: finite_or_none(e["vali_mean"]) for e in scored},
        "searched": sorted(searched),
        "uncorrected": sorted(uncorrected),
        "plain_vali": sorted(plain),
    }
    original = next(e for e in entries if e["model"] == chosen["model"])
    return original, details


RULES = ("argmax", "robust", "crossfit")


def select_entry(
    entries: list[dict],
    runs: dict[tuple, dict],
    *,
    rule: str,
    alpha: float = ALPHA,
    k: int = SELECTION_K,
) -> tuple[dict, dict | None]:
    """``select``'s choice among one setting's `sweeps.stats.model_table` entries under
    ``rule``: ``argmax`` (`stats.choose_best`, no details), ``robust`` (`choose_robust` on
    vali NDCG@``k``) or ``crossfit`` (`choose_crossfit`, vali NDCG@5: what trials keep)."""
    if rule == "argmax":
        return stats.choose_best(entries), None
    if rule == "robust":
        return choose_robust(entries, runs, alpha=alpha, k=k)
    if rule == "crossfit":
        if k != SELECTION_K:
            raise ValueError(f"rule=crossfit chooses on vali NDCG@{SELECTION_K} (select_k={k})")
        return choose_crossfit(entries, runs)
    raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")


def _by_query(units: list[tuple], per_unit: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """``[n_distinct (fold, QG)]``: each vali QG's value averaged over the units (seeds) of its
    fold that label it, in (fold, qid) order; NaN where it is undefined in every one."""
    values: dict[tuple, list[float]] = defaultdict(list)
    for (fold, _), (qids, unit_values) in zip(units, per_unit, strict=True):
        for qid, value in zip(qids.tolist(), unit_values.tolist(), strict=True):
            values[(fold is not None, fold or 0, qid)].append(value)
    return np.array([_mean(np.array(values[key])) for key in sorted(values)])


def _load(rows: list[dict]) -> tuple[list[tuple[dict, np.ndarray]], list[str], np.ndarray]:
    """The rows of one unit whose per-QG vali reads (on the first one's QGs), with it; the
    models of the others; the QGs' qids."""
    loaded, left_out, qids = [], [], None
    for row in rows:
        found = _read(row)
        qids = found[0] if qids is None and found is not None else qids
        if found is None or not np.array_equal(found[0], qids):
            left_out.append(row["model"])
            continue
        loaded.append((row, found[1]))
    return loaded, left_out, qids


def _read(row: dict | None, k: int = SELECTION_K) -> tuple[np.ndarray, np.ndarray] | None:
    """A done row's `vali_per_group`; None without a row or a readable ``vali_labels``."""
    if row is None:
        return None
    try:
        return vali_per_group(row["run_dir"], policy=row.get("policy") or "skip", k=k)
    except ValueError:
        return None


def _challenge(challenge, loaded: list[tuple[dict, np.ndarray]]) -> dict:
    return {
        "incumbent": loaded[challenge.incumbent][0]["model"],
        "challenger": loaded[challenge.challenger][0]["model"],
        "mean_diff": challenge.mean_diff,
        "p": challenge.p,
        "switched": challenge.switched,
    }


def _mean(values: np.ndarray) -> float:
    defined = values[~np.isnan(values)]
    return float(defined.mean()) if len(defined) else float("nan")


def _order(unit: tuple) -> tuple:
    fold, seed = unit
    return (fold is not None, fold or 0, seed)


def _unit_key(item: tuple) -> tuple:
    (dataset, setting, fold, seed), _ = item
    return (dataset, setting, *_order((fold, seed)))


def finite_or_none(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if np.isfinite(value) else None
