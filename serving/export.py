"""``./run.sh export <run> format=onnx|torchscript|lightgbm [out=<file>]``: a file a serving stack
loads without this project, taking raw features.

- ``onnx``: torch rankers (lp/mp/full/combine on ResNet, MLP or attention encoders; the resnet,
  deepfm and dcnv2 baselines), any transform. ``model.onnx``: inputs ``features`` float32
  ``[B, L, d]`` and ``mask`` bool ``[B, L]`` (B query groups of up to L items, both dynamic),
  output ``scores`` float32 ``[B, L]``, 0 at padding.
- ``torchscript``: the same models and signature, ``model.torchscript.pt`` (``torch.jit.load``;
  traced, since the modules use Python that ``torch.jit.script`` rejects; torch 2.13 marks
  TorchScript deprecated in favour of ``torch.export``, ONNX is the format to prefer).
- ``lightgbm``: LightGBM boosters without PCA columns (gbdt, gbdt-pseudo) on the transforms none,
  standardize, log1p and log1p-standardize. ``model.raw.txt``: the booster with its thresholds on
  raw feature values (`scarce_ltr.trees.lightgbm.export`).

The fitted transform is inside the exported model. Ensembles, PCA and embedding features are
refused with a message that names what to export instead. Before the file is put in place, the
export scores QGs of 1, 7 and 300 synthetic items drawn on the scale of the training data both
ways (the bundle and the exported model) and refuses the file if they differ by more than the
tolerance; the file is written atomically (`core.files.atomic_path`: the umask's mode, a temp
file of a killed export removed by the next export of that file, errors naming ``out=`` and the
file, never the temp file). ``out=`` naming an existing folder is refused, as LightGBM's
``save_model`` refuses it, and so is one inside the bundle (its own ``model.txt``) or inside a
run's own files (``report.json``, ``DONE``: `serving.targets`), and a target that is no regular
file (a link, a FIFO, a device: `core.files.refuse_foreign_target`), left as it was.
"""

from __future__ import annotations

import contextlib
import glob
import io
import logging
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.extras import require, require_all
from scarce_ltr.core.files import atomic_path, remove_stale_temps
from scarce_ltr.data.transforms import FeatureTransform
from scarce_ltr.families import export_formats
from scarce_ltr.serving.ranker import BundledRanker, load_ranker, run_folder_of
from scarce_ltr.serving.targets import refuse_run_files

FILE_NAMES = {
    "onnx": "model.onnx",
    "torchscript": "model.torchscript.pt",
    "lightgbm": "model.raw.txt",
}
CHECK_SIZES = (1, 7, 300)  # items per QG of the self-check
TOLERANCE = 1e-5  # max |difference| / max(1, max |score|) of the self-check
# format=onnx: torch's exporter needs onnxscript, the file is written by onnx and checked by ONNX
# Runtime (the extra scarce-ltr[export]).
ONNX_MODULES = ("onnx", "onnxscript", "onnxruntime")


@dataclass(frozen=True)
class ExportConfig:
    run: str | None = None  # a finished run folder (or its bundle/ folder)
    format: str = "onnx"  # onnx | torchscript | lightgbm
    out: str | None = None  # the exported file; default <run>/export/<model file>
    seed: int = 0  # of the self-check's synthetic items

    def __post_init__(self) -> None:
        if not self.run:
            raise ValueError("export needs a run: ./run.sh export <run folder> format=onnx")
        if self.format not in FILE_NAMES:
            raise ValueError(f"format must be one of {', '.join(FILE_NAMES)}, got {self.format!r}")


