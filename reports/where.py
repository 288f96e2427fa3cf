"""Where the deep rankers win or lose against the tree, and where pretraining helps, test QG
by test QG (issue 30, item 5).

For each data set and label setting of a report, the member of each deep group
(``pretrained-dl``, ``no-pretrain-dl``; `reports.stats` chooses it on vali) meets the member of
the ``gbdt`` group (the vali-best tree), and the pretrained DL meets the same networks from
scratch (``no-pretrain-dl``), on every test QG of every (fold, seed) unit both ran:
per QG, the difference of their NDCG@k, read from the runs' ``scores.npz`` (QGs undefined for
either model under the report's empty-QG policy are left out). The test QGs are split three
ways: the paper's outlier QGs or not (``test_outliers``, `data.outliers`), size (items
per QG) and the share of relevant items (label > 0), the last two in terciles of the
setting's test QGs (pooled over its units; a tercile that repeats a cut point is dropped).

Per bin: the QGs where the deep model wins, ties and loses (pooled over units), and its margin
as a per-unit mean (each unit's mean margin over its QGs in the bin) averaged over the units,
with the std over units and a two-sided one-sample t-test over them. Units, not QGs, are the
replicates: the QGs of one unit share its label draw and its two training runs. Bin ``all``
is the whole test set, whose margin is the report's paired margin of the two groups. The
other bins (up to eight) test that many times, so they also get Holm's adjusted p (``p_holm``,
family-wise over one comparison's bins): read a bin's lead by it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from html import escape

import numpy as np
from scipy import stats as scipy_stats

from scarce_ltr.data.evaluation import TestGroupReader
from scarce_ltr.reports import stats

# (group, the group it meets): each deep group against the tree, then what pretraining adds
COMPARISONS = (
    (stats.CHALLENGER_GROUP, stats.REFERENCE_GROUP),
    (stats.SCRATCH_GROUP, stats.REFERENCE_GROUP),
    (stats.CHALLENGER_GROUP, stats.SCRATCH_GROUP),
)
# The tercile splits: (attribute as the tables name it, key of the per-unit arrays)
TERCILE_ATTRIBUTES = (("items", "items"), ("relevant share", "relevant"))
CSV_FIELDS = [
    "dataset", "series", "setting", "group", "against", "model", "reference", "attribute", "bin",
    "n_qgs", "wins", "ties", "losses", "margin", "margin_std", "n_units", "p", "p_holm",
]  # fmt: skip


def study(summary: dict, done: list[dict], *, read: TestGroupReader) -> list[dict]:
    """One entry per (data set, series, setting) and comparison of `COMPARISONS` whose groups
    both ran: the group's member (``model``), the member of the group it meets (``against``,
    ``reference``), the units both ran and the per-bin table (``bins``). ``read`` gives a run's
    test QGs (a member meets two others; the dashboard reads them too)."""
    rows = {(r["dataset"], r["setting"], r["model"], stats.unit_of(r)): r for r in done}
    groups = defaultdict(dict)
    for entry in summary["groups"]:
        groups[(entry["dataset"], entry["series"], entry["setting"])][entry["group"]] = entry
    out = []
    for (dataset, series, setting), by_group in sorted(groups.items(), key=_order):
        for group, against in COMPARISONS:
            if group not in by_group or against not in by_group:
                continue
            model, reference = by_group[group]["member"], by_group[against]["member"]
            units = _per_qg_units(rows, (dataset, setting), (model, reference), read)
            if not units:
                continue
            entry = {"dataset": dataset, "series": series, "setting": setting, "group": group}
            entry["against"] = against
            entry |= {"model": model, "reference": reference, "n_units": len(units)}
            out.append(entry | {"bins": bins(units)})
    return out


def bins(units: list[dict]) -> list[dict]:
    """The per-bin rows of `study` from per-unit arrays over the unit's test QGs: ``margin``,
    ``keep`` (defined for both models), ``outlier``, ``items``, ``relevant``. Empty bins are
    dropped."""
    pooled = {key: np.concatenate([u[key] for u in units]) for key in ("items", "relevant")}
    masks: list[tuple[str, str, list[np.ndarray]]] = [("all", "all", [u["keep"] for u in units])]
    masks += [
        ("outlier", name, [u["keep"] & (u["outlier"] == flag) for u in units])
        for name, flag in (("outlier", True), ("not outlier", False))
    ]
    for attribute, key in TERCILE_ATTRIBUTES:
        kept = pooled[key][np.concatenate([u["keep"] for u in units])]
        for low, high, shown in _terciles(kept):
            chosen = [u["keep"] & (u[key] > low) & (u[key] <= high) for u in units]
            name = "-".join(dict.fromkeys(_fmt(v, key) for v in shown))  # "6-8", or "4"
            masks.append((attribute, name, chosen))
    rows = [_bin_row(attribute, name, units, chosen) for attribute, name, chosen in masks]
    rows = [row for row in rows if row["n_qgs"]]
    split = [row for row in rows if row["attribute"] != "all"]
    for row, adjusted in zip(split, holm([row["p"] for row in split]), strict=True):
        row["p_holm"] = adjusted
    for row in rows:
        row.setdefault("p_holm", row["p"])  # bin all: one test, nothing to adjust
    return rows


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error), in the input order; NaN stays
    NaN and does not count in the family. Example: (0.01, 0.04, 0.03) -> (0.03, 0.06, 0.06)."""
    finite = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    out = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(finite):
        running = max(running, min(1.0, (len(finite) - rank) * p))
        out[i] = running
    return out


