"""Error messages point the right way: only the advice that applies, and advice that works when
followed (the README's Reliability table)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny import letor_folder, tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError

GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=5", "logger=none"]


@pytest.mark.parametrize("split", ["train", "vali"])
def test_a_split_whose_labels_are_all_zero_is_named_without_dead_end_advice(
    split, tmp_path
) -> None:
    data = letor_folder(tmp_path / "data", zero_labels=(split,))
    args = ["baseline", "gbdt", "data=letor", f"data.path={data}", "data.outliers.method=none"]
    with pytest.raises(UserError) as error:
        run([*args, *GBDT, f"run_dir={tmp_path / 'run'}"])
    message = str(error.value)
    assert f"every label of {data / (split + '.txt')} is 0" in message
    assert "none of its 4 QGs has a relevant item" in message
    # scarcity.fraction is 1 already, and no seed draws other labels: neither is advised.
    assert "scarcity.fraction" not in message and "seed" not in message


def test_a_small_label_fraction_advises_what_can_be_changed(tmp_path) -> None:
    args = ["baseline", "gbdt", *tiny_data(), "scarcity.fraction=0.01", "scarcity.val=same"]
    with pytest.raises(UserError) as error:
        # 1 labeled QG of 10 vali QGs, and the seed's draw has no relevant item in it.
        for seed in range(20):
            run([*args, *GBDT, f"seed={seed}", f"run_dir={tmp_path / str(seed)}"])
    message = str(error.value)
    assert "labeled vali QGs and none has a relevant item (the vali split)" in message
    assert message.endswith("use scarcity.val=full, raise scarcity.fraction or change seed")


def test_combine_over_a_baseline_run_says_it_takes_finetuned_runs(tmp_path) -> None:
    gbdt = tmp_path / "gbdt"
    run(["baseline", "gbdt", *tiny_data(), *GBDT, f"run_dir={gbdt}"])
    args = ["finetune", "combine", *tiny_data(), "logger=none", f"runs=[{gbdt},{gbdt}]"]
    with pytest.raises(UserError, match=r"a baseline run \(gbdt\); combine takes finetuned runs"):
        run([*args, f"run_dir={tmp_path / 'combined'}"])


# --- the advice, followed ---------------------------------------------------------------------


def test_following_the_all_zero_labels_advice_trains(tmp_path) -> None:
    data = letor_folder(tmp_path / "data", zero_labels=("train",))
    args = ["baseline", "gbdt", "data=letor", f"data.path={data}", "data.outliers.method=none",
            *GBDT, f"run_dir={tmp_path / 'run'}"]  # fmt: skip
    with pytest.raises(UserError, match="relevant items need a label above 0"):
        run(args)
    letor_folder(data)  # the advice: graded labels in the first column
    run(args)  # the same command, the same run folder
    assert (tmp_path / "run" / "DONE").is_file()


def test_following_the_label_fraction_advice_trains(tmp_path) -> None:
    args = ["baseline", "gbdt", *tiny_data(), *GBDT, "scarcity.fraction=0.01"]
    for seed in range(20):
        try:
            run([*args, "scarcity.val=same", f"seed={seed}", f"run_dir={tmp_path / str(seed)}"])
        except UserError as error:
            assert "use scarcity.val=full" in str(error)
            break
    else:
        pytest.fail("no seed left the labeled vali QG without a relevant item")
    run([*args, "scarcity.val=full", f"seed={seed}", f"run_dir={tmp_path / 'full'}"])
    assert (tmp_path / "full" / "DONE").is_file()


def test_following_the_combine_advice_mixes_the_runs(tmp_path) -> None:
    gbdt, pca = tmp_path / "gbdt", tmp_path / "pca"
    run(["baseline", "gbdt", *tiny_data(), *GBDT, f"run_dir={gbdt}"])
    run(["baseline", "gbdt-pca", *tiny_data(), *GBDT, "gbdt.pca_components=[3]",
         f"run_dir={pca}"])  # fmt: skip
    args = [*tiny_data(), "logger=none", f"runs=[{gbdt},{pca}]"]
    with pytest.raises(UserError, match=r"with ./run.sh ensemble runs=\[\.\.\.\]"):
        run(["finetune", "combine", *args, f"run_dir={tmp_path / 'combined'}"])
    run(["ensemble", *args, f"run_dir={tmp_path / 'ensemble'}"])  # the advice
    assert (tmp_path / "ensemble" / "DONE").is_file()


def test_following_the_positional_advice_predicts(tmp_path) -> None:
    folder = tmp_path / "gbdt" / "frac=1" / "seed=0"
    run(["baseline", "gbdt", *tiny_data(), *GBDT, f"run_dir={folder}"])
    data = _tiny_test_file(tmp_path / "test.txt")
    both = ["predict", str(folder), f"run={folder}", f"data.path={data}"]
    with pytest.raises(UserError, match="give one"):
        run(both)
    run([*both[:2], *both[3:], f"out={tmp_path / 'scores.csv'}"])  # the positional one only
    assert (tmp_path / "scores.csv").read_text().startswith("qid,position,score,rank")


def test_a_stray_file_error_advises_the_commands_own_key(tmp_path, monkeypatch, capsys) -> None:
    """An `OSError` no layer named reaches the CLI: predict and export write where ``out=``
    says, so the advice names ``out=``, never ``run_dir=``."""
    import sys

    from scarce_ltr import cli
    from scarce_ltr.serving import predict

    def refused(cfg, out_dir):
        raise PermissionError(13, "Permission denied", str(tmp_path / "scores.csv"))

    monkeypatch.setattr(predict, "main", refused)
    args = ["predict", str(tmp_path / "frac=1" / "seed=0"), f"data.path={tmp_path / 'x.txt'}"]
    monkeypatch.setattr(sys, "argv", ["scarce-ltr", *args])
    with pytest.raises(SystemExit) as stop:
        cli.main()
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "give out=<a folder you may write to>" in err
    assert "run_dir" not in err


def test_a_finetuning_checkpoint_with_a_relative_data_path_resumes(tmp_path, monkeypatch) -> None:
    """Earlier versions stored ``data.path`` as typed; configs store it absolute now."""
    import json

    from scarce_ltr.finetune.run_settings import check_identity

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    old = json.dumps({"data": {"path": "data/"}, "lrs": [1e-3]}, sort_keys=True)
    new = json.dumps({"data": {"path": str(tmp_path / "data")}, "lrs": [1e-3]}, sort_keys=True)
    check_identity(tmp_path / "run", old, new)  # the same folder: the same run
    other = new.replace("0.001", "0.002")
    with pytest.raises(UserError, match=r"other settings \(lrs differ\)"):
        check_identity(tmp_path / "run", old, other)


def _tiny_test_file(path: Path) -> Path:
    from scarce_ltr.core.config import load_config
    from scarce_ltr.data.datasets import load_dataset
    from scarce_ltr.data.letor import write_letor
    from scarce_ltr.data.stage_config import CommonConfig

    cfg, _ = load_config(CommonConfig, tiny_data())
    write_letor(load_dataset(cfg.data)["test"], path, precision=9)
    return path


def test_following_the_two_inputs_for_one_csv_advice_predicts(tmp_path) -> None:
    import gzip

    model = tmp_path / "gbdt"
    run(["baseline", "gbdt", *tiny_data(), *GBDT, f"run_dir={model}"])
    data = tmp_path / "data"
    data.mkdir()
    plain = _tiny_test_file(data / "test.txt")
    (data / "test.txt.gz").write_bytes(gzip.compress(plain.read_bytes()))
    args = ["predict", str(model), f"out={tmp_path / 'out'}"]
    with pytest.raises(UserError, match=r"give data.path=<one file>"):
        run([*args, f"data.path={data}"])
    run([*args, f"data.path={plain}"])  # the advice
    assert (tmp_path / "out" / "test.csv").is_file()


def test_following_the_other_settings_advice_trains(tmp_path) -> None:
    folder = tmp_path / "run"
    run(["baseline", "gbdt", *tiny_data(), *GBDT, f"run_dir={folder}"])
    other = ["baseline", "gbdt", *tiny_data(), *GBDT, "seed=1"]
    with pytest.raises(UserError, match=r"give run_dir=<another folder>"):
        run([*other, f"run_dir={folder}"])
    run([*other, f"run_dir={tmp_path / 'another'}"])  # the advice
    assert (tmp_path / "another" / "DONE").is_file() and (folder / "DONE").is_file()


def test_a_folder_where_a_split_file_belongs_is_named(tmp_path) -> None:
    data = letor_folder(tmp_path / "data")
    (data / "train.txt").unlink()
    (data / "train").mkdir()
    args = ["baseline", "gbdt", "data=letor", f"data.path={data}", *GBDT]
    with pytest.raises(UserError, match=r"data/train is a folder; a LETOR file .* is expected"):
        run([*args, f"run_dir={tmp_path / 'run'}"])
