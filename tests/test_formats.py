"""The extension points of data formats and sweep executors: one registry each, the stage config
holding the choice and refusing a key the choice does not read, and a format or executor added by
its module and one registry line alone (docs/architecture.md, "Where new code goes")."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from scarce_ltr.core.config import available, load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.datasets import DataConfig, check_files, load_data
from scarce_ltr.data.formats import FORMATS
from scarce_ltr.data.formats.base import DataFormat, LoadedData
from scarce_ltr.data.ranking_split import QidGroups, RankingSplit
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.serving.predict import PREDICTORS
from scarce_ltr.sweeps import executors
from scarce_ltr.sweeps.executor_kind import ExecutorKind
from scarce_ltr.sweeps.local_executor import LocalExecutor
from scarce_ltr.sweeps.ray_executor import RayConfig
from scarce_ltr.sweeps.sweep import SweepConfig


def test_every_format_key_is_a_data_key_with_the_same_default() -> None:
    """A format's `Options` fields are `DataConfig` keys: config.yaml keeps its keys, and a
    key's default is one value (the refusal compares with it)."""
    data = {f.name: f for f in dataclasses.fields(DataConfig)}
    for name, fmt in FORMATS.items():
        assert fmt.name == name
        for option in dataclasses.fields(fmt.options):
            assert option.name in data, (name, option.name)
            mine = fmt.options()
            theirs = DataConfig()
            assert getattr(mine, option.name) == getattr(theirs, option.name)
    # predict reads through the registry: every predictor is a format that claims inputs
    assert all(FORMATS[name].predicts for name in PREDICTORS)
    assert list(PREDICTORS)[-1] == "letor"  # the last resort, claiming any path


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data=letor", "data.path=/x", "data.qid=query"],
         r"data.qid=query: data.format=letor does not read it \(read with data.format=table\); "
         r"it reads data.path, data.splits$"),
        (["data=arrays", "data.path=/x", "data.split_column=part"],
         r"data.split_column=part: data.format=arrays does not read it"),
        (["data=ohsumed", "data.features=[f1]"], r"data.features=\['f1'\]: data.format=letor"),
        (["data.label=grade"], r"data.label=grade: data=synthetic does not read it \(read with "
                               r"data.format=table\); it reads data.synthetic.\*$"),
        (["data=table", "data.path=/x", "data.qid=''"], r"data.qid must name a column"),
    ],
)  # fmt: skip
def test_a_key_the_chosen_format_does_not_read_is_refused(overrides, message) -> None:
    """Before: data.qid=... with LETOR files was silently ignored."""
    with pytest.raises(UserError, match=message):
        load_config(CommonConfig, overrides)


def test_the_chosen_formats_keys_and_every_data_config_load() -> None:
    keys = ["data.qid=query", "data.features=[a,b]", "data.split_column=part"]
    cfg, _ = load_config(CommonConfig, ["data=table", "data.path=/x", *keys])
    options = FORMATS["table"].options_of(cfg.data)
    assert (options.qid, options.features, options.split_column) == ("query", ["a", "b"], "part")
    for name in available("data"):  # none sets a key its format does not read
        load_config(CommonConfig, [f"data={name}"])


def _csv_find(cfg: DataConfig, folder: Path, stem: str) -> Path | None:
    path = folder / f"{stem}.csv"
    return path if path.is_file() else None


def _csv_load(cfg: DataConfig, files: dict[str, Path]) -> LoadedData:
    splits = {}
    for split, path in files.items():
        rows = np.loadtxt(path, delimiter=",", ndmin=2)  # qid, label, features...
        groups = QidGroups(rows[:, 0].astype(np.int64))
        rows = rows[groups.order]
        x = np.ascontiguousarray(rows[:, 2:], dtype=np.float32)
        splits[split] = RankingSplit(x, rows[:, 1], groups.offsets, groups.qids, split)
    return LoadedData(splits, files)


@dataclass(frozen=True)
class _CsvOptions:
    def check(self) -> None:
        pass


