"""The dashboard's interactive part: data gathered from the run folders, and a small script.

Still one offline file: the script is inline and draws with plotly.js, which the page carries
once in its head (`reports.dashboard`; no network).
`collect` reads, for every finished cell, its training curves (finetuning vali NDCG@5 and loss
per epoch, its encoder's pretraining loss and k-NN probe, a tree ranker's grid points), its cost
(seconds, training items per second) and each test QG's NDCG@k (from ``scores.npz``, with the
outlier QGs marked). `render` turns that into:

- sortable tables (click a header; every table of the page, ``#sort=<table id>:<column>`` sorts
  one on load);
- the cost of each model beside its quality;
- training curves with one colour per model, a tooltip on every point, zoom and pan, and a
  checkbox per model;
- a per-QG view: each test QG's NDCG@k under two chosen runs, outlier QGs in red.

Nothing from a run becomes markup: the data travels as JSON with ``<``, ``>`` and ``&`` written
as ``\\u`` escapes, and the script writes names as text (plotly strings entity-escaped).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from scarce_ltr.core.runs import read_report
from scarce_ltr.data.evaluation import TestGroupReader

# Distinct colours, one per model (tab10, then tab20's lighter shades): two models of one group
# never share a colour.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
)  # fmt: skip


def model_colours(models: list[str]) -> dict[str, str]:
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(sorted(set(models)))}


def collect(rows: list[dict], *, k: int, read: TestGroupReader) -> dict:
    """What the script needs, JSON-ready: one entry per finished cell; ``read`` gives a run's
    per-test-QG NDCG@k (the report's reader, shared with its "where" section)."""
    runs = []
    for row in rows:
        if row.get("status") != "done" or not row.get("run_dir"):
            continue
        folder = Path(row["run_dir"])
        report = read_report(folder) or {}
        runs.append(
            {
                "id": row["id"],
                "model": row["model"],
                "group": row.get("group"),
                "dataset": row["dataset"],
                "setting": row["setting"],
                "seed": row["seed"],
                "fold": row.get("fold"),  # None without folds; runs pair within a fold
                "vali": _finite(row.get(f"vali_ndcg@{k}")),
                "test": _finite(row.get(f"test_ndcg@{k}")),
                "seconds": _seconds(row, report),
                "items_per_s": _items_per_s(report),
                "curves": curves(report),
                "qg": per_qg(read(folder)),
            }
        )
    return {"k": k, "runs": runs, "colours": model_colours([r["model"] for r in runs])}


def curves(report: dict) -> dict[str, list[list[float]]]:
    """Training curves of a run: name -> ``[[x, y], ...]``."""
    out: dict[str, list[list[float]]] = {}
    # A deep baseline keeps the history of each learning rate; its chosen one is "selected".
    history = report.get("history") or (report.get("selected") or {}).get("history") or []
    for key, name in (("vali_ndcg@5", "vali NDCG@5 per epoch"), ("train_loss", "train loss")):
        points = [[h["epoch"], h[key]] for h in history if _is_number(h.get(key))]
        if points:
            out[name] = points
    grid = report.get("grid") or []
    scored = [g["vali_ndcg@5"] for g in grid if _is_number(g.get("vali_ndcg@5"))]
    points = [[i + 1, v] for i, v in enumerate(scored)]
    if points:
        out["vali NDCG@5 per grid point (trees)"] = points
    rounds = report.get("rounds_vali_ndcg@5") or []
    if rounds:
        out["vali NDCG@5 per boosting round"] = [[i + 1, v] for i, v in enumerate(rounds)]
    encoder = report.get("pretrained")
    if isinstance(encoder, str) and encoder.lower() not in ("none", ""):
        pre = read_report(encoder) or {}
        for h_key, name in (("loss", "pretraining loss"), ("knn_ndcg@5", "pretraining k-NN probe")):
            points = [
                [h["epoch"], _monitor(h, h_key)]
                for h in pre.get("history") or []
                if _is_number(_monitor(h, h_key))
            ]
            if points:
                out[name] = points
    return out


def _monitor(entry: dict, key: str) -> Any:
    return entry.get(key) if key in entry else (entry.get("monitor") or {}).get(key)


def per_qg(loaded: dict | None) -> dict | None:
    """A run's test QGs (`TestGroupReader`) for the page, NDCG@k rounded (None where undefined)
    and the outlier flag; None for older runs."""
    if loaded is None:
        return None
    return {
        "qids": [int(q) for q in loaded["qids"]],
        "ndcg": [round(float(v), 5) if math.isfinite(v) else None for v in loaded["ndcg"]],
        "outlier": [bool(o) for o in loaded["outlier"]],
    }


def _seconds(row: dict, report: dict) -> float | None:
    for value in (row.get("seconds"), report.get("seconds")):
        if _is_number(value) and value > 0:
            return float(value)
    per_epoch, epochs = report.get("seconds_per_epoch"), report.get("epochs_trained")
    if _is_number(per_epoch) and _is_number(epochs):
        return float(per_epoch * epochs)
    return None


def _items_per_s(report: dict) -> float | None:
    """Training throughput: labeled items per second of a finetuning epoch."""
    items = (report.get("labels") or {}).get("train_labeled_items")
    seconds = report.get("train_seconds_per_epoch")
    if _is_number(items) and _is_number(seconds) and seconds > 0:
        return float(items / seconds)
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _finite(value: Any) -> float | None:
    return float(value) if _is_number(value) else None


def render(data: dict) -> str:
    """The section and its script; empty data still gives the sortable tables."""
    payload = script_json(data)
    return (
        "<h2 id='explore'>Explore: cost, training curves, per-QG</h2>"
        "<div id='ltr-cost'></div><div id='ltr-curves'></div><div id='ltr-qg'></div>"
        f"<script>const LTR_DATA = {payload};</script>\n<script>{SCRIPT}</script>"
    )


def script_json(data: object) -> str:
    """``data`` as JSON to put inside ``<script>``: ``<``, ``>`` and ``&`` as ``\\u`` escapes,
    so no string in it can end the element or be read as markup."""
    text = json.dumps(data, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


SCRIPT = Path(__file__).with_name("interactive.js").read_text()
