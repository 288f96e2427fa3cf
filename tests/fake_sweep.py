"""Finished sweep folders written by hand, for tests of the report and ``select``.

A test chooses each run's metrics (and may add its ``scores.npz``); `run_cell` writes the run
folder as a sweep leaves it (``report.json``, ``config.yaml``, ``DONE``) and returns its manifest
cell, `write_manifest` the sweep's ``manifest.json``. Imported as ``from fake_sweep import ...``,
like ``tiny``.
"""

from __future__ import annotations

import json
from pathlib import Path

FRACTION = 0.2


def run_cell(
    folder: Path,
    place: str,
    model: str,
    *,
    stage: str,
    group: str,
    seed: int,
    metrics: dict,
    fold: int | None = None,
    status: str = "done",
    dataset: str = "ohsumed",
    fraction: float = FRACTION,
    tau: float | None = None,
    report: dict | None = None,
) -> dict:
    """The run folder ``<folder>/<place>/<stage>/<model>/<setting>/seed=<seed>`` of a run at
    ``fraction`` labels (or binary feedback at threshold ``tau``) and its manifest cell. A
    finished run has ``metrics`` and ``report``'s keys in its report; a failed one (``status``
    other than "done") leaves its folder empty, as a crash before the report does."""
    setting = f"frac={fraction:g}" if tau is None else f"tau={tau:g}"
    run_dir = folder / place / stage / model / setting / f"seed={seed}"
    run_dir.mkdir(parents=True)
    if status == "done":
        body = {"stage": stage, "model": model, "group": group, "seed": seed, "metrics": metrics}
        (run_dir / "report.json").write_text(json.dumps(body | (report or {})))
        config = {"data": {"name": dataset}, "seed": seed}
        config["scarcity"] = {"fraction": fraction, "val": "full", "binary_tau": tau}
        (run_dir / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
        (run_dir / "DONE").write_text("")
    key = f"{place}/{model}/{setting}/seed={seed}"
    cell = {"id": key, "dataset": dataset, "model": model, "group": group, "stage": stage}
    cell |= {"setting": setting, "fraction": fraction, "binary_tau": tau}
    cell |= {"seed": seed, "run_dir": str(run_dir), "job_key": key, "status": status}
    cell |= {"error": None if status == "done" else "exit code 1: error: LightGBM boom"}
    cell["seconds"] = 1.0
    if fold is not None:
        cell["fold"] = fold
    return cell


def write_manifest(folder: Path, cells: list[dict]) -> Path:
    """The sweep's ``manifest.json`` over ``cells``; returns ``folder``."""
    manifest = {"sweep": folder.name, "updated": "2026-01-01T00:00:00", "cells": cells}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder
