"""Estimator keywords as config keys, and the stages run with them.

A keyword is a config key with ``__`` for the dot (``optimizer__lr=1e-4`` is
``optimizer.lr``); a mapping value stands for its keys (``gbdt__params={"max_bin": 63}``).
`route` sends each key, with its Python value, to the stage whose config holds it
(docs/estimators.md has the table). A `StageCall` composes the stage's config as ``./run.sh``
does (`scarce_ltr.cli.compose_named`: the stage's file, ``data=arrays``) with the keys set last,
no value turned into a string and parsed back, and runs it through `scarce_ltr.cli.run_stage`,
the code of the commands; its `record` is the ``./run.sh`` argv that runs the same.
"""

from __future__ import annotations

import contextlib
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from scarce_ltr import cli
from scarce_ltr.baselines.config import BaselineConfig
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


@dataclass(frozen=True)
class StageCall:
    """One stage of a fit: ``./run.sh <stage> <name>`` on ``data=arrays``, with the keys the
    estimator sets (``given``: where the data and runs are, which QGs are labeled) and the
    user's keywords; ``run_dir`` last."""

    stage: str  # pretrain | finetune | baseline
    name: str  # configs/<stage>/<name>.yaml
    given: dict[str, Any]
    keywords: list[tuple[str, Any]]  # `route`'s
    run_dir: Path

    @property
    def values(self) -> dict[str, Any]:
        return {**self.given, **dict(self.keywords), "run_dir": str(self.run_dir)}

    @property
    def record(self) -> list[str]:
        """The ``./run.sh`` argv that runs the same: ``ranker.commands_``."""
        given = [
            f"{k}={v!r}" if isinstance(v, float) else f"{k}={v}" for k, v in self.given.items()
        ]
        keywords = [f"{k}={render(v)}" for k, v in self.keywords]
        return [self.stage, self.name, "data=arrays", *given, *keywords, f"run_dir={self.run_dir}"]


def run_stage(call: StageCall, log: Path | None, *, progress: bool = False) -> dict | None:
    """``call``'s config composed as the command line composes it, run by
    `scarce_ltr.cli.run_stage`: stdout and stderr into ``log`` (appended, after the ``$
    ./run.sh`` line of its record) when given; ``progress``: stderr (the stages' progress bars
    and lines, warnings) stays on the terminal."""
    if log is None:
        return _run(call)
    with open(log, "a") as out, contextlib.redirect_stdout(out), contextlib.ExitStack() as stack:
        if not progress:
            stack.enter_context(contextlib.redirect_stderr(out))
        print(f"$ ./run.sh {' '.join(call.record)}", flush=True)
        try:
            return _run(call)
        finally:
            out.flush()
            sys.stdout.flush()


def _run(call: StageCall) -> dict | None:
    stage = cli.STAGES[call.stage]
    return cli.run_stage(
        stage, cli.compose_named(stage, call.name, ["data=arrays"], values=call.values)
    )
