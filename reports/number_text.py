"""How the report writes a number, one way for its three faces: the plain-text tables
(`reports.report_text`), the dashboard's tables (`reports.dashboard`) and its hover labels
(`reports.dashboard_plots`).

A metric has four decimals (``0.4123``; ``–`` where there is none), a p-value three
(``<0.001`` below that), a cell the mean ± std over seeds, and the paired margin against the
reference its ``Δ`` line (`reports.stats` computes them all).
"""

from __future__ import annotations

import math


def mean_pm_std(entry: dict, metric: str) -> str:
    """``0.4123 ± 0.0031``; ``–`` without a value, and no ``±`` part with a single seed."""
    mean, std = entry[f"{metric}_mean"], entry[f"{metric}_std"]
    if not math.isfinite(mean):
        return "–"
    return fmt(mean) + (f" ± {fmt(std)}" if math.isfinite(std) else "")


def paired_text(entry: dict, metric: str) -> str | None:
    """``Δ -0.0110 ± 0.0200, paired p=0.030, n=15``: the paired margin against the reference
    (`reports.stats`); None where there is none (the reference itself, other metrics)."""
    margin = entry.get(f"margin_{metric}", math.nan)
    if not isinstance(margin, float | int) or not math.isfinite(margin):
        return None
    std = entry.get(f"margin_{metric}_std", math.nan)
    n = entry.get("n_pairs" if metric == "test" else f"n_pairs_{metric}", 0)
    p = entry.get(f"p_paired_{metric}", math.nan)
    text = f"Δ {margin:+.4f}" + (f" ± {std:.4f}" if math.isfinite(std) else "")
    text += f", paired p={fmt_p(p)}" if math.isfinite(p) else ""
    return text + f", n={n}"


def fmt(value: float) -> str:
    return f"{value:.4f}" if isinstance(value, float | int) and math.isfinite(value) else "–"


def fmt_p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"
