"""Numbers of the report: mean and std over seeds, validation-best group members, t-tests.

Rows are the done rows of `reports.results` (one per data set, model, label setting, fold, seed).

- The replicate unit is ``(fold, seed)``: a sweep over the folds of a data set (``folds:``) has
  one per fold and seed, a sweep without folds one per seed (fold None). "Seeds" below means
  these units; each entry keeps ``units`` aligned with its per-unit lists, and ``seeds`` (the
  seed of each unit) for readers that show seeds.
- Per model and label setting: mean and sample standard deviation (``ddof=1``; NaN with one
  unit) over the units whose metric is finite.
- Validation-best member of a group (paper 4.1.1: "GBDT" is the best of the GBDTs, "pretrained
  DL" the best of the pretrained rankers, ...): for each (data set, label setting, group), the
  member model with the highest validation NDCG@k (``select_k``, 5 by default), averaged over its
  seeds, is chosen (`search.selection.select_best`, the rule of every choice on vali: a member
  without a finite vali mean ranks below every other); ties go to the member with more seeds,
  then to the first name in alphabetical order. Test metrics never enter the choice. The same
  member then stands for the group in every seed of that setting, and the group's numbers are
  that member's test numbers.
- Tuned methods (paper A.2.3): the variants of a model (``simclr-rank@zero0.1+full``,
  ``simclr-rank@noise1+full``, and ``simclr-rank+full`` itself when the sweep has it) are the
  candidates of ``simclr-rank+full``; by the same rule, on validation only, one of them stands
  for it in each (data set, label setting): the ``tuned`` table.
- p-values: one-sided Welch t-test (``scipy.stats.ttest_ind(a, b, equal_var=False,
  alternative="greater")``) of a model's (or group's) per-seed test values against those of the
  validation-best GBDT of the same (data set, label setting); H1: the model's mean is higher.
  NaN when either side has fewer than two seeds, and for the reference GBDT itself.
- Paired: the same comparison unit by unit (`paired_greater`): both models ran on the same fold
  and label draw (the labeled QGs are drawn from the seed), so the per-unit difference removes
  what the fold and the draw do to both. ``margin_test`` is the mean per-unit difference (model
  minus reference), ``margin_test_std`` its sample std, ``n_pairs`` the units finite in both, and
  ``p_paired_test`` the one-sided paired t-test (``scipy.stats.ttest_rel(a, b,
  alternative="greater")``; H1: the model is better); likewise ``*_outlier``. Paired is the test
  to trust when the fold or the label draw moves both models (five folds of 20-odd test queries
  each move them a lot); Welch, which ignores the pairing, stays beside it.
- Crossover (`curve_stats.crossover`): along a curve of label fractions, from the lowest up,
  the first fraction at which the pretrained-DL group no longer beats the best other group
  (highest mean) of that fraction, by its paired margin over the units both have (by the means
  where no unit is shared).
- Verdict (`curve_stats.verdicts`): per label setting, a group wins only where its paired margin
  over every other group is positive with a one-sided paired p below alpha; otherwise "no clear
  winner".
- What pretraining adds (`curve_stats.pretraining_gain`): at each label fraction, the
  pretrained-DL group's paired margin over the no-pretrain-DL group (the same networks from
  scratch), each group standing by its validation-chosen member: pretraining earns its place
  only where this is positive.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

import numpy as np
from scipy import stats as scipy_stats

from scarce_ltr.core.metrics import PRIMARY, compared_metrics
from scarce_ltr.core.run_identity import GROUPS
from scarce_ltr.models.names import ModelName
from scarce_ltr.search.selection import select_best

REFERENCE_GROUP = "gbdt"
CHALLENGER_GROUP = "pretrained-dl"
SCRATCH_GROUP = "no-pretrain-dl"  # the same networks without pretraining
# The metrics shown beside NDCG (MRR, MAP, ERR@k, P@k) and their outlier versions: mean and std,
# no test, never used to choose.
EXTRA_METRICS = tuple(
    f"{prefix}{m.name}" for prefix in ("", "outlier_") for m in compared_metrics()
)


def finite(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def mean_std(values: Iterable[float | None]) -> tuple[float, float, int]:
    """``(mean, sample std, n)`` over the finite values; NaN where undefined."""
    kept = finite(values)
    if not kept:
        return math.nan, math.nan, 0
    std = float(np.std(kept, ddof=1)) if len(kept) > 1 else math.nan
    return float(np.mean(kept)), std, len(kept)


def welch_greater(a: Iterable[float | None], b: Iterable[float | None]) -> float:
    """One-sided Welch t-test p-value of H1 mean(a) > mean(b); NaN with fewer than 2 per side."""
    a, b = finite(a), finite(b)
    if len(a) < 2 or len(b) < 2:
        return math.nan
    result = scipy_stats.ttest_ind(a, b, equal_var=False, alternative="greater")
    return float(result.pvalue)


def paired_greater(
    a: dict[tuple, float | None], b: dict[tuple, float | None]
) -> tuple[float, float, int, float]:
    """``(mean diff, std of diffs, n pairs, p)`` of a over b, unit by unit.

    Over the units (keys) present and finite in both: the differences ``d = a[u] - b[u]``, their
    mean, sample std (``ddof=1``; NaN with one pair) and the one-sided paired t-test p-value of
    H1 mean(d) > 0 (``t = mean(d) / (std(d) / sqrt(n))``, p from Student's t with n - 1 degrees
    of freedom; NaN with fewer than 2 pairs). Example: a = {1: 0.5, 2: 0.7, 3: 0.6}, b = {1: 0.4,
    2: 0.5, 3: 0.6}: d = (0.1, 0.2, 0.0), mean 0.1, std 0.1, t = 1.732, p = 0.113.
    """
    units = [u for u in a if u in b and finite([a[u]]) and finite([b[u]])]
    x = np.array([float(a[u]) for u in units])  # type: ignore[arg-type]
    y = np.array([float(b[u]) for u in units])  # type: ignore[arg-type]
    n = len(units)
    if n == 0:
        return math.nan, math.nan, 0, math.nan
    diffs = x - y
    mean = float(np.mean(diffs))
    std = float(np.std(diffs, ddof=1)) if n > 1 else math.nan
    if n < 2:
        return mean, std, n, math.nan
    # Every pair differs by the same amount (up to rounding): t is infinite or undefined, and
    # scipy's would be rounding noise.
    if std <= 1e-12 * max(1.0, abs(mean)):
        p = 0.0 if mean > 0 else 1.0 if mean < 0 else math.nan
        return mean, std, n, p
    p = float(scipy_stats.ttest_rel(x, y, alternative="greater").pvalue)
    return mean, std, n, p


def by_unit(entry: dict, metric: str) -> dict[tuple, float | None]:
    """``{(fold, seed): value}`` of an entry's per-unit list ``metric`` (``test``, ...)."""
    return dict(zip(map(tuple, entry["units"]), entry[metric], strict=True))


