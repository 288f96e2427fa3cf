"""``./run.sh <stage> [<name>] [key=value ...]``: one entry point per stage.

Every stage is ``main(cfg, out_dir)``. The CLI loads the stage's config (schema, data set file,
``configs/<folder>/<name>.yaml``, overrides), makes the run directory, saves the resolved config
there and calls the stage. A `UserError` ends in one line on stderr and exit code 2.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

from scarce_ltr.core.config import CONFIG_ROOT, available, load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.runs import Run


@dataclass(frozen=True)
class Stage:
    help: str
    entry: str  # "module:function", called as function(cfg, out_dir)
    schema: str  # "module:Class", the config dataclass
    config_folder: str | None = None  # the stage takes a name: configs/<folder>/<name>.yaml
    runs: bool = False  # the stage trains or scores in a run folder (its config: identity())
    name_key: str | None = None  # config key that receives the command-line name


def _load(ref: str):
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def usage() -> str:
    lines = [
        "usage: ./run.sh <command> [<name>] [key=value ...]",
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
    stage_file = None
    name = command
    if stage.config_folder:
        names = available(stage.config_folder)
        if not rest or "=" in rest[0]:
            raise UserError(f"'{command}' needs a name: one of {', '.join(names)}")
        name, rest = rest[0], rest[1:]
        if name not in names:
            raise UserError(f"unknown {command} '{name}'; valid: {', '.join(names)}")
        stage_file = CONFIG_ROOT / stage.config_folder / f"{name}.yaml"
    elif command in POSITIONAL and rest and "=" not in rest[0] and not rest[0].startswith("-"):
        rest = [f"{POSITIONAL[command]}={rest[0]}", *rest[1:]]  # ./run.sh report <sweep>
    if any(a in ("-h", "--help") for a in rest):
        print(usage())
        return None
    # A flag such as --dry-run is the override dry_run=true.
    rest = [f"{a[2:].replace('-', '_')}=true" if a.startswith("--") else a for a in rest]
    if stage.name_key:
        if stage.runs:  # a run's method is its command-line name (a sweep may be renamed)
            _check_name_key(stage.name_key, name, rest)
        rest = [f"{stage.name_key}={name}", *rest]
    cfg, resolved = load_config(_load(stage.schema), rest, stage_file=stage_file)
    out_dir: Path | None = None
    if stage.runs:
        the_run = Run.of(cfg, cfg.identity())
        the_run.start(resolved)
        out_dir = the_run.folder
    return _load(stage.entry)(cfg, out_dir)


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
    try:
        run(sys.argv[1:])
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


# Commands whose first argument, when it is not key=value, is this key: ./run.sh report <sweep>.
POSITIONAL = {"report": "sweep", "select": "sweep", "predict": "run"}

# The command-line name of each stage. Later stages register here.
STAGES: dict[str, Stage] = {
    "sweep": Stage(
        help="methods x label settings x seeds, resumable (--dry-run lists the cells, workers=N)",
        entry="scarce_ltr.sweeps.sweep:main",
        schema="scarce_ltr.sweeps.sweep:SweepConfig",
        config_folder="sweep",
        name_key="name",
    ),
    "data-info": Stage(
        help="per split: QGs, items, labels, outlier QGs; the label setting's labeled QGs",
        entry="scarce_ltr.data.info:main",
        schema="scarce_ltr.data.stage_config:CommonConfig",
    ),
    "pretrain": Stage(
        help="self-supervised pretraining of an item encoder on all train (+ vali) QGs, no labels",
        entry="scarce_ltr.pretrain.train:main",
        schema="scarce_ltr.pretrain.config:PretrainConfig",
        config_folder="pretrain",
        runs=True,
        name_key="method",
    ),
    "baseline": Stage(
        help="a baseline ranker on the labeled QGs, chosen on vali (LightGBM LambdaMART, "
        "+ pseudo-labels / PCA)",
        entry="scarce_ltr.baselines.run:main",
        schema="scarce_ltr.baselines.config:BaselineConfig",
        config_folder="baseline",
        runs=True,
        name_key="method",
    ),
    "finetune": Stage(
        help="a scoring head on a pretrained (pretrained=<run dir>) or fresh (pretrained=none) "
        "encoder, trained on the labeled QGs; combine=finetuned runs",
        entry="scarce_ltr.finetune.train:main",
        schema="scarce_ltr.finetune.config:FinetuneConfig",
        config_folder="finetune",
        runs=True,
        name_key="strategy",
    ),
    "ensemble": Stage(
        help="scores of finished runs (runs=[<run>,...]) mixed per QG after rank or z-score "
        "normalisation (normalize=), weights chosen on vali (weights=grid) or uniform",
        entry="scarce_ltr.ensembles.ensemble:main",
        schema="scarce_ltr.ensembles.config:EnsembleConfig",
        runs=True,
    ),
    "report": Stage(
        help="tables, plots, t-tests and one HTML dashboard of a sweep (./run.sh report <sweep>) "
        "or of every run (./run.sh report)",
        entry="scarce_ltr.sweeps.report:main",
        schema="scarce_ltr.sweeps.report:ReportConfig",
    ),
    "select": Stage(
        help="the validation-best model of each data set and label setting of a sweep, over all "
        "models (./run.sh select <sweep>); writes <sweep>/report/best.json with run folders "
        "and bundle paths",
        entry="scarce_ltr.sweeps.select:main",
        schema="scarce_ltr.sweeps.select:SelectConfig",
    ),
    "predict": Stage(
        help="score a LETOR file or folder with a finished run's model bundle "
        "(./run.sh predict <run> data.path=<file or folder> [out=<file.csv or folder>])",
        entry="scarce_ltr.serving.predict:main",
        schema="scarce_ltr.serving.predict:PredictConfig",
    ),
}


if __name__ == "__main__":
    main()
