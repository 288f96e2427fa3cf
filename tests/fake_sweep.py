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
) -> dict:
    """The run folder ``<folder>/<place>/<stage>/<model>/frac=0.2/seed=<seed>`` of a finished
    run at 20 % labels with ``metrics`` in its report, and its manifest cell."""
    run_dir = folder / place / stage / model / f"frac={FRACTION}" / f"seed={seed}"
    run_dir.mkdir(parents=True)
    report = {"stage": stage, "seed": seed, "method": model, "metrics": metrics}
    (run_dir / "report.json").write_text(json.dumps(report))
    config = {"data": {"name": "ohsumed"}, "seed": seed}
    config["scarcity"] = {"fraction": FRACTION, "val": "full"}
    (run_dir / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    (run_dir / "DONE").write_text("")
    key = f"{place}/{model}/frac={FRACTION}/seed={seed}"
    cell = {"id": key, "dataset": "ohsumed", "model": model, "group": group, "stage": stage}
    cell |= {"setting": f"frac={FRACTION}", "fraction": FRACTION, "binary_tau": None}
    cell |= {"seed": seed, "run_dir": str(run_dir), "job_key": key, "status": status}
    cell |= {"error": None if status == "done" else "boom", "seconds": 1.0}
    if fold is not None:
        cell["fold"] = fold
    return cell


def write_manifest(folder: Path, cells: list[dict]) -> None:
    manifest = {"sweep": folder.name, "updated": "2026-01-01T00:00:00", "cells": cells}
    (folder / "manifest.json").write_text(json.dumps(manifest))