def csv_rows(entries: list[dict]) -> list[dict]:
    """`study`'s entries flattened, one row per bin (``where.csv``)."""
    keys = ("dataset", "series", "setting", "group", "against", "model", "reference")
    return [{key: e[key] for key in keys} | row for e in entries for row in e["bins"]]


def text_lines(entries: list[dict], *, alpha: float = 0.05) -> list[str]:
    """The report's printed section, short: per comparison its margin on all test QGs and the
    bins whose Holm p is below ``alpha`` (every bin: the dashboard and ``where.csv``)."""
    if not entries:
        return []
    lines = [
        "\nwhere the deep rankers win or lose against the vali-best tree, and the pretrained DL "
        "against the networks from scratch, per test QG (reports/where.py): the margin on all "
        "test QGs (± std over units, two-sided p, units), then the "
        f"bins by outlier flag, QG size and share of relevant items with Holm p < {alpha:g}; "
        "every bin in the dashboard and where.csv"
    ]
    for entry in entries:
        everything = next((r for r in entry["bins"] if r["attribute"] == "all"), None)
        clear = [
            f"{row['attribute']} {row['bin']} {row['margin']:+.4f} (Holm p={row['p_holm']:.3f})"
            for row in entry["bins"]
            if row["attribute"] != "all" and row["p_holm"] < alpha  # NaN compares False
        ]
        overall = f"all {_margin_text(everything)}" if everything else ""
        lines.append(
            f"{entry['dataset']} · {entry['setting']} · {entry['model']} - {entry['reference']}: "
            f"{overall}; " + ("; ".join(clear) if clear else f"no bin with Holm p < {alpha:g}")
        )
    return lines


def html(entries: list[dict]) -> str:
    """The dashboard's section; nothing without an entry."""
    if not entries:
        return ""
    rows = []
    for entry in entries:
        for row in entry["bins"]:
            tds = [entry["dataset"], entry["setting"], f"{entry['model']} − {entry['reference']}"]
            tds += [row["attribute"], row["bin"]]
            cells = "".join(f"<td class='name'>{escape(str(t))}</td>" for t in tds)
            sig = math.isfinite(row["p_holm"]) and row["p_holm"] < 0.05
            mark = " class='sig'" if sig else ""
            cells += f"<td{mark}>{_margin_text(row)}</td>"
            cells += f"<td>{row['wins']} / {row['ties']} / {row['losses']}</td>"
            rows.append(f"<tr>{cells}</tr>")
    names = ("data set", "setting", "model − reference", "by", "QGs")
    header = "".join(f"<th class='name'>{n}</th>" for n in names)
    header += "<th>margin ± std over units (two-sided p, Holm p, units)</th>"
    header += "<th>QGs won / tied / lost</th>"
    return (
        "<h2 id='where'>Where the deep rankers win or lose against the tree</h2><p class='note'>"
        "Each deep group's vali-chosen member against the vali-best tree, and the pretrained "
        "DL's against the networks from scratch (where pretraining helps), on every test QG of "
        "every unit both ran: the NDCG margin per QG, by outlier flag, QG size and share of "
        "relevant items (terciles). Margin: per-unit mean over the bin's QGs, averaged over "
        "units; p: two-sided t-test over units, Holm: adjusted over the comparison's bins "
        "(marked below 0.05).</p>"
        f"<table id='where-table'><tr>{header}</tr>{''.join(rows)}</table>"
    )


