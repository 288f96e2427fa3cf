"""``./run.sh <stage> [<name>] [key=value ...]``: one entry point per stage.

Each command is a `Stage`: its name, its help line and its code, imported (`Entry`: the
config class and ``main``) when the command runs. The CLI composes the stage's config (schema,
data set file, ``configs/<folder>/<name>.yaml``, overrides; `compose`) and hands the typed
config to `run_stage`, the one way a stage runs: a stage that trains in a run folder is
``main(cfg, run)``, whose `core.runs.Run` it builds and lives out (`Run.execute`: the folder's
lock, the saved config and its check, the skip of a finished run, the tracker closed); the
other commands are ``main(cfg, None)`` (they take their own ``out=``). A `UserError`, and an
`OSError` that no layer below turned into one, end in one line on stderr and exit code 2; a
stage whose result has an ``exit_code`` (a sweep with failed cells) exits with it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Generic, TypeVar

from omegaconf import DictConfig, OmegaConf

from scarce_ltr.core.config import CONFIG_ROOT, available, load_config, merge_config, to_yaml
from scarce_ltr.core.config_doc import describe, help_text
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.extras import EXTRAS, MissingExtra, missing_message
from scarce_ltr.core.files import file_error
from scarce_ltr.core.malloc import keep_freed_memory
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
    name, preset = _preset(stage, name)
    stage_file = _stage_file(stage.name, stage, name, available(stage.config_folder))
    named = [f"{stage.name_key}={stage_file.stem}"] if stage.name_key else []
    return compose(stage, [*named, *preset, *overrides], stage_file=stage_file, values=values)


def _preset(stage: Stage, name: str) -> tuple[str, list[str]]:
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


def usage() -> str:
    lines = [
        "usage: ./run.sh <command> [<name>] [key=value ...] [--config my.yaml] [--print-config]",
        "       ./run.sh <command> [<name>] --help   (the command's keys, types and defaults)",
        "",
        "commands:",
    ]
    for name, stage in STAGES.items():
        names = f" <{'|'.join(available(stage.config_folder))}>" if stage.config_folder else ""
        lines.append(f"  {name}{names}\n      {stage.help}")
    lines += [
        "  test [pytest args]\n      run the test suite",
        "",
        "common keys: data=<name> data.path=<folder> scarcity.fraction=<f>",
        "             scarcity.val=full|same scarcity.binary_tau=<tau> seed=<int>",
        "             run_dir=<folder> epochs=<int> logger=none",
        f"data sets: {', '.join(available('data'))}",
    ]
    return "\n".join(lines)


def run(argv: list[str]) -> object:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return None
    command, rest = argv[0], argv[1:]
    if command not in STAGES:
        raise UserError(f"unknown command '{command}'; commands: {', '.join(STAGES)}, test")
    stage = STAGES[command]
    rest, options = _take_options(rest)
    stage_file, preset = None, []
    name = command
    if stage.config_folder:
        names = available(stage.config_folder)
        if not rest or "=" in rest[0] or rest[0].startswith("-"):
            if options.help:
                print(command_help(command))
                return None
            raise UserError(f"'{command}' needs a name: one of {', '.join(names)}")
        name, rest = rest[0], rest[1:]
        name, preset = _preset(stage, name)
        stage_file = _stage_file(command, stage, name, names)
        name = stage_file.stem
    elif command in POSITIONAL and rest and _is_positional(rest[0], stage):
        rest = _take_positionals(command, rest, stage)
    if options.help:
        print(command_help(command, name if stage_file else None, stage_file))
        return None
    # A flag such as --dry-run is the override dry_run=true.
    rest = [f"{a[2:].replace('-', '_')}=true" if a.startswith("--") else a for a in rest]
    if stage.name_key:
        if stage.runs:  # a run's method is its command-line name (a sweep may be renamed)
            _check_name_key(stage.name_key, name, rest)
        rest = [f"{stage.name_key}={name}", *preset, *rest]
    composed = compose(stage, rest, stage_file=stage_file, config_files=options.config_files)
    if options.print_config:
        print(to_yaml(composed.resolved), end="")
        if stage.runs:
            print(f"# run folder: {Run.of(composed.cfg, composed.cfg.identity()).folder}")
        return None
    return run_stage(stage, composed)


@dataclass
class Options:
    """The flags that are not overrides: ``--help``, ``--config <file>``, ``--print-config``."""

    help: bool = False
    print_config: bool = False
    config_files: list[Path] = field(default_factory=list)


def _take_options(args: list[str]) -> tuple[list[str], Options]:
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


def _stage_file(command: str, stage: Stage, name: str, names: list[str]) -> Path:
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


def command_help(command: str, name: str | None = None, stage_file: Path | None = None) -> str:
    """A command's keys with types, defaults (the named config's when given) and help lines."""
    stage = STAGES[command]
    schema = stage.config()
    overrides = [f"{stage.name_key}={name}"] if stage.name_key and name else []
    merged = merge_config(schema, overrides, stage_file=stage_file)
    values = {}
    for doc in describe(schema):
        value = OmegaConf.select(merged, doc.key)
        values[doc.key] = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    what = f"<{'|'.join(available(stage.config_folder))}>" if stage.config_folder else ""
    if command in POSITIONAL:
        what = f"[<{POSITIONAL[command]}>]"
    head = [
        " ".join(filter(None, ["usage: ./run.sh", command, name or what, "[key=value ...]"]))
        + " [--config my.yaml] [--print-config]",
        f"  {stage.help}",
        *(_data_line() if "data.name" in values else []),
        "",
        f"keys (key: type = default{' from ' + str(stage_file) if stage_file else ''}):",
    ]
    return "\n".join([*head, help_text(schema, values)])


def _data_line() -> list[str]:
    return [f"  data=<name> loads configs/data/<name>.yaml: {', '.join(available('data'))}"]


# An override's key: a dotted name (``out=``, ``data.path=``); a run folder such as
# ``runs/x/frac=0.02/seed=0`` or ``/abs/frac=1`` has a '/' or another character before its '='.
_OVERRIDE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*=")


def _is_positional(arg: str, stage: Stage) -> bool:
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


def _take_positionals(command: str, rest: list[str], stage: Stage) -> list[str]:
    """``rest`` with its leading positional argument as ``<key>=<value>``; for a key that
    takes a list (`LISTED`: ``portfolio <folder> <folder> ...``), all its leading ones."""
    if POSITIONAL[command] not in LISTED:
        return [_positional_override(command, rest[0], rest[1:]), *rest[1:]]
    count = next((i for i, arg in enumerate(rest) if not _is_positional(arg, stage)), len(rest))
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


def _check_name_key(key: str, name: str, overrides: list[str]) -> None:
    """The command-line name is the config's ``key``: an override may not say otherwise."""
    for item in overrides:
        given, _, value = item.partition("=")
        if given == key and value != name:
            raise UserError(
                f"'{item}' contradicts the command-line name '{name}'; drop it, or give the "
                f"name you want first (./run.sh <command> {value} ...)"
            )


