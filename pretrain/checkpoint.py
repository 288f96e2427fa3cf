"""``encoder.pt``: the pretrained encoder that finetuning loads.

Format (a dict read with ``torch.load(..., weights_only=True)``)::

    {"method": str, "n_features": int, "encoder_config": dict (EncoderConfig fields),
     "state_dict": encoder weights, "data": {"name": str, "transform": str}, "epochs": int}

`load_pretrained_encoder(run_dir)` rebuilds the encoder from it; every way it can fail (no such
folder, no encoder yet, an unreadable or foreign file) is one `UserError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
from torch import nn

from scarce_ltr.core.checkpointing import (
    load_checkpoint,
    load_module_state,
    require_keys,
    save_checkpoint,
)
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.runs import read_report
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder

ENCODER_FILE = "encoder.pt"
_KEYS = ("method", "n_features", "encoder_config", "state_dict", "data")


@dataclass(eq=False)
class Encoder:
    """A pretrained encoder in memory: what `scarce_ltr.pretrain.train.fit` returns and
    `scarce_ltr.finetune.train.fit` finetunes; `save` writes it as ``encoder.pt``, `load` reads
    one back. ``state``: its weights on the CPU, as ``encoder.pt`` holds them."""

    method: str
    n_features: int
    config: EncoderConfig
    state: dict
    data: dict = field(default_factory=dict)  # {"name", "transform"} it was pretrained on
    epochs: int | None = None
    folder: Path | None = None  # where it was saved or loaded from; None: in memory only

    @classmethod
    def of(cls, encoder: nn.Module, **info) -> Encoder:
        state = {k: v.detach().cpu().clone() for k, v in encoder.state_dict().items()}
        return cls(state=state, **info)

    @classmethod
    def load(cls, run_dir: str | Path) -> Encoder:
        """The encoder of a pretraining run folder (`load_pretrained_encoder`'s checks)."""
        with torch.random.fork_rng(devices=[]):  # building it draws; the caller's stream stays
            module, info = load_pretrained_encoder(run_dir)
        return cls.of(
            module, method=info["method"], n_features=info["n_features"],
            config=info["encoder_config"], data=info["data"], epochs=info["epochs"],
            folder=Path(run_dir),
        )  # fmt: skip

    def module(self) -> nn.Module:
        """A fresh copy on the CPU, in eval mode, built as `load_pretrained_encoder` builds it
        (the same random draws before its weights are loaded: a ranker finetuned on it equals
        one finetuned on its ``encoder.pt``)."""
        encoder = build_encoder(self.config, n_features=self.n_features)
        load_module_state(encoder, self.state, path=self.folder or Path("."), what="the encoder")
        return encoder.eval()

    def save(self, run_dir: str | Path) -> Path:
        """``<run_dir>/encoder.pt`` (the folder made if needed); ``pretrained=<run_dir>``
        finetunes it from the command line."""
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        data = self.data or {"name": "", "transform": ""}
        path = _write(Path(run_dir) / ENCODER_FILE, self.state, method=self.method,
                      n_features=self.n_features, encoder_config=self.config, data=data,
                      epochs=self.epochs or 0)  # fmt: skip
        self.folder = Path(run_dir)
        return path


def save_encoder(
    run_dir: Path,
    encoder: nn.Module,
    *,
    method: str,
    n_features: int,
    encoder_config: EncoderConfig,
    data: dict,
    epochs: int,
) -> Path:
    state = {k: v.detach().cpu().clone() for k, v in encoder.state_dict().items()}
    return _write(Path(run_dir) / ENCODER_FILE, state, method=method, n_features=n_features,
                  encoder_config=encoder_config, data=data, epochs=epochs)  # fmt: skip


def _write(
    path: Path, state: dict, *, method: str, n_features: int, encoder_config: EncoderConfig,
    data: dict, epochs: int,
) -> Path:  # fmt: skip
    save_checkpoint(
        path,
        {
            "method": method,
            "n_features": int(n_features),
            "encoder_config": encoder_config.to_dict(),
            "state_dict": state,
            "data": {"name": str(data["name"]), "transform": str(data["transform"])},
            "epochs": int(epochs),
        },
    )
    return path


def load_pretrained_encoder(run_dir: str | Path) -> tuple[nn.Module, dict]:
    """The encoder of a pretraining run (on the CPU, in eval mode) and its description.

    Returns:
        ``(encoder, info)`` with ``info`` holding ``method``, ``n_features``,
        ``encoder_config`` (an `EncoderConfig`), ``data``, ``epochs`` and ``path``.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such pretraining run directory")
    path = run_dir / ENCODER_FILE
    kind = _other_kind(run_dir)
    if kind:
        raise UserError(
            f"pretrained={run_dir} is {kind}, not a pretraining run; give the folder of a "
            "./run.sh pretrain run (or pretrained=none)"
        )
    if not path.is_file():
        raise UserError(
            f"{run_dir}: no {ENCODER_FILE}; the pretraining run has not finished "
            "(run the same ./run.sh pretrain command again: it resumes, or rebuilds "
            f"{ENCODER_FILE} from its checkpoint)"
        )
    advice = (
        "delete it and run the same ./run.sh pretrain command again (a finished run rebuilds "
        f"{ENCODER_FILE} from its checkpoint.pt)"
    )
    state = load_checkpoint(path, what="pretrained encoder", advice=advice)
    require_keys(state, _KEYS, path=path, what="pretrained encoder")
    known = {f.name for f in fields(EncoderConfig)}
    raw = state["encoder_config"]
    if not isinstance(raw, dict) or not set(raw) <= known:
        raise UserError(f"{path}: encoder_config is not an encoder configuration")
    try:
        config = EncoderConfig(**raw)
        encoder = build_encoder(config, n_features=int(state["n_features"]))
    except (TypeError, ValueError) as exc:
        raise UserError(f"{path}: bad encoder description ({exc})") from None
    load_module_state(encoder, state["state_dict"], path=path, what="the stored encoder")
    encoder.eval()
    info = {
        "method": state["method"],
        "n_features": int(state["n_features"]),
        "encoder_config": config,
        "data": dict(state["data"]),
        "epochs": state.get("epochs"),
        "path": str(path),
    }
    return encoder, info


def _other_kind(run_dir: Path) -> str | None:
    """``"a finetune run (model scratch+full)"`` when ``run_dir`` holds a run of another stage."""
    report = read_report(run_dir) or {}
    stage = report.get("stage")
    if stage and stage != "pretrain":
        return f"a {stage} run (model {report.get('model') or 'unknown'})"
    config = run_dir / "config.yaml"
    if not report and config.is_file():
        text = config.read_text(errors="replace")
        for key, stage in (("strategy:", "finetune"), ("gbdt:", "baseline"), ("runs:", "ensemble")):
            if any(line.startswith(key) for line in text.splitlines()):
                return f"a {stage} run"
    return None
