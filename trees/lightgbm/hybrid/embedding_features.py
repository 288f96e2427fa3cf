"""Item embeddings of a pretraining or finetuning run's encoder: the extra features of gbdt-ssl.

A pretraining run gives its ``encoder.pt``; a finetuning run gives the encoder inside its
``model.pt`` (the encoder's output, not the head's: the same space a pretraining run gives).
Items are embedded in eval mode, batches of whole QGs (`data.batching.QueryGroupBatcher`), so an
item's embedding never depends on which other QGs share its batch, and an encoder that attends
across a QG sees its list whole.

Embeddings depend on the encoder and on the transformed features, not on the label setting or
seed: they are cached in ``embeddings.npz`` in the source run directory, keyed on a hash of the
encoder file and the data config, and shared by every gbdt-ssl run on that encoder. A cache
that does not match is recomputed; one that cannot be written is skipped with a warning.
An encoder in memory (`pretrain.checkpoint.Encoder`, `pretrain.fit`'s) embeds the same way and
is never cached: it has no run folder, and an estimator's fit writes no file.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import atomic_write_bytes, npz_bytes
from scarce_ltr.core.runs import run_model
from scarce_ltr.data.batching import QueryGroupBatcher
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import RankingSplit, rows_of_groups

if TYPE_CHECKING:
    from scarce_ltr.pretrain.checkpoint import Encoder

EMBEDDINGS_FILE = "embeddings.npz"
SPLITS = ("train", "vali", "test")


@dataclass(frozen=True)
class Embeddings:
    """``[n_items, dim]`` float32 embeddings of each split's items, in split order."""

    train: np.ndarray
    vali: np.ndarray
    test: np.ndarray
    source: dict  # run, kind (pretrain | finetune), model, dim, cached, seconds
    encoder: nn.Module | None = None  # the encoder that made them (CPU, eval mode)
    encoder_config: dict | None = None  # its `EncoderConfig` fields, to rebuild it in a bundle

    @property
    def dim(self) -> int:
        return int(self.train.shape[1])


def load_encoder(run_dir: str | Path) -> tuple[nn.Module, dict]:
    """The encoder of a pretraining or finetuning run (CPU, eval mode) and where it came from.

    Returns:
        ``(encoder, info)``; ``info`` holds ``kind``, ``model`` (the source's model name as
        sweeps write it: ``simclr-rank``, ``simclr-rank+full``), ``n_features``, ``transform``
        and ``file`` (the file the weights came from).
    """
    from scarce_ltr.finetune.model import MODEL_FILE, Ranker, model_of, read_model
    from scarce_ltr.pretrain.checkpoint import ENCODER_FILE, load_pretrained_encoder

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"pretrained={run_dir}: no such run directory")
    if (run_dir / ENCODER_FILE).is_file():
        encoder, info = load_pretrained_encoder(run_dir)
        return encoder.eval(), {
            "kind": "pretrain",
            # As the run's report names it: a sweep variant's too (``simclr-rank@zero0.7``),
            # which encoder.pt does not hold.
            "model": run_model(run_dir) or str(info["method"]),
            "n_features": info["n_features"],
            "transform": info["data"].get("transform"),
            "file": info["path"],
            "encoder_config": info["encoder_config"].to_dict(),
        }
    if (run_dir / MODEL_FILE).is_file():
        # Refused by its kind before it is built: a deep baseline's (DeepFM, DCNv2, DASALC;
        # their builders live a layer above) or a combination holds no one item encoder.
        payload = read_model(run_dir)
        if payload["spec"].get("kind") != "ranker":
            raise UserError(
                f"pretrained={run_dir}: holds a {payload['spec'].get('kind')} model, which has no "
                "item encoder; use a pretraining run or a finetuning run (lp, mp, full)"
            )
        model = model_of(payload, run_dir / MODEL_FILE)
        assert isinstance(model, Ranker)
        data = payload.get("data") or {}
        return model.encoder.eval(), {
            "kind": "finetune",
            "model": source_model(run_dir),
            "n_features": data.get("n_features"),
            "transform": data.get("transform"),
            "file": str(run_dir / MODEL_FILE),
            "encoder_config": dict(payload["spec"]["encoder"]),
        }
    raise UserError(
        f"pretrained={run_dir}: neither encoder.pt nor model.pt; gbdt-ssl needs a finished "
        "pretraining or finetuning run"
    )


