"""Reading config files: the shipped YAML, and a user's ``--config`` files.

``--config`` files are read as UTF-8, or as the UTF-8/16/32 their byte-order mark names (Windows
PowerShell's ``>`` writes UTF-16). A file that is missing, a folder, not text or not valid YAML
stops with a `UserError` naming it (and the line, where YAML names one), never a traceback; so
does a key given twice in one mapping (`refuse_repeated_keys`), of which YAML keeps the last.
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import file_error

# Byte-order marks of a --config file and their codecs; UTF-32's before UTF-16's, which they
# begin with.
BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def read_mapping(path: Path) -> dict:
    """A ``--config`` file: YAML holding a mapping of config keys."""
    text = read_config_text(path, flag="--config")
    try:
        refuse_repeated_keys(yaml.compose(text, Loader=yaml.SafeLoader), path)
        content = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f":{where.line + 1}" if where is not None else ""
        raise UserError(f"{path}{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if content is None:
        return {}
    if not isinstance(content, dict):
        kind = type(content).__name__
        raise UserError(f"{path}: a --config file holds keys (key: value), not a {kind}")
    return content


def refuse_repeated_keys(node: yaml.Node | None, path: Path, prefix: str = "") -> None:
    """A `UserError` at the second of two equal keys in one mapping of the composed document
    ``node``: PyYAML's safe_load keeps the last silently (OmegaConf's loader refuses them:
    `read_yaml`)."""
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            refuse_repeated_keys(item, path, prefix)
    if not isinstance(node, yaml.MappingNode):
        return
    first: dict[str, int] = {}
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        name = f"{prefix}{key.value}"
        if key.value in first:
            raise UserError(
                f"{path}:{key.start_mark.line + 1}: key '{name}' given twice (first on line "
                f"{first[key.value]}); YAML would keep only the last: give it once"
            )
        first[key.value] = key.start_mark.line + 1
        refuse_repeated_keys(value, path, f"{name}.")


def read_config_text(path: Path, *, flag: str = "") -> str:
    """A config file's text: UTF-8, or what its byte-order mark names (UTF-8, UTF-16, UTF-32);
    a `UserError` naming the file (and ``flag``) when it is missing, a folder or not UTF-8."""
    label = f"{flag} {path}".strip()
    if not path.exists():
        raise UserError(f"{label}: no such file")
    if path.is_dir():
        raise UserError(f"{label}: a folder, not a YAML file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise file_error(exc, "read", path) from None
    for bom, codec in BOMS:
        if data.startswith(bom):
            try:
                return data.decode(codec)
            except UnicodeDecodeError:
                raise UserError(
                    f"{label}: starts with a {codec} byte-order mark but is not {codec} text; "
                    "save it as UTF-8"
                ) from None
    if b"\x00" in data:  # UTF-16 without its byte-order mark, or not text at all
        raise UserError(
            f"{label}: holds NUL bytes (UTF-16 without a byte-order mark?); save it as UTF-8"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(
            f"{label}:{line}: byte 0x{data[exc.start]:02x} is not UTF-8; a config file must be "
            "UTF-8 (save it as UTF-8)"
        ) from None


def read_yaml(path: Path) -> Any:
    text = read_config_text(path)
    try:
        content = OmegaConf.create(text)
    except OmegaConfBaseException as exc:
        raise UserError(f"{path}: not valid YAML ({exc})") from None
    except yaml.YAMLError as exc:  # a shipped or user config file that does not parse
        where = getattr(exc, "problem_mark", None)
        line = f":{where.line + 1}" if where is not None else ""
        raise UserError(f"{path}{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    return content