def unit_of(row: dict) -> tuple[int | None, int]:
    """A row's replicate unit, ``(fold, seed)``; fold None in a sweep without folds."""
    return row.get("fold"), row["seed"]


def _unit_order(row: dict) -> tuple:
    fold, seed = unit_of(row)
    return (fold is not None, fold or 0, seed)


def axis_of(row: dict) -> tuple[str, float]:
    """``(series, x)``: which curve a label setting lies on and where.

    Fraction settings lie on ``% labeled`` (x = percentage of labeled train QGs); implicit
    binary-feedback settings on ``tau`` (x = tau); a validation setting other than full, or a
    fraction below 1 in the tau setting, makes a series of its own.
    """
    suffix = "" if row.get("val_labels") in (None, "full") else f", val={row['val_labels']}"
    if row.get("binary_tau") is not None:
        fraction = row.get("fraction")
        frac = "" if fraction in (None, 1.0) else f", frac={fraction:g}"
        return f"tau{frac}{suffix}", float(row["binary_tau"])
    return f"% labeled{suffix}", 100.0 * float(row["fraction"])


def model_table(rows: list[dict], *, k: int, select_k: int) -> list[dict]:
    """One entry per (data set, setting, model): per-seed values, means and stds."""
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        cells[(row["dataset"], row["setting"], row["model"])].append(row)
    table = []
    for (dataset, setting, model), members in sorted(cells.items()):
        members = sorted(members, key=_unit_order)
        series, x = axis_of(members[0])
        entry = {
            "dataset": dataset,
            "setting": setting,
            "series": series,
            "x": x,
            "model": model,
            "group": members[0]["group"],
            "seeds": [r["seed"] for r in members],
            "units": [unit_of(r) for r in members],
            "vali": [r.get(f"vali_{PRIMARY.key(select_k)}") for r in members],
            "test": [r.get(f"test_{PRIMARY.key(k)}") for r in members],
            "outlier": [r.get(f"test_outlier_{PRIMARY.key(k)}") for r in members],
        }
        # the metrics users compare with, shown beside NDCG; never used to choose
        for prefix in ("", "outlier_"):
            for metric in compared_metrics():
                column = f"test_{prefix}{metric.key(k)}"
                entry[f"{prefix}{metric.name}"] = [r.get(column) for r in members]
        table.append(entry | _moments(entry))
    return table


