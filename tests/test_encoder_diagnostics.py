"""benchmarks/bench_encoder_diagnostics.py: linear CKA and the ridge probe on hand-checkable
cases, the reading rule, and the script end to end on a mocked folded sweep (tiny encoders saved
as the pretraining stage saves them, finetuning runs whose config.yaml names tiny synthetic
data)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_encoder_diagnostics as bench  # noqa: E402

from scarce_ltr.finetune.model import Ranker, head_on, ranker_spec, save_model  # noqa: E402
from scarce_ltr.pretrain.checkpoint import save_encoder  # noqa: E402
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder  # noqa: E402


def test_linear_cka_by_hand() -> None:
    """The docstring's example: one column each, CKA is the squared correlation."""
    x, y = np.array([[1.0], [2.0], [3.0]]), np.array([[2.0], [4.0], [7.0]])
    assert bench.linear_cka(x, y) == pytest.approx(np.corrcoef(x[:, 0], y[:, 0])[0, 1] ** 2)
    assert bench.linear_cka(x, y) == pytest.approx(0.9868, abs=1e-4)
    assert np.isnan(bench.linear_cka(x, np.ones((3, 2))))  # a constant side


def test_linear_cka_invariances() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 8))
    y = x @ rng.normal(size=(8, 5)) + 0.5 * rng.normal(size=(200, 5))
    assert bench.linear_cka(x, x) == pytest.approx(1.0)
    rotation, _ = np.linalg.qr(rng.normal(size=(8, 8)))
    assert bench.linear_cka(x @ rotation * 3.7 + 5.0, x) == pytest.approx(1.0)
    assert bench.linear_cka(x @ rotation * 0.2, y) == pytest.approx(bench.linear_cka(x, y))
    assert bench.linear_cka(x, y) == pytest.approx(bench.linear_cka(y, x))
    independent = bench.linear_cka(x, rng.normal(size=(200, 5)))
    assert independent < 0.1 < bench.linear_cka(x, y)


def _groups(rng, n_groups: int, size: int, width: int) -> bench.Items:
    """Graded labels 0..3 in dimension 0 of the embeddings, noise in the others."""
    labels = rng.integers(0, 4, size=n_groups * size).astype(np.float32)
    x = rng.normal(size=(n_groups * size, width))
    x[:, 0] = 0.5 * labels
    return x, labels, np.arange(0, n_groups * size + 1, size)


def test_between_qg_share_by_hand_and_at_its_ends() -> None:
    offsets = np.array([0, 2, 4])
    assert bench.between_qg_share(np.array([[0.0], [2.0], [10.0], [12.0]]), offsets) == 100 / 104
    same_means = np.array([[0.0, 1.0], [2.0, -1.0], [0.0, 1.0], [2.0, -1.0]])
    assert bench.between_qg_share(same_means, offsets) == 0.0
    coinciding = np.array([[3.0], [3.0], [-1.0], [-1.0]])
    assert bench.between_qg_share(coinciding, offsets) == pytest.approx(1.0)


def test_within_qg_by_hand() -> None:
    """The docstring's example; an empty QG takes no rows and shifts nothing."""
    x = np.array([[0.0], [2.0], [10.0], [13.0]])
    assert bench.within_qg(x, np.array([0, 2, 4])).tolist() == [[-1.0], [1.0], [-1.5], [1.5]]
    assert bench.within_qg(x, np.array([0, 2, 2, 4])).tolist() == [[-1.0], [1.0], [-1.5], [1.5]]
    # A side that only says which QG an item is in has nothing within QGs: CKA NaN there.
    by_group = np.array([[1.0], [1.0], [5.0], [5.0]])
    assert np.isnan(bench.linear_cka(bench.within_qg(by_group, np.array([0, 2, 4])), x))


