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

from omegaconf import DictConfig, OmegaConf

from core.config import CONFIG_ROOT, available, load_config, to_yaml
from core.errors import UserError
from core.rundir import atomic_write_text, resolve_run_dir


@dataclass(frozen=True)
class Stage:
    help: str
    entry: str  # "module:function", called as function(cfg, out_dir)
    schema: str  # "module:Class", the config dataclass
    config_folder: str | None = None  # the stage takes a name: configs/<folder>/<name>.yaml
    run_stage: str | None = None  # the <stage> part of the run directory
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
    elif command == "report" and rest and "=" not in rest[0] and not rest[0].startswith("-"):
        rest = [f"sweep={rest[0]}", *rest[1:]]  # ./run.sh report <sweep>
    if any(a in ("-h", "--help") for a in rest):
        print(usage())
        return None
    # A flag such as --dry-run is the override dry_run=true.
    rest = [f"{a[2:].replace('-', '_')}=true" if a.startswith("--") else a for a in rest]
    if stage.name_key:
        rest = [f"{stage.name_key}={name}", *rest]
    cfg, resolved = load_config(_load(stage.schema), rest, stage_file=stage_file)
    out_dir: Path | None = None
    if stage.run_stage:
        method = cfg.run_method(name) if hasattr(cfg, "run_method") else name
        out_dir = resolve_run_dir(cfg, stage=stage.run_stage, method=method)
        _save_config(out_dir, resolved)
    return _load(stage.entry)(cfg, out_dir)


# Keys that may change between the runs of one run directory (they do not change results).
_FREE_KEYS = ("logger",)


def _save_config(out_dir: Path, resolved: DictConfig) -> None:
    """Write ``config.yaml``; refuse a folder that holds a run with other settings."""
    path = out_dir / "config.yaml"
    # Only a run that got going (it left more than its config and log) is protected.
    started = any(p.name not in ("config.yaml", "log.txt") for p in out_dir.iterdir())
    if path.is_file() and started:
        old = OmegaConf.to_container(OmegaConf.load(path))
        new = OmegaConf.to_container(resolved)
        assert isinstance(old, dict) and isinstance(new, dict)
        for key in _FREE_KEYS:
            old.pop(key, None)
            new.pop(key, None)
        if old != new:
            changed = _changed_keys(old, new)
            raise UserError(
                f"{out_dir} holds a run with other settings ({', '.join(changed[:8])} differ); "
                "give run_dir=<another folder>, or delete that folder to start over"
            )
    atomic_write_text(path, to_yaml(resolved))


def _changed_keys(old: object, new: object, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(set(old) | set(new))
        return [c for k in keys for c in _changed_keys(old.get(k), new.get(k), f"{prefix}{k}.")]
    return [] if old == new else [prefix.rstrip(".")]


def main() -> None:
    try:
        run(sys.argv[1:])
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


# The command-line name of each stage. Later stages register here.
STAGES: dict[str, Stage] = {
    "sweep": Stage(
        help="methods x label settings x seeds, resumable (--dry-run lists the cells, workers=N)",
        entry="experiments.sweep:main",
        schema="experiments.sweep:SweepConfig",
        config_folder="sweep",
        name_key="name",
    ),
    "data-info": Stage(
        help="per split: QGs, items, labels, outlier QGs; the label setting's labeled QGs",
        entry="data.info:main",
        schema="core.config:CommonConfig",
    ),
    "pretrain": Stage(
        help="self-supervised pretraining of an item encoder on all train (+ vali) QGs, no labels",
        entry="pretrain.train:main",
        schema="pretrain.config:PretrainConfig",
        config_folder="pretrain",
        run_stage="pretrain",
    ),
    "baseline": Stage(
        help="a baseline ranker on the labeled QGs, chosen on vali (LightGBM LambdaMART, "
        "+ pseudo-labels / PCA)",
        entry="baselines.run:main",
        schema="baselines.config:BaselineConfig",
        config_folder="baseline",
        run_stage="baseline",
    ),
    "finetune": Stage(
        help="a scoring head on a pretrained (pretrained=<run dir>) or fresh (pretrained=none) "
        "encoder, trained on the labeled QGs; combine=finetuned runs",
        entry="finetune.train:main",
        schema="finetune.config:FinetuneConfig",
        config_folder="finetune",
        run_stage="finetune",
    ),
    "ensemble": Stage(
        help="scores of finished runs (runs=[<run>,...]) mixed per QG after rank or z-score "
        "normalisation (normalize=), weights chosen on vali (weights=grid) or uniform",
        entry="baselines.ensemble:main",
        schema="baselines.ensemble_config:EnsembleConfig",
        run_stage="ensemble",
    ),
    "report": Stage(
        help="tables, plots, t-tests and one HTML dashboard of a sweep (./run.sh report <sweep>) "
        "or of every run (./run.sh report)",
        entry="experiments.report:main",
        schema="experiments.report:ReportConfig",
    ),
}


if __name__ == "__main__":
    main()
