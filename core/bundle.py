"""Model bundles: everything needed to score raw items, in ``<run>/bundle/``, and nothing else.

A bundle is a folder: ``bundle.json`` (the manifest: format, model kind and description, feature
count and indices, the fitted transform's kind, the outlier rule, the label setting and the
validation metric the model was chosen with, the run's identity, project version and git
revision) beside plain data files (``*.npz`` arrays read without pickle: the transform's
statistics, the histogram detector's bounds, PCA projections; ``*.safetensors`` torch weights of
a ranker or of gbdt-ssl's encoder; LightGBM's ``model.txt``; and ``members/<i>/`` sub-bundles of
an ensemble). Reading one never executes code from a file, and a bundle is read as untrusted
input: every file it names must lie inside it (`bundle_path`: no ``..``, no absolute path, no
link out), and every field is checked against the weights before anything of its size is
allocated (`serving.ranker`). The folder is written under a temporary name and renamed into
place, so a crash never leaves half a bundle. `scarce_ltr.serving` loads and scores bundles.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import (
    TEMP_SUFFIX,
    fault_point,
    file_error,
    jsonable,
    temp_folder_beside,
)

BUNDLE_DIR = "bundle"
MANIFEST = "bundle.json"
FORMAT = "scarce-ltr/bundle/1"


def write_bundle(run_folder: Path, manifest: dict[str, Any], files: dict[str, bytes]) -> Path:
    """Write ``<run_folder>/bundle/`` atomically; ``files`` maps relative paths (``model.txt``,
    ``members/0/bundle.json``) to their contents."""
    final = Path(run_folder) / BUNDLE_DIR
    tmp = temp_folder_beside(final)
    try:
        for name, data in files.items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        text = json.dumps({"format": FORMAT, **manifest}, indent=2, default=jsonable)
        (tmp / MANIFEST).write_text(text + "\n")
        fault_point()
        old = None
        if final.exists():  # replaced, never mixed with the new one
            old = final.with_name(f".{BUNDLE_DIR}.old.{os.getpid()}{TEMP_SUFFIX}")
            os.replace(final, old)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise file_error(exc, "write the model bundle", final) from None
        raise
    fault_point()
    return final


def bundle_files(bundle: Path, prefix: str) -> dict[str, bytes]:
    """Every file of a finished bundle under ``prefix`` (to nest it in another bundle)."""
    bundle = Path(bundle)
    return {
        f"{prefix}{path.relative_to(bundle)}": path.read_bytes()
        for path in sorted(bundle.rglob("*"))
        if path.is_file()
    }


def bundle_folder(run_or_bundle: str | Path) -> Path:
    """The bundle folder of a run folder (or the bundle folder itself); `UserError` if none."""
    path = Path(run_or_bundle)
    if (path / MANIFEST).is_file():
        return path
    if (path / BUNDLE_DIR / MANIFEST).is_file():
        return path / BUNDLE_DIR
    if not path.exists():
        raise UserError(f"{path}: no such run folder")
    if not (path / "DONE").is_file() and (path / "config.yaml").is_file():
        raise UserError(f"{path}: the run has not finished (no DONE); run its command again")
    raise UserError(
        f"{path}: no model bundle ({BUNDLE_DIR}/{MANIFEST}); finished finetune, baseline and "
        "ensemble runs leave one (not yet gbdt-ssl, nor an ensemble with a gbdt-ssl member); a "
        "run made before bundles existed: run its command again with run_dir=<new folder>; "
        "pretraining runs score no item"
    )


def read_manifest(bundle: Path) -> dict[str, Any]:
    path = Path(bundle) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable bundle manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise UserError(f"{path}: format {found!r}, this version reads {FORMAT!r}")
    for key, kind in (("model", dict), ("transform", dict), ("n_features", int)):
        if not isinstance(manifest.get(key), kind) or isinstance(manifest.get(key), bool):
            raise UserError(
                f"{path}: {key} is missing or not a{'n integer' if kind is int else ' mapping'}"
            )
    return manifest


def bundle_path(bundle: Path, name: object, key: str = "a file") -> Path:
    """``bundle/name`` for a manifest's relative ``name`` that stays inside the bundle once
    links are resolved (and is not the bundle itself); `UserError` naming ``key`` otherwise."""
    bundle = Path(bundle)
    where = f"{bundle / MANIFEST}: {key} {name!r}"
    if not isinstance(name, str) or not name or "\0" in name:
        raise UserError(f"{where} is not a file name inside the bundle")
    if Path(name).is_absolute() or ".." in Path(name).parts:
        raise UserError(f"{where} leads out of the bundle (an absolute path or '..'); refused")
    path = bundle / name
    try:
        root, target = bundle.resolve(), path.resolve()
    except (OSError, RuntimeError) as exc:  # a loop of links
        raise UserError(f"{where} cannot be resolved ({exc})") from None
    if target == root or root not in target.parents:
        raise UserError(f"{where} is a link leading out of the bundle (to {target}); refused")
    return path


def read_npz(bundle: Path, name: str) -> dict[str, np.ndarray]:
    path = bundle_path(bundle, name)
    try:
        with np.load(path, allow_pickle=False) as stored:
            return {key: stored[key] for key in stored.files}
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable array file ({exc})") from None


def tensors_bytes(module: torch.nn.Module) -> bytes:
    state = {k: v.detach().cpu().contiguous().clone() for k, v in module.state_dict().items()}
    return save_tensors(state)


def read_tensors(bundle: Path, name: str) -> dict[str, torch.Tensor]:
    path = bundle_path(bundle, name)
    try:
        return load_tensors(path.read_bytes())
    except Exception as exc:  # safetensors raises its own error types for a damaged file
        raise UserError(f"{path}: not a readable weights file ({exc})") from None


def read_model_bytes(path: Path) -> bytes:
    """A bundle's model file (a booster's text or binary model), with a one-line `UserError`
    when it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: not a readable model file ({exc.strerror})") from None
