"""The typed stage API under the command line: each `Stage`'s code imported as an `Entry`
(its config class and ``main``), `compose` and `run_stage`, which ``./run.sh`` runs through."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import typing
from dataclasses import is_dataclass
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from tiny import tiny_data

from scarce_ltr.cli import STAGES, run
from scarce_ltr.cli_compose import compose, run_stage
from scarce_ltr.core.config import CONFIG_ROOT, available
from scarce_ltr.core.config_doc import describe
from scarce_ltr.core.runs import Outcome, Run


@pytest.mark.parametrize("name", list(STAGES))
def test_each_stage_entry_is_its_typed_config_and_main(name: str) -> None:
    stage = STAGES[name]
    assert stage.name == name
    entry = stage.entry()
    assert is_dataclass(entry.config) and stage.config() is entry.config
    hints = typing.get_type_hints(entry.main)
    cfg, second = list(inspect.signature(entry.main).parameters)[:2]
    assert issubclass(entry.config, hints[cfg]), (name, hints[cfg])  # main takes its config
    if stage.runs:  # main(cfg, run) -> Outcome, which Run.execute finishes the run with
        assert hints[second] is Run and hints["return"] is Outcome
        assert hasattr(entry.config, "identity")
    else:
        assert hints[second] == Path | None


def test_the_command_line_imports_no_stage_until_one_runs() -> None:
    code = (
        "import sys; import scarce_ltr.cli as cli; cli.usage(); "
        "print(sorted(m for m in sys.modules if m.startswith(('scarce_ltr.sweeps', "
        "'scarce_ltr.serving', 'scarce_ltr.baselines', 'scarce_ltr.finetune.train'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_run_stage_on_a_composed_config_is_the_command(tmp_path: Path) -> None:
    overrides = [*tiny_data(), "method=gbdt", "gbdt.max_rounds=3", "logger=none"]
    stage = STAGES["baseline"]
    composed = compose(
        stage,
        [*overrides, f"run_dir={tmp_path / 'api'}"],
        stage_file=CONFIG_ROOT / "baseline" / "gbdt.yaml",
    )
    assert composed.cfg.gbdt.max_rounds == 3 and composed.defaults is not None
    by_api = run_stage(stage, composed)
    by_cli = run(["baseline", "gbdt", *overrides, f"run_dir={tmp_path / 'cli'}"])
    assert json.dumps(by_api["metrics"]) == json.dumps(by_cli["metrics"])  # nan: no outlier QG
    config = [(tmp_path / d / "config.yaml").read_text() for d in ("api", "cli")]
    assert config[0].replace("/api", "/cli") == config[1]
    # A finished run is skipped: None, as ./run.sh answers it.
    assert run_stage(stage, composed) is None


@pytest.mark.parametrize("name", ["pretrain", "finetune"])
def test_the_learning_rate_has_one_default(name: str, capsys) -> None:
    """``optimizer.lr``'s default is the config class's alone (pretraining 5e-4, finetuning
    5e-5): no stage file restates it; one that sets another rate is its recipe (combine's 1e-3),
    and ``--help`` and every run read the rate that wins."""
    stage = STAGES[name]
    default = {d.key: d.default for d in describe(stage.config())}["optimizer.lr"]
    assert default == {"pretrain": 5e-4, "finetune": 5e-5}[name]
    for config in available(stage.config_folder):
        stage_file = CONFIG_ROOT / stage.config_folder / f"{config}.yaml"
        lr = OmegaConf.select(OmegaConf.load(stage_file), "optimizer.lr")
        assert lr != default, f"{stage_file} restates optimizer.lr={default}"
        run([name, config, "--help"])
        expected = default if lr is None else lr
        assert f"  optimizer.lr: float = {expected}" in capsys.readouterr().out, config


def test_an_estimator_composes_its_config_and_runs_it_without_the_command_line(
    tmp_path: Path, monkeypatch
) -> None:
    """`TreeRanker.fit` composes the stage's config with its keywords as Python values and
    calls the stage's function in memory, neither `cli.run` nor `cli_compose.run_stage`;
    ``commands_`` is the ``./run.sh`` argv of the same config, which on the arrays written as
    ``data=arrays`` gives the same scores, bit for bit."""
    from scarce_ltr import TreeRanker, cli, cli_compose
    from scarce_ltr.data.arrays import write_arrays
    from scarce_ltr.data.ranking_split import RankingSplit

    rng = np.random.default_rng(0)
    qid = np.repeat(np.arange(30), 8)
    x = rng.normal(size=(len(qid), 6)).astype(np.float32)
    y = (x[:, 0] + rng.normal(size=len(qid)) > 0.5).astype(int)
    xv, qv = x[:80], qid[:80] + 100
    yv = (xv[:, 0] > 0.3).astype(int)

    def refused(*args) -> None:
        raise AssertionError(f"the command line ran: {args}")

    monkeypatch.setattr(cli, "run", refused)
    monkeypatch.setattr(cli_compose, "run_stage", refused)
    keywords = {"gbdt__max_rounds": np.int64(5), "gbdt__params": {"max_bin": 15}, "seed": 3}
    ranker = TreeRanker("gbdt", n_jobs=1, verbose=0, **keywords)
    ranker.fit(x, y, qid, eval_set=(xv, yv, qv))
    monkeypatch.undo()
    [argv] = ranker.commands_
    assert "gbdt.max_rounds=5" in argv and "gbdt.params.max_bin=15" in argv
    assert ranker.run_ is None  # no work_dir: no run folder
    for name, (features, labels, ids) in {"train": (x, y, qid), "vali": (xv, yv, qv)}.items():
        sizes = np.bincount(ids - ids.min())
        offsets = np.r_[0, np.cumsum(sizes[sizes > 0])].astype(np.int64)
        split = RankingSplit(features, labels.astype(np.float32), offsets, np.unique(ids), name)
        write_arrays(split, tmp_path / "d" / name)
    run([*argv, f"data.path={tmp_path / 'd'}", "data.splits.test=vali",
         f"run_dir={tmp_path / 'cli'}"])  # fmt: skip
    with np.load(tmp_path / "cli" / "scores.npz") as saved:
        np.testing.assert_array_equal(ranker.predict(xv, qv), saved["test"])


@pytest.mark.parametrize(
    ("stage", "name"), [("pretrain", "simclr@released"), ("finetune", "lp"), ("baseline", "gbdt")]
)
def test_an_estimator_stage_config_is_the_command_lines(stage: str, name: str) -> None:
    """`api.stages.StageConfig` composes without the command line what ``./run.sh <stage>
    <name> data=arrays`` composes (a preset's keys too), the keywords set last."""
    from scarce_ltr import cli, cli_compose
    from scarce_ltr.api.stages import StageConfig

    keys = [
        ("seed", 3),
        ("logger", "none"),
        *([("pretrained", "none")] if stage == "finetune" else []),
    ]
    step = StageConfig(stage, name, {}, keys)
    cfg, resolved = step.compose()
    composed = cli_compose.compose_named(
        cli.STAGES[stage], name, ["data=arrays"], values=dict(keys)
    )
    assert cfg == composed.cfg and resolved == composed.resolved
    assert step.defaults() == composed.defaults  # what Run.start takes a missing key at


def test_an_estimator_run_folder_of_an_older_version_starts_again(tmp_path: Path) -> None:
    """A fit's run folder (``work_dir``) whose ``config.yaml`` an older version wrote (a key
    added since left out at its default, a key renamed since under its old name) is started
    again as ``./run.sh`` starts it, with the stage's defaults: no other setting; without the
    defaults the missing key was one."""
    from scarce_ltr.api import TreeRanker
    from scarce_ltr.api.stages import StageConfig
    from scarce_ltr.core.errors import UserError

    ranker = TreeRanker("resnet")
    ranker.commands_, ranker._progress = [], False
    step = StageConfig("baseline", "resnet", {"scarcity.fraction": 0.5}, [("logger", "none")])
    cfg, run = ranker._stage_config(step, tmp_path)
    path = run.folder / "config.yaml"
    saved = OmegaConf.load(path)
    assert saved.deep.head_dropout == step.defaults().deep.head_dropout  # at its default
    del saved.deep["head_dropout"]
    saved.deep.max_epochs = saved.deep.pop("full_epochs")  # `core.run_config.KEY_ALIASES`
    path.write_text(OmegaConf.to_yaml(saved))
    (run.folder / "checkpoint.pt").write_bytes(b"")  # a run that got going: its settings held
    with pytest.raises(UserError, match=r"other settings \(deep.head_dropout differ\)"):
        Run(cfg.identity(), run.folder, logger="none").start(step.compose()[1])
    again, run = ranker._stage_config(step, tmp_path)
    assert again == cfg and OmegaConf.load(path).deep.full_epochs == cfg.deep.full_epochs
