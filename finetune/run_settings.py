"""What a finetuning run is, as its checkpoints store it: `run_identity` (its settings as one
JSON string, the free keys left out), `checkpoint_meta` (what a checkpoint holds of it) and
`check_identity` (the one-line refusal of a folder holding a run with other settings, or the
note that its source runs moved).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from scarce_ltr.core.checkpointing import load_checkpoint
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_config import SOURCE_KEYS, sources_moved, without_free_keys
from scarce_ltr.finetune.config import FinetuneConfig

# Keys `run_identity` leaves out at these values (the run is the one it was before the key
# existed); a checkpoint written while a key was still kept at its default holds it there.
_LEFT_OUT_AT = {"vali_every": 1}


def _without_defaults(settings: dict) -> dict:
    return {k: v for k, v in settings.items() if _LEFT_OUT_AT.get(k, object()) != v}


def run_identity(cfg: FinetuneConfig) -> str:
    """The settings that make a run what it is, as one JSON string (stored in its checkpoints and
    report; the keys that may change between a run and its resume left out)."""
    settings = without_free_keys(asdict(cfg))
    if not cfg.search.on:  # a run without a search is the run it was before the key existed
        settings.pop("search")
    else:
        if not cfg.search.l2sp:  # likewise a search without an L2-SP range
            settings["search"].pop("l2sp")
        if cfg.search.pruner == "none":  # likewise a search without a pruner
            settings["search"].pop("pruner"), settings["search"].pop("prune_warmup")
        if cfg.search.pruner != "median":  # only the median pruner reads it
            settings["search"].pop("prune_startup")
        if cfg.search.strategy == "optuna":  # likewise a search from before portfolios
            settings["search"].pop("strategy"), settings["search"].pop("portfolio")
    if not cfg.l2sp_on:  # likewise without L2-SP
        settings.pop("l2sp"), settings.pop("l2sp_grid")
    if cfg.head_lr is None:  # likewise with one rate for both phases
        settings.pop("head_lr")
    if not cfg.joint.on:  # likewise without joint training
        settings.pop("joint")
    if not cfg.variant:  # likewise a fresh encoder without a variant's name
        settings.pop("variant")
    if cfg.vali_every == _LEFT_OUT_AT["vali_every"]:  # likewise vali scored every epoch
        settings.pop("vali_every")
    if not cfg.from_scratch:
        settings["pretrained"] = str(Path(cfg.pretrained).resolve())
    settings["runs"] = [str(Path(r).resolve()) for r in cfg.runs]
    return json.dumps(settings, sort_keys=True, default=str)


def check_identity(out_dir: Path, found: str | None, expected: str) -> None:
    if found is not None and found != expected:
        # A checkpoint of an earlier version kept keys now free (cpu_amp): no setting.
        old = _without_defaults(without_free_keys(_data_path_resolved(json.loads(found))))
        new = _without_defaults(without_free_keys(json.loads(expected)))
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if not keys:  # the data folder spelled otherwise by an earlier version
            return
        if all(k in SOURCE_KEYS and sources_moved(old.get(k), new.get(k)) for k in keys):
            # The runs it was finetuned from have moved (a copied or moved runs/ tree): the
            # same settings otherwise, so it is the same run.
            print(f"{out_dir}: its {' and '.join(keys)} moved; resuming there", file=sys.stderr)
            return
        raise UserError(
            f"{out_dir} holds a finetuning run with other settings ({', '.join(keys)} differ); "
            "pass run_dir=<new folder>, or delete that folder to start over"
        )


def _data_path_resolved(settings: dict) -> dict:
    """A checkpoint of an earlier version stored ``data.path`` as typed (relative, with a
    trailing ``/``); configs store it absolute now: the same folder is the same setting."""
    data = settings.get("data")
    if isinstance(data, dict) and data.get("path"):
        data["path"] = str(Path(str(data["path"])).expanduser().resolve())
    return settings


def checkpoint_meta(path: Path) -> dict:
    if not path.is_file():
        return {}
    return load_checkpoint(path, what="finetuning checkpoint").get("meta") or {}
