"""Config values and paths that cannot work end in one line naming the key and what it allows,
before a run folder is made: ranges (seeds, epochs, rates, data.clip), nan and inf, a CUDA device
where there is none, --config files that are not UTF-8, run folders no file system could hold,
and one data folder spelled two ways (the same setting, not a run with other settings).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import torch
from tiny import letor_folder, tiny_data

from scarce_ltr import cli
from scarce_ltr.core.config import load_config
from scarce_ltr.core.device import setup_runtime
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import atomic_write_text
from scarce_ltr.core.run_config import read_config
from scarce_ltr.core.run_identity import RunIdentity
from scarce_ltr.core.runs import Run
from scarce_ltr.data.stage_config import CommonConfig

PRETRAIN = ["pretrain", "simclr-rank", *tiny_data(), "logger=none", "epochs=1"]
GBDT = ["baseline", "gbdt", "gbdt.num_threads=1", "gbdt.max_rounds=2", "logger=none"]


def _main(monkeypatch, capsys, args: list[str]) -> tuple[int, str]:
    """``./run.sh <args>`` in this process: (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["scarce-ltr", *args])
    with pytest.raises(SystemExit) as stop:
        cli.main()
    return stop.value.code, capsys.readouterr().err


def _one_error(code: int, err: str) -> str:
    """The one ``error:`` line of a refused command (exit code 2, no traceback)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.fixture
def runs(tmp_path: Path, monkeypatch) -> Path:
    """This test's own runs root: a refused command must leave it uncreated."""
    root = tmp_path / "runs"
    monkeypatch.setenv("LTR_RUNS_DIR", str(root))
    return root


# --- ranges, nan and inf ---------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "0", "nan", "-inf"])
def test_data_clip_out_of_range_is_one_line(value, runs, monkeypatch, capsys) -> None:
    line = _one_error(*_main(monkeypatch, capsys, [*PRETRAIN, f"data.clip={value}"]))
    assert re.search(r"data\.clip=.*: data\.clip must be > 0 \(features are clipped", line), line
    assert not runs.exists()


def test_data_clip_inf_clips_nothing_and_is_taken() -> None:
    cfg, _ = load_config(CommonConfig, ["data.clip=inf"])
    assert cfg.data.clip == float("inf")


@pytest.mark.parametrize(
    "override",
    ["seed=-1", "seed=4294967296", "seed=18446744073709551616", "seed=1e30", "seed=-1e30"]
    + ["scarcity.seed=4294967296", "data.synthetic.seed=4294967296"],
)
def test_a_seed_outside_numpys_range_leaves_nothing_on_disk(
    override, runs, monkeypatch, capsys
) -> None:
    line = _one_error(*_main(monkeypatch, capsys, [*PRETRAIN, override]))
    key = override.partition("=")[0]
    assert f"{key}" in line and ">= 0 and <= 4294967295" in line, line
    assert not runs.exists()


def test_the_largest_numpy_seed_is_taken() -> None:
    cfg, _ = load_config(CommonConfig, ["seed=4294967295", "scarcity.seed=0"])
    assert cfg.seed == 2**32 - 1


