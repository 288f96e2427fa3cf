"""The ranker finetuning trains: an encoder (pretrained, given in memory, or fresh) with a new
scoring head; a pretrained one checked against the data it is finetuned on."""

from __future__ import annotations

import sys
from pathlib import Path

from scarce_ltr.core.errors import UserError
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.finetune.config import FinetuneConfig
from scarce_ltr.finetune.model import Ranker, head_on, ranker_spec
from scarce_ltr.pretrain.checkpoint import Encoder, load_pretrained_encoder
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder


def build_ranker(
    cfg: FinetuneConfig, prepared: PreparedData, encoder: Encoder | None = None
) -> tuple[Ranker, dict, dict]:
    """``(model, spec, source)``: the encoder (``encoder`` when given, else the pretrained one
    of ``cfg.pretrained``, else a fresh one) with a new head."""
    if encoder is not None:
        module, encoder_cfg, source = given_encoder(cfg, prepared, encoder)
    elif cfg.from_scratch:
        encoder_cfg = cfg.encoder
        # Piecewise-linear embeddings take their bins from the train items (features only).
        module = build_encoder(
            encoder_cfg, n_features=prepared.n_features, features=prepared.train.features
        )
        source: dict = {"pretrained": None, "method": None}
    else:
        module, encoder_cfg, source = load_pretrained(cfg, prepared)
    head = head_on(module, cfg.head, hidden=cfg.head_hidden, dropout=cfg.head_dropout)
    spec = ranker_spec(
        n_features=prepared.n_features,
        encoder=encoder_cfg,
        head=cfg.head,
        hidden=cfg.head_hidden,
        dropout=cfg.head_dropout,
    )
    return Ranker(encoder=module, head=head), spec, source


def load_pretrained(cfg: FinetuneConfig, prepared: PreparedData):
    """The pretrained encoder of ``cfg.pretrained``, checked against the data."""
    path = Path(cfg.pretrained)
    encoder, info = load_pretrained_encoder(path)
    if info["n_features"] != prepared.n_features:
        raise UserError(
            f"pretrained={cfg.pretrained}: the encoder takes {info['n_features']} features; "
            f"data {cfg.data.name} has {prepared.n_features}"
        )
    encoder_cfg = info["encoder_config"]
    if cfg.encoder not in (EncoderConfig(), encoder_cfg):
        raise UserError(
            f"encoder.* keys were set, but the encoder comes from pretrained={cfg.pretrained} "
            f"({encoder_cfg}); leave them out, or use pretrained=none"
        )
    data = info.get("data", {})
    if data.get("transform") not in (None, cfg.data.transform):
        print(
            f"warning: the encoder was pretrained on features with transform "
            f"{data.get('transform')}; this run uses {cfg.data.transform}",
            file=sys.stderr,
        )
    source = {"pretrained": str(path.resolve()), "method": info.get("method")}
    return encoder, encoder_cfg, source


def given_encoder(cfg: FinetuneConfig, prepared: PreparedData, encoder: Encoder):
    """``encoder`` (in memory) as `load_pretrained` gives a stored one: a fresh copy built
    with the same random draws, so a ranker finetuned on it equals one finetuned on its file."""
    if encoder.n_features != prepared.n_features:
        raise UserError(
            f"encoder: it takes {encoder.n_features} features; the data has {prepared.n_features}"
        )
    if cfg.encoder not in (EncoderConfig(), encoder.config):
        raise UserError(
            f"encoder.* keys were set, but the encoder is given ({encoder.config}); leave them out"
        )
    folder = None if encoder.folder is None else str(Path(encoder.folder).resolve())
    return encoder.module(), encoder.config, {"pretrained": folder, "method": encoder.method}