def test_a_new_format_is_its_module_and_one_registry_line(tmp_path, monkeypatch) -> None:
    """What a format module exports, registered in `FORMATS` alone: data.format=<it> finds,
    reads and names its files, no branch elsewhere."""
    fmt = DataFormat("csv", _CsvOptions, pattern=".csv", kinds="CSV files",
                     find=_csv_find, load=_csv_load)  # fmt: skip
    monkeypatch.setitem(FORMATS, "csv", fmt)
    rng = np.random.default_rng(0)
    for split in ("train", "vali"):
        qids = np.repeat([3, 1, 2], 4)
        rows = np.column_stack([qids, rng.integers(0, 3, 12), rng.normal(size=(12, 5))])
        np.savetxt(tmp_path / f"{split}.csv", rows, delimiter=",")
    cfg = DataConfig(name="mine", format="csv", path=str(tmp_path))
    with pytest.raises(UserError, match=r"missing CSV files:\n  .*test\.csv"):
        check_files(cfg)
    (tmp_path / "test.csv").write_text((tmp_path / "vali.csv").read_text())
    loaded = load_data(cfg)
    assert loaded.splits["train"].n_features == 5
    assert list(loaded.splits["test"].qids) == [1, 2, 3]
    with pytest.raises(ValueError, match="data.qid=q: data.format=csv does not read it"):
        DataConfig(name="mine", format="csv", path=str(tmp_path), qid="q")


@dataclass(frozen=True)
class _KeyedCsvOptions:
    qid: str | None = None  # a key table reads too

    def check(self) -> None:
        pass


def test_a_key_two_formats_read_is_named_with_both(monkeypatch) -> None:
    """Once a second format reads data.qid, the refusal names both readers in plain words
    (it once said "data.qid is data.format=table and data.format=csv's")."""
    fmt = DataFormat("csv", _KeyedCsvOptions, pattern=".csv", kinds="CSV files",
                     find=_csv_find, load=_csv_load)  # fmt: skip
    monkeypatch.setitem(FORMATS, "csv", fmt)
    with pytest.raises(ValueError, match=re.escape(
        "data.qid=q: data.format=letor does not read it (read with data.format=table or csv); "
        "it reads data.path, data.splits"
    )):  # fmt: skip
        DataConfig(name="mine", format="letor", path="/x", qid="q")


@pytest.mark.parametrize(
    ("ray", "message"),
    [
        (RayConfig(address="auto"), r"ray.address=auto: executor=local does not read it \(read "
                                    r"with executor=ray\); it reads workers$"),
        (RayConfig(max_retries=1, resources={"default": {"num_cpus": 2}}),
         r"ray.resources=.*, ray.max_retries=1: executor=local does not read them"),
    ],
)  # fmt: skip
def test_a_ray_key_with_the_local_executor_is_refused(ray, message) -> None:
    """Before: ray.address=... with executor=local ran locally without a word."""
    with pytest.raises(ValueError, match=message):
        SweepConfig(ray=ray)
    assert SweepConfig(executor="ray", ray=ray).ray == ray
    assert SweepConfig().executor == "local"  # the defaults pass


def test_every_sweep_config_sets_only_its_executors_keys() -> None:
    from scarce_ltr.core.config import CONFIG_ROOT

    for name in available("sweep"):
        load_config(SweepConfig, [], stage_file=CONFIG_ROOT / "sweep" / f"{name}.yaml")


def test_a_new_executor_is_its_module_and_one_registry_line(tmp_path, monkeypatch) -> None:
    built = {}

    def build(options, *, workers, folder, stages):
        built.update(workers=workers, folder=folder, stages=stages)
        return LocalExecutor(workers)

    kind = ExecutorKind("serial", executors.local_executor.Options, section=None, build=build)
    monkeypatch.setitem(executors.EXECUTORS, "serial", kind)
    cfg = SweepConfig(executor="serial", workers=2)
    executor = executors.make_executor(cfg, tmp_path, [])
    executor.close()
    assert isinstance(executor, LocalExecutor)
    assert built == {"workers": 2, "folder": tmp_path, "stages": set()}
    with pytest.raises(ValueError, match="ray.address=auto: executor=serial does not read it"):
        SweepConfig(executor="serial", ray=RayConfig(address="auto"))
    with pytest.raises(ValueError, match="executor must be one of local, ray, serial"):
        SweepConfig(executor="slurm")
