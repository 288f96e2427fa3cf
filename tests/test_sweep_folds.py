"""Sweeps over the folds of a data set (``folds: [1, 2, ...]``): the plan, the folders, the checks,
and a tiny real run on two folds of LETOR files."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from tiny import letor_folder

from scarce_ltr.cli import run
from scarce_ltr.core.config import CONFIG_ROOT, load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.sweeps.cells import plan_cells
from scarce_ltr.sweeps.sweep import SweepConfig

MODELS = [
    "gbdt",
    "simclr-rank+full",
    "ensemble:simclr-rank+full,gbdt",
    "seed-ensemble:simclr-rank+full",
]


def _sweep(*overrides: str) -> SweepConfig:
    cfg, _ = load_config(
        SweepConfig,
        ["name=quick", f"models={json.dumps(MODELS)}", "logger=none", "seed_ensemble_size=2",
         *overrides],
        stage_file=CONFIG_ROOT / "sweep" / "quick.yaml",
    )  # fmt: skip
    return cfg


def _splits(job) -> dict[str, str]:
    return {
        o.split("=", 1)[0].removeprefix("data.splits."): o.split("=", 1)[1]
        for o in job.overrides
        if o.startswith("data.splits.")
    }


def test_every_cell_and_pretraining_runs_once_per_fold_on_its_own_files() -> None:
    folds, seeds, fractions = [2, 5], [0, 1], [0.2, 1.0]
    cfg = _sweep("datasets=[ohsumed]", "folds=[2,5]", "seeds=[0,1]", "fractions=[0.2,1.0]")
    jobs, cells = plan_cells(cfg, Path("/S"))
    assert len(cells) == len(folds) * len(seeds) * len(fractions) * len(MODELS)
    assert Counter(c.fold for c in cells) == {2: 16, 5: 16}
    assert len({c.id for c in cells}) == len(cells)  # cell ids name the fold
    for job in jobs:
        fold = int(re.search(r"/fold=(\d+)/", job.key).group(1))
        assert job.key.startswith(f"ohsumed/fold={fold}/")
        assert str(job.run_dir).startswith(f"/S/ohsumed/fold={fold}/")
        expected = {s: f"Fold{fold}/{s}" for s in ("train", "vali", "test")}
        assert _splits(job) == expected, job.key
        assert f"fold={fold}" in job.tags
        # Pretrained encoders and ensemble members come from the job's own fold.
        others = [d for d in job.depends_on if not d.startswith(f"ohsumed/fold={fold}/")]
        assert not others, (job.key, others)
        for option in (o for o in job.overrides if o.startswith(("pretrained=", "runs="))):
            assert "/fold=" in option and all(
                f"/fold={k}/" not in option for k in folds if k != fold
            ), option
    pretraining = [j for j in jobs if j.stage == "pretrain"]
    assert sorted(j.key for j in pretraining) == [
        f"ohsumed/fold={k}/pretrain/simclr-rank/seed={s}" for k in folds for s in seeds
    ]
    for cell in cells:
        assert f"/fold={cell.fold}/" in cell.run_dir and cell.to_dict()["fold"] == cell.fold


def test_without_folds_the_plan_is_the_one_before_folds() -> None:
    """The quick sweep's folders, keys and overrides do not change (written out by hand)."""
    jobs, cells = plan_cells(_sweep("seeds=[0]", "fractions=[0.2]"), Path("/S"))
    by_key = {j.key: j for j in jobs}
    assert list(by_key) == [
        "synthetic/pretrain/simclr-rank/seed=0",
        "synthetic/gbdt/frac=0.2/seed=0",
        "synthetic/simclr-rank+full/frac=0.2/seed=0",
        "synthetic/simclr-rank+full/frac=0.2,labels=0/seed=1000",
        "synthetic/ensemble:simclr-rank+full,gbdt/frac=0.2/seed=0",
        "synthetic/seed-ensemble:simclr-rank+full/frac=0.2/seed=0",
    ]
    pretrain = "/S/synthetic/pretrain/simclr-rank/seed=0"
    assert by_key["synthetic/pretrain/simclr-rank/seed=0"].overrides == [
        "data=synthetic", "logger=none", "seed=0", "scarcity.fraction=0.2", "scarcity.val=full",
        "epochs=20", f"run_dir={pretrain}",
    ]  # fmt: skip
    finetune = "/S/synthetic/finetune/simclr-rank+full/frac=0.2/seed=0"
    assert by_key["synthetic/simclr-rank+full/frac=0.2/seed=0"].overrides == [
        "data=synthetic", "logger=none", "seed=0", "scarcity.fraction=0.2", "scarcity.val=full",
        f"pretrained={pretrain}", "optimizer.lr=2.0e-4", f"run_dir={finetune}",
    ]  # fmt: skip
    ensemble = by_key["synthetic/ensemble:simclr-rank+full,gbdt/frac=0.2/seed=0"]
    assert ensemble.overrides == [
        "data=synthetic", "logger=none", "seed=0", "scarcity.fraction=0.2", "scarcity.val=full",
        f'runs=["{finetune}","/S/synthetic/baseline/gbdt/frac=0.2/seed=0"]',
        "run_dir=/S/synthetic/ensemble/ensemble:simclr-rank+full,gbdt/frac=0.2/seed=0",
    ]  # fmt: skip
    assert ensemble.tags == ["ensemble:simclr-rank+full,gbdt", "frac=0.2", "seed=0", "synthetic"]
    assert cells[0].to_dict() == {
        "id": "synthetic/gbdt/frac=0.2/seed=0", "dataset": "synthetic", "model": "gbdt",
        "group": "gbdt", "stage": "baseline", "setting": "frac=0.2", "fraction": 0.2,
        "binary_tau": None, "seed": 0, "run_dir": "/S/synthetic/baseline/gbdt/frac=0.2/seed=0",
        "job_key": "synthetic/gbdt/frac=0.2/seed=0", "fold": None, "status": "pending",
        "error": None, "seconds": 0.0,
    }  # fmt: skip


