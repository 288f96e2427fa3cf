"""The dashboard's curves as plotly figures: drawn by plotly.js in the page, offline.

Per data set and curve: the groups' validation-best members (paper Figures 1 and 8) and every
model (Figure 3), test NDCG@k and Outlier-NDCG@k against the label setting, mean over the units
with a band of one sample std; zoom, pan, hover (member, n, paired margin and p against the
validation-best GBDT) and a legend that hides a curve in every panel. Label fractions lie on a log
axis whose ticks are the measured fractions; nothing is drawn between two of them but the line
joining their means, and a star marks a setting where a group wins by the verdict rule
(`curve_stats.verdicts`). plotly.js itself is put in the page once, by `reports.dashboard`.

Text that plotly draws (titles, names, hover) passes through `plotly_text`: plotly.js reads a few
HTML tags in it, and a name from a config file must stay text.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from scarce_ltr.reports import plots
from scarce_ltr.reports.interactive import model_colours
from scarce_ltr.reports.number_text import mean_pm_std, paired_text
from scarce_ltr.reports.report_text import verdict_text

# matplotlib's tab10 names (plots.GROUP_STYLE) and marker codes in plotly's spelling: the PNGs
# and the page show a group in the same colour and shape.
TAB = {
    "tab:blue": "#1f77b4", "tab:orange": "#ff7f0e", "tab:green": "#2ca02c",
    "tab:purple": "#9467bd", "tab:gray": "#7f7f7f",
}  # fmt: skip
SYMBOLS = {"o": "circle", "s": "square", "^": "triangle-up", "D": "diamond", "x": "x"}
MODEL_SYMBOLS = ("circle", "square", "triangle-up", "diamond", "triangle-down", "pentagon", "x")
DASHES = ("solid", "dash", "dashdot", "dot")
CONFIG = {"displaylogo": False, "responsive": True, "scrollZoom": False}
HEIGHT = 430


def plotly_text(text: object) -> str:
    """``text`` as plotly.js shows it literally: ``&``, ``<`` and ``>`` as entities (plotly
    turns them back into characters; a tag would be read as markup)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def group_figure(section: dict, *, k: int, alpha: float, div_id: str) -> str:
    """The group curves of one `reports.report` section, as a ``<div>`` and its script."""
    groups = section["groups"]
    present = {g["group"] for g in groups}
    styles = [
        (name, legend, TAB.get(colour, colour), SYMBOLS.get(marker, "circle"), "solid")
        for name, (legend, colour, marker) in plots.ordered_groups(plots.GROUP_STYLE, present)
    ]
    fig = _figure(section, k)
    for column, metric in enumerate(_shown(section), start=1):
        for name, legend, colour, symbol, dash in styles:
            entries = [g for g in groups if g["group"] == name]
            style = {"colour": colour, "symbol": symbol, "dash": dash}
            _curve(fig, entries, metric, legend, style, column=column, member=True)
    wins = [v for v in section.get("verdicts", []) if v["status"] == "win"]
    _stars(fig, wins, groups, k, alpha)
    return _html(fig, section, div_id, title="groups (validation-best member of each)")


def model_figure(section: dict, *, k: int, div_id: str) -> str:
    """Every model's curves of one section: a colour per model (the explorer's), members of one
    group told apart by marker and dash."""
    models = section["models"]
    names = sorted({m["model"] for m in models}, key=lambda n: (plots.group_rank(models, n), n))
    group = {n: next(m["group"] for m in models if m["model"] == n) for n in names}
    colours = model_colours(names)
    fig = _figure(section, k)
    for column, metric in enumerate(_shown(section), start=1):
        for name in names:
            nth = [n for n in names if group[n] == group[name]].index(name)
            style = {
                "colour": colours[name],
                "symbol": MODEL_SYMBOLS[nth % len(MODEL_SYMBOLS)],
                "dash": DASHES[nth % len(DASHES)],
            }
            entries = [m for m in models if m["model"] == name]
            label = f"{name} ({group[name]})"
            _curve(fig, entries, metric, label, style, column=column, member=False)
    return _html(fig, section, div_id, title="every model")


def _shown(section: dict) -> list[str]:
    """``test`` and ``outlier``; ``test`` alone where no outlier QG was flagged."""
    return ["test"] if section.get("outlier_note") else ["test", "outlier"]


