"""The run lifecycle (core/runs.py, core/run_identity.py): one identity, one folder layout, one
set of report keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from scarce_ltr.cli import run
from scarce_ltr.core.config import CONFIG_ROOT, load_config, merge_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_config import read_config
from scarce_ltr.core.run_identity import RunIdentity, run_folder
from scarce_ltr.core.runs import DONE, Run, run_model
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.finetune.config import FinetuneConfig
from scarce_ltr.models.names import model_group
from scarce_ltr.pretrain.config import PretrainConfig
from scarce_ltr.search.trial_folders import GridPoint

FINETUNE_FULL = CONFIG_ROOT / "finetune" / "full.yaml"
IDENTITY_KEYS = ["stage", "model", "group", "dataset", "label_setting", "seed", "version", "git"]


def identity(model: str = "simclr-rank+full", stage: str = "finetune") -> RunIdentity:
    return RunIdentity(
        dataset="synthetic",
        stage=stage,
        model=model,
        setting="frac=0.1",
        seed=2,
        group=model_group(model, strict=False),
    )


def test_one_folder_layout(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LTR_RUNS_DIR", str(tmp_path))
    expected = tmp_path / "synthetic/finetune/simclr-rank+full/frac=0.1/seed=2"
    assert identity().default_folder() == expected
    combine = RunIdentity(
        dataset="synthetic",
        stage="finetune",
        model="simclr-rank+simsiam+combine",
        setting="frac=1",
        seed=0,
        group="pretrained-dl",
        folder_name="combine",
    )
    assert combine.default_folder().parent.parent.name == "combine"
    assert run_folder(tmp_path, dataset="d", stage="pretrain", name="m", setting=None, seed=1) == (
        tmp_path / "d/pretrain/m/seed=1"
    )


def test_tracker_names_tell_models_apart() -> None:
    """Two finetuned models of one sweep (same strategy) get their own names and groups."""
    a, b = identity("simclr-rank+full"), identity("simsiam+full")
    assert a.tracker_name != b.tracker_name and a.tracker_group != b.tracker_group
    assert a.tracker_name == "synthetic/finetune/simclr-rank+full/frac=0.1/seed=2"
    assert a.tags == ["synthetic", "finetune", "simclr-rank+full", "frac=0.1"]


def test_start_then_finish_writes_config_report_and_done_last(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    the_run = Run(identity(), folder)
    _, resolved = load_config(CommonConfig, ["seed=2"])
    the_run.start(resolved)
    assert (folder / "config.yaml").is_file() and not the_run.done
    report = the_run.finish({"metrics": {"test": {}}, "model": "renamed", "git": "x"})
    assert list(report)[: len(IDENTITY_KEYS)] == IDENTITY_KEYS
    assert report["model"] == "simclr-rank+full" and report["group"] == "pretrained-dl"
    assert json.loads((folder / "report.json").read_text()) == report
    assert (folder / DONE).is_file() and run_model(folder) == "simclr-rank+full"
    # The DONE marker is younger than the report: a crash between the two leaves no DONE.
    assert (folder / DONE).stat().st_mtime_ns >= (folder / "report.json").stat().st_mtime_ns


def test_a_grid_point_finishes_on_its_own(tmp_path: Path) -> None:
    point = GridPoint.within(tmp_path, "lr=0.001")
    assert point.folder == tmp_path / "grid" / "lr=0.001" and point.result() is None
    point.folder.mkdir(parents=True)
    point.finish({"best_vali_ndcg@5": 0.5})
    assert GridPoint(point.folder).result() == {"best_vali_ndcg@5": 0.5}
    (point.folder / "result.json").write_text("{not json")
    with pytest.raises(UserError, match="delete .* to train that point again"):
        point.result()


def test_a_run_config_reads_back_typed(tmp_path: Path) -> None:
    cfg, resolved = load_config(
        PretrainConfig, ["method=simsiam", "seed=3", "scarcity.fraction=0.5"]
    )
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(resolved))
    assert read_config(tmp_path, PretrainConfig) == cfg
    common = read_config(tmp_path, CommonConfig)  # the keys every stage shares
    assert isinstance(common, CommonConfig) and common.seed == 3
    assert common.scarcity.fraction == 0.5
    with pytest.raises(UserError, match="no config.yaml"):
        read_config(tmp_path / "missing", CommonConfig)


def test_model_groups() -> None:
    assert model_group("gbdt") == "gbdt" and model_group("resnet") == "no-pretrain-dl"
    assert model_group("simclr-rank+full") == "pretrained-dl"
    assert model_group("gbdt-ssl+simclr-rank+full") == "hybrid"
    assert model_group("ensemble:simclr-rank+full,gbdt") == "hybrid"
    assert model_group("seed-ensemble:gbdt") == "gbdt"
    assert model_group("scratch+full") == "no-pretrain-dl"  # a fresh encoder: a sweep model
    with pytest.raises(UserError, match="unknown pretraining method 'nope'"):
        model_group("nope+full")  # not a sweep model
    assert model_group("simclr-rank+simsiam+combine", strict=False) == "pretrained-dl"


def test_finetune_identity_names_the_encoder(tmp_path: Path) -> None:
    encoder = tmp_path / "enc"
    encoder.mkdir()
    _, resolved = load_config(PretrainConfig, ["method=vime"])
    (encoder / "config.yaml").write_text(OmegaConf.to_yaml(resolved))
    cfg, _ = load_config(FinetuneConfig, ["strategy=full", f"pretrained={encoder}"])
    assert cfg.identity().model == "vime+full"
    scratch, _ = load_config(FinetuneConfig, ["strategy=full", "pretrained=none"])
    assert scratch.identity().model == "scratch+full"


@pytest.mark.parametrize(
    ("command", "override"),
    [
        (["pretrain", "simclr-rank"], "method=simsiam"),
        (["baseline", "gbdt"], "method=gbdt-pca"),
        (["finetune", "full", "pretrained=none"], "strategy=lp"),
    ],
)
def test_the_command_line_name_and_an_override_cannot_disagree(command, override) -> None:
    with pytest.raises(UserError, match="contradicts the command-line name"):
        run([*command, override, "logger=none"])


# Keys a version before the Optuna search and the teacher did not write in a finetuning run.
NEW_FINETUNE_KEYS = ("search", "teacher", "teaching")


def _an_older_versions_run(folder: Path, resolved, drop=NEW_FINETUNE_KEYS) -> None:
    """``folder`` as an older version left it: its config without ``drop``, a run that got
    going (a checkpoint)."""
    folder.mkdir(parents=True, exist_ok=True)
    old = OmegaConf.to_container(resolved)
    for key in drop:
        section, _, leaf = key.partition(".")
        del (old[section] if leaf else old)[leaf or section]
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(old))
    (folder / "checkpoint.pt").write_bytes(b"")


def _finetune_config(overrides: list[str], stage_file: Path | None = None):
    stage_file = stage_file or FINETUNE_FULL
    _, resolved = load_config(FinetuneConfig, overrides, stage_file=stage_file)
    defaults = merge_config(FinetuneConfig, overrides, stage_file=stage_file, defaults_only=True)
    return resolved, defaults


def test_a_run_of_an_older_version_resumes_where_its_new_keys_hold_their_defaults(
    tmp_path: Path,
) -> None:
    """An upgrade mid-run: keys the older version did not write are no change at the value the
    stage gives them (search off, no teacher); set otherwise, or a key of both changed, they
    are."""
    base = ["strategy=full", "pretrained=none", "seed=2"]
    resolved, defaults = _finetune_config(base)
    _an_older_versions_run(tmp_path, resolved)
    Run(identity(), tmp_path).start(resolved, defaults=defaults)
    assert "n_trials: 0" in (tmp_path / "config.yaml").read_text()  # written in full now

    _an_older_versions_run(tmp_path, resolved)
    searched, defaults = _finetune_config([*base, "search.n_trials=5"])
    with pytest.raises(UserError, match=r"other settings \(search.n_trials differ\)"):
        Run(identity(), tmp_path).start(searched, defaults=defaults)
    lr, defaults = _finetune_config([*base, "optimizer.lr=0.001"])
    with pytest.raises(UserError, match=r"other settings \(optimizer.lr differ\)"):
        Run(identity(), tmp_path).start(lr, defaults=defaults)
    # Without the defaults (a caller that does not know them) a missing key is a change.
    with pytest.raises(UserError, match=r"other settings \(search, teaching differ\)"):
        Run(identity(), tmp_path).start(resolved)


def test_a_missing_keys_default_is_the_stage_files(tmp_path: Path) -> None:
    """The stage's file, not the schema, gives a new key its default: a stage file that sets
    ``search.lr`` makes that value no change, and the schema's value a change."""
    stage_file = tmp_path / "narrow.yaml"
    full = FINETUNE_FULL.read_text()
    stage_file.write_text(full.replace("lr: [1.0e-5, 1.0e-2]", "lr: [1.0e-4, 1.0e-3]"))
    base = ["strategy=full", "pretrained=none"]
    resolved, defaults = _finetune_config(base, stage_file)
    folder = tmp_path / "run"
    _an_older_versions_run(folder, resolved, drop=["search.lr"])
    Run(identity(), folder).start(resolved, defaults=defaults)
    _an_older_versions_run(folder, resolved, drop=["search.lr"])
    schemas, defaults = _finetune_config([*base, "search.lr=[1e-5,1e-2]"], stage_file)
    with pytest.raises(UserError, match=r"other settings \(search.lr differ\)"):
        Run(identity(), folder).start(schemas, defaults=defaults)


def test_the_command_line_resumes_a_run_of_an_older_version(tmp_path: Path, monkeypatch) -> None:
    """`cli.run` gives `Run.start` the defaults of the stage's file and data set."""
    import scarce_ltr.finetune.train as finetune_train

    class Trained(Exception):
        """The stage's main was reached (the folder accepted); the run stays unfinished."""

    def interrupted_main(cfg, run):
        raise Trained

    monkeypatch.setattr(finetune_train, "main", interrupted_main)
    command = ["finetune", "full", "pretrained=none", "logger=none", f"run_dir={tmp_path}"]
    with pytest.raises(Trained):
        run(command)
    saved = OmegaConf.load(tmp_path / "config.yaml")
    _an_older_versions_run(tmp_path, saved)
    with pytest.raises(Trained):
        run(command)
    _an_older_versions_run(tmp_path, saved)
    with pytest.raises(UserError, match=r"other settings \(search.n_trials differ\)"):
        run([*command, "search.n_trials=4"])
    with pytest.raises(UserError, match=r"other settings \(seed differ\)"):
        run([*command, "seed=7"])
