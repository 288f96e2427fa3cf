"""A run's ``config.yaml``: read back as a typed object, and compared with a resume's settings.

`read_config` reads a run's saved config as a stage's schema (`UserError` when unreadable).
`changed_settings` names the keys a resume changes from the saved config, which `Run.start`
refuses: the `FREE_KEYS` (device, AMP, the scoring batch size, the logger, the folder itself)
may change between a run and its resume, one data folder spelled two ways, relative or
absolute, with or without a trailing ``/``, is one ``data.path``, and the source run folders
(`SOURCE_KEYS`) may have moved. A key the saved config lacks (a version before the key wrote
it) is no change where the new config holds its default. A key renamed since (`KEY_ALIASES`)
is read under its new name: a run saved with the old spelling compares equal to the new spelling
with the same value, and the old spelling in a config file or on the command line is the new key
(`new_names`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import file_error

CONFIG = "config.yaml"
# The settings that may change between a run and its resume, or its skip once finished: where it
# runs and logs (device, AMP, the tracker), how many items it scores at once (a QG's scores do not
# depend on the others in its batch), where pretraining batches are gathered (the same batches),
# whether its checkpoints are kept once it finished, its folder (moved or copied), and where a
# search's Optuna study is recorded (``storage``, ``study_name``: `search.studies` draws in
# memory and only records; the same trials, the same choice). A free key is one of these at
# the top of a stage's config, of a family's section (``deep.device``) or of a section's search
# (`FREE_SECTIONS`: ``deep.search.storage``), never inside a pass-through mapping of a backend's
# own options (``xgboost.params.device`` is a setting).
FREE_KEYS = (
    "logger", "run_dir", "device", "amp", "cpu_amp", "eval_item_budget", "gather_on_device",
    "keep_checkpoints", "storage", "study_name",
)  # fmt: skip
# The sections inside a family's section whose free keys are free too.
FREE_SECTIONS = ("search",)
# Keys naming the run folders a run is built from: they may differ when those folders moved.
SOURCE_KEYS = ("pretrained", "runs")

# Keys renamed since runs saved them: old dotted key -> new dotted key. Finished runs' config.yaml
# keep the old names (a baseline run of any method saves the deep: section), so both spellings
# are one key: an alias applies to a config whose schema holds the new key and not the old one,
# which makes it the stage's (deep.* is the baseline stage's alone). The deep baselines took
# finetuning's names for finetuning's recipe (issue 63): one whole-network phase is full_epochs
# (with head_epochs=0), Adam's L2 penalty is optimizer.weight_decay.
KEY_ALIASES = {
    "deep.max_epochs": "deep.full_epochs",
    "deep.weight_decay": "deep.optimizer.weight_decay",
}

ConfigT = TypeVar("ConfigT")
# A key a config does not hold (`_changed_keys`), told apart from one holding None.
_ABSENT: Any = object()


def read_config(folder: str | Path, schema: type[ConfigT]) -> ConfigT:
    """A run's ``config.yaml`` as a ``schema`` object (keys the schema lacks are left out, so a
    stage's config reads as the `CommonConfig` every stage shares); `UserError` when unreadable."""
    path = Path(folder) / CONFIG
    written = "a ./run.sh command wrote: runs/<data>/<stage>/<model>/<setting>/seed=<s>"
    if Path(folder).is_file():
        raise UserError(f"{folder}: a file, not a run folder (give the folder {written})")
    if path.is_dir():
        raise UserError(f"{path}: a folder where the run's config file belongs; not a run folder")
    try:
        saved = OmegaConf.load(path)
    except FileNotFoundError:
        raise UserError(
            f"{folder}: no {CONFIG}; not a run folder (give the folder {written}, or its run_dir=)"
        ) from None
    except OSError as exc:
        raise file_error(exc, "read", path) from None
    except OmegaConfBaseException as exc:
        raise UserError(f"{path}: not readable ({exc})") from None
    if not isinstance(saved, DictConfig):
        raise UserError(f"{path}: not a mapping")
    base = OmegaConf.structured(schema)
    plain = _container(saved)
    renamed = new_names(plain, lambda key: _holds(base, key))
    if renamed is not plain:  # a run saved before a key's rename (`KEY_ALIASES`)
        saved = OmegaConf.create(renamed)
    known = [k for k in saved.keys() if k in base]
    try:
        merged = OmegaConf.merge(base, OmegaConf.masked_copy(saved, known))
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except (OmegaConfBaseException, ValueError, TypeError) as exc:
        raise UserError(f"{path}: not a config this version reads ({exc})") from None


def changed_settings(
    saved: DictConfig, resolved: DictConfig, *, defaults: DictConfig | None = None
) -> list[str]:
    """The dotted keys whose values differ between a run's saved config and ``resolved``: free
    keys left out, and a source key (`SOURCE_KEYS`) whose folders moved is no change.
    ``defaults``: see `scarce_ltr.core.runs.Run.start`; without it every missing key is a change."""
    new = _plain(resolved)
    old = new_names(_plain(saved), lambda key: _holds(new, key))
    default = _ABSENT if defaults is None else _plain(defaults)
    return [
        k
        for k in _changed_keys(old, new, default=default)
        if not (k in SOURCE_KEYS and sources_moved(old.get(k), new.get(k)))
    ]


