"""Error messages point the right way: only the advice that applies, and advice that works when
followed (the README's Reliability table)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny import tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError

GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=5", "logger=none"]


def _letor(folder: Path, *, zero_labels: tuple[str, ...] = ()) -> Path:
    """4 QGs of 4 items per split, 3 features; the splits named in ``zero_labels`` all 0."""
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "vali", "test"):
        lines = [
            f"{0 if split in zero_labels else i % 3} qid:{q} 1:{q * 0.5 + i} "
            f"2:{(q * 7 + i * 3) % 5} 3:{i * 1.5}"
            for q in range(1, 5)
            for i in range(4)
        ]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return folder


@pytest.mark.parametrize("split", ["train", "vali"])
def test_a_split_whose_labels_are_all_zero_is_named_without_dead_end_advice(
    split, tmp_path
) -> None:
    data = _letor(tmp_path / "data", zero_labels=(split,))
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
    assert "labeled vali QGs of the vali split and none has a relevant item" in message
    assert message.endswith("use scarcity.val=full, raise scarcity.fraction or change seed")


def test_combine_over_a_baseline_run_says_it_takes_finetuned_runs(tmp_path) -> None:
    gbdt = tmp_path / "gbdt"
    run(["baseline", "gbdt", *tiny_data(), *GBDT, f"run_dir={gbdt}"])
    args = ["finetune", "combine", *tiny_data(), "logger=none", f"runs=[{gbdt},{gbdt}]"]
    with pytest.raises(UserError, match=r"a baseline run \(gbdt\); combine takes finetuned runs"):
        run([*args, f"run_dir={tmp_path / 'combined'}"])