def test_probe_reads_a_linear_label() -> None:
    """The label is a linear function of one embedding dimension: NDCG@5 = 1 on vali and test;
    a probe on pure noise does not reach it."""
    rng = np.random.default_rng(1)
    train, vali, test = (_groups(rng, n, 8, 6) for n in (20, 10, 10))
    probe = bench.linear_probe(train[:2], vali, test)
    assert probe["vali"] == pytest.approx(1.0) and probe["test"] == pytest.approx(1.0)
    assert probe["alpha"] in bench.ALPHAS
    noise = rng.normal(size=train[0].shape)
    blind = bench.linear_probe((noise, train[1]), vali, test)
    assert blind["test"] < 0.95
    nan = bench.linear_probe((np.full_like(noise, np.nan), train[1]), vali, test)
    assert np.isnan(nan["test"])


def test_direction_and_reading() -> None:
    up = {1: 0.6, 2: 0.7, 3: 0.65}
    base = {1: 0.5, 2: 0.52, 3: 0.51}
    assert bench.direction(up, base) == "up" and bench.direction(base, up) == "down"
    assert bench.direction({1: 0.5, 2: 0.6}, {1: 0.55, 2: 0.55}) == "level"
    assert bench.direction({1: 0.6}, {1: 0.5}) is None
    assert bench.reading("level", "level", "level").startswith("learned nothing")
    assert bench.reading("level", None, "up").endswith(", yet finetuning pays")
    assert bench.reading("down", "level", "down") == (
        "below the random init (probe or CKA down); finetuning costs"
    )
    assert bench.reading("up", "level", "level") == "learned something the labels do not use"
    assert bench.reading("level", "up", "down").endswith("(finetuning costs)")
    assert bench.reading("level", "up", "up") == "closer to the oracle and pays"
    assert bench.reading("up", "level", "up") == "a linear signal that pays"
    assert bench.reading(None, None, None) == "too few units to read"


TINY = {"n_train_groups": 30, "n_vali_groups": 10, "n_test_groups": 10, "n_features": 12}
ARCH = EncoderConfig(width=8, hidden=16, n_blocks=1)


def _encoder(folder: Path, seed: int, method: str) -> None:
    torch.manual_seed(seed)
    save_encoder(folder, build_encoder(ARCH, n_features=12), method=method, n_features=12,
                 encoder_config=ARCH, data={"name": "synthetic", "transform": "standardize"},
                 epochs=1)  # fmt: skip


