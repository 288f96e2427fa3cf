"""The optional parts of scarce-ltr (``pyproject.toml``'s extras) and the one line naming a
missing one.

The core (data, pretraining, finetuning, the LightGBM baseline, ``predict`` of a torch or
LightGBM bundle) needs none of them. A feature that does imports its package through `require`
where it is used, so a user without the extra gets one line saying which to install::

    export format=onnx needs onnxruntime, which is not installed: pip install "scarce-ltr[export]"

``./run.sh`` installs every extra; ``pip install "scarce-ltr[all]"`` does too.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import NamedTuple

from scarce_ltr.core.errors import UserError

# Top-level module -> (the package that installs it, the extra that lists the package). A tree
# backend's package is not here: its module declares it (`Extra`, trees/backends.py).
EXTRAS: dict[str, tuple[str, str]] = {
    "wandb": ("wandb", "wandb"),
    "onnx": ("onnx", "export"),
    "onnxscript": ("onnxscript", "export"),
    "onnxruntime": ("onnxruntime", "export"),
    "matplotlib": ("matplotlib", "report"),
    "plotly": ("plotly", "report"),
    "optuna": ("optuna", "trees"),
    "pyarrow": ("pyarrow", "parquet"),
    "pandas": ("pandas", "parquet"),
    "ray": ("ray[client]", "cluster"),
    "tabm": ("tabm", "tabular"),
    "rtdl_num_embeddings": ("rtdl-num-embeddings", "tabular"),
}


class Extra(NamedTuple):
    """An optional package declared by the module that imports it, beside that module's other
    declarations, rather than in `EXTRAS`: a tree backend's (``trees/xgboost.py``:
    ``Extra("xgboost", "xgboost-cpu", "trees")``), so that a new backend edits no table here."""

    module: str  # the top-level module it imports
    package: str  # the pip package that installs it
    extra: str  # pyproject.toml's extra that lists the package


class MissingExtra(UserError):
    """An optional package a feature needs is not installed (the message names the extra)."""


def install_hint(extra: str) -> str:
    return f'pip install "scarce-ltr[{extra}]"'


def missing_message(
    module: str, feature: str, problem: ImportError | None = None, *, extra: Extra | None = None
) -> str:
    """``<feature> needs <package>, which is not installed: pip install "scarce-ltr[<extra>]"``;
    an installed package that fails to import is named with its error instead. ``extra``: the
    package as its module declares it (not in `EXTRAS`)."""
    root = module.partition(".")[0]
    package, name = (extra.package, extra.extra) if extra is not None else EXTRAS[root]
    if problem is None or (problem.name or "").partition(".")[0] == root:
        state = "which is not installed"
    else:  # the package is there, but something it imports is not (a broken install)
        state = f"which failed to import ({problem})"
    return f"{feature} needs {package}, {state}: {install_hint(name)}"


def require(module: str, feature: str, *, extra: Extra | None = None) -> ModuleType:
    """``import module``, or a `MissingExtra` naming ``feature`` and the extra to install
    (``extra``: the package as its module declares it; default: `EXTRAS`')."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(missing_message(module, feature, exc, extra=extra)) from None


def import_feature(module: str, feature: str) -> ModuleType:
    """Import a module of this package whose own imports need an extra (``./run.sh report``
    imports matplotlib): a missing optional package becomes a `MissingExtra`."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        root = (exc.name or "").partition(".")[0]
        if root in EXTRAS:
            raise MissingExtra(missing_message(root, feature, exc)) from None
        raise


def require_all(modules: tuple[str, ...], feature: str) -> None:
    """`require` each of ``modules`` (before a feature starts work it could not finish)."""
    for module in modules:
        require(module, feature)


def missing(modules: tuple[str, ...], feature: str) -> str | None:
    """The `missing_message` of the first of ``modules`` that does not import; None if all do."""
    try:
        require_all(modules, feature)
    except MissingExtra as exc:
        return str(exc)
    return None
