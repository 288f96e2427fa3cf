"""The report's figures, as PNG bytes (matplotlib's Agg canvas, no pyplot, no display).

- `group_curves` (paper Figures 1 and 8): test NDCG@k and Outlier-NDCG@k of each group's
  validation-best member against the label setting, error bars one std over seeds (no line
  between two measured fractions: nothing was measured there; the dashboard's verdicts say
  where a group wins);
- `model_curves` (Figure 3): the same with every model's own curve;
- `tsne_panels` (Figure 4): t-SNE of item embeddings, coloured and sized by relevance;
- `outlier_histogram` (Figure 5): one feature's validation histogram, the cut of the gap rule
  and the test values beyond it.

Curves of label fractions use a log x axis (percent of labeled train QGs); curves of the binary
threshold tau a linear one.
"""

from __future__ import annotations

import io
import math

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from scarce_ltr.reports.interactive import model_colours

GROUP_STYLE = {
    "gbdt": ("GBDT", "tab:green", "s"),
    "no-pretrain-dl": ("No pretrain DL", "tab:orange", "^"),
    "pretrained-dl": ("Pretrained DL", "tab:blue", "o"),
    "hybrid": ("Hybrid", "tab:purple", "D"),
}
MARKERS = "os^Dv<>pXh*"
STYLES = ("-", "--", "-.", ":")
METRICS = (("test", "NDCG@{k}"), ("outlier", "Outlier-NDCG@{k}"))
DPI = 110


def group_curves(groups: list[dict], *, title: str, k: int, metrics: tuple = METRICS) -> bytes:
    """`group_figure` as PNG bytes."""
    return _png(group_figure(groups, title=title, k=k, metrics=metrics))


def group_figure(groups: list[dict], *, title: str, k: int, metrics: tuple = METRICS) -> Figure:
    """``groups``: the group entries of one (data set, series); ``metrics`` drops the
    Outlier-NDCG panel when no outlier QG was flagged. Only measured settings carry a mark."""
    fig, axes = _figure(len(metrics))
    present = {g["group"] for g in groups}
    for ax, (metric, label) in zip(axes, metrics, strict=True):
        for name, (legend, color, marker) in ordered_groups(GROUP_STYLE, present):
            _curve(ax, [g for g in groups if g["group"] == name], metric, legend, color, marker)
        _style_axes(ax, groups, label.format(k=k))
    fig.suptitle(title)
    return fig


def model_curves(models: list[dict], *, title: str, k: int, metrics: tuple = METRICS) -> bytes:
    """``models``: the model entries of one (data set, series); one curve per model.

    Every model has a colour of its own (the dashboard's script uses the same ones); members of
    one group share a marker shape family and differ in line style.
    """
    fig, axes = _figure(len(metrics))
    names = sorted({m["model"] for m in models}, key=lambda n: (group_rank(models, n), n))
    groups = {n: next(m["group"] for m in models if m["model"] == n) for n in names}
    colours = model_colours(names)
    for ax, (metric, label) in zip(axes, metrics, strict=True):
        for name in names:
            group = groups[name]
            nth = [n for n in names if groups[n] == group].index(name)
            color = colours[name]
            entries = [m for m in models if m["model"] == name]
            _curve(ax, entries, metric, f"{name} ({group})", color, MARKERS[nth % len(MARKERS)],
                   STYLES[nth % len(STYLES)])  # fmt: skip
        _style_axes(ax, models, label.format(k=k))
    fig.suptitle(title)
    return _png(fig)