def new_names(
    settings: dict[str, Any], holds: Callable[[str], bool], *, source: str | None = None
) -> dict[str, Any]:
    """``settings`` (a config's nested plain values) with each key of `KEY_ALIASES` that
    ``holds`` (the schema's keys) does not know moved to its new name, which ``holds`` knows;
    ``settings`` itself is left as it is. ``source`` (a config file, ``command line``): user
    input, where both spellings at once are refused naming the new one; a saved config holding
    both keeps the new key's value."""
    renamed = settings
    for old, new in KEY_ALIASES.items():
        if not holds(new) or holds(old) or _lookup(settings, old) is _ABSENT:
            continue
        if renamed is settings:
            renamed = copy.deepcopy(settings)
        value = _pop(renamed, old)
        if _lookup(renamed, new) is not _ABSENT:
            if source is not None:
                raise UserError(
                    f"{source}: {old} and {new} both given; {old} is the old name of {new}: "
                    f"give {new} alone"
                )
            continue
        parent = renamed
        *heads, last = new.split(".")
        for head in heads:
            parent = parent.setdefault(head, {})
        parent[last] = value
    return renamed


def new_names_layer(layer: Any, schema: DictConfig, source: str) -> Any:
    """A layer of a stage's config (a file's mapping, the command line's keys) with the old
    spellings of `KEY_ALIASES` the stage's ``schema`` reads under their new names (`new_names`);
    the layer itself where it holds none."""
    if not any(_lookup(layer, old) is not _ABSENT for old in KEY_ALIASES):
        return layer
    return new_names(_container(layer), lambda key: _holds(schema, key), source=source)


def _container(config: Any) -> dict[str, Any]:
    plain = OmegaConf.to_container(config) if isinstance(config, DictConfig) else config
    assert isinstance(plain, dict)
    return plain


def _holds(config: Any, dotted: str) -> bool:
    return _lookup(config, dotted) is not _ABSENT


def _lookup(config: Any, dotted: str) -> Any:
    """The value at ``dotted`` in nested mappings (plain or `DictConfig`), `_ABSENT` if none."""
    node = config
    for part in dotted.split("."):
        # a DictConfig's keys() lists a key whose value is missing (???) too; `in` does not
        keys = node.keys() if isinstance(node, DictConfig) else node
        if not isinstance(node, (dict, DictConfig)) or part not in keys:
            return _ABSENT
        node = node._get_node(part) if isinstance(node, DictConfig) else node[part]
    return node


def _pop(settings: dict[str, Any], dotted: str) -> Any:
    *heads, last = dotted.split(".")
    node = settings
    for head in heads:
        node = node[head]
    return node.pop(last)


def sources_moved(old: Any, new: Any) -> bool:
    """Whether the source run folders ``old`` names (a path or a list of paths) are all gone
    and ``new`` names as many: they moved (a moved or copied runs/ tree), they did not change."""
    olds = old if isinstance(old, list) else [old]
    news = new if isinstance(new, list) else [new]
    paths = [p for p in olds if p not in (None, "", "none")]
    if len(olds) != len(news) or len(paths) != len(olds):
        return False
    if any(p in (None, "", "none") for p in news):
        return False
    return not any(Path(p).exists() for p in paths)


def _plain(config: Any) -> dict:
    """A run's settings, free keys left out and ``data.path`` in a normal form: a config saved
    before paths were made absolute (`core.config.load_config`) compares equal to the same
    folder given now."""
    plain = OmegaConf.to_container(config)
    assert isinstance(plain, dict)
    data = plain.get("data")
    if isinstance(data, dict) and isinstance(data.get("path"), str) and data["path"]:
        data["path"] = os.path.abspath(os.path.expanduser(data["path"]))
    return without_free_keys(plain)


def without_free_keys(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` (a stage's config as plain values) without its `FREE_KEYS`: those at the top,
    those of a section one level down and those of its `FREE_SECTIONS` (``deep.search``)."""
    return {
        key: _without_free(value, nested=True) if isinstance(value, dict) else value
        for key, value in settings.items()
        if key not in FREE_KEYS
    }


def _without_free(section: dict[str, Any], *, nested: bool) -> dict[str, Any]:
    return {
        k: _without_free(v, nested=False)
        if nested and k in FREE_SECTIONS and isinstance(v, dict)
        else v
        for k, v in section.items()
        if k not in FREE_KEYS
    }


def _changed_keys(
    old: object, new: object, prefix: str = "", default: object = _ABSENT
) -> list[str]:
    """The dotted keys whose values differ between ``old`` and ``new``. A key ``old`` lacks is
    no change where ``new`` holds its ``default`` (`_ABSENT`: none known); a section ``old``
    lacks is compared key by key with its defaults, naming the keys set otherwise."""
    if old is _ABSENT and default is not _ABSENT and new == default:
        return []
    if isinstance(new, dict) and (
        isinstance(old, dict) or (old is _ABSENT and isinstance(default, dict))
    ):
        olds = old if isinstance(old, dict) else {}
        defaults = default if isinstance(default, dict) else {}
        keys = sorted(set(olds) | set(new))
        return [
            c
            for k in keys
            for c in _changed_keys(
                olds.get(k, _ABSENT), new.get(k), f"{prefix}{k}.", defaults.get(k, _ABSENT)
            )
        ]
    was = None if old is _ABSENT else old
    return [] if was == new else [prefix.rstrip(".")]