def _per_qg_units(rows: dict, cell: tuple, pair: tuple, read: TestGroupReader) -> list[dict]:
    """Per unit both models of ``pair`` (model, reference) ran in ``cell`` (data set, setting):
    each test QG's margin and attributes; units whose scores.npz is missing or predates the test
    labels, or whose test QGs differ, are left out."""
    units = []
    model, reference = pair
    model_units = sorted({u for d, s, m, u in rows if (d, s, m) == (*cell, model)}, key=str)
    for unit in model_units:
        reference_row = rows.get((*cell, reference, unit))
        if reference_row is None:
            continue
        ours, theirs = read(rows[(*cell, model, unit)]["run_dir"]), read(reference_row["run_dir"])
        if ours is None or theirs is None or not np.array_equal(ours["qids"], theirs["qids"]):
            continue
        margin = ours["ndcg"] - theirs["ndcg"]
        units.append(
            {"unit": unit, "margin": margin, "keep": np.isfinite(margin)}
            | {key: theirs[key] for key in ("outlier", "items", "relevant")}
        )
    return units


def _bin_row(attribute: str, name: str, units: list[dict], masks: list[np.ndarray]) -> dict:
    margins = [u["margin"][m] for u, m in zip(units, masks, strict=True)]
    pooled = np.concatenate(margins)
    per_unit = [float(np.mean(m)) for m in margins if len(m)]
    mean, std, n = stats.mean_std(per_unit)
    p = math.nan
    if n > 1 and std <= 1e-12 * max(1.0, abs(mean)):
        # The same margin in every unit (up to rounding), as `stats.paired_greater` reads it.
        p = 0.0 if abs(mean) > 1e-12 else math.nan
    elif n > 1:
        p = float(scipy_stats.ttest_1samp(per_unit, 0.0).pvalue)
    return {
        "attribute": attribute, "bin": name, "n_qgs": int(len(pooled)),
        "wins": int(np.sum(pooled > 0)), "ties": int(np.sum(pooled == 0)),
        "losses": int(np.sum(pooled < 0)),
        "margin": mean, "margin_std": std, "n_units": n, "p": p,
    }  # fmt: skip


def _terciles(values: np.ndarray) -> list[tuple[float, float, tuple[float, float]]]:
    """``(low, high, (smallest, largest))``: the bins ``low < v <= high`` cut at the terciles of
    ``values`` and the values each holds; a repeated cut point merges two bins."""
    cuts = np.unique(np.quantile(values, [1 / 3, 2 / 3])) if len(values) else []
    edges = [-math.inf, *list(cuts), math.inf]
    out = []
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        inside = values[(values > low) & (values <= high)]
        if len(inside):
            out.append((float(low), float(high), (float(inside.min()), float(inside.max()))))
    return out


def _fmt(value: float, key: str) -> str:
    """``120 items``-style bin ends: item counts, or relevant shares in percent."""
    return f"{value:.0f}" if key == "items" else f"{100 * value:.0f}%"


def _margin_text(row: dict) -> str:
    if not math.isfinite(row["margin"]):
        return "–"
    text = f"{row['margin']:+.4f}"
    if math.isfinite(row["margin_std"]):
        text += f" ± {row['margin_std']:.4f}"
    p = "–" if not math.isfinite(row["p"]) else f"{row['p']:.3f}"
    if row["attribute"] != "all" and math.isfinite(row["p_holm"]):
        p += f", Holm {row['p_holm']:.3f}"
    return text + f" (p={p}, {row['n_units']})"


def _order(item: tuple) -> tuple:
    (dataset, series, setting), by_group = item
    x = next(iter(by_group.values())).get("x", 0.0)
    return dataset, series, x, setting
