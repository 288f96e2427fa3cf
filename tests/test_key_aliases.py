"""A renamed key keeps its old spelling (`core.run_config.KEY_ALIASES`, issue 63): the deep
baselines took finetuning's names (``deep.max_epochs`` is ``deep.full_epochs``,
``deep.weight_decay`` is ``deep.optimizer.weight_decay``), and every baseline run's
``config.yaml`` written before holds the old ones. Such a run resumes, is skipped once finished
and is not stale in a sweep under the new names; the old spelling on the command line or in a
config file is the new key; both at once are refused naming the new one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf
from tiny import tiny_data

from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.cli import run
from scarce_ltr.core.config import CONFIG_ROOT, load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_config import KEY_ALIASES, changed_settings, new_names, read_config
from scarce_ltr.core.runs import Run
from scarce_ltr.sweeps.jobs import Job
from scarce_ltr.sweeps.stale import finished_differs

RESNET = CONFIG_ROOT / "baseline" / "resnet.yaml"
OLD = ["deep.max_epochs=7", "deep.weight_decay=0.01"]
NEW = ["deep.full_epochs=7", "deep.optimizer.weight_decay=0.01"]
# a resnet run of a few seconds
TINY = [*tiny_data(), "logger=none", "deep.lrs=[1e-3]", "deep.encoder.width=8",
        "deep.encoder.hidden=16", "deep.encoder.n_blocks=1", "deep.head_hidden=8"]  # fmt: skip


def _resnet(*keys: str, files: tuple[Path, ...] = ()):
    return load_config(BaselineConfig, ["method=resnet", *keys], stage_file=RESNET,
                       config_files=list(files))  # fmt: skip


def _old_spelling(folder: Path) -> None:
    """``folder``'s config.yaml as the version before the rename wrote it: the old names, no
    ``deep.optimizer`` section (its other keys then at their defaults)."""
    path = folder / "config.yaml"
    saved = yaml.safe_load(path.read_text())
    deep = saved["deep"]
    deep["max_epochs"] = deep.pop("full_epochs")
    deep["weight_decay"] = deep.pop("optimizer")["weight_decay"]
    path.write_text(yaml.safe_dump(saved))


def test_the_old_spelling_on_the_command_line_or_in_a_file_is_the_new_key(tmp_path) -> None:
    new_cfg, new_resolved = _resnet(*NEW)
    assert (new_cfg.deep.full_epochs, new_cfg.deep.optimizer.weight_decay) == (7, 0.01)
    assert _resnet(*OLD) == (new_cfg, new_resolved)
    file = tmp_path / "old.yaml"
    file.write_text("deep:\n  max_epochs: 7\n  weight_decay: 0.01\n")
    assert _resnet(files=(file,)) == (new_cfg, new_resolved)
    # across layers the later wins, as with one spelling: the file's old key, the command's new
    assert _resnet("deep.full_epochs=5", files=(file,))[0].deep.full_epochs == 5
    assert _resnet("deep.max_epochs=5", files=(file,))[0].deep.full_epochs == 5


@pytest.mark.parametrize(
    ("keys", "file", "message"),
    [
        (
            ["deep.max_epochs=7", "deep.full_epochs=7"],
            "",
            r"^command line: deep\.max_epochs and deep\.full_epochs both given; .*give "
            r"deep\.full_epochs alone$",
        ),
        (
            [],
            "deep:\n  weight_decay: 0.1\n  optimizer:\n    weight_decay: 0.1\n",
            r"old\.yaml: deep\.weight_decay and deep\.optimizer\.weight_decay both given; "
            r".*give deep\.optimizer\.weight_decay alone$",
        ),
        (["deep.max_epochs=0"], "", r"deep\.full_epochs must be >= 1"),
        (["deep.max_epochs=abc"], "", r"config key 'deep\.full_epochs' expects int"),
        (["deep.optimizer.lr=0.1"], "", r"deep\.optimizer\.lr=0\.1: .*give deep\.lrs=\[0\.1\]$"),
    ],
)
def test_both_spellings_at_once_and_bad_values_are_refused_by_the_new_name(
    tmp_path, keys: list[str], file: str, message: str
) -> None:
    files = ()
    if file:
        files = (tmp_path / "old.yaml",)
        files[0].write_text(file)
    with pytest.raises(UserError, match=message):
        _resnet(*keys, files=files)


def test_a_saved_config_compares_under_the_new_names() -> None:
    """`changed_settings` reads a saved config's old names as the new ones, where the current
    config holds the new key and not the old (the stage's: a config without the section is
    left as it is); the value still counts, named by the new key."""
    saved = OmegaConf.create({"seed": 1, "deep": {"max_epochs": 3, "weight_decay": 0.0}})
    now = {"seed": 1, "deep": {"full_epochs": 3, "optimizer": {"weight_decay": 0.0}}}
    assert changed_settings(saved, OmegaConf.create(now)) == []
    now["deep"]["full_epochs"] = 4
    assert changed_settings(saved, OmegaConf.create(now)) == ["deep.full_epochs"]
    # the optimizer's keys an old run did not write: no change at their defaults only
    now = {"seed": 1, "deep": {"full_epochs": 3, "optimizer": {"weight_decay": 0.0, "lr": 1.0}}}
    defaults = OmegaConf.create({"deep": {"optimizer": {"lr": 1.0}}})
    assert changed_settings(saved, OmegaConf.create(now), defaults=defaults) == []
    assert changed_settings(saved, OmegaConf.create(now)) == ["deep.optimizer.lr"]
    # a config holding the old key itself (no rename for it) compares it as it is
    kept = {"seed": 1, "deep": {"max_epochs": 3, "weight_decay": 0.0}}
    assert changed_settings(saved, OmegaConf.create(kept)) == []
    plain = {"deep": {"max_epochs": 3}}
    assert new_names(plain, lambda key: key == "deep.full_epochs") == {"deep": {"full_epochs": 3}}
    assert plain == {"deep": {"max_epochs": 3}}  # the caller's settings are left as they are
    assert all(old.split(".")[0] == new.split(".")[0] for old, new in KEY_ALIASES.items())


def test_a_run_saved_with_the_old_names_resumes_is_skipped_and_is_not_stale(
    tmp_path, monkeypatch
) -> None:
    """A resnet run stopped before its report, its config.yaml rewritten as the version before
    the rename wrote it: refused with another epoch count (named by the new key), resumed with
    the same settings to the uninterrupted run's scores, then skipped, and not stale for a
    sweep's job of the same command."""
    args = ["baseline", "resnet", *TINY, "deep.full_epochs=2"]
    straight = run([*args, f"run_dir={tmp_path / 'straight'}"])
    folder = tmp_path / "stopped"

    def stop(self, body, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(Run, "finish", stop)
        with pytest.raises(KeyboardInterrupt):
            run([*args, f"run_dir={folder}"])
    _old_spelling(folder)
    assert read_config(folder, BaselineConfig).deep.full_epochs == 2
    with pytest.raises(UserError, match=r"other settings \(deep\.full_epochs differ\)"):
        run(["baseline", "resnet", *TINY, "deep.full_epochs=3", f"run_dir={folder}"])
    resumed = run([*args, f"run_dir={folder}"])
    assert json.dumps(resumed["metrics"]) == json.dumps(straight["metrics"])  # NaN too

    _old_spelling(folder)  # finished, as the version before wrote it
    assert run([*args, f"run_dir={folder}"]) is None  # finished: skipped, not refused
    overrides = [*TINY, "deep.full_epochs=2"]
    job = Job(key="resnet", stage="baseline", name="resnet", overrides=overrides, run_dir=folder)
    assert finished_differs(job) is None
    changed = Job(key="resnet", stage="baseline", name="resnet", run_dir=folder,
                  overrides=[*TINY, "deep.optimizer.weight_decay=0.5"])  # fmt: skip
    assert "deep.optimizer.weight_decay differ" in (finished_differs(changed) or "")


def test_shipped_configs_spell_the_new_names() -> None:
    """The shipped configs (a stage's, a sweep's per-model overrides) use the new names; the
    old ones are read, never written."""
    for path in CONFIG_ROOT.rglob("*.yaml"):
        text = path.read_text()
        for old in KEY_ALIASES:
            section, _, key = old.partition(".")
            assert old not in text, (path, old)
            assert f"{section}:\n" not in text or f"\n  {key}:" not in text, (path, old)