@pytest.mark.parametrize(
    ("schema", "overrides", "pattern"),
    [
        (
            "pretrain",
            ["optimizer.lr=inf"],
            r"optimizer\.lr=inf: optimizer\.lr must be > 0 and finite",
        ),
        (
            "pretrain",
            ["optimizer.lr=nan"],
            r"optimizer\.lr=nan: optimizer\.lr must be > 0 and finite",
        ),
        (
            "pretrain",
            ["optimizer.weight_decay=inf"],
            r"optimizer\.weight_decay must be >= 0 and fin",
        ),
        (
            "pretrain",
            ["optimizer.weight_decay=nan"],
            r"optimizer\.weight_decay must be >= 0 and fin",
        ),
        ("pretrain", ["temperature=inf"], r"temperature=inf: temperature must be > 0 and finite"),
        ("pretrain", ["augment.noise_scale=inf"], r"augment\.noise_scale must be >= 0 and finite"),
        (
            "common",
            ["epochs=1e23"],
            r"'epochs' expects int or null, got 1e\+23; epochs must be a "
            r"whole number >= 1 and <= 1000000$",
        ),
        ("common", ["epochs=100000000000000000000000"], r"epochs must be >= 1 and <= 1000000"),
        ("common", ["epochs=1000001"], r"epochs=1000001: epochs must be >= 1 and <= 1000000"),
        (
            "common",
            ["seed=1e3"],
            r"seed must be a whole number >= 0 and <= 4294967295: write it "
            r"as 1000$",
        ),
        ("finetune", ["lrs=[1e-3,inf]"], r"lrs=inf: lrs must be > 0 and finite"),
        ("finetune", ["loss.sigma=inf"], r"loss\.sigma=inf: loss\.sigma must be > 0 and finite"),
        ("finetune", ["loss.mu=nan"], r"loss\.mu=nan: loss\.mu must be >= 0 and finite"),
        ("finetune", ["noise_std=inf"], r"noise_std=inf: noise_std must be >= 0 and finite"),
        ("finetune", ["head_epochs=10000000"], r"head_epochs must be >= 0 and <= 1000000"),
        ("baseline", ["method=resnet", "deep.lrs=[nan]"], r"deep\.lrs must be > 0 and finite"),
        (
            "baseline",
            ["method=resnet", "deep.optimizer.weight_decay=inf"],
            r"optimizer\.weight_decay must be >=",
        ),
        (
            "baseline",
            ["method=resnet", "deep.full_epochs=1e23"],
            r"deep\.full_epochs must be a whole number >= 1 and <= 1000000$",
        ),
        ("baseline", ["gbdt.learning_rate=inf"], r"gbdt\.learning_rate must be > 0 and finite"),
        ("baseline", ["gbdt.max_rounds=1000000000"], r"gbdt\.max_rounds must be >= 1 and <= 1000"),
        ("baseline", ["gbdt.n_trials=1000000000"], r"gbdt\.n_trials must be >= 1 and <= 100000"),
        (
            "baseline",
            ["method=catboost", "catboost.max_rounds=1000000000"],
            r"catboost\.max_rounds must be >= 1 and <= 1000000",
        ),
        (
            "baseline",
            ["method=xgboost", "xgboost.n_trials=1000000000"],
            r"xgboost\.n_trials must be >= 1 and <= 100000",
        ),
        # keys of sections that declare no range: the nets for nan and beyond-int64 integers
        ("common", ["scarcity.binary_tau=nan"], r"config key 'scarcity\.binary_tau' is nan"),
        ("pretrain", ["item_budget=100000000000000000000000"], r"'item_budget'=1000.*too large"),
    ],
)
def test_values_that_cannot_train_name_the_key_and_range(schema, overrides, pattern) -> None:
    from scarce_ltr.baselines.config import BaselineConfig
    from scarce_ltr.finetune.config import FinetuneConfig
    from scarce_ltr.pretrain.config import PretrainConfig

    schemas = {
        "common": (CommonConfig, []),
        "pretrain": (PretrainConfig, []),
        "finetune": (FinetuneConfig, ["pretrained=none"]),
        "baseline": (BaselineConfig, []),
    }
    cls, base = schemas[schema]
    with pytest.raises(UserError, match=pattern):
        load_config(cls, [*base, *overrides])


def test_absurd_epochs_stop_the_command_line_before_a_run_folder(runs, monkeypatch, capsys):
    line = _one_error(*_main(monkeypatch, capsys, [*PRETRAIN, "epochs=1e23"]))
    assert "epochs must be a whole number >= 1 and <= 1000000" in line
    assert not runs.exists()