def tsne_panels(panels: list, *, title: str) -> bytes:
    """One scatter per `reports.embeddings.Embedded`, colour and size by relevance label."""
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(4.6 * cols, 4.4 * rows), dpi=DPI, layout="constrained")
    labels_all = np.concatenate([p.labels for p in panels])
    low, high = float(labels_all.min()), float(labels_all.max())
    scatter = None
    for i, panel in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        order = np.argsort(panel.labels, kind="stable")  # relevant items drawn on top
        size = 6 + 30 * (panel.labels[order] - low) / max(high - low, 1e-9)
        scatter = ax.scatter(
            panel.points[order, 0], panel.points[order, 1], c=panel.labels[order], s=size,
            cmap="viridis", vmin=low, vmax=high, alpha=0.8, linewidths=0,
        )  # fmt: skip
        ax.set_title(f"{panel.title}\n{_short(panel.run_dir)}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    if scatter is not None:
        fig.colorbar(scatter, ax=fig.axes, label="relevance label", shrink=0.8)
    fig.suptitle(title)
    return _png(fig)


def outlier_histogram(hist: dict, test_values: np.ndarray, *, title: str) -> bytes:
    """``hist``: `data.outliers.histogram.feature_histogram`; ``test_values``: the feature's
    test values. Bars: vali counts per bin (log scale); dashed lines: the cut; red ticks: test
    values beyond it, the values that make their QGs outliers."""
    fig, (ax,) = _figure(1)
    edges, counts = hist["edges"], hist["counts"]
    ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge", color="tab:blue", alpha=0.7,
           label="vali values (bins)")  # fmt: skip
    ax.set_yscale("symlog", linthresh=1)
    beyond = test_values[(test_values > hist["upper"]) | (test_values < hist["lower"])]
    for bound in (hist["lower"], hist["upper"]):
        if math.isfinite(bound):
            ax.axvline(bound, color="black", linestyle="--", linewidth=1)
    if beyond.size:
        ax.plot(beyond, np.full(beyond.shape, 0.5), "|", color="tab:red", markersize=14,
                label=f"test values beyond the cut ({beyond.size})")  # fmt: skip
    ax.set_xlabel("raw feature value")
    ax.set_ylabel("count")
    ax.legend(fontsize=8)
    fig.suptitle(title)
    return _png(fig)


def _figure(n: int) -> tuple[Figure, list]:
    fig = Figure(figsize=(5.6 * n, 4.2), dpi=DPI, layout="constrained")
    return fig, [fig.add_subplot(1, n, i + 1) for i in range(n)]


def _curve(
    ax, entries: list[dict], metric: str, legend: str, color, marker: str, style: str = "-"
) -> None:
    entries = sorted(entries, key=lambda e: e["x"])
    xs = [e["x"] for e in entries if math.isfinite(e[f"{metric}_mean"])]
    if not xs:
        return
    ys = [e[f"{metric}_mean"] for e in entries if math.isfinite(e[f"{metric}_mean"])]
    errs = [
        e[f"{metric}_std"] if math.isfinite(e[f"{metric}_std"]) else 0.0
        for e in entries
        if math.isfinite(e[f"{metric}_mean"])
    ]
    ax.errorbar(
        xs, ys, yerr=errs, label=legend, color=color, marker=marker, ls=style, capsize=3, lw=1.6
    )


def _style_axes(ax, entries: list[dict], ylabel: str) -> None:
    series = entries[0]["series"] if entries else ""
    if series.startswith("%"):
        ax.set_xscale("log")
        ax.set_xlabel("labeled train QGs (%)")
        xs = sorted({e["x"] for e in entries})
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.minorticks_off()
    else:
        ax.set_xlabel(f"binary label threshold {series}")
    ax.set_ylabel(f"test {ylabel}")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def ordered_groups(style: dict, present: set[str]) -> list[tuple[str, tuple]]:
    known = [(name, style[name]) for name in style if name in present]
    extra = [(name, (name, "tab:gray", "x")) for name in sorted(present - set(style))]
    return known + extra


def group_rank(models: list[dict], name: str) -> int:
    group = next(m["group"] for m in models if m["model"] == name)
    order = list(GROUP_STYLE)
    return order.index(group) if group in order else len(order)


def _short(path) -> str:
    parts = str(path).rstrip("/").split("/")
    return "/".join(parts[-4:])


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buffer)
    return buffer.getvalue()
