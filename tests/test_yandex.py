"""The Yandex presets (``data=yandex``: five folds; ``data=yandex-original``: the published split,
its vali carved from train by ``data.vali_from_train``) on ../shared/data, and the carve itself on
tiny files: seeded, disjoint, refused beside a vali file."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.datasets import check_files, load_dataset
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.sweeps.settings import fold_overrides

ROOT = Path(__file__).resolve().parents[1]
YANDEX = ROOT.parent / "shared" / "data" / "yandex-web"
needs_yandex = pytest.mark.skipif(
    not (YANDEX / "Fold1" / "train.txt.gz").is_file(),
    reason=f"the Yandex web-search data is not at {YANDEX} (../shared/data/README.md)",
)


def _data(*overrides: str):
    return load_config(CommonConfig, list(overrides))[0].data


@needs_yandex
def test_yandex_preset_reads_fold1_and_every_fold_has_its_files():
    splits = load_dataset(_data("data=yandex", f"data.path={YANDEX}"))
    counts = {s: (splits[s].n_groups, splits[s].n_items) for s in splits}
    assert counts == {"train": (2001, 36597), "vali": (667, 10964), "test": (666, 11500)}
    assert {s.n_features for s in splits.values()} == {50}
    labels, n = np.unique(splits["train"].labels, return_counts=True)
    assert dict(zip(labels.tolist(), n.tolist(), strict=True)) == {
        0: 19120, 1: 6753, 2: 10006, 3: 580, 4: 138
    }  # fmt: skip
    sweep = SimpleNamespace(folds=[1, 2, 3, 4, 5], overrides=SimpleNamespace(common=[]))
    folds = fold_overrides(sweep, "yandex")
    assert folds[3] == [
        "data.splits.train=Fold3/train",
        "data.splits.vali=Fold3/vali",
        "data.splits.test=Fold3/test",
    ]
    for overrides in folds.values():  # each fold's three files are there
        check_files(_data("data=yandex", f"data.path={YANDEX}", *overrides))


@needs_yandex
def test_yandex_original_carves_a_seeded_disjoint_vali(capsys):
    path = f"data.path={YANDEX / 'original'}"
    splits = load_dataset(_data("data=yandex-original", path))
    train, vali, test = splits["train"], splits["vali"], splits["test"]
    assert (train.n_groups, vali.n_groups, test.n_groups) == (533, 133, 2668)
    assert not set(train.qids.tolist()) & set(vali.qids.tolist())
    assert len(set(train.qids.tolist()) | set(vali.qids.tolist())) == 666
    again = load_dataset(_data("data=yandex-original", path))["vali"]
    assert np.array_equal(again.qids, vali.qids) and np.array_equal(again.features, vali.features)
    other = load_dataset(_data("data=yandex-original", path, "data.vali_from_train.seed=1"))
    assert not np.array_equal(other["vali"].qids, vali.qids)
    run(["data-info", "data=yandex-original", path])
    out = capsys.readouterr().out
    assert "vali: carved from train (data.vali_from_train: fraction 0.2, seed 0): 133 of" in out
    assert "test                    2668     46596" in out


def _tiny_folder(root: Path, *, vali: bool = False) -> Path:
    for split, n_qgs in (("train", 20), ("test", 4), *((("vali", 4),) if vali else ())):
        lines = [f"{q % 3} qid:{q} 1:{q / 10:g} 2:{q % 2}" for q in range(n_qgs) for _ in range(3)]
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return root


def test_vali_from_train_is_seeded_disjoint_and_keeps_file_order(tmp_path):
    folder = _tiny_folder(tmp_path)
    carve = ["data=letor", f"data.path={folder}", "data.splits.vali=null"]
    splits = load_dataset(_data(*carve, "data.vali_from_train.fraction=0.25"))
    train, vali = splits["train"], splits["vali"]
    assert (train.n_groups, vali.n_groups) == (15, 5) and vali.name == "vali"
    assert sorted([*train.qids, *vali.qids]) == list(range(20))
    assert list(vali.qids) == sorted(vali.qids) and list(train.qids) == sorted(train.qids)
    assert np.array_equal(vali.features[:, 0], np.repeat(vali.qids / 10, 3).astype(np.float32))
    same = load_dataset(_data(*carve, "data.vali_from_train.fraction=0.25"))["vali"]
    assert np.array_equal(same.qids, vali.qids)
    seeded = load_dataset(
        _data(*carve, "data.vali_from_train.fraction=0.25", "data.vali_from_train.seed=7")
    )
    assert not np.array_equal(seeded["vali"].qids, vali.qids)


def test_vali_from_train_is_refused_beside_a_vali_file(tmp_path):
    folder = _tiny_folder(tmp_path, vali=True)
    base = ["data=letor", f"data.path={folder}"]
    with pytest.raises(UserError, match=r"carves vali .*data\.splits\.vali=vali names a vali"):
        _data(*base, "data.vali_from_train.fraction=0.2")
    with pytest.raises(UserError, match=r"data\.splits\.vali is null .*vali_from_train"):
        _data(*base, "data.splits.vali=null")
    with pytest.raises(UserError, match=r"vali_from_train\.fraction must be in \(0, 1\)"):
        _data(*base, "data.splits.vali=null", "data.vali_from_train.fraction=1.0")


def test_folds_need_fold_folders_also_without_a_vali_file():
    sweep = SimpleNamespace(folds=[1, 2], overrides=SimpleNamespace(common=[]))
    with pytest.raises(UserError, match=r"train, test names no Fold<n> folder"):
        fold_overrides(sweep, "yandex-original")
