"""A stage of the command line and its config: `Entry` (its config class and ``main``),
`Stage` (its name, help line, code and where it runs), `compose` / `compose_named` (the typed
config the command line composes: schema, data set file, ``configs/<folder>/<name>.yaml``,
overrides) and `run_stage`, the one way a stage runs (`cli` holds the stages, `STAGES`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from omegaconf import DictConfig

from scarce_ltr.core.config import CONFIG_ROOT, available, load_config, merge_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.extras import EXTRAS, MissingExtra, missing_message
from scarce_ltr.core.runs import Run
from scarce_ltr.pretrain.presets import preset_overrides, split_preset

ConfigT = TypeVar("ConfigT")


@dataclass(frozen=True)
class Entry(Generic[ConfigT]):
    """A stage's code: its config class and ``main(cfg, run)`` (a `Run` for a stage that
    trains in a run folder, returning its `core.runs.Outcome`; None for the other commands,
    which return their result)."""

    config: type[ConfigT]
    main: Callable[[ConfigT, Any], Any]


@dataclass(frozen=True)
class Stage:
    name: str  # the command: ./run.sh <name>
    help: str
    # Imports the stage's modules and returns its `Entry`; called when the command runs, so
    # that ./run.sh --help and the other commands do not import them (nor need their extras).
    load: Callable[[], Entry[Any]]
    config_folder: str | None = None  # the stage takes a name: configs/<folder>/<name>.yaml
    # The stage trains or scores in a run folder (its config: identity()), which `Run.execute`
    # locks, starts, skips when finished and closes.
    runs: bool = False
    report_when_done: bool = False  # a finished run answers with its report.json (else None)
    name_key: str | None = None  # config key that receives the command-line name
    out_key: str = "run_dir"  # the key that says where the command writes (in file advice)

    def entry(self) -> Entry[Any]:
        """The stage's `Entry`; a missing extra its modules import says which (one line)."""
        try:
            return self.load()
        except ImportError as exc:
            root = (exc.name or "").partition(".")[0]
            if root in EXTRAS:
                raise MissingExtra(missing_message(root, f"./run.sh {self.name}", exc)) from None
            raise

    def config(self) -> type:
        """The stage's config class."""
        return self.entry().config


@dataclass(frozen=True)
class Composed:
    """A stage's config as the command line composes it: the typed object, its resolved YAML
    (saved with a run) and the values the user left unset (`merge_config`'s defaults)."""

    cfg: Any
    resolved: DictConfig
    defaults: DictConfig | None = None


def compose(
    stage: Stage,
    overrides: list[str],
    *,
    stage_file: Path | None = None,
    config_files: list[Path] = (),  # type: ignore[assignment]
    values: Mapping[str, Any] | None = None,
) -> Composed:
    """The stage's config: schema <- data set file <- ``stage_file`` <- ``config_files`` <-
    ``key=value`` overrides <- ``values`` (dotted keys, Python values: the estimators'),
    validated (`core.config.load_config`)."""
    schema = stage.config()
    cfg, resolved = load_config(
        schema, overrides, stage_file=stage_file, config_files=config_files, values=values
    )
    defaults = None
    if stage.runs:
        # What the user left unset: a key a run of an older version did not write is no change
        # when it holds that value.
        defaults = merge_config(
            schema, overrides, stage_file=stage_file, config_files=config_files,
            defaults_only=True,
        )  # fmt: skip
    return Composed(cfg, resolved, defaults)


def compose_named(
    stage: Stage,
    name: str,
    overrides: list[str] = (),  # type: ignore[assignment]
    *,
    values: Mapping[str, Any] | None = None,
) -> Composed:
    """The config ``./run.sh <stage> <name> <overrides>`` composes
    (``configs/<folder>/<name>.yaml``, the name its `Stage.name_key`), with ``values`` (dotted
    keys, Python values) set last."""
    assert stage.config_folder is not None, stage.name
    name, preset = preset_of(stage, name)
    stage_file = named_file(stage.name, stage, name, available(stage.config_folder))
    named = [f"{stage.name_key}={stage_file.stem}"] if stage.name_key else []
    return compose(stage, [*named, *preset, *overrides], stage_file=stage_file, values=values)


def preset_of(stage: Stage, name: str) -> tuple[str, list[str]]:
    """``simclr@released`` -> ``("simclr", <its shipped preset's keys, variant=released>)``:
    pretraining's named presets (`pretrain.presets`), laid between the method's file and the
    command line's keys; any other name as it is, with no keys."""
    method, preset = split_preset(name)
    if stage.config_folder != "pretrain" or preset is None:
        return name, []
    return method, preset_overrides(name)


def run_stage(stage: Stage, composed: Composed) -> Any:
    """Run ``stage`` on its composed config: in its run folder through `Run.execute` (the
    finished run's report, or None when it finished before and the stage does not ask for it),
    else its ``main(cfg, None)``'s result."""
    main = stage.entry().main
    cfg = composed.cfg
    if stage.runs:
        return Run.of(cfg, cfg.identity()).execute(
            main,
            cfg,
            composed.resolved,
            defaults=composed.defaults,
            report_when_done=stage.report_when_done,
        )
    return main(cfg, None)


def named_file(command: str, stage: Stage, name: str, names: list[str]) -> Path:
    """``configs/<folder>/<name>.yaml``; a sweep may also be a YAML file of the user's."""
    if stage.name_key == "name" and name.endswith((".yaml", ".yml")):
        path = Path(name)
        if not path.is_file():
            raise UserError(f"{command} file '{name}' does not exist")
        return path
    if name not in names:
        file_hint = " or a path to a .yaml file" if stage.name_key == "name" else ""
        raise UserError(f"unknown {command} '{name}'; valid: {', '.join(names)}{file_hint}")
    assert stage.config_folder is not None
    return CONFIG_ROOT / stage.config_folder / f"{name}.yaml"
