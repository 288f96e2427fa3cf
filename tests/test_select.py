"""``./run.sh select``: the validation-best model per setting, ties, ``best.json``, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fake_sweep import run_cell, write_manifest

from scarce_ltr.core.errors import UserError
from scarce_ltr.reports import stats
from scarce_ltr.sweeps.select import SelectConfig, main

GROUP = {
    "gbdt": "gbdt",
    "gbdt-pseudo": "gbdt",
    "resnet": "no-pretrain-dl",
    "simclr-rank+full": "pretrained-dl",
    "simsiam+full": "pretrained-dl",
}
# (model, fraction) -> per-seed (vali ndcg@5, test ndcg@5); None: the cell failed.
VALUES = {
    # At 2% simsiam+full and resnet are best on TEST, simclr-rank+full on VALIDATION.
    ("gbdt", 0.02): [(0.50, 0.40), (0.52, 0.42), (0.51, 0.41)],
    ("resnet", 0.02): [(0.40, 0.70), (0.41, 0.71), (0.42, 0.72)],
    ("simclr-rank+full", 0.02): [(0.60, 0.46), (0.62, 0.47), (0.61, 0.49)],
    ("simsiam+full", 0.02): [(0.58, 0.60), (0.59, 0.62), (0.57, 0.61)],
    # At 50% a tie on validation: gbdt has fewer finished seeds, so gbdt-pseudo wins.
    ("gbdt", 0.5): [(0.50, 0.89), (0.50, 0.91), None],
    ("gbdt-pseudo", 0.5): [(0.50, 0.60), (0.50, 0.61), (0.50, 0.62)],
    ("simsiam+full", 0.5): [(0.45, 0.93), (0.45, 0.95), (0.45, 0.97)],
    # At 100% a tie on validation and seeds: the first name alphabetically wins.
    ("simsiam+full", 1.0): [(0.70, 0.80), (0.70, 0.81), (0.70, 0.82)],
    ("simclr-rank+full", 1.0): [(0.70, 0.60), (0.70, 0.61), (0.70, 0.62)],
}
CHOSEN = {0.02: "simclr-rank+full", 0.5: "gbdt-pseudo", 1.0: "simclr-rank+full"}


def make_sweep(root: Path, name: str = "demo") -> Path:
    """Fake run dirs and a manifest under ``root/sweeps/<name>`` (tests/fake_sweep.py)."""
    folder = root / "sweeps" / name
    cells = []
    for (model, fraction), per_seed in VALUES.items():
        for seed, values in enumerate(per_seed):
            vali, test = values or (None, None)
            cells.append(
                run_cell(
                    folder, "synthetic", model, dataset="synthetic", fraction=fraction,
                    stage="finetune" if "+" in model else "baseline", group=GROUP[model],
                    seed=seed, metrics={"vali": {"ndcg@5": vali}, "test": {"ndcg@5": test}},
                    status="failed" if values is None else "done",
                )
            )  # fmt: skip
    return write_manifest(folder, cells)


@pytest.fixture
def sweep(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "runs"
    return root, make_sweep(root)


def test_validation_best_is_chosen_never_test(sweep, capsys) -> None:
    root, folder = sweep
    best = main(SelectConfig(sweep="demo", runs_root=str(root)))
    by_setting = {c["setting"]: c for c in best["choices"]}
    assert list(by_setting) == ["frac=0.02", "frac=0.5", "frac=1"]
    assert {s: c["model"] for s, c in by_setting.items()} == {
        f"frac={f:g}": m for f, m in CHOSEN.items()
    }
    choice = by_setting["frac=0.02"]
    vali, test = zip(*VALUES[("simclr-rank+full", 0.02)], strict=True)
    assert choice["group"] == "pretrained-dl" and choice["n_candidates"] == 4
    assert choice["n_seeds"] == 3 and choice["vali_mean"] == pytest.approx(np.mean(vali))
    assert choice["test_mean"] == pytest.approx(np.mean(test))
    assert choice["test_std"] == pytest.approx(np.std(test, ddof=1))
    out = capsys.readouterr().out
    assert "simclr-rank+full" in out and str(folder / "report" / "best.json") in out


def test_ties_more_seeds_then_alphabetical(sweep) -> None:
    root, _ = sweep
    choices = {
        c["setting"]: c for c in main(SelectConfig(sweep="demo", runs_root=str(root)))["choices"]
    }
    assert choices["frac=0.5"]["model"] == "gbdt-pseudo"  # gbdt ties on vali with 2 seeds
    assert choices["frac=0.5"]["n_seeds"] == 3
    assert choices["frac=1"]["model"] == "simclr-rank+full"  # before simsiam+full


def test_agrees_with_the_reports_group_members(sweep) -> None:
    root, folder = sweep
    from scarce_ltr.reports import results

    rows = results.rows_from_manifest(folder / "manifest.json", [5])
    summary = stats.summarize(rows, k=5, select_k=5)
    for c in main(SelectConfig(sweep=str(folder), runs_root=str(root)))["choices"]:
        assert summary["chosen"][(c["dataset"], c["setting"], c["group"])] == c["model"]


def test_best_json_lists_run_folders_and_bundles(sweep, tmp_path: Path) -> None:
    root, folder = sweep
    run_dir = folder / "synthetic" / "baseline" / "gbdt-pseudo" / "frac=0.5"
    (run_dir / "seed=1" / "bundle").mkdir()
    (run_dir / "seed=1" / "bundle" / "bundle.json").write_text("{}")
    returned = main(SelectConfig(sweep="demo", runs_root=str(root)))
    written = json.loads((folder / "report" / "best.json").read_text())
    assert written == returned and written["select_k"] == 5
    (choice,) = [c for c in written["choices"] if c["setting"] == "frac=0.5"]
    assert [s["seed"] for s in choice["seeds"]] == [0, 1, 2]
    for s in choice["seeds"]:
        assert s["run_dir"] == str(run_dir / f"seed={s['seed']}")
        assert s["bundle"] == str(run_dir / f"seed={s['seed']}" / "bundle")
        assert s["bundle_exists"] is (s["seed"] == 1)
    out = tmp_path / "elsewhere" / "mine.json"
    main(SelectConfig(sweep="demo", runs_root=str(root), out=str(out)))
    assert json.loads(out.read_text())["choices"] == written["choices"]


def test_unknown_sweep_and_bad_config(sweep) -> None:
    root, _ = sweep
    with pytest.raises(UserError, match=r"no sweep 'gamma'.*demo"):
        main(SelectConfig(sweep="gamma", runs_root=str(root)))
    with pytest.raises(ValueError, match="sweep is required"):
        SelectConfig()
    with pytest.raises(ValueError, match="select_k"):
        SelectConfig(sweep="demo", select_k=0)
