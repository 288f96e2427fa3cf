"""Estimator keywords as the command line's ``key=value`` overrides, and the stages run with them.

A keyword is a config key with ``__`` for the dot (``optimizer__lr=1e-4`` is
``optimizer.lr=1e-4``); a mapping value stands for its keys (``gbdt__params={"max_bin": 63}``).
`route` sends each key to the stage whose config holds it (docs/estimators.md has the table);
`run_stage` calls `scarce_ltr.cli.run` with the argv that ``./run.sh`` would get, so an
estimator runs the very code of the commands, and records that argv.
"""

from __future__ import annotations

import contextlib
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.cli import run
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.finetune.config import FinetuneConfig
from scarce_ltr.pretrain.config import PretrainConfig

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


def route(params: Mapping[str, Any], stages: tuple[str, ...]) -> dict[str, list[str]]:
    """The overrides of each of ``stages`` (``pretrain``, ``finetune``, ``baseline``).

    ``<stage>__<key>`` goes to that stage alone; a key every stage shares (``seed``, ``epochs``,
    ``data__transform``, ...) to each; ``encoder__*`` to pretraining; any other key to the
    last stage whose config holds it (the one that trains the ranker)."""
    out: dict[str, list[str]] = {stage: [] for stage in stages}
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
            out[stage].append(f"{key}={render(value)}")
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


def run_stage(argv: list[str], log: Path | None, *, progress: bool = False) -> dict | None:
    """``scarce_ltr.cli.run(argv)``: stdout and stderr into ``log`` (appended) when given;
    ``progress``: stderr (the stages' progress bars and lines, warnings) stays on the terminal."""
    if log is None:
        return run(argv)
    with open(log, "a") as out, contextlib.redirect_stdout(out), contextlib.ExitStack() as stack:
        if not progress:
            stack.enter_context(contextlib.redirect_stderr(out))
        print(f"$ ./run.sh {' '.join(argv)}", flush=True)
        try:
            return run(argv)
        finally:
            out.flush()
            sys.stdout.flush()
