"""Configs: OmegaConf YAML plus ``key=value`` overrides, validated into frozen dataclasses.

A stage's config is its dataclass schema (the keys every stage shares are
`scarce_ltr.data.stage_config.CommonConfig`), merged in this order:
``schema defaults <- configs/data/<data>.yaml (under "data") <- configs/<stage>/<name>.yaml
<- key=value overrides``. ``data=<name>`` picks the data set file; every other override is a
dotted key. An unknown key, a value of the wrong type or out of range stops with a `UserError`
naming the key (and the allowed keys or values), never a traceback.

The ranges keys declare and the shared sections are `scarce_ltr.core.config_fields`; the files
are read by `scarce_ltr.core.config_files`. A type error (``epochs=1e23``, a float for an int)
quotes the key's range. nan is refused for every key, and an integer beyond int64 too. A
``device`` key that asks for CUDA on a machine without it, and a data set's ``data.path`` that
names a file where a folder of split files belongs, stop here, before a run folder is made.
``data.path`` is kept absolute (``~`` expanded, no trailing ``/``), so one folder spelled two
ways is one setting of a run.

The public keys that scripts rely on: ``data``, ``data.path``, ``scarcity.fraction``,
``scarcity.val``, ``scarcity.binary_tau``, ``seed``, ``run_dir``, ``epochs``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf, read_write
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from scarce_ltr.core.config_doc import expected_type, key_field
from scarce_ltr.core.config_files import read_mapping, read_yaml
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_config import new_names_layer

# The package's root folder (the checkout's root, or site-packages/scarce_ltr): configs/ ships
# inside it as package data.
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
CONFIG_ROOT = PACKAGE_ROOT / "configs"
INT64_MAX = 2**63 - 1  # numpy and torch hold integers in int64

ConfigT = TypeVar("ConfigT")


def available(folder: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_ROOT / folder).glob("*.yaml"))


def load_config(
    schema: type[ConfigT],
    overrides: list[str],
    *,
    stage_file: Path | None = None,
    config_files: list[Path] = (),  # type: ignore[assignment]
    values: Mapping[str, Any] | None = None,
) -> tuple[ConfigT, DictConfig]:
    """The validated config object and its resolved OmegaConf form (saved with every run)."""
    merged = merge_config(
        schema, overrides, stage_file=stage_file, config_files=config_files, values=values
    )
    _absolute_data_path(merged)
    try:
        obj = OmegaConf.to_object(merged)
    except (ValueError, TypeError) as exc:
        raise UserError(f"bad config value: {exc}") from None
    except OmegaConfBaseException as exc:
        raise UserError(f"bad config: {exc}") from None
    # After the dataclasses' own checks, whose messages name the range: the nets for the rest.
    leaves = dict(_leaves(OmegaConf.to_container(merged)))
    _check_numbers(leaves)
    _check_devices(leaves)
    return obj, merged  # type: ignore[return-value]


def _absolute_data_path(merged: DictConfig) -> None:
    """A data set's ``data.path`` made absolute and normal (``~`` expanded, no ``..`` or
    trailing ``/``), so that one folder given two ways is one setting of a run; symlinks stay
    as given (the run folder's name, `DataConfig.run_name`, resolves them itself)."""
    data = merged.get("data")
    if not isinstance(data, DictConfig) or "name" not in data:
        return  # predict's data.path: a file or folder it names in its own messages
    path = data.get("path")
    if isinstance(path, str) and path:
        with read_write(data):  # the merge leaves the config read-only
            data.path = os.path.abspath(os.path.expanduser(path))


def _leaves(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted key, value)`` of every leaf of a plain config (list items as ``key[i]``)."""
    if isinstance(node, dict):
        return [leaf for k, v in node.items() for leaf in _leaves(v, f"{prefix}{k}.")]
    if isinstance(node, list):
        key = prefix.rstrip(".")
        return [leaf for i, v in enumerate(node) for leaf in _leaves(v, f"{key}[{i}].")]
    return [(prefix.rstrip("."), node)]


def _check_numbers(leaves: dict[str, Any]) -> None:
    """nan for any key, and integers beyond int64 (what numpy and torch hold), are refused even
    where a dataclass declares no range (LightGBM's ``gbdt.params``, a section of another
    module)."""
    for key, value in leaves.items():
        if isinstance(value, float) and math.isnan(value):
            raise UserError(f"config key '{key}' is nan; give a number")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
            raise UserError(
                f"config key '{key}'={value}: too large; integers here are at most 2**63 - 1"
            )


def _check_devices(leaves: dict[str, Any]) -> None:
    """``device=cuda`` (or ``deep.device=cuda``) on a machine without CUDA, named now rather
    than when the stage starts in the run folder it made."""
    for key, value in leaves.items():
        if key.rpartition(".")[2] == "device" and isinstance(value, str) and "cuda" in value:
            from scarce_ltr.core.device import check_device  # torch: only when CUDA is named

            check_device(key, value)


def merge_config(
    schema: type,
    overrides: list[str],
    *,
    stage_file: Path | None = None,
    config_files: list[Path] = (),  # type: ignore[assignment]
    defaults_only: bool = False,
    values: Mapping[str, Any] | None = None,
) -> DictConfig:
    """The layers merged, not yet validated (``--help`` shows a named config's defaults with it).

    ``config_files`` (``--config my.yaml``) come after the stage's file and before ``key=value``;
    a top-level ``data: <name>`` in one picks the data set file as ``data=<name>`` does.
    ``defaults_only``: the schema, the data set's file and the stage's file alone, what the user
    did not set (`core.runs.Run.start` takes a key an older run's config lacks at this value as
    no change); the data set is still the one the user picked.
    ``values``: dotted keys with Python values (no string parsed), the last layer (the
    estimators' keywords, `scarce_ltr.api.stages`), checked as the command line's are.
    """
    base = OmegaConf.structured(schema)
    OmegaConf.set_readonly(base, False)
    OmegaConf.set_struct(base, True)
    _open_plain_dicts(base)
    has_data = "data" in base and "name" in base.data  # a data set by name (predict: a path)
    user_files = [(str(path), read_mapping(path)) for path in config_files]
    default_data = base.data.name if has_data else ""
    for _, content in user_files:
        if has_data and isinstance(content.get("data"), str):
            default_data = content.pop("data")
    dataset, dotlist = _split_overrides(overrides, default_data=default_data)
    layers: list[tuple[str, Any]] = []
    if has_data:
        layers.append((str(_data_file(dataset)), {"data": read_yaml(_data_file(dataset))}))
    if stage_file is not None:
        layers.append((str(stage_file), read_yaml(stage_file)))
    if not defaults_only:
        layers += user_files
        layers.append(("command line", _parse_dotlist(dotlist)))
        if values:
            layers.append(("keywords", _nested(values)))
    # An extension's section (``objective: {name: vime, alpha: 1.0}``) spelled in the schema's
    # own keys, each layer before it is merged (`core.config_sections`).
    sections = getattr(schema, "SECTIONS", ())
    merged = base
    for source, layer in layers:
        layer = new_names_layer(layer, base, source)  # a renamed key's old spelling: its new one
        for spelling in sections:
            layer = spelling.flatten(layer, merged, source)
        merged = _merge(merged, layer, source, base, schema)
    for spelling in sections:
        spelling.finish(merged)
    return merged


def _open_plain_dicts(node: DictConfig) -> None:
    """Keys of dataclass nodes are fixed; a ``dict[str, ...]`` field may take new keys."""
    for key in node.keys():
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            if child._metadata.object_type in (None, dict):
                OmegaConf.set_struct(child, False)
            else:
                _open_plain_dicts(child)


def _split_overrides(overrides: list[str], *, default_data: str) -> tuple[str, list[str]]:
    dataset, dotlist = default_data, []
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"'{item}' is not a key=value override")
        if key == "data" and default_data:
            dataset = value
        else:
            dotlist.append(item)
    return dataset, dotlist


def _data_file(dataset: str) -> Path:
    path = CONFIG_ROOT / "data" / f"{dataset}.yaml"
    if not path.is_file():
        raise UserError(
            f"unknown data set '{dataset}'; known: {', '.join(available('data'))} "
            "(or data=letor data.path=<folder with train/vali/test files>)"
        )
    return path


def _nested(values: Mapping[str, Any]) -> dict[str, Any]:
    """``{"optimizer.lr": 1e-4}`` as ``{"optimizer": {"lr": 1e-4}}``; a later key wins, as a
    later ``key=value`` does."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        *heads, last = key.split(".")
        node = out
        for head in heads:
            if not isinstance(node.get(head), dict):
                node[head] = {}
            node = node[head]
        node[last] = value
    return out


def _parse_dotlist(dotlist: list[str]) -> DictConfig:
    for item in dotlist:
        try:
            OmegaConf.from_dotlist([item])
        except (OmegaConfBaseException, yaml.YAMLError) as exc:
            problem = str(exc).splitlines()[0]
            raise UserError(f"bad override '{item}': {problem}") from None
    return OmegaConf.from_dotlist(dotlist)


def _merge(
    merged: DictConfig, layer: Any, source: str, schema: DictConfig, schema_type: type
) -> DictConfig:
    try:
        return OmegaConf.merge(merged, layer)  # type: ignore[return-value]
    except ConfigKeyError as exc:
        key = str(exc.full_key)
        hint = _nested_home(schema, key)
        raise UserError(
            f"{source}: unknown config key '{key}'{hint}; allowed keys here: "
            f"{_siblings(schema, key)}"
        ) from None
    except ValidationError as exc:
        raise UserError(_type_error(exc, layer, source, schema, schema_type)) from None
    except OmegaConfBaseException as exc:
        raise UserError(f"{source}: {exc}") from None


def _type_error(
    exc: ValidationError, layer: Any, source: str, schema: DictConfig, schema_type: type
) -> str:
    """Key, expected type and the value given; OmegaConf's internals stay out of it."""
    key, value = exc.full_key, getattr(exc, "value", None)
    if not key:  # a whole section given one value (encoder=3): OmegaConf names no key
        plain = OmegaConf.to_container(layer) if isinstance(layer, DictConfig) else layer
        for name, given in (plain or {}).items():
            if isinstance(schema.get(name), DictConfig) and not isinstance(given, dict):
                key, value = name, given
                break
    expected = expected_type(schema_type, str(key)) if key else None
    if expected == "section":
        expected = f"keys ({key}.<key>=...; ./run.sh <command> --help lists them)"
    message = f"{source}: config key '{key}' expects {expected or 'another type'}, got {value!r}"
    if key and expected and expected.startswith("int"):
        message += _range_hint(schema_type, str(key), value)
    return message


def _range_hint(schema_type: type, key: str, value: Any) -> str:
    """``; <key> must be a whole number <range>`` when an int key was given another number
    (``epochs=1e23``; scikit-learn says "must be an int in the range [1, inf)") and declares
    a range."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return ""  # not a number at all (seed=abc): the type says it
    found = key_field(schema_type, key)
    bounds = found.metadata.get("allowed") if found is not None else None
    if bounds is None:
        return ""
    hint = f"; {key} must be a whole number {bounds}"
    if number.is_integer() and int(number) in bounds:
        hint += f": write it as {int(number)}"
    return hint


def _nested_home(schema: DictConfig, key: str) -> str:
    """`` (did you mean 'deep.loss'?)`` when a top-level key the user gave exists one level
    down (the deep baselines keep their training keys under ``deep.``)."""
    if "." in key:
        return ""
    homes = [
        f"{name}.{key}"
        for name, node in schema.items()
        if isinstance(node, DictConfig) and key in node
    ]
    return f" (did you mean {' or '.join(repr(h) for h in homes)}?)" if homes else ""


def _siblings(schema: DictConfig, key: str) -> str:
    parent = key.rpartition(".")[0]
    node = OmegaConf.select(schema, parent) if parent else schema
    if isinstance(node, DictConfig):
        return ", ".join(f"{parent + '.' if parent else ''}{k}" for k in node.keys())
    return f"(none: '{parent}' takes a value, not keys)"


def to_yaml(resolved: DictConfig) -> str:
    return OmegaConf.to_yaml(resolved)
