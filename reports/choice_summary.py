"""The report's study of the choice rules (`reports.choice.unit_study`'s units) per data set and
setting: `setting_summary` (each rule's mean test NDCG@5 and its paired margins against the
unit's vali-best tree and against argmax), its ``choice.csv`` fields (`SUMMARY_FIELDS`), and its
table as the report's text lines (`text_lines`) and the dashboard's HTML (`html`).
"""

from __future__ import annotations

from collections import defaultdict
from html import escape

from scarce_ltr.reports import stats
from scarce_ltr.reports.choice import finite_or_none

PICKS = ("argmax", "robust", "crossfit")  # the rules unit_study compares
PAIRS = (
    ("argmax", "tree"), ("robust", "tree"), ("crossfit", "tree"), ("robust", "argmax"),
    ("crossfit", "argmax"),
)  # fmt: skip


def setting_summary(units: list[dict]) -> list[dict]:
    """Per (data set, setting): the mean test NDCG@5 of each rule's picks and of the tree, and
    the paired margin (mean, std, n, one-sided paired t p) of each rule against the tree and of
    robust and crossfit against argmax, over the units."""
    settings: dict[tuple, list[dict]] = defaultdict(list)
    for unit in units:
        settings[(unit["dataset"], unit["setting"])].append(unit)
    out = []
    for (dataset, setting), members in settings.items():
        test = {
            name: {(u["fold"], u["seed"]): u[f"{name}_test"] for u in members}
            for name in (*PICKS, "tree")
        }
        entry = {"dataset": dataset, "setting": setting, "n_units": len(members)}
        for name in test:
            entry[f"{name}_test_mean"] = finite_or_none(stats.mean_std(test[name].values())[0])
        for a, b in PAIRS:
            mean, std, n, p = stats.paired_greater(test[a], test[b])
            entry |= {f"{a}_vs_{b}": finite_or_none(mean), f"{a}_vs_{b}_std": finite_or_none(std)}
            entry |= {f"{a}_vs_{b}_n": n, f"{a}_vs_{b}_p": finite_or_none(p)}
        entry["n_differ"] = sum(u["argmax_model"] != u["robust_model"] for u in members)
        entry["n_crossfit_differ"] = sum(u["argmax_model"] != u["crossfit_model"] for u in members)
        out.append(entry)
    return sorted(out, key=lambda e: (e["dataset"], e["setting"]))


SUMMARY_FIELDS = (
    "dataset", "setting", "n_units", "n_differ", "n_crossfit_differ",
    *(f"{name}_test_mean" for name in (*PICKS, "tree")),
    *(f"{a}_vs_{b}{end}" for a, b in PAIRS for end in ("", "_std", "_n", "_p")),
)  # fmt: skip


def text_lines(summary: list[dict]) -> list[str]:
    """The report's section: per setting, the test NDCG@5 of each rule's picks and their paired
    margins against the unit's vali-best tree (and robust against argmax)."""
    if not summary:
        return []
    lines = [
        "\nchoice on small validation sets (per (fold, seed) unit, among all its models: the "
        "vali argmax, the robust rule and the cross-fitted rule, reports/choice.py; test NDCG@5 "
        "of each pick, mean over units; Δ: paired margin, one-sided paired p; differ: units "
        "where robust / crossfit pick another model than argmax)"
    ]
    header = ["dataset", "setting", "units", *PICKS, "tree",
              *(f"{a} Δ {b}" for a, b in PAIRS), "differ"]  # fmt: skip
    table = [header]
    for entry in summary:
        table.append(
            [entry["dataset"], entry["setting"], str(entry["n_units"]),
             *(_cell(entry[f"{name}_test_mean"]) for name in (*PICKS, "tree")),
             *(_margin(entry, f"{a}_vs_{b}") for a, b in PAIRS),
             f"{entry['n_differ']} / {entry['n_crossfit_differ']}"]
        )  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in table]
    return lines


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _margin(entry: dict, pair: str) -> str:
    mean, p = entry[pair], entry[f"{pair}_p"]
    if mean is None:
        return "-"
    return f"{mean:+.4f}" + ("" if p is None else f" (p={p:.3f})")


def html(summary: list[dict]) -> str:
    """The dashboard's section: `text_lines`' table; nothing without a unit to show."""
    if not summary:
        return ""
    names = ("data set", "setting", "units")
    numbers = (*(f"{name} pick" for name in PICKS), "vali-best tree")
    pairs = tuple(f"{a} Δ {b}" for a, b in PAIRS)
    header = "".join(f"<th class='name'>{n}</th>" for n in names)
    header += "".join(f"<th>test NDCG@5, {n}</th>" for n in numbers)
    header += "".join(f"<th>{escape(n)}</th>" for n in pairs)
    header += "<th>picks differ from argmax (robust / crossfit)</th>"
    rows = []
    for entry in summary:
        tds = "".join(
            f"<td class='name'>{escape(str(entry[key]))}</td>"
            for key in ("dataset", "setting", "n_units")
        )
        tds += "".join(f"<td>{_cell(entry[f'{n}_test_mean'])}</td>" for n in (*PICKS, "tree"))
        tds += "".join(f"<td>{escape(_margin(entry, f'{a}_vs_{b}'))}</td>" for a, b in PAIRS)
        differ = f"{entry['n_differ']} / {entry['n_crossfit_differ']}"
        rows.append(f"<tr>{tds}<td>{differ}</td></tr>")
    return (
        "<h2 id='choice'>Choice on small validation sets</h2><p class='note'>Per (fold, seed) "
        "unit, among all its models: the vali argmax, the robust rule (the simpler model "
        "unless a more complex one wins clearly: paired bootstrap over the unit's vali QGs, "
        "one-sided p &lt; 0.05; tree &lt; deep ranker &lt; built on other models &lt; mix), and "
        "the cross-fitted rule (the argmax of vali scores in which each searched run's choice "
        "among its trials is cross-fitted over 5 folds of the vali QGs). "
        "Test NDCG@5 of each pick, mean over units; Δ: paired margin (one-sided paired t p) "
        "against the unit's vali-best tree.</p>"
        f"<table id='choice-table'><tr>{header}</tr>{''.join(rows)}</table>"
    )