def encoder_in_memory(encoder: Encoder) -> tuple[nn.Module, dict]:
    """`load_encoder`'s ``(encoder, info)`` of an `Encoder` in memory: its module built as
    ``encoder.pt`` builds it (the same weights, so the same embeddings), ``file`` None."""
    return encoder.module(), {
        "kind": "pretrain",
        "model": (run_model(encoder.folder) if encoder.folder else None) or encoder.method,
        "n_features": encoder.n_features,
        "transform": encoder.data.get("transform"),
        "file": None,
        "encoder_config": encoder.config.to_dict(),
    }


def embed_split(
    encoder: nn.Module, split: RankingSplit, *, item_budget: int, device: str = "cpu"
) -> np.ndarray:
    """``[n_items, encoder.out_dim]`` float32 embeddings of every item of ``split``."""
    encoder.eval()
    out = np.zeros((split.n_items, encoder.out_dim), dtype=np.float32)
    with torch.no_grad():
        for batch in QueryGroupBatcher(split, item_budget=item_budget):
            b = batch.to(device)
            vectors = encoder(b.features, b.mask)[b.mask]
            rows = rows_of_groups(split.offsets, batch.groups.numpy())
            out[rows] = vectors.float().cpu().numpy()
    return out


def compute_embeddings(
    source: str | Path | Encoder,
    prepared: PreparedData,
    data_cfg,
    *,
    item_budget: int,
    cache: bool,
) -> Embeddings:
    """Every split's embeddings by the encoder of ``source``: a run folder (cached there when
    ``cache``) or an `Encoder` in memory (never cached)."""
    start = time.perf_counter()
    if isinstance(source, str | Path):
        run_dir: Path | None = Path(source)
        encoder, info = load_encoder(run_dir)
        where = f"pretrained={run_dir}"
    else:
        run_dir, cache = source.folder, False
        encoder, info = encoder_in_memory(source)
        where = f"encoder ({info['model']}, in memory)"
    if info["n_features"] != prepared.n_features:
        raise UserError(
            f"{where}: the encoder takes {info['n_features']} features; "
            f"data {data_cfg.name} has {prepared.n_features}"
        )
    if info["transform"] not in (None, data_cfg.transform):
        print(
            f"warning: {where} was trained on features with transform "
            f"{info['transform']}; this run uses {data_cfg.transform}",
            file=sys.stderr,
        )
    arrays, cached = None, False
    if cache:
        assert run_dir is not None
        key, path = _cache_key(Path(info["file"]), data_cfg), run_dir / EMBEDDINGS_FILE
        arrays = _read_cache(path, key, prepared)
        cached = arrays is not None
    if arrays is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        encoder.to(device)
        arrays = {
            s: embed_split(encoder, getattr(prepared, s), item_budget=item_budget, device=device)
            for s in SPLITS
        }
        if cache:
            _write_cache(path, key, arrays)
    source_info = {
        "run": f"<in memory: {info['model']}>" if run_dir is None else str(run_dir.resolve()),
        "kind": info["kind"],
        "model": info["model"],
        "dim": int(arrays["train"].shape[1]),
        "cached": cached,
        "seconds": round(time.perf_counter() - start, 3),
    }
    encoder.to("cpu")
    return Embeddings(
        **arrays, source=source_info, encoder=encoder, encoder_config=info["encoder_config"]
    )


def source_model(run_dir: str | Path) -> str:
    """The model name of a pretraining (``simclr-rank``) or finetuning (``simclr-rank+full``,
    ``scratch+full``) run, as its report gives it; the folder's name when it has none."""
    return run_model(run_dir) or Path(run_dir).name


def _cache_key(weights: Path, data_cfg) -> str:
    """What the embeddings depend on: the encoder's weights and the features it sees."""
    data = asdict(data_cfg)
    for inert in ("outliers", "source"):  # they change no feature
        data.pop(inert, None)
    if data.get("path"):
        data["path"] = str(Path(data["path"]).expanduser().resolve())
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    return json.dumps({"weights": digest, "data": data}, sort_keys=True, default=str)


def _read_cache(path: Path, key: str, prepared: PreparedData) -> dict[str, np.ndarray] | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as stored:
            if str(stored["key"]) != key:
                return None
            arrays = {s: stored[s] for s in SPLITS}
    except (OSError, ValueError, KeyError):
        return None  # unreadable or foreign: recompute and replace it
    if any(len(arrays[s]) != getattr(prepared, s).n_items for s in SPLITS):
        return None
    return arrays


def _write_cache(path: Path, key: str, arrays: dict[str, np.ndarray]) -> None:
    try:
        atomic_write_bytes(path, npz_bytes(key=np.array(key), **arrays))
    except OSError as exc:
        print(f"warning: cannot cache the embeddings in {path} ({exc})", file=sys.stderr)
