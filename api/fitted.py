"""A fit's model in memory, with the face of a bundle the estimators read (`serving.ranker`).

A stage's function returns its fitted ranker (`finetune.fitted.FinetunedRanker`,
`trees.fitted.FittedTrees`): it scores raw features and ``save``s the bundle a run writes.
`InMemory` gives it what the estimators ask of a `serving.ranker.BundledRanker` (``kind``,
``transform``, ``model``: the torch module, or LightGBM's booster; ``folder``: None), so a fresh
fit and a `load_estimator` or an unpickled one are used alike, and `bundle_files` is the bundle
of either as bytes (pickling: the model travels as its bundle, not with the data it was fit on).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np


class InMemory:
    """``fitted`` (a stage's ranker) as the estimators read a bundle."""

    folder = None  # nothing on disk

    def __init__(self, fitted: Any) -> None:
        self.fitted = fitted

    @property
    def n_features(self) -> int:
        return self.fitted.n_features

    @property
    def transform(self):
        return self.fitted.prepared.transform

    @cached_property
    def description(self) -> dict:
        """The bundle's model description (``kind`` and its parts)."""
        if hasattr(self.fitted, "bundle"):  # trees: the chosen fit's bundle
            return self.fitted.bundle()[0]
        return {"kind": "torch", "spec": self.fitted.spec}

    @property
    def kind(self) -> str:
        return str(self.description["kind"])

    @cached_property
    def model(self) -> Any:
        """A torch model's module (``module``); a tree bundle's parts, LightGBM's ``booster``
        read from its ``model.txt`` (``pca``, ``embedding``: columns the trees add)."""
        if not hasattr(self.fitted, "bundle"):
            return SimpleNamespace(module=self.fitted.model, embedding=None)
        description, files = self.fitted.bundle()
        booster = None
        if description.get("kind") == "lightgbm" and description.get("booster") in files:
            import lightgbm as lgb

            booster = lgb.Booster(model_str=files[description["booster"]].decode())
        return SimpleNamespace(
            booster=booster, pca=description.get("pca"), embedding=description.get("embedding")
        )

    def predict(self, features: np.ndarray, qids: np.ndarray | None = None) -> np.ndarray:
        """``[n_items]`` float64 scores of raw ``features`` (a QG's items consecutive)."""
        return np.asarray(self.fitted.predict(features, qids), dtype=np.float64)

    def write(self, folder: Path) -> None:
        """The bundle's files straight into ``folder`` (an empty folder)."""
        staging = folder / ".staging"  # save writes <folder>/bundle/; its files go up a level
        inner = Path(self.fitted.save(staging))
        for entry in inner.iterdir():
            os.replace(entry, folder / entry.name)
        shutil.rmtree(staging)


def write_bundle(ranker: Any, folder: Path) -> None:
    """``ranker``'s bundle files into the empty ``folder`` (a fit's in memory, or a bundle
    folder's copied)."""
    if ranker.folder is None:  # in memory (`InMemory`, the LightGBM face's booster)
        ranker.write(folder)
        return
    for name, data in bundle_files(ranker).items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def bundle_files(ranker: Any) -> dict[str, bytes]:
    """``{relative path: bytes}`` of ``ranker``'s bundle (in memory: written to a temporary
    folder and read back, removed at once)."""
    if ranker.folder is None:
        with tempfile.TemporaryDirectory(prefix="scarce-ltr-bundle-") as tmp:
            ranker.write(Path(tmp))
            return _read_files(Path(tmp))
    return _read_files(Path(ranker.folder))


def _read_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