def test_a_data_set_without_fold_folders_is_refused_by_name(tmp_path: Path) -> None:
    args = ["sweep", "quick", "folds=[1,2]", "models=[gbdt]", f"run_dir={tmp_path / 's'}"]
    with pytest.raises(
        UserError, match=r"data set 'synthetic' has splits \{train: train, .*Fold<n>"
    ):
        run([*args, "--dry-run"])
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("folds=[0,1]", r"folds must be distinct fold numbers >= 1"),
        ("folds=[1,1]", r"folds must be distinct fold numbers >= 1"),
        ("overrides.common=[data.splits.test=Fold3/test]", r"overrides.common: 'data.splits"),
    ],
)
def test_bad_folds_stop_before_any_cell(tmp_path: Path, override: str, message: str) -> None:
    args = ["sweep", "quick", "datasets=[ohsumed]", "folds=[1,2]", "models=[gbdt]"]
    with pytest.raises(UserError, match=message):
        run([*args, override, f"run_dir={tmp_path / 's'}", "--dry-run"])


def _letor_folds(root: Path) -> Path:
    letor_folder(root / "Fold1")
    letor_folder(root / "Fold2", {"test": {1: "2 qid:1 1:9 2:9 3:9"}})  # fold 2's test differs
    return root


def _fold_sweep(tmp_path: Path, *extra: str) -> list[str]:
    common = (
        f"[data.path={tmp_path / 'data'},data.n_features=3,gbdt.num_threads=1,gbdt.max_rounds=5]"
    )
    return [
        "sweep", "quick", "datasets=[ohsumed]", "models=[gbdt]", "fractions=[1.0]", "seeds=[0]",
        "workers=1", "logger=none", "report=false", f"overrides.common={common}",
        "overrides.pretrain=[]", "overrides.finetune=[]", "overrides.per_model={}",
        f"run_dir={tmp_path / 'sweep'}", *extra,
    ]  # fmt: skip


def test_missing_fold_folders_stop_a_run_and_warn_a_dry_run(tmp_path: Path, capsys) -> None:
    letor_folder(tmp_path / "data" / "Fold1")
    with pytest.raises(UserError, match="Fold2"):
        run(_fold_sweep(tmp_path, "folds=[1,2]"))
    run(_fold_sweep(tmp_path, "folds=[1,2]", "--dry-run"))
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "Fold2/train" in err and "Fold1/train" not in err


def test_a_sweep_runs_each_fold_on_its_files_and_resumes(tmp_path: Path, capsys) -> None:
    _letor_folds(tmp_path / "data")
    cells = run(_fold_sweep(tmp_path, "folds=[1,2]"))
    assert [(c["fold"], c["status"]) for c in cells] == [(1, "done"), (2, "done")]
    for cell in cells:
        config = (Path(cell["run_dir"]) / "config.yaml").read_text()
        assert f"test: Fold{cell['fold']}/test" in config
    tests = [
        json.loads((Path(c["run_dir"]) / "report.json").read_text())["metrics"]["test"]
        for c in cells
    ]
    assert tests[0] != tests[1]  # two folds, two test files
    manifest = json.loads((tmp_path / "sweep" / "manifest.json").read_text())
    assert [c["fold"] for c in manifest["cells"]] == [1, 2]
    logs = [(Path(c["run_dir"]) / "log.txt").read_text() for c in cells]
    capsys.readouterr()
    run(_fold_sweep(tmp_path, "folds=[1,2]", "--dry-run"))
    assert capsys.readouterr().out.count("[  done]") == 2
    again = run(_fold_sweep(tmp_path, "folds=[1,2]"))
    assert [c["status"] for c in again] == ["done", "done"]
    assert [(Path(c["run_dir"]) / "log.txt").read_text() for c in again] == logs  # not rerun
