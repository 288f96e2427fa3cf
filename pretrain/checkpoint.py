"""``encoder.pt``: the pretrained encoder that finetuning loads.

Format (a dict read with ``torch.load(..., weights_only=True)``)::

    {"method": str, "n_features": int, "encoder_config": dict (EncoderConfig fields),
     "state_dict": encoder weights, "data": {"name": str, "transform": str}, "epochs": int}

`load_pretrained_encoder(run_dir)` rebuilds the encoder from it; every way it can fail (no such
folder, no encoder yet, an unreadable or foreign file) is one `UserError`.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

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
    path = Path(run_dir) / ENCODER_FILE
    state = {k: v.detach().cpu().clone() for k, v in encoder.state_dict().items()}
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