# --- devices ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [*PRETRAIN, "device=cuda"],
        [*GBDT[:1], "resnet", "logger=none", "deep.device=cuda"],
    ],
)
def test_cuda_where_there_is_none_is_named_before_a_run_folder(
    args, runs, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    line = _one_error(*_main(monkeypatch, capsys, args))
    key = args[-1].partition("=")[0]
    assert f"{key}=cuda: no CUDA device here (torch.cuda.is_available() is False" in line, line
    assert re.search(r"devices here: cpu(, mps.*)?; give .*=cpu or .*=auto$", line), line
    assert not runs.exists()


def test_cuda_where_there_is_one_is_taken(monkeypatch) -> None:
    from scarce_ltr.pretrain.config import PretrainConfig

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg, _ = load_config(PretrainConfig, ["device=cuda"])
    assert cfg.device == "cuda"


def test_setup_runtime_refuses_cuda_with_the_same_line(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match=r"device=cuda: no CUDA device here .*devices here: cpu"):
        setup_runtime(device="cuda")


def test_more_processes_than_gpus_is_one_clear_line(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(UserError, match=r"wants GPU 1, but it has 1: .*--nproc-per-node"):
        setup_runtime()


# --- --config files --------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig", "utf-32", "utf-16-be"])
def test_a_config_file_with_a_byte_order_mark_is_read(encoding, tmp_path, capsys) -> None:
    path = tmp_path / "my.yaml"
    text = "# réglages\nseed: 7\nlogger: none\n"
    data = text.encode(encoding)
    if encoding == "utf-16-be":  # Python writes no mark for an explicit byte order
        data = b"\xfe\xff" + data
    path.write_bytes(data)
    cli.run(["pretrain", "simclr-rank", "--config", str(path), "--print-config"])
    out = capsys.readouterr().out
    assert "\nseed: 7\n" in out and "logger: none" in out


@pytest.mark.parametrize(
    ("content", "pattern"),
    [
        (
            "seed: 3\n# café\n".encode("latin-1"),
            r"my\.yaml:2: byte 0xe9 is not UTF-8; a config file must be UTF-8",
        ),
        ("seed: 3\n".encode("utf-16-le"), r"my\.yaml: holds NUL bytes \(UTF-16 without a byte"),
    ],
)
def test_a_config_file_in_another_encoding_is_one_line(
    content, pattern, tmp_path, runs, monkeypatch, capsys
) -> None:
    path = tmp_path / "my.yaml"
    path.write_bytes(content)
    line = _one_error(*_main(monkeypatch, capsys, [*PRETRAIN, "--config", str(path)]))
    assert re.search(pattern, line) and "--config" in line, line
    assert not runs.exists()


def test_a_config_folder_or_missing_file_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    line = _one_error(*_main(monkeypatch, capsys, [*PRETRAIN, "--config", str(tmp_path)]))
    assert line == f"error: --config {tmp_path}: a folder, not a YAML file"
    missing = tmp_path / "nope.yaml"
    line = _one_error(*_main(monkeypatch, capsys, [*PRETRAIN, "--config", str(missing)]))
    assert line == f"error: --config {missing}: no such file"


# --- run folders and the files in them ------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/mounts").is_file(), reason="no Linux mount table")
@pytest.mark.parametrize("folder", ["/proc/foo", "/proc/self/ltr-run", "/sys/foo"])
def test_a_run_folder_on_a_kernel_file_system_says_so(folder, monkeypatch, capsys) -> None:
    line = _one_error(*_main(monkeypatch, capsys, [*GBDT, f"run_dir={folder}"]))
    assert re.search(r"/(proc|sys) is the (proc|sysfs) file system \(the kernel's", line), line
    assert "give run_dir=<a folder on a disk>" in line
    assert "you may write to" not in line and "No such file" not in line


def test_a_run_folder_name_too_long_for_the_file_system(tmp_path, monkeypatch, capsys) -> None:
    folder = tmp_path / ("x" * 300) / "run"
    line = _one_error(*_main(monkeypatch, capsys, [*GBDT, f"run_dir={folder}"]))
    assert re.search(r"holds a name of 300 bytes \('x{20}\.\.\.x{12}'\); this file system", line)
    assert "bytes per name: give run_dir=<a shorter path>" in line
    assert len(line) < 200, line  # not the 300 characters again
    assert not any(p.name.startswith("xxx") for p in tmp_path.iterdir())


def test_a_run_folder_whose_files_are_folders_or_that_is_a_file(tmp_path) -> None:
    run = tmp_path / "run"
    (run / "config.yaml").mkdir(parents=True)
    with pytest.raises(UserError, match=r"config\.yaml: a folder where the run's config file"):
        read_config(run, CommonConfig)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(UserError, match=r"a-file: a file, not a run folder"):
        read_config(tmp_path / "a-file", CommonConfig)


def test_letor_data_path_that_is_a_file_is_one_line(tmp_path, runs, monkeypatch, capsys):
    data = letor_folder(tmp_path / "data")
    args = [*GBDT, "data=letor", f"data.path={data / 'train.txt'}"]
    line = _one_error(*_main(monkeypatch, capsys, args))
    assert re.search(r"data\.path=.*train\.txt: a file; data=letor reads a folder", line), line
    assert not runs.exists()


# --- one data folder, spelled several ways ---------------------------------------------------


def _start(folder: Path, overrides: list[str]) -> Run:
    cfg, resolved = load_config(CommonConfig, ["data=letor", *overrides])
    identity = RunIdentity(
        dataset=cfg.data.run_name,
        stage="baseline",
        model="gbdt",
        setting="frac=1",
        seed=0,
        group="gbdt",
    )
    run = Run(identity, folder)
    run.start(resolved)
    return run


def test_one_data_folder_spelled_three_ways_is_one_setting(tmp_path, monkeypatch) -> None:
    letor_folder(tmp_path / "shared" / "Fold1")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    folder = tmp_path / "run"
    first = _start(folder, ["data.path=../shared/Fold1"])
    (folder / "checkpoint.pt").write_bytes(b"")  # the run got going
    assert f"path: {tmp_path / 'shared' / 'Fold1'}\n" in (folder / "config.yaml").read_text()
    for spelling in [f"{tmp_path}/shared/Fold1/", f"{tmp_path}/work/../shared/./Fold1"]:
        again = _start(folder, [f"data.path={spelling}"])
        assert again.identity == first.identity
    assert first.identity.dataset == "letor-shared-Fold1"  # the folder name is unchanged
    # A run saved with the path as given (before paths were made absolute) is the same run too.
    saved = (folder / "config.yaml").read_text()
    (folder / "config.yaml").write_text(saved.replace(str(tmp_path / "shared"), "../shared"))
    _start(folder, [f"data.path={tmp_path}/shared/Fold1/"])
    # Another folder is another setting.
    letor_folder(tmp_path / "other" / "Fold1")
    with pytest.raises(UserError, match=r"other settings \(data\.path differ\)"):
        _start(folder, [f"data.path={tmp_path}/other/Fold1"])


def test_a_run_resumed_with_its_data_folder_spelled_otherwise(tmp_path, runs, monkeypatch, capsys):
    letor_folder(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    args = [*GBDT, "data=letor", "gbdt.grid=paper"]
    code, err = _main(monkeypatch, capsys, [*args, "data.path=data"])
    assert code == 0, err
    folder = runs / "letor-data" / "baseline" / "gbdt" / "frac=1" / "seed=0"
    assert (folder / "DONE").is_file()
    code, err = _main(monkeypatch, capsys, [*args, f"data.path={os.path.abspath('data')}/"])
    assert code == 0 and "other settings" not in err, err


def test_a_folder_where_a_run_file_belongs_and_a_name_too_long_are_named(tmp_path) -> None:
    run = tmp_path / "run"
    (run / "config.yaml").mkdir(parents=True)
    _, resolved = load_config(CommonConfig, [])
    identity = RunIdentity(
        dataset="synthetic", stage="baseline", model="gbdt", setting="x", seed=0, group="gbdt"
    )
    with pytest.raises(UserError, match=r"config\.yaml: .*\(a folder is where a file belongs; "):
        Run(identity, run).start(resolved)
    with pytest.raises(UserError, match=r"\(a name in the path is longer than the file system"):
        atomic_write_text(tmp_path / ("x" * 300), "text")