def main() -> None:
    keep_freed_memory()  # the command's own process: freed buffers are reused (core.malloc)
    try:
        result = run(sys.argv[1:])
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:  # `./run.sh x --help | head`: the reader left; nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except OSError as exc:  # a file operation of a layer that does not name its own
        stage = STAGES.get(sys.argv[1] if len(sys.argv) > 1 else "")
        key = stage.out_key if stage else "run_dir"
        print(f"error: {file_error(exc, 'use', key=key)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(getattr(result, "exit_code", 0))


# Commands whose first argument, when it is not key=value, is this key: ./run.sh report <sweep>;
# a `LISTED` key takes every leading one: ./run.sh portfolio <folder> <folder>.
POSITIONAL = {
    "report": "sweep", "select": "sweep", "predict": "run", "export": "run", "portfolio": "folders",
}  # fmt: skip
LISTED = ("folders",)  # positional keys that take every leading positional argument


# Each stage's code, imported when its command runs.
def _sweep() -> Entry[Any]:
    from scarce_ltr.sweeps.sweep import SweepConfig, main

    return Entry(SweepConfig, main)


def _data_info() -> Entry[Any]:
    from scarce_ltr.data.info import main
    from scarce_ltr.data.stage_config import CommonConfig

    return Entry(CommonConfig, main)


def _pretrain() -> Entry[Any]:
    from scarce_ltr.pretrain.config import PretrainConfig
    from scarce_ltr.pretrain.train import main

    return Entry(PretrainConfig, main)


def _baseline() -> Entry[Any]:
    from scarce_ltr.baselines.config import BaselineConfig
    from scarce_ltr.baselines.run import main

    return Entry(BaselineConfig, main)


def _finetune() -> Entry[Any]:
    from scarce_ltr.finetune.config import FinetuneConfig
    from scarce_ltr.finetune.train import main

    return Entry(FinetuneConfig, main)


def _ensemble() -> Entry[Any]:
    from scarce_ltr.ensembles.config import EnsembleConfig
    from scarce_ltr.ensembles.ensemble import main

    return Entry(EnsembleConfig, main)


def _report() -> Entry[Any]:
    from scarce_ltr.reports.report import ReportConfig, main

    return Entry(ReportConfig, main)


def _select() -> Entry[Any]:
    from scarce_ltr.sweeps.select import SelectConfig, main

    return Entry(SelectConfig, main)


def _portfolio() -> Entry[Any]:
    from scarce_ltr.sweeps.portfolio import PortfolioConfig, main

    return Entry(PortfolioConfig, main)


def _predict() -> Entry[Any]:
    from scarce_ltr.serving.predict import PredictConfig, main

    return Entry(PredictConfig, main)


def _export() -> Entry[Any]:
    from scarce_ltr.serving.export import ExportConfig, main

    return Entry(ExportConfig, main)


# The stages, by command-line name. Later stages register here.
STAGES: dict[str, Stage] = {
    stage.name: stage
    for stage in (
        Stage(
            name="sweep",
            help="methods x label settings x seeds, resumable (--dry-run lists the cells, "
            "workers=N)",
            load=_sweep,
            config_folder="sweep",
            name_key="name",
        ),
        Stage(
            name="data-info",
            help="per split: QGs, items, labels, outlier QGs; the label setting's labeled QGs",
            load=_data_info,
        ),
        Stage(
            name="pretrain",
            help="self-supervised pretraining of an item encoder on the train QGs, no labels (vali "
            "QGs: SSL Val, which picks the epoch)",
            load=_pretrain,
            config_folder="pretrain",
            runs=True,
            report_when_done=True,
            name_key="method",
        ),
        Stage(
            name="baseline",
            help="a baseline ranker on the labeled QGs, chosen on vali (LightGBM and its "
            "pseudo-label / PCA / embedding variants, CatBoost, XGBoost, ResNet, DeepFM, DCNv2, "
            "DASALC)",
            load=_baseline,
            config_folder="baseline",
            runs=True,
            name_key="method",
        ),
        Stage(
            name="finetune",
            help="a scoring head on a pretrained (pretrained=<run dir>) or fresh (pretrained=none) "
            "encoder, trained on the labeled QGs; combine=finetuned runs",
            load=_finetune,
            config_folder="finetune",
            runs=True,
            name_key="strategy",
        ),
        Stage(
            name="ensemble",
            help="scores of finished runs (runs=[<run>,...]) mixed per QG after rank or z-score "
            "normalisation (normalize=), weights chosen on vali (weights=grid), cross-fitted over "
            "the vali QGs (weights=crossfit) or uniform",
            load=_ensemble,
            runs=True,
        ),
        Stage(
            name="report",
            help="tables, plots, t-tests and one HTML dashboard of a sweep (./run.sh report "
            "<sweep>) or of every run (./run.sh report)",
            load=_report,
            out_key="out",
        ),
        Stage(
            name="select",
            help="the validation-best model of each data set and label setting of a sweep, over "
            "all models (./run.sh select <sweep>); writes <sweep>/report/best.json with run "
            "folders and bundle paths",
            load=_select,
            out_key="out",
        ),
        Stage(
            name="portfolio",
            help="K training recipes mined from the searched deep runs under the folders "
            "(./run.sh portfolio <folder> ... [k=8] [exclude=<data set>] [out=<file>]): trains "
            "the missing entries of its candidate x cell matrix (dry_run=true counts them) and "
            "writes the file search.strategy=portfolio trains",
            load=_portfolio,
            out_key="out",
        ),
        Stage(
            name="predict",
            help="score a LETOR file or folder with a finished run's model bundle "
            "(./run.sh predict <run> data.path=<file or folder> [out=<file.csv or folder>])",
            load=_predict,
            out_key="out",
        ),
        Stage(
            name="export",
            help="a finished run's model as one file that takes raw features "
            "(./run.sh export <run> format=onnx|torchscript|lightgbm [out=<file>])",
            load=_export,
            out_key="out",
        ),
    )
}


if __name__ == "__main__":
    main()