def main(cfg: ExportConfig, out_dir: Path | None = None) -> dict:
    """Export the run's bundle; ``{"out": path, "format", "max_difference"}``."""
    ranker = load_ranker(cfg.run)
    check_format(ranker, cfg.format)
    if cfg.format == "onnx":  # before any work: torch's exporter, the file, its check
        require_all(ONNX_MODULES, "export format=onnx")
    target = Path(cfg.out) if cfg.out else run_folder_of(ranker) / "export" / FILE_NAMES[cfg.format]
    if target.is_dir():
        raise UserError(
            f"out={target} is a folder; give a file: out={target / FILE_NAMES[cfg.format]}"
        )
    bundle = Path(ranker.folder).resolve()
    if bundle == target.resolve() or bundle in target.resolve().parents:  # its model.txt, too
        raise UserError(
            f"out={target} is inside the bundle {bundle}, which holds what training wrote; "
            "give out=<a file outside it>"
        )
    refuse_run_files(target, command="export", default="export")
    if target.parent.is_dir():
        name = glob.escape(target.name)
        for stale in remove_stale_temps(target.parent, name=name, below=False, key="out"):
            print(f"removed {stale} (left by an interrupted export)", file=sys.stderr)
    with atomic_path(target, key="out") as tmp:
        try:
            EXPORTERS[cfg.format](ranker, tmp)
        except (RuntimeError, ValueError, TypeError) as exc:  # the exporter's, not ours
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise UserError(
                f"{ranker.folder}: the {cfg.format} exporter failed on this "
                f"{ranker.model_name} model ({type(exc).__name__}: {first}); nothing was written"
            ) from None
        difference = self_check(ranker, cfg.format, tmp, seed=cfg.seed)
    print(f"export: wrote {target} ({cfg.format}; the bundle's scores within {difference:.1e})")
    return {"out": str(target), "format": cfg.format, "max_difference": difference}


def check_format(ranker: BundledRanker, fmt: str) -> None:
    """A `UserError` naming what can be exported when ``fmt`` cannot hold the bundle's model."""
    kind = ranker.kind
    if kind == "ensemble":
        members = ", ".join(str(m.folder) for m in ranker.model.members)
        raise UserError(
            f"{ranker.folder}: an ensemble mixes its members' per-QG normalized scores; no "
            f"export format holds it. Export each member bundle ({members}) and mix with the "
            f"weights {ranker.model.weights.tolist()} in bundle.json"
        )
    allowed = export_formats(kind)
    if fmt not in allowed:
        can = f"use format={' or format='.join(allowed)}" if allowed else "no format holds it"
        raise UserError(f"{ranker.folder}: format={fmt} cannot hold a {kind} model; {can}")
    if kind == "lightgbm" and (ranker.model.pca or ranker.model.embedding) is not None:
        raise UserError(
            f"{ranker.folder}: the booster also reads PCA or encoder-embedding columns made "
            "from the features; format=lightgbm exports boosters on the features alone "
            "(gbdt, gbdt-pseudo)"
        )


