"""The command line's arguments before they are overrides: the flags (`Options`: ``--help``,
``--config <file>``, ``--print-config``), a command's positional argument (`POSITIONAL`:
``./run.sh report <sweep>``, ``./run.sh predict <run>``) turned into its ``key=value``, and the
check that no override contradicts the command-line name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path

from scarce_ltr.cli_compose import Stage
from scarce_ltr.core.errors import UserError

# Commands whose first argument, when it is not key=value, is this key: ./run.sh report <sweep>;
# a `LISTED` key takes every leading one: ./run.sh portfolio <folder> <folder>.
POSITIONAL = {
    "report": "sweep", "select": "sweep", "predict": "run", "export": "run", "portfolio": "folders",
}  # fmt: skip
LISTED = ("folders",)  # positional keys that take every leading positional argument


@dataclass
class Options:
    """The flags that are not overrides: ``--help``, ``--config <file>``, ``--print-config``."""

    help: bool = False
    print_config: bool = False
    config_files: list[Path] = field(default_factory=list)


def take_options(args: list[str]) -> tuple[list[str], Options]:
    options, rest = Options(), []
    items = iter(args)
    for arg in items:
        if arg in ("-h", "--help"):
            options.help = True
        elif arg == "--print-config":
            options.print_config = True
        elif arg == "--config":
            path = next(items, None)
            if path is None or path.startswith("-") or "=" in path:
                raise UserError("--config needs a YAML file: --config my.yaml")
            options.config_files.append(Path(path))
        elif arg.startswith("--config="):
            options.config_files.append(Path(arg.partition("=")[2]))
        else:
            rest.append(arg)
    return rest, options


# An override's key: a dotted name (``out=``, ``data.path=``); a run folder such as
# ``runs/x/frac=0.02/seed=0`` or ``/abs/frac=1`` has a '/' or another character before its '='.
_OVERRIDE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*=")


def is_positional(arg: str, stage: Stage) -> bool:
    """``./run.sh predict <run> ...``: the first argument is the run (or sweep) unless it is an
    override of one of the command's keys; run folders the tool names hold ``frac=`` and
    ``seed=``, which are no keys of ``predict``, ``export``, ``select`` or ``report``."""
    if arg.startswith("-"):
        return False
    match = _OVERRIDE.match(arg)
    if match is None:
        return True
    top = arg.partition("=")[0].split(".")[0]
    return top not in {f.name for f in fields(stage.config())}


def take_positionals(command: str, rest: list[str], stage: Stage) -> list[str]:
    """``rest`` with its leading positional argument as ``<key>=<value>``; for a key that
    takes a list (`LISTED`: ``portfolio <folder> <folder> ...``), all its leading ones."""
    if POSITIONAL[command] not in LISTED:
        return [_positional_override(command, rest[0], rest[1:]), *rest[1:]]
    count = next((i for i, arg in enumerate(rest) if not is_positional(arg, stage)), len(rest))
    values, others = rest[:count], rest[count:]
    key = POSITIONAL[command]
    _check_given_once(key, values[0], others)
    return [f"{key}=[{','.join(_quoted(v) for v in values)}]", *others]


def _positional_override(command: str, value: str, overrides: list[str]) -> str:
    """``<key>=<value>`` for the positional argument, quoted so that YAML keeps it the string
    it is (a folder named ``1e5``, ``true`` or holding ``: `` or `` #``)."""
    key = POSITIONAL[command]
    _check_given_once(key, value, overrides)
    return f"{key}={_quoted(value)}"


def _check_given_once(key: str, value: str, overrides: list[str]) -> None:
    for item in overrides:
        if item.partition("=")[0] == key:
            raise UserError(
                f"'{item}' and the positional {key} '{value}' both give the {key}; give one"
            )


def _quoted(value: str) -> str:
    """``value`` single-quoted for YAML, so that it stays the string it is."""
    quoted = value.replace("'", "''").replace("${", "\\${")
    return f"'{quoted}'"


def check_name_key(key: str, name: str, overrides: list[str]) -> None:
    """The command-line name is the config's ``key``: an override may not say otherwise."""
    for item in overrides:
        given, _, value = item.partition("=")
        if given == key and value != name:
            raise UserError(
                f"'{item}' contradicts the command-line name '{name}'; drop it, or give the "
                f"name you want first (./run.sh <command> {value} ...)"
            )