def _figure(section: dict, k: int) -> go.Figure:
    labels = {"test": f"test NDCG@{k}", "outlier": f"test Outlier-NDCG@{k}"}
    shown = _shown(section)
    fig = make_subplots(
        rows=1, cols=len(shown), subplot_titles=[labels[m] for m in shown],
        horizontal_spacing=0.08,
    )  # fmt: skip
    fractions = section["series"].startswith("%")
    xs = sorted({e["x"] for e in section["groups"] + section["models"]})
    for column, metric in enumerate(shown, start=1):
        fig.update_yaxes(title_text=labels[metric], row=1, col=column)
        fig.update_xaxes(
            type="log" if fractions else "linear",
            title_text=(
                "labeled train QGs (%)"
                if fractions
                else f"binary label threshold {plotly_text(section['series'])}"
            ),
            tickvals=xs,
            ticktext=[f"{x:g}" for x in xs],
            row=1,
            col=column,
        )
    return fig


def _curve(
    fig: go.Figure,
    entries: list[dict],
    metric: str,
    label: str,
    style: dict,
    *,
    column: int,
    member: bool,
) -> None:
    """A mean line with a one-std band; the legend entry (first panel only) hides both in
    every panel."""
    points = sorted(
        (e for e in entries if math.isfinite(e[f"{metric}_mean"])), key=lambda e: e["x"]
    )
    if not points:
        return
    xs = [e["x"] for e in points]
    ys = [e[f"{metric}_mean"] for e in points]
    stds = [e[f"{metric}_std"] if math.isfinite(e[f"{metric}_std"]) else 0.0 for e in points]
    name = plotly_text(label)
    fig.add_trace(
        go.Scatter(
            x=xs + xs[::-1],
            y=[y + s for y, s in zip(ys, stds, strict=True)]
            + [y - s for y, s in zip(ys[::-1], stds[::-1], strict=True)],
            mode="lines", fill="toself", fillcolor=_translucent(style["colour"]),
            line={"width": 0},
            hoverinfo="skip", legendgroup=name, showlegend=False, name=f"{name} ± std",
        ),
        row=1, col=column,
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=xs, y=ys, mode="lines+markers", name=name, legendgroup=name,
            showlegend=column == 1,
            line={"color": style["colour"], "dash": style["dash"], "width": 2},
            marker={"symbol": style["symbol"], "size": 8},
            text=[_hover(e, metric, label, member) for e in points],
            hovertemplate="%{text}<extra></extra>",
        ),
        row=1, col=column,
    )  # fmt: skip


def _hover(entry: dict, metric: str, label: str, member: bool) -> str:
    n = entry["n_outlier_seeds"] if metric == "outlier" else entry["n_seeds"]
    lines = [f"<b>{plotly_text(label)}</b>", plotly_text(entry["setting"])]
    if member:
        lines.append(f"member: {plotly_text(entry['member'])}")
    lines.append(f"{plotly_text(mean_pm_std(entry, metric))} (n={n})")
    paired = paired_text(entry, metric)
    if paired:
        lines.append(f"vs {plotly_text(entry.get('reference'))}: {plotly_text(paired)}")
    return "<br>".join(lines)


def _stars(fig: go.Figure, wins: list[dict], groups: list[dict], k: int, alpha: float) -> None:
    """A star on the winner's NDCG point where a group wins by the verdict rule."""
    points = []
    for verdict in wins:
        entry = next(
            (g for g in groups
             if (g["setting"], g["group"]) == (verdict["setting"], verdict["leader"])),
            None,
        )  # fmt: skip
        if entry is not None and math.isfinite(entry["test_mean"]):
            text = plotly_text(verdict_text(verdict, k, alpha=alpha))
            points.append((entry["x"], entry["test_mean"], text))
    if points:
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in points], y=[p[1] for p in points], mode="markers",
                name=plotly_text(f"clear win (paired p < {alpha:g})"),
                marker={"symbol": "star", "size": 16, "color": "#222",
                        "line": {"width": 1, "color": "#fff"}},
                text=[p[2] for p in points], hovertemplate="%{text}<extra></extra>",
            ),
            row=1, col=1,
        )  # fmt: skip


def _html(fig: go.Figure, section: dict, div_id: str, *, title: str) -> str:
    head = plotly_text(f"{section['dataset']} · {section['series']} · {title}")
    fig.update_layout(
        title={"text": head, "x": 0.01},
        height=HEIGHT,
        template="plotly_white",
        hovermode="closest",
        legend={"orientation": "v", "x": 1.01, "y": 1.0},
        margin={"l": 60, "r": 20, "t": 70, "b": 50},
    )
    # to_json (inside to_html) writes < > / as \u escapes: nothing in the data ends the script.
    return pio.to_html(
        fig, include_plotlyjs=False, full_html=False, div_id=div_id, config=CONFIG,
        default_width="100%", default_height=f"{HEIGHT}px", validate=True,
    )  # fmt: skip


def _translucent(colour: str, alpha: float = 0.15) -> str:
    """``#1f77b4`` -> ``rgba(31,119,180,0.15)``: the std band under a curve."""
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red},{green},{blue},{alpha})"