def choose_members(models: list[dict]) -> dict[tuple[str, str, str], str]:
    """``{(dataset, setting, group): model}``, the validation-best member (module docstring)."""
    candidates: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for entry in models:
        candidates[(entry["dataset"], entry["setting"], entry["group"])].append(entry)
    return {key: choose_best(entries)["model"] for key, entries in candidates.items()}


def choose_best(entries: list[dict]) -> dict:
    """The validation-best of some `model_table` entries, by the member rule (module docstring):
    `search.selection.select_best`, every stage's choice, of their mean vali, over the entries
    ordered by the rule's ties (more seeds first, then by name), so its first of ties is theirs."""
    ordered = sorted(entries, key=_tie_order)
    return ordered[select_best([entry["vali_mean"] for entry in ordered])]


def group_table(models: list[dict], chosen: dict[tuple[str, str, str], str]) -> list[dict]:
    """One entry per (data set, setting, group): its validation-best member's numbers."""
    by_key = {(m["dataset"], m["setting"], m["model"]): m for m in models}
    table = []
    for (dataset, setting, group), model in sorted(chosen.items(), key=_group_order):
        member = by_key[(dataset, setting, model)]
        entry = {k: member[k] for k in ("dataset", "setting", "series", "x", "seeds", "units")}
        count = _count(models, dataset, setting, group)
        entry |= {"group": group, "member": model, "n_candidates": count}
        entry |= {k: member[k] for k in ("vali", "test", "outlier", *EXTRA_METRICS)}
        table.append(entry | _moments(entry))
    return table


def add_p_values(entries: list[dict], reference: dict[tuple[str, str], dict], name: str) -> None:
    """Set ``p_test`` and ``p_outlier`` (Welch) and the paired margins and p-values (module
    docstring) of each entry against ``reference[(dataset, setting)]``.

    ``name`` is the entry key compared with the reference's to leave the reference itself out.
    """
    for entry in entries:
        ref = reference.get((entry["dataset"], entry["setting"]))
        entry["reference"] = None if ref is None else ref.get("member", ref.get("model"))
        if ref is None or ref[name] == entry[name]:
            entry["p_test"] = entry["p_outlier"] = math.nan
            entry |= dict.fromkeys(PAIRED_KEYS, math.nan) | {"n_pairs": 0, "n_pairs_outlier": 0}
            continue
        entry["p_test"] = welch_greater(entry["test"], ref["test"])
        entry["p_outlier"] = welch_greater(entry["outlier"], ref["outlier"])
        entry |= paired_against(entry, ref)


PAIRED_KEYS = (
    "margin_test", "margin_test_std", "p_paired_test",
    "margin_outlier", "margin_outlier_std", "p_paired_outlier",
)  # fmt: skip


