"""``./run.sh <stage> [<name>] [key=value ...]``: one entry point per stage.

Each command is a `Stage` (`cli_compose`): its name, its help line and its code, imported
(`Entry`: the config class and ``main``) when the command runs. The CLI reads its flags and
positional arguments (`cli_args`), composes the stage's config (schema, data set file,
``configs/<folder>/<name>.yaml``, overrides; `cli_compose.compose`) and hands the typed
config to `cli_compose.run_stage`, the one way a stage runs: a stage that trains in a run
folder is ``main(cfg, run)``, whose `core.runs.Run` it builds and lives out (`Run.execute`: the
folder's lock, the saved config and its check, the skip of a finished run, the tracker closed);
the other commands are ``main(cfg, None)`` (they take their own ``out=``). A `UserError`, and an
`OSError` that no layer below turned into one, end in one line on stderr and exit code 2; a
stage whose result has an ``exit_code`` (a sweep with failed cells) exits with it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from scarce_ltr.cli_args import (
    POSITIONAL,
    check_name_key,
    is_positional,
    take_options,
    take_positionals,
)
from scarce_ltr.cli_compose import Entry, Stage, compose, named_file, preset_of, run_stage
from scarce_ltr.core.config import available, merge_config, to_yaml
from scarce_ltr.core.config_doc import describe, help_text
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import file_error
from scarce_ltr.core.malloc import keep_freed_memory
from scarce_ltr.core.runs import Run


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
    rest, options = take_options(rest)
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
        name, preset = preset_of(stage, name)
        stage_file = named_file(command, stage, name, names)
        name = stage_file.stem
    elif command in POSITIONAL and rest and is_positional(rest[0], stage):
        rest = take_positionals(command, rest, stage)
    if options.help:
        print(command_help(command, name if stage_file else None, stage_file))
        return None
    # A flag such as --dry-run is the override dry_run=true.
    rest = [f"{a[2:].replace('-', '_')}=true" if a.startswith("--") else a for a in rest]
    if stage.name_key:
        if stage.runs:  # a run's method is its command-line name (a sweep may be renamed)
            check_name_key(stage.name_key, name, rest)
        rest = [f"{stage.name_key}={name}", *preset, *rest]
    composed = compose(stage, rest, stage_file=stage_file, config_files=options.config_files)
    if options.print_config:
        print(to_yaml(composed.resolved), end="")
        if stage.runs:
            print(f"# run folder: {Run.of(composed.cfg, composed.cfg.identity()).folder}")
        return None
    return run_stage(stage, composed)


def command_help(command: str, name: str | None = None, stage_file: Path | None = None) -> str:
    """A command's keys with types, defaults (the named config's when given) and help lines."""
    stage = STAGES[command]
    schema = stage.config()
    overrides = [f"{stage.name_key}={name}"] if stage.name_key and name else []
    merged = merge_config(schema, overrides, stage_file=stage_file)
    values = {}
    for doc in describe(schema):
        # a key the config leaves out when empty (pretraining's objective mapping): its default
        value = OmegaConf.select(merged, doc.key, default=doc.default)
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