def export_torch_graph(ranker: BundledRanker) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The module from raw features to scores and an example input (2 QGs of 3 items: sizes of
    1 would be specialized by the tracer)."""
    from scarce_ltr.serving.torch_graph import RawFeatureRanker

    graph = RawFeatureRanker(ranker.transform, ranker.model.module, ranker.n_features)
    graph.requires_grad_(False)  # an inference graph: outputs that need no .detach()
    example = (torch.zeros(2, 3, ranker.n_features), torch.ones(2, 3, dtype=torch.bool))
    return graph, example


def to_onnx(ranker: BundledRanker, path: Path) -> None:
    graph, example = export_torch_graph(ranker)
    batch, items = torch.export.Dim("query_groups"), torch.export.Dim("items")
    dims = {0: batch, 1: items}
    with _quiet():
        program = torch.onnx.export(
            graph,
            example,
            dynamo=True,
            input_names=["features", "mask"],
            output_names=["scores"],
            dynamic_shapes={"features": dims, "mask": dims},
        )
    model = program.model_proto
    for key, value in _metadata(ranker).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    import onnx

    onnx.save_model(model, str(path))


def to_torchscript(ranker: BundledRanker, path: Path) -> None:
    graph, example = export_torch_graph(ranker)
    with _quiet(), torch.no_grad():
        traced = torch.jit.trace(graph, example, check_trace=False)
    torch.jit.save(traced, str(path), _extra_files={"scarce_ltr.json": repr(_metadata(ranker))})


def to_lightgbm(ranker: BundledRanker, path: Path) -> None:
    from scarce_ltr.trees.lightgbm.export import raw_feature_model

    text = ranker.model.booster.model_to_string()
    path.write_text(raw_feature_model(text, ranker.transform))


EXPORTERS = {"onnx": to_onnx, "torchscript": to_torchscript, "lightgbm": to_lightgbm}


def self_check(ranker: BundledRanker, fmt: str, path: Path, *, seed: int) -> float:
    """Max relative difference between the bundle and the exported file on synthetic QGs of
    `CHECK_SIZES` items; a `UserError` above `TOLERANCE` (the file is then not kept)."""
    rng = np.random.default_rng(seed)
    exported = load_exported(fmt, path)
    worst = 0.0
    for size in CHECK_SIZES:
        features = plausible_raw_features(ranker.transform, rng, size, ranker.n_features)
        expected = ranker.predict(features)
        got = exported(features)
        scale = max(1.0, float(np.max(np.abs(expected))))
        worst = max(worst, float(np.max(np.abs(got - expected))) / scale)
    if worst > TOLERANCE:
        raise UserError(
            f"{ranker.folder}: the exported {fmt} model differs from the bundle by {worst:.2e} "
            f"(relative, more than {TOLERANCE:.0e}); nothing was written"
        )
    return worst


def score_exported(fmt: str, path: Path, features: np.ndarray) -> np.ndarray:
    """Scores of one QG ``[n_items, n_features]`` by an exported file (float64)."""
    return load_exported(fmt, path)(features)


def load_exported(fmt: str, path: Path) -> Callable[[np.ndarray], np.ndarray]:
    """The exported file loaded once, as a scorer of one QG ``[n_items, n_features]``."""
    if fmt == "onnx":
        onnxruntime = require("onnxruntime", "scoring an ONNX file")
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])

        def onnx_scores(features: np.ndarray) -> np.ndarray:
            x, mask = _one_group(features)
            return session.run(None, {"features": x, "mask": mask})[0][0].astype(np.float64)

        return onnx_scores
    if fmt == "torchscript":
        module = torch.jit.load(str(path))

        def torchscript_scores(features: np.ndarray) -> np.ndarray:
            x, mask = _one_group(features)
            with torch.no_grad():
                out = module(torch.from_numpy(x), torch.from_numpy(mask))
            return out[0].double().numpy()

        return torchscript_scores
    import lightgbm as lgb

    booster = lgb.Booster(model_file=str(path))
    return lambda features: booster.predict(np.asarray(features, dtype=np.float32))


def _one_group(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(features, dtype=np.float32)[None]
    return x, np.ones(x.shape[:2], dtype=bool)


def plausible_raw_features(
    transform: FeatureTransform, rng: np.random.Generator, n_items: int, n_features: int
) -> np.ndarray:
    """Raw features whose transformed values are standard normal: the scale the model saw."""
    z = rng.standard_normal((n_items, n_features))
    if transform.kind in ("standardize", "log1p-standardize"):
        z = z * transform.std + transform.mean
    if transform.kind in ("log1p", "log1p-standardize"):
        z = np.sign(z) * np.expm1(np.abs(z))
    return z.astype(np.float32)


def _metadata(ranker: BundledRanker) -> dict[str, str]:
    manifest = ranker.manifest
    return {
        "scarce_ltr.inputs": "features float32 [query_groups, items, n_features] raw; mask bool "
        "[query_groups, items] (True for real items)",
        "scarce_ltr.outputs": "scores float32 [query_groups, items], 0 at padding",
        "scarce_ltr.n_features": str(ranker.n_features),
        "scarce_ltr.transform": str(manifest["transform"]["kind"]),
        "scarce_ltr.run": str(manifest.get("run", {}).get("folder")),
        "scarce_ltr.version": str(manifest.get("run", {}).get("version")),
        "scarce_ltr.git": str(manifest.get("run", {}).get("git")),
    }


@contextlib.contextmanager
def _quiet():
    """The exporters' progress lines and warnings (missing torchvision, tracer notes) hidden."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)
