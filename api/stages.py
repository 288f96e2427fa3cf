"""Estimator keywords as config keys, and each stage's config composed with them.

A keyword is a config key with ``__`` for the dot (``optimizer__lr=1e-4`` is
``optimizer.lr``); a mapping value stands for its keys (``gbdt__params={"max_bin": 63}``).
`route` sends each key, with its Python value, to the stage whose config holds it
(docs/estimators.md has the table). A `StageConfig` composes the stage's config as ``./run.sh``
does (`core.config.load_config` on the stage's file and ``data=arrays``) with the keys set last,
no value turned into a string and parsed back; the estimators hand it to the stage's function
(`pretrain.fit`, `finetune.fit`, `baselines.fit`). Its `record` is the ``./run.sh`` argv.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.core.config import CONFIG_ROOT, available, load_config, merge_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.finetune.config import FinetuneConfig
from scarce_ltr.pretrain.config import PretrainConfig
from scarce_ltr.pretrain.presets import preset_overrides, split_preset

SCHEMAS = {"pretrain": PretrainConfig, "finetune": FinetuneConfig, "baseline": BaselineConfig}
COMMON = frozenset(f.name for f in fields(CommonConfig))
# Keys the estimator sets itself: where the data and runs are, which QGs are labeled.
RESERVED = (
    "run_dir", "scarcity", "pretrained", "runs", "method", "strategy",
    "data.path", "data.name", "data.format", "data.splits",
)  # fmt: skip
_PLAIN = re.compile(r"[A-Za-z0-9_.+/:-]+")


def leaves(params: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(dotted key, value)`` of every keyword, mappings flattened."""
    out: list[tuple[str, Any]] = []
    for key, value in params.items():
        dotted = key.replace("__", ".")
        if isinstance(value, Mapping):
            out += leaves({f"{dotted}.{k}": v for k, v in value.items()})
        else:
            out.append((dotted, value))
    return out


def route(params: Mapping[str, Any], stages: tuple[str, ...]) -> dict[str, list[tuple[str, Any]]]:
    """The ``(config key, value)`` pairs of each of ``stages`` (``pretrain``, ``finetune``,
    ``baseline``), in the keywords' order (a later one wins, as a later ``key=value`` does).

    ``<stage>__<key>`` goes to that stage alone; a key every stage shares (``seed``, ``epochs``,
    ``data__transform``, ...) to each; ``encoder__*`` to pretraining; any other key to the
    last stage whose config holds it (the one that trains the ranker)."""
    out: dict[str, list[tuple[str, Any]]] = {stage: [] for stage in stages}
    for key, value in leaves(params):
        head, _, rest = key.partition(".")
        if head in SCHEMAS and rest:
            if head not in stages:
                raise ValueError(f"{key.replace('.', '__')}: this estimator runs no {head} stage")
            targets, key = [head], rest
        else:
            targets = _targets(key, stages)
        reserved = next((r for r in RESERVED if key == r or key.startswith(f"{r}.")), None)
        if reserved:
            raise ValueError(
                f"{key.replace('.', '__')}: the estimator sets {reserved} itself (from fit's "
                "arguments and work_dir)"
            )
        for stage in targets:
            out[stage].append((key, plain(value)))
    return out


def _targets(key: str, stages: tuple[str, ...]) -> list[str]:
    head = key.partition(".")[0]
    if head in COMMON:
        return list(stages)
    if head == "encoder" and "pretrain" in stages:
        return ["pretrain"]
    holding = [s for s in stages if head in {f.name for f in fields(SCHEMAS[s])}]
    if not holding:
        known = sorted({f.name for s in stages for f in fields(SCHEMAS[s])} - set(RESERVED))
        raise ValueError(
            f"unknown keyword {key.replace('.', '__')!r}: the config keys of this estimator "
            f"are {', '.join(known)} (nested keys with __, such as optimizer__lr)"
        )
    return [holding[-1]]


def plain(value: Any) -> Any:
    """``value`` as a config value: a numpy scalar as its Python one, a tuple as a list, what
    is no YAML scalar (a path) as its text; numbers, strings, None and booleans as they are."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if hasattr(value, "item"):  # a numpy scalar
        return plain(value.item())
    return str(value)


def render(value: Any) -> str:
    """``value`` as YAML in a ``key=value`` override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(render(v) for v in value) + "]"
    if hasattr(value, "item") and not isinstance(value, str):  # a numpy scalar
        return render(value.item())
    text = str(value)
    if _PLAIN.fullmatch(text):
        return text
    return "'" + text.replace("'", "''") + "'"


# Where each stage's named config lives, and the key that receives its name (as ``./run.sh
# <stage> <name>`` gives it: `scarce_ltr.cli.STAGES`' ``config_folder`` and ``name_key``).
NAME_KEYS = {"pretrain": "method", "finetune": "strategy", "baseline": "method"}


@dataclass(frozen=True)
class StageConfig:
    """One stage of a fit: ``./run.sh <stage> <name>`` on ``data=arrays``, with the keys the
    estimator sets (``given``: which QGs are labeled, which encoder) and the user's keywords.
    `compose` builds its config as the command line does; `record` is the argv."""

    stage: str  # pretrain | finetune | baseline
    name: str  # configs/<stage>/<name>.yaml (pretraining: also <method>@<preset>)
    given: dict[str, Any]
    keywords: list[tuple[str, Any]]  # `route`'s

    def compose(self) -> tuple[Any, DictConfig]:
        """The typed config and its resolved YAML: the schema <- ``configs/data/arrays.yaml``
        <- ``configs/<stage>/<name>.yaml`` (<- a pretraining preset's keys) <- ``given`` and the
        keywords as Python values, checked by `core.config.load_config`, the loader of the
        command line (`cli_compose.compose_named` composes the same; a test holds them equal)."""
        overrides, stage_file = self._layers()
        return load_config(
            SCHEMAS[self.stage],
            overrides,
            stage_file=stage_file,
            values={**self.given, **dict(self.keywords)},
        )

    def defaults(self) -> DictConfig:
        """The config as the user left it (no ``given``, no keyword), as the command line's
        `cli_compose.compose` gives it to `core.runs.Run.start`: a key a run folder's older
        ``config.yaml`` lacks is no change when it holds this value."""
        overrides, stage_file = self._layers()
        return merge_config(
            SCHEMAS[self.stage], overrides, stage_file=stage_file, defaults_only=True
        )

    def _layers(self) -> tuple[list[str], Path]:
        """The command line's overrides and stage file of ``./run.sh <stage> <name>
        data=arrays`` (a pretraining preset's keys among the overrides)."""
        name, preset = split_preset(self.name)
        names = available(self.stage)
        if name not in names:
            raise UserError(f"unknown {self.stage} '{name}'; valid: {', '.join(names)}")
        keys = preset_overrides(self.name) if preset is not None else []  # pretraining's alone
        overrides = [f"{NAME_KEYS[self.stage]}={name}", *keys, "data=arrays"]
        return overrides, CONFIG_ROOT / self.stage / f"{name}.yaml"

    @property
    def record(self) -> list[str]:
        """The ``./run.sh`` argv of the same config (``ranker.commands_``), but for the data
        (``data.path=``: fit's arrays) and the labeled QGs (fit's, a mask, not a draw)."""
        given = [f"{k}={render(v)}" for k, v in self.given.items() if k != "scarcity.fraction"]
        keywords = [f"{k}={render(v)}" for k, v in self.keywords]
        return [self.stage, self.name, "data=arrays", *given, *keywords]