def paired_against(entry: dict, ref: dict) -> dict:
    """The paired keys (module docstring) of ``entry`` against ``ref``, unit by unit."""
    out: dict = {}
    for metric in ("test", "outlier"):
        mean, std, n, p = paired_greater(by_unit(entry, metric), by_unit(ref, metric))
        suffix = "" if metric == "test" else "_outlier"
        out |= {f"margin_{metric}": mean, f"margin_{metric}_std": std}
        out |= {f"p_paired_{metric}": p, f"n_pairs{suffix}": n}
    return out


def summarize(rows: list[dict], *, k: int = 5, select_k: int = 5) -> dict:
    """``{"models": [...], "groups": [...], "chosen": {...}}`` for the done rows."""
    done = [r for r in rows if r.get("status") == "done"]
    models = model_table(done, k=k, select_k=select_k)
    chosen = choose_members(models)
    groups = group_table(models, chosen)
    by_model = {(m["dataset"], m["setting"], m["model"]): m for m in models}
    ref_groups = {(g["dataset"], g["setting"]): g for g in groups if g["group"] == REFERENCE_GROUP}
    ref_models = {key: by_model[(*key, g["member"])] for key, g in ref_groups.items()}
    add_p_values(models, ref_models, "model")
    add_p_values(groups, ref_groups, "group")
    return {"models": models, "groups": groups, "chosen": chosen, "tuned": tuned_table(models)}


def tuned_table(models: list[dict]) -> list[dict]:
    """One entry per (data set, setting, model with variants): its validation-best variant's
    numbers, ``model`` the family's name and ``member`` the variant (module docstring)."""
    families: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for entry in models:
        family = str(ModelName.parse(entry["model"]).without_variants())
        families[(entry["dataset"], entry["setting"], family)].append(entry)
    table = []
    for (_, _, family), entries in sorted(families.items()):
        if not any(ModelName.parse(e["model"]).has_variant for e in entries):
            continue
        best = choose_best(entries)
        candidates = sorted(e["model"] for e in entries)
        table.append(
            best
            | {"model": family, "member": best["model"], "n_candidates": len(entries)}
            | {"candidates": candidates}
        )
    return table


def best_in_column(values: list[float], stds: list[float]) -> tuple[int | None, list[bool]]:
    """Index of the highest finite mean, and which entries lie within its margin of error.

    Within the margin: the intervals mean ± std overlap (``mean + std >= best - best_std``;
    a NaN std counts as 0).
    """
    finite_idx = [i for i, v in enumerate(values) if math.isfinite(v)]
    if not finite_idx:
        return None, [False] * len(values)
    best = max(finite_idx, key=lambda i: values[i])

    def spread(i: int) -> float:
        return stds[i] if math.isfinite(stds[i]) else 0.0

    floor = values[best] - spread(best)
    close = [i in finite_idx and values[i] + spread(i) >= floor for i in range(len(values))]
    return best, close


def _moments(entry: dict) -> dict:
    vali_mean, _, _ = mean_std(entry["vali"])
    test_mean, test_std, n = mean_std(entry["test"])
    outlier_mean, outlier_std, n_outlier = mean_std(entry["outlier"])
    extra = {}
    for metric in EXTRA_METRICS:
        mean, std, _ = mean_std(entry.get(metric, []))
        extra |= {f"{metric}_mean": mean, f"{metric}_std": std}
    return extra | {
        "n_seeds": n,
        "vali_mean": vali_mean,
        "test_mean": test_mean,
        "test_std": test_std,
        "outlier_mean": outlier_mean,
        "outlier_std": outlier_std,
        "n_outlier_seeds": n_outlier,
    }


def _tie_order(entry: dict) -> tuple:
    """Among equal mean vali scores, the member with more finite vali seeds, then by name."""
    return -len(finite(entry["vali"])), entry["model"]


def _group_order(item: tuple) -> tuple:
    (dataset, setting, group), _ = item
    rank = GROUPS.index(group) if group in GROUPS else len(GROUPS)
    return dataset, setting, rank, group


def _count(models: list[dict], dataset: str, setting: str, group: str) -> int:
    return sum(
        1 for m in models if (m["dataset"], m["setting"], m["group"]) == (dataset, setting, group)
    )