def _finetuned(folder: Path, seed: int, test: float, encoder_seed: int | None = None) -> None:
    """A finished full finetuning; with ``encoder_seed`` its ``model.pt``, whose encoder is the
    one `_encoder` saves with that seed (the finetuning left it as it started)."""
    folder.mkdir(parents=True)
    if encoder_seed is not None:
        torch.manual_seed(encoder_seed)
        encoder = build_encoder(ARCH, n_features=12)
        model = Ranker(encoder=encoder, head=head_on(encoder, "linear", hidden=4, dropout=0.0))
        spec = ranker_spec(n_features=12, encoder=ARCH, head="linear", hidden=4, dropout=0.0)
        save_model(folder, model, spec=spec, data={"n_features": 12}, source={})
    config = {"data": {"name": "synthetic", "synthetic": TINY}, "seed": seed, "logger": "none",
              "scarcity": {"fraction": 0.2, "val": "full"}}  # fmt: skip
    (folder / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    metrics = {"test": {"ndcg@5": test}, "vali": {"ndcg@5": test}}
    (folder / "report.json").write_text(json.dumps({"metrics": metrics, "seconds": 1.0}))
    (folder / "DONE").touch()


def test_end_to_end_on_a_mocked_folded_sweep(monkeypatch, tmp_path: Path, capsys) -> None:
    """Two folds x two seeds; ``copy`` holds the oracle's weights (CKA 1, the oracle's probe)
    and its finetuning beats scratch+full in every unit; ``other@v1`` is another random
    encoder. Without the oracle, its row and the CKA are blank and the command is printed."""
    sweep, oracle_sweep = tmp_path / "yandex-x", tmp_path / "yandex-recipe"
    oracle_root = tmp_path / "yandex-recipe-oracle"
    for fold in (1, 2):
        for seed in (0, 1):
            place = sweep / "yandex" / f"fold={fold}"
            oracle = oracle_root / f"yandex/fold={fold}/encoder-seed={seed}/oracle"
            _encoder(oracle, 100 + seed, "oracle")
            _encoder(place / f"pretrain/copy/seed={seed}", 100 + seed, "copy")
            _encoder(place / f"pretrain/other@v1/seed={seed}", 200 + seed, "other")
            for model, test, start in [("scratch+full", 0.5, seed), ("copy+full", 0.6, 100 + seed),
                                       ("other@v1+full", 0.5, None)]:  # fmt: skip
                test += 0.01 * (fold + 2 * seed) * (model != "scratch+full")
                _finetuned(place / f"finetune/{model}/frac=0.2/seed={seed}", seed, test, start)
            _finetuned(oracle_root / f"yandex/fold={fold}/finetune/oracle+full/frac=0.2/"
                       f"seed={seed}", seed, 0.7 + 0.01 * seed)  # fmt: skip
            # --label-trained's network on the unit's labels: the oracle's weights again
            _finetuned(oracle_sweep / f"yandex/fold={fold}/baseline/resnet/frac=0.2/seed={seed}",
                       seed, 0.65 + 0.01 * fold, 100 + seed)  # fmt: skip
    argv = ["bench", "--sweep", str(sweep), "--oracle-sweep", str(oracle_sweep), "--folds",
            "1", "2", "--seeds", "0", "1", "--fraction", "0.2", "--cka-items", "50",
            "--label-trained"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    out = capsys.readouterr().out
    assert "4 (fold, seed) units" in out and "No oracle encoder" not in out
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in out.splitlines()
            if line.startswith("| ") and "---" not in line}  # fmt: skip
    oracle_row = "oracle (resnet, frac=1)"
    labels_row = "`resnet` on the unit's labels"
    assert list(rows) == ["encoder", "random init", "`copy`", "`other@v1`", labels_row, oracle_row]
    labels = rows[labels_row]
    assert labels[5] == "0.665 ± 0.006" and labels[9] == "1.000 ± 0.000" and labels[11] == ""
    assert labels[15] == "what the labels alone teach a fresh network |"
    copy, oracle, random = rows["`copy`"], rows[oracle_row], rows["random init"]
    assert copy[1] == "4" and copy[7] == "1.000 ± 0.000" and copy[2] == oracle[2]
    # Within QGs too, and after its finetuning (model.pt holds the oracle's weights); the random
    # init's finetuned column is scratch+full's encoder, the fresh one; other@v1 has no model.pt.
    assert copy[9] == "1.000 ± 0.000" and copy[11] == "1.000 ± 0.000" and "4/4 > 0" in copy[12]
    assert random[11] == random[9] != "" and rows["`other@v1`"][11] == ""
    assert copy[5] == "0.625 ± 0.013" and oracle[5] == "0.705 ± 0.006"
    assert random[5] == "0.500 ± 0.000" and random[15] == "the reference |"
    assert "4/4 > 0" in copy[6] and copy[15].startswith("closer to the oracle and pays")
    assert oracle[15] == "has seen every train label |" and oracle[8] == oracle[10] == ""
    # The random init: the pretrainings' architecture and seed (torch.manual_seed, then
    # build_encoder), as pretraining draws its own starting point.
    encoders = bench.unit_encoders(bench_args(argv, monkeypatch), 1, 0, ["copy"])
    torch.manual_seed(0)
    fresh = build_encoder(ARCH, n_features=12).state_dict()
    assert all(torch.equal(v, fresh[k]) for k, v in encoders["random init"][0].state_dict().items())
    # Without the oracle: blank oracle columns and the command that trains it.
    empty = tmp_path / "nothing"
    argv = [*argv[:3], "--oracle-sweep", str(empty), *argv[5:-1], "--models", "copy"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    out = capsys.readouterr().out
    assert f"No oracle encoder in {empty}" in out
    assert "benchmarks/bench_oracle_encoder.py --data yandex --with-sweep" in out
    assert "| oracle" not in out and "other@v1" not in out
    copy = next(line for line in out.splitlines() if line.startswith("| `copy`")).split(" | ")
    assert copy[7] == "" and copy[5] == "0.625 ± 0.013"


def bench_args(argv: list[str], monkeypatch):
    monkeypatch.setattr(sys, "argv", argv)
    return bench.parse_args()
