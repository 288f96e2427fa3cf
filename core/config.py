"""Configs: OmegaConf YAML plus ``key=value`` overrides, validated into frozen dataclasses.

A stage's config is its dataclass schema (the keys every stage shares are
`scarce_ltr.data.stage_config.CommonConfig`), merged in this order:
``schema defaults <- configs/data/<data>.yaml (under "data") <- configs/<stage>/<name>.yaml
<- key=value overrides``. ``data=<name>`` picks the data set file; every other override is a
dotted key. An unknown key, a value of the wrong type or out of range stops with a `UserError`
naming the key (and the allowed keys), never a traceback.

The public keys that scripts rely on: ``data``, ``data.path``, ``scarcity.fraction``,
``scarcity.val``, ``scarcity.binary_tau``, ``seed``, ``run_dir``, ``epochs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from scarce_ltr.core.config_doc import expected_type
from scarce_ltr.core.errors import UserError

# The package's root folder (the checkout's root, or site-packages/scarce_ltr): configs/ ships
# inside it as package data.
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
CONFIG_ROOT = PACKAGE_ROOT / "configs"
POLICIES = ("skip", "one", "zero")
LOGGERS = ("wandb", "none")


@dataclass(frozen=True)
class MetricsConfig:
    ks: list[int] = field(default_factory=lambda: [1, 3, 5, 10])  # NDCG cutoffs reported
    policy: str = "skip"  # what a QG without any relevant item counts as: skip | one | zero

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"metrics.policy must be one of {', '.join(POLICIES)}")
        if not self.ks or min(self.ks) < 1:
            raise ValueError("metrics.ks must be a non-empty list of positive integers")


@dataclass(frozen=True)
class OptimizerConfig:
    """Adam at a constant rate (paper A.2.3); pretraining's default rate is the paper's 5e-4.
    The A.2.5 recipe: ``name=adamw weight_decay=0.01 schedule=cosine`` (`core.optim`)."""

    lr: float = 5e-4  # the base learning rate
    weight_decay: float = 0.0  # adam: L2 penalty in the gradient; adamw: decoupled decay
    name: str = "adam"  # adam | adamw
    schedule: str = "constant"  # constant | cosine (per batch, over the run or phase)
    warmup: float = 0.05  # cosine: share of the steps with a linear warmup from 0

    def __post_init__(self) -> None:
        from scarce_ltr.core.optim import OPTIMIZERS, SCHEDULES

        if not self.lr > 0:
            raise ValueError(f"optimizer.lr must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"optimizer.weight_decay must be >= 0, got {self.weight_decay}")
        if self.name not in OPTIMIZERS:
            raise ValueError(f"optimizer.name must be one of {', '.join(OPTIMIZERS)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"optimizer.schedule must be one of {', '.join(SCHEDULES)}")
        if not 0.0 <= self.warmup < 1.0:
            raise ValueError(f"optimizer.warmup must be in [0, 1), got {self.warmup}")


ConfigT = TypeVar("ConfigT")


def available(folder: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_ROOT / folder).glob("*.yaml"))


def load_config(
    schema: type[ConfigT],
    overrides: list[str],
    *,
    stage_file: Path | None = None,
    config_files: list[Path] = (),  # type: ignore[assignment]
) -> tuple[ConfigT, DictConfig]:
    """The validated config object and its resolved OmegaConf form (saved with every run)."""
    merged = merge_config(schema, overrides, stage_file=stage_file, config_files=config_files)
    try:
        obj = OmegaConf.to_object(merged)
    except (ValueError, TypeError) as exc:
        raise UserError(f"bad config value: {exc}") from None
    except OmegaConfBaseException as exc:
        raise UserError(f"bad config: {exc}") from None
    return obj, merged  # type: ignore[return-value]


def merge_config(
    schema: type,
    overrides: list[str],
    *,
    stage_file: Path | None = None,
    config_files: list[Path] = (),  # type: ignore[assignment]
) -> DictConfig:
    """The layers merged, not yet validated (``--help`` shows a named config's defaults with it).

    ``config_files`` (``--config my.yaml``) come after the stage's file and before ``key=value``;
    a top-level ``data: <name>`` in one picks the data set file as ``data=<name>`` does.
    """
    base = OmegaConf.structured(schema)
    OmegaConf.set_readonly(base, False)
    OmegaConf.set_struct(base, True)
    _open_plain_dicts(base)
    has_data = "data" in base and "name" in base.data  # a data set by name (predict: a path)
    user_files = [(str(path), _read_mapping(path)) for path in config_files]
    default_data = base.data.name if has_data else ""
    for _, content in user_files:
        if has_data and isinstance(content.get("data"), str):
            default_data = content.pop("data")
    dataset, dotlist = _split_overrides(overrides, default_data=default_data)
    layers: list[tuple[str, Any]] = []
    if has_data:
        layers.append((str(_data_file(dataset)), {"data": _read_yaml(_data_file(dataset))}))
    if stage_file is not None:
        layers.append((str(stage_file), _read_yaml(stage_file)))
    layers += user_files
    layers.append(("command line", _parse_dotlist(dotlist)))
    merged = base
    for source, layer in layers:
        merged = _merge(merged, layer, source, base, schema)
    return merged


def _read_mapping(path: Path) -> dict:
    """A ``--config`` file: YAML holding a mapping of config keys."""
    if not path.is_file():
        raise UserError(f"--config {path}: no such file")
    try:
        content = yaml.safe_load(path.read_text())
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


def _read_yaml(path: Path) -> Any:
    try:
        content = OmegaConf.load(path)
    except OmegaConfBaseException as exc:
        raise UserError(f"{path}: not valid YAML ({exc})") from None
    except yaml.YAMLError as exc:  # a shipped or user config file that does not parse
        where = getattr(exc, "problem_mark", None)
        line = f":{where.line + 1}" if where is not None else ""
        raise UserError(f"{path}{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    return content


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
    return f"{source}: config key '{key}' expects {expected or 'another type'}, got {value!r}"


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
