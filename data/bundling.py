"""The part of a model bundle every scoring run shares: features, fitted transform, labels and
selection; each stage adds its model (`scarce_ltr.core.bundle` holds the format)."""

from __future__ import annotations

from pathlib import Path

from scarce_ltr.core.bundle import write_bundle
from scarce_ltr.core.files import npz_bytes
from scarce_ltr.core.metrics import SELECTION_METRIC
from scarce_ltr.core.runs import Run
from scarce_ltr.data.pipeline import PreparedData

TRANSFORM_FILE = "transform.npz"
OUTLIERS_FILE = "outliers.npz"  # the histogram detector's raw lower / upper bounds


def write_run_bundle(
    run: Run, prepared: PreparedData, metrics: dict, model: dict, files: dict[str, bytes]
) -> Path:
    """``<run>/bundle/``: ``model`` (its ``kind`` and description) and ``files`` beside the
    fitted transform, the feature count and indices, the label setting and the vali metric."""
    setting = run.identity.setting
    keys = run.identity.report_keys() | {"folder": str(run.folder.resolve())}
    return write_model_bundle(
        run.folder, prepared, metrics, model, files, setting=setting, run=keys
    )


def write_model_bundle(
    folder: Path,
    prepared: PreparedData,
    metrics: dict,
    model: dict,
    files: dict[str, bytes],
    *,
    setting: str,
    run: dict | None,
) -> Path:
    """``<folder>/bundle/`` as `write_run_bundle` writes it, for a model trained in a run
    (``run``: its identity's keys and folder) or in memory (None); ``setting``: the label
    setting's tag; ``metrics``: the vali metrics it was chosen on (``{"vali": {...}}``)."""
    transform, arrays = prepared.transform.to_bundle()
    files = dict(files)
    if arrays:
        files[TRANSFORM_FILE] = npz_bytes(**arrays)
    outliers = {"method": prepared.outlier_info.get("method"), "file": None}
    if prepared.outlier_bounds is not None:
        outliers |= {"gap": prepared.outlier_info.get("gap"), "file": OUTLIERS_FILE}
        files[OUTLIERS_FILE] = npz_bytes(**prepared.outlier_bounds)
    manifest = {
        "model": model,
        "n_features": prepared.n_features,
        "feature_indices": list(range(1, prepared.n_features + 1)),  # LETOR's 1-based indices
        "transform": transform | {"file": TRANSFORM_FILE if arrays else None},
        "outliers": outliers,  # the rule that names a new file's outlier QGs (raw features)
        "label_setting": setting,
        "selection": {
            "split": "vali",
            "metric": SELECTION_METRIC,
            "value": metrics["vali"].get(SELECTION_METRIC),
            "val_labels": metrics.get("val_labels"),
            "policy": metrics.get("policy"),
        },
        "run": run,
    }
    if prepared.feature_names is not None:  # a table's columns: predict matches them by name
        manifest["feature_names"] = list(prepared.feature_names)
    return write_bundle(folder, manifest, files)
