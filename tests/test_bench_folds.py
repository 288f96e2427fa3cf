"""The five-fold benchmark helpers (benchmarks/ohsumed_folds.py) and bench_oracle_encoder.py's
options: OHSUMED stays every default, ``--data yandex`` reads the Yandex sweep's folders."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_oracle_encoder  # noqa: E402
import ohsumed_folds  # noqa: E402


def test_units_needed_by_hand() -> None:
    # (1.6449 + 0.8416)^2 * (0.081 / 0.036)^2 = 6.1826 * 5.0625 = 31.30 (OHSUMED's ceiling at 5 %)
    assert ohsumed_folds.units_needed(0.036, 0.081) == pytest.approx(31.30, abs=0.01)
    assert ohsumed_folds.units_needed(0.018, 0.081) == pytest.approx(4 * 31.30, abs=0.05)
    assert ohsumed_folds.units_needed(0.0, 0.081) == math.inf
    assert ohsumed_folds.units_needed(-0.01, 0.081) == math.inf


def test_units_needed_from_students_t() -> None:
    """The fewest n whose one-sided t-test has 80 % power: n - 1 = 32 degrees of freedom,
    t_0.95 = 1.694, noncentrality 0.036 / 0.081 * sqrt(33) = 2.553: power 0.80 (at n = 32,
    2.514: 0.79)."""
    assert ohsumed_folds.units_needed_t(0.036, 0.081) == 33
    assert ohsumed_folds.units_needed_t(0.08, 0.01) == 2  # the approximation says 0.4
    assert ohsumed_folds.units_needed_t(0.0, 0.01) == math.inf
    assert ohsumed_folds.units_needed_t(1e-4, 1.0, most=50) == math.inf


def test_folders_and_jobs_default_to_ohsumed(tmp_path: Path) -> None:
    ohsumed = ohsumed_folds.run_dir(tmp_path, "resnet", 2, 1, 0.05)
    assert ohsumed == tmp_path / "ohsumed/fold=2/baseline/resnet/frac=0.05/seed=1"
    yandex = ohsumed_folds.run_dir(tmp_path, "scratch+full", 3, 0, 0.01, "yandex")
    assert yandex == tmp_path / "yandex/fold=3/finetune/scratch+full/frac=0.01/seed=0"
    assert ohsumed_folds.pretraining(tmp_path, 1, 0, "yandex").parts[-5:] == (
        "yandex", "fold=1", "pretrain", "simclr-rank", "seed=0"
    )  # fmt: skip
    args = ohsumed_folds.finetune_args(4, 2, 0.03, "none", "yandex")
    assert args[:3] == ["finetune", "full", "data=yandex"]
    assert args[3].endswith("/shared/data/yandex-web") and "data.splits.vali=Fold4/vali" in args
    assert ohsumed_folds.finetune_args(4, 2, 0.03, "none")[2:4] == ohsumed_folds.DATA
    assert ohsumed_folds.DATA[1].endswith("/shared/data/ohsumed-letor3")


def test_sweep_command_lists(monkeypatch, tmp_path: Path) -> None:
    """One unit's sweep jobs: the lists given replace the benchmark's; no run.sh (which would
    reinstall into .venv on a changed stamp)."""
    seen = {}
    monkeypatch.setattr(ohsumed_folds.subprocess, "run", lambda c, **kw: seen.update(c=c, **kw))
    monkeypatch.setattr(sys, "argv", ["bench", "--data", "yandex", "--sweep", str(tmp_path)])
    args = bench_oracle_encoder.parse_args()
    ohsumed_folds.run_sweep("yandex-recipe", args, folds=[2], models=["resnet"], fractions=[1.0])
    command = seen["c"]
    assert command[:5] == [sys.executable, "-m", "scarce_ltr", "sweep", "yandex-recipe"]
    assert command[5:] == [
        "folds=[2]", "seeds=[0,1,2]", "fractions=[1]", "models=[resnet]", "logger=none",
        "workers=2", f"run_dir={tmp_path}",
    ]  # fmt: skip
    assert seen["check"] is True


@pytest.mark.parametrize(
    ("argv", "sweep", "fractions", "seeds"),
    [
        ([], "ohsumed-recipe", [0.05, 0.2], [0, 1, 2]),
        (["--data", "yandex"], "yandex-recipe", [0.01, 0.03, 0.1], [0, 1, 2]),
        (["--synthetic"], "quick-scratch", [0.02, 0.1, 0.5], [0, 1, 2, 3, 4, 5]),
        (["--data", "yandex", "--fractions", "0.01", "--seeds", "0"], "yandex-recipe", [0.01], [0]),
    ],
)
def test_oracle_defaults_per_data_set(monkeypatch, argv, sweep, fractions, seeds) -> None:
    monkeypatch.setattr(sys, "argv", ["bench", *argv])
    args = bench_oracle_encoder.parse_args()
    assert (args.sweep.name, args.fractions, args.seeds) == (sweep, fractions, seeds)
    assert args.sweep_name == sweep and args.folds == [1, 2, 3, 4, 5]


def test_oracle_cells_of_yandex(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "argv", ["bench", "--data", "yandex", "--sweep", str(tmp_path / "s")])
    args = bench_oracle_encoder.parse_args()
    root = bench_oracle_encoder.oracle_root(args.sweep)
    assert root == tmp_path / "s-oracle"
    out = bench_oracle_encoder.cell_dir(args, root, "oracle+full", 5, 1, 0.1)
    assert out == root / "yandex/fold=5/finetune/oracle+full/frac=0.1/seed=1"
    job = bench_oracle_encoder.cell_args(args, 5, 1, 0.1, tmp_path / "enc")
    assert "data=yandex" in job and f"pretrained={tmp_path / 'enc'}" in job
    with pytest.raises(SystemExit, match="not finished; run ./run.sh sweep yandex-recipe"):
        bench_oracle_encoder.fully_labeled_resnet(args, 5, 1)


def test_with_sweep_refuses_synthetic(monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", ["bench", "--synthetic", "--with-sweep"])
    with pytest.raises(SystemExit):
        bench_oracle_encoder.parse_args()


def _finished(folder: Path, test: float) -> None:
    folder.mkdir(parents=True)
    metrics = {"test": {"ndcg@5": test}, "vali": {"ndcg@5": test}}
    (folder / "report.json").write_text(json.dumps({"metrics": metrics, "seconds": 1.0}))
    (folder / "DONE").touch()


def test_oracle_report_pairs_the_finished_units(monkeypatch, tmp_path: Path, capsys) -> None:
    """Three of five units finished: the source's mean, the margins over the three, and the units
    a test needs: diffs (0.08, 0.02, 0.08), mean 0.06, sd 0.0346: (2.486 * 0.0346 / 0.06)^2 = 2.06
    for the whole ceiling, 8.2 for half."""
    sweep = tmp_path / "yandex-recipe"
    monkeypatch.setattr(sys, "argv", ["bench", "--data", "yandex", "--sweep", str(sweep),
                                      "--fractions", "0.01", "--seeds", "0"])  # fmt: skip
    args = bench_oracle_encoder.parse_args()
    root = bench_oracle_encoder.oracle_root(sweep)
    for fold, o, s, p in [(1, 0.60, 0.52, 0.53), (2, 0.62, 0.60, 0.58), (3, 0.58, 0.50, 0.50)]:
        _finished(ohsumed_folds.run_dir(sweep, "resnet", fold, 0, 1.0, "yandex"), o + 0.01)
        _finished(ohsumed_folds.run_dir(root, "oracle+full", fold, 0, 0.01, "yandex"), o)
        _finished(ohsumed_folds.run_dir(sweep, "scratch+full", fold, 0, 0.01, "yandex"), s)
        _finished(ohsumed_folds.run_dir(sweep, "simclr-rank+full", fold, 0, 0.01, "yandex"), p)
    bench_oracle_encoder.report(args, [(fold, 0) for fold in range(1, 6)])
    out = capsys.readouterr().out
    assert "(the oracle's source): 0.610 ± 0.020 (n=3)" in out
    assert "| (o) oracle+full | 0.600 ± 0.020 (n=3) |" in out
    assert "| (o) - (s) | the ceiling" in out and "+0.060 ± 0.035" in out and "3/3 > 0" in out
    assert "| (p) - (s) |" in out and "-0.003 ± 0.015" in out
    assert "sd 0.035 over 3 units): 2 for all of it (+0.060), 8 for half " in out
    assert "with Student's t 4 and 10." in out


def _finished_cell(folder: Path, vali: float, test: float, cpu: float) -> None:
    folder.mkdir(parents=True)
    metrics = {"vali": {"ndcg@5": vali}, "test": {"ndcg@5": test}}
    (folder / "report.json").write_text(json.dumps({"metrics": metrics, "seconds": 1.0,
                                                    "cpu_seconds": cpu}))  # fmt: skip
    (folder / "DONE").write_text("")


def test_yandex_hybrid_pairs_each_unit_against_its_vali_best_tree(
    monkeypatch, tmp_path: Path, capsys
) -> None:
    """bench_yandex_hybrid.py: the tree vali picks per unit (not test's best), a unit counted
    only once every single model finished, and vali's pick among the seven."""
    import bench_yandex_hybrid as bench

    sweep = tmp_path / "yandex-hybrid"
    # (vali, test) per model and unit: unit 1's vali-best tree is catboost (test 0.50, below
    # gbdt's 0.60), and vali picks scratch+full there; unit 2 picks xgboost and simclr-rank+full
    values = {
        1: {"gbdt": (0.1, 0.60), "gbdt-optuna": (0.2, 0.55), "catboost": (0.3, 0.50),
            "xgboost": (0.0, 0.40), "resnet": (0.1, 0.52), "scratch+full": (0.4, 0.54),
            "simclr-rank+full": (0.2, 0.56)},
        2: {"gbdt": (0.1, 0.50), "gbdt-optuna": (0.1, 0.50), "catboost": (0.1, 0.50),
            "xgboost": (0.2, 0.52), "resnet": (0.1, 0.49), "scratch+full": (0.2, 0.50),
            "simclr-rank+full": (0.5, 0.53)},
    }  # fmt: skip
    for fold, models in values.items():
        for model, (vali, test) in models.items():
            _finished_cell(bench.cell(sweep, model, fold, 0, 0.01), vali, test, 10.0 * fold)
    bench.cell(sweep, "gbdt", 3, 0, 0.01).mkdir(parents=True)  # unit 3: not finished
    _finished_cell(bench.cell(sweep, bench.TOPK, 1, 0, 0.01), 0.9, 0.58, 1.0)  # unit 1 only
    argv = ["bench", "--sweep", str(sweep), "--seeds", "0", "--fractions", "0.01"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    out = capsys.readouterr().out
    assert "2 unit(s) done" in out
    assert "vali-best tree per unit: catboost, xgboost" in out
    assert "| vali-best tree | 2 | 0.5100 |" in out  # (0.50 + 0.52) / 2
    # scratch+full - that tree: +0.04, -0.02; simclr-rank+full - scratch+full: +0.02, +0.03
    assert "| `scratch+full` | 2 | 0.5200 | 15.0 | +0.010 ± 0.042" in out
    assert "+0.025 ± 0.007" in out
    assert f"| `{bench.TOPK}` | 1 | 0.5800 |" in out  # an ensemble where it finished
    assert "| vali's pick among the seven single models | 2 | 0.5350 |" in out
    assert "among the seven single models, per unit: scratch+full, simclr-rank+full" in out
    assert "| vali's pick among every model | 2 | 0.5550 |" in out  # topk in unit 1
    # the setting's tree: catboost has the best mean vali (0.2); its test 0.50 in both units
    assert (
        "the setting's vali-best tree (mean vali NDCG@5 over the units): `catboost`, test 0.5000"
        in out
    )
    assert "| `scratch+full` | 2 | +0.020 ± 0.028" in out  # +0.04, 0.00
    assert f"| `{bench.TOPK}` | 1 | n < 2 |" in out  # one unit: no margin
    # --taught: a taught network run beside the ten, paired with its untaught twin, and topk:
    # over the eight among vali's picks (the ten's own pick printed beside)
    taught = "scratch+full~catboost"
    for fold, (vali, test) in {1: (0.5, 0.57), 2: (0.1, 0.55)}.items():
        _finished_cell(bench.cell(sweep, taught, fold, 0, 0.01), vali, test, 100.0)
    topk8 = f"{bench.TOPK},{taught}"
    _finished_cell(bench.cell(sweep, topk8, 2, 0, 0.01), 0.6, 0.56, 1.0)  # unit 2 only
    monkeypatch.setattr(sys, "argv", [*argv, "--taught", taught])
    bench.main()
    out = capsys.readouterr().out
    assert f"| `{taught}` | 2 | 0.5600 | 100.0 | +0.050 ± 0.028" in out  # +0.07, +0.03
    assert "| +0.040 ± 0.014" in out  # minus scratch+full: +0.03, +0.05
    assert f"| `{topk8}` | 1 | 0.5600 |" in out
    assert "| vali's pick among the sweep config's ten | 2 | 0.5550 |" in out
    assert "| vali's pick among every model | 2 | 0.5700 |" in out  # topk, then topk over eight


def test_yandex_teachers_pairs_each_student_with_its_untaught_twin(
    monkeypatch, tmp_path: Path, capsys
) -> None:
    """bench_yandex_teachers.py: a taught model against the same model untaught over the units
    both finished, then against the teacher tree."""
    import bench_yandex_teachers as bench

    sweep = tmp_path / "yandex-teachers"
    # test NDCG@5 per model and unit; unit 3 has no taught run
    values = {
        1: {"gbdt-optuna": 0.50, "scratch+full": 0.52, "scratch+full~gbdt-optuna": 0.55},
        2: {"gbdt-optuna": 0.48, "scratch+full": 0.50, "scratch+full~gbdt-optuna": 0.51},
        3: {"gbdt-optuna": 0.49, "scratch+full": 0.40},
    }
    for fold, models in values.items():
        for model, test in models.items():
            stage = "finetune" if "+" in model else "baseline"  # where the sweep writes them
            _finished(sweep / f"yandex/fold={fold}/{stage}/{model}/frac=0.01/seed=0", test)
    argv = ["bench", "--sweep", str(sweep), "--seeds", "0", "--folds", "1", "2", "3"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    out = capsys.readouterr().out
    # taught - untaught over units 1 and 2: +0.03, +0.01
    assert "| `scratch+full~gbdt-optuna` - `scratch+full` | 2 | 0.5300 | +0.020 ± 0.014" in out
    assert "| `scratch+full~self` - `scratch+full` | 0 |" in out
    # scratch+full - the tree over all three units: +0.02, +0.02, -0.09
    assert "| `scratch+full` | 3 | 0.4733 | -0.017 ± 0.064" in out


def test_yandex_augmentations_pairs_each_variant_with_the_control_sweeps_scratch(
    monkeypatch, tmp_path: Path, capsys
) -> None:
    """bench_yandex_augmentations.py: a variant searched alone is paired with the searched
    scratch+full of --control (the sweep has none), and vali picks the variant per unit."""
    import bench_yandex_augmentations as bench

    sweep, control = tmp_path / "yandex-augmentations", tmp_path / "yandex-hybrid"
    plain, flags = "simsiam@zero0.1+full", "simsiam@zero0.1-flags0.6+full"
    # (vali, test): unit 1 vali picks the flags variant (test 0.50), unit 2 the plain one (0.57)
    values = {
        1: {plain: (0.3, 0.58), flags: (0.4, 0.50), "scratch+full": (0.2, 0.52)},
        2: {plain: (0.5, 0.57), flags: (0.1, 0.60), "scratch+full": (0.2, 0.50)},
    }
    for fold, models in values.items():
        for model, (vali, test) in models.items():
            where = control if model == "scratch+full" else sweep
            folder = where / f"yandex/fold={fold}/finetune/{model}/frac=0.01/seed=0"
            _finished_cell(folder, vali, test, 1.0)
    argv = ["bench", "--sweep", str(sweep), "--control", str(control), "--seeds", "0"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    out = capsys.readouterr().out
    assert f"2 units, from {control}" in out
    assert f"| `{plain}` | 2 | 0.5750 | +0.065 ± 0.007" in out  # +0.06, +0.07
    assert f"| `{flags}` | 2 | 0.5500 | +0.040 ± 0.085" in out  # -0.02, +0.10
    assert "| SimSiam, zeroing 0.1: the variant vali picks per unit | 2 | 0.5350 | +0.025" in out
    assert "SimCLR-Rank" not in out  # none of its variants ran


def test_vali_choice_picks_per_unit_where_every_variant_ran() -> None:
    """bench_flags_screen.vali_choice, shared by the flag screen and the searched readout: the
    highest vali per unit, the first listed on a tie, and no pick where a variant is missing."""
    from bench_flags_screen import vali_choice

    plain = {(1, 0): (0.50, 0.3), (2, 0): (0.60, 0.2), (3, 0): (0.70, 0.1)}
    flags = {(1, 0): (0.40, 0.4), (2, 0): (0.90, 0.2)}  # unit 2: a tie on vali
    assert vali_choice(plain, flags) == {(1, 0): (0.40, 0.4), (2, 0): (0.60, 0.2)}


def test_released_ablation_pairs_with_scratch_and_with_the_released_recipe(
    monkeypatch, tmp_path: Path, capsys
) -> None:
    """bench_released_ablation.py: each pretraining against scratch+full, and each variant that
    takes one difference back against simclr@released+full itself."""
    import bench_released_ablation as bench

    sweep = tmp_path / "yandex-released"
    released, noise = "simclr@released+full", "simclr@released-noise+full"
    values = {1: {"scratch+full": 0.50, released: 0.53, noise: 0.49},
              2: {"scratch+full": 0.52, released: 0.54, noise: 0.51}}  # fmt: skip
    for fold, models in values.items():
        for model, test in models.items():
            folder = sweep / f"yandex/fold={fold}/finetune/{model}/frac=0.01/seed=0"
            _finished_cell(folder, test, test, 1.0)
    monkeypatch.setattr(sys, "argv", ["bench", "--sweep", str(sweep), "--seeds", "0"])
    bench.main()
    out = capsys.readouterr().out
    assert f"| `{released}` | 2 | 0.5350 | +0.025 ± 0.007" in out  # +0.03, +0.02
    assert f"| `{noise}` | 2 | 0.5000 | -0.010 ± 0.000" in out
    assert f"same-QG swaps p 0.8 (`{noise}`) | 2 | 0.5000 | -0.035 ± 0.007" in out
    assert "| `simclr-rank@noise1+full` | 0 |" in out  # not run: listed, empty


def test_pool_candidates_pair_each_use_with_its_control_and_the_ceiling(
    monkeypatch, tmp_path: Path, capsys
) -> None:
    """bench_pool_candidates.py: a joint run of its own sweep is paired with the released
    screen's scratch+full, and its share of --ceiling is its mean margin over the ceiling."""
    import bench_pool_candidates as bench

    for fold, (scratch, joint) in {1: (0.50, 0.54), 2: (0.52, 0.54)}.items():
        cells = {("yandex-released", "scratch+full"): scratch,
                 ("yandex-joint", "simclr@released+full"): joint}  # fmt: skip
        for (sweep, model), test in cells.items():
            folder = tmp_path / sweep / f"yandex/fold={fold}/finetune/{model}/frac=0.01/seed=0"
            _finished_cell(folder, test, test, 1.0)
    argv = ["bench", "--runs", str(tmp_path), "--ceiling", "0.06"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    out = capsys.readouterr().out
    assert "yandex-joint) | 2 | 0.5400 | +0.030 ± 0.014" in out and "| +50% |" in out
    assert "against yandex-hybrid's scratch+full (0 units)" in out


def test_sweep_pairs_pools_the_units_of_two_data_sets(monkeypatch, tmp_path: Path, capsys) -> None:
    """bench_sweep_pairs.py with a --sweep and --data each: every setting named with its data set,
    and --pooled pairs the units of both (2 + 1 here) in one margin."""
    import bench_sweep_pairs as bench

    yandex, ohsumed = tmp_path / "yandex-hybrid", tmp_path / "ohsumed-search"
    # (data set's sweep, fold): (the model's test, the base's test); margins +0.02, +0.04, -0.03
    units = {(yandex, "yandex", 1): (0.52, 0.50), (yandex, "yandex", 2): (0.54, 0.50),
             (ohsumed, "ohsumed", 1): (0.40, 0.43)}  # fmt: skip
    for (sweep, data, fold), (test, base_test) in units.items():
        for model, value in (("tabm+full", test), ("scratch+full", base_test)):
            folder = sweep / f"{data}/fold={fold}/finetune/{model}/frac=0.05/seed=0"
            _finished_cell(folder, 0.5, value, 1.0)
    argv = ["bench", "--sweep", str(yandex), "--data", "yandex", "--sweep", str(ohsumed),
            "--data", "ohsumed", "--pooled"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    out = capsys.readouterr().out
    assert "### yandex frac=0.05, against `scratch+full`" in out
    assert "| `tabm+full` | 2 | 0.5300 | +0.030 ± 0.014" in out
    assert "### ohsumed frac=0.05, against `scratch+full`" in out
    assert "| `tabm+full` | ohsumed frac=0.05, yandex frac=0.05 | 3 | +0.010 ± 0.036" in out

    monkeypatch.setattr(sys, "argv", [*argv[:5], "--sweep", str(ohsumed)])  # 2 sweeps, 1 --data
    bench.main()
    assert "### frac=0.05" in capsys.readouterr().out  # one data set: settings unprefixed
    monkeypatch.setattr(sys, "argv", [*argv[:4], "--data", "x", "--data", "y", "--data", "z"])
    with pytest.raises(SystemExit):  # three --data for one --sweep
        bench.main()
