"""Named settings of a pretraining method that ship with the tool: ``<method>@<preset>``.

A preset is one YAML layer, ``configs/pretrain/presets/<method>@<name>.yaml``, laid over the
method's own file (``configs/pretrain/<method>.yaml``); the command line's keys win over it.
``./run.sh pretrain simclr@released`` runs ``simclr`` with the preset's keys and
``variant=released``, so the run's model and folder are ``simclr@released`` as a sweep's variant
of that name would make them; a sweep's model ``simclr@released+full`` takes the shipped preset
where the sweep declares no variant ``released`` of its own (the sweep's list wins, so a sweep
stays what it was if a preset changes). The preset's file says where its settings come from.

Light on purpose (no torch): the CLI reads it before it knows which stage it runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from scarce_ltr.core.config import CONFIG_ROOT
from scarce_ltr.core.config_files import read_mapping
from scarce_ltr.core.errors import UserError

# <method>@<variant>: a method with named settings, a shipped preset's or a sweep's variant's
# (paper A.2.3 tunes each method's augmentation), as in simclr-rank@zero0.1+full.
VARIANT_MARK = "@"
PRESET_FOLDER = CONFIG_ROOT / "pretrain" / "presets"


def available_presets() -> list[str]:
    """Every shipped ``<method>@<name>``."""
    return sorted(p.stem for p in PRESET_FOLDER.glob(f"*{VARIANT_MARK}*.yaml"))


def split_preset(name: str) -> tuple[str, str | None]:
    """``("simclr", "released")`` of ``simclr@released``; ``(name, None)`` without a mark."""
    method, mark, preset = name.partition(VARIANT_MARK)
    return method, preset if mark else None


def preset_file(name: str) -> Path | None:
    """The shipped file of ``<method>@<name>``, None when there is none."""
    path = PRESET_FOLDER / f"{name}.yaml"
    return path if VARIANT_MARK in name and path.is_file() else None


def preset_overrides(name: str) -> list[str]:
    """The preset's keys as ``key=value`` overrides (nested keys dotted), then
    ``variant=<name>``: what a sweep's variant list would say.

    Raises `UserError` naming the shipped presets when ``name`` is none of them.
    """
    path = preset_file(name)
    if path is None:
        shipped = ", ".join(available_presets()) or "none"
        raise UserError(f"no pretraining preset '{name}'; shipped: {shipped}")
    overrides = [f"{key}={_scalar(value)}" for key, value in _dotted(read_mapping(path))]
    return [*overrides, f"variant={split_preset(name)[1]}"]


def _dotted(node: dict, prefix: str = "") -> list[tuple[str, object]]:
    pairs: list[tuple[str, object]] = []
    for key, value in node.items():
        if isinstance(value, dict):
            pairs += _dotted(value, f"{prefix}{key}.")
        else:
            pairs.append((f"{prefix}{key}", value))
    return pairs


def _scalar(value: object) -> str:
    """A value as an override spells it: strings bare, the rest as YAML reads them back."""
    return value if isinstance(value, str) else json.dumps(value)
