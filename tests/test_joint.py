"""Joint semi-supervised finetuning (`finetune.joint`, ``joint.*``): off is bit-identical, the
loss learns, is padding-free and seeded, same-grade donors, resume, end-to-end runs (fresh and
pretrained encoders, a run and the student itself as graders), refusals, a sweep's override."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from test_finetune_units import run_fit
from tiny import small_encoder, tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.device import setup_runtime
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.finetune import loop
from scarce_ltr.finetune.config import FinetuneConfig, Phase
from scarce_ltr.finetune.heads import build_head
from scarce_ltr.finetune.joint import Joint, JointConfig, JointRun, joint_for
from scarce_ltr.finetune.joint_loss import OBJECTIVES, joint_loss, joint_view
from scarce_ltr.finetune.model import Ranker
from scarce_ltr.pretrain.encoders import EncoderConfig, build_encoder
from scarce_ltr.pretrain.heads import Projector
from scarce_ltr.serving.ranker import load_ranker

DATA = [*tiny_data(), "logger=none", "scarcity.fraction=0.2"]
FRESH = ["pretrained=none", *small_encoder()]
JOINT = ["joint.weight=0.5", "joint.donors=grade"]


def finetune(run_dir: Path, *args: str) -> dict | None:
    args = ("head_hidden=16", "epochs=4", "optimizer.lr=1e-2", *args)
    return run(["finetune", "full", *DATA, f"run_dir={run_dir}", *args])


def report(run_dir: Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


def weights(run_dir: Path) -> dict:
    return torch.load(run_dir / "model.pt", weights_only=True)["state_dict"]


def encoder(kind: str = "resnet", dropout: float = 0.0) -> torch.nn.Module:
    config = EncoderConfig(kind=kind, width=16, hidden=32, n_blocks=2, n_heads=2, dropout=dropout)
    return build_encoder(config, n_features=6)


def batch(sizes=(5, 3, 1, 4), width: int | None = None, seed: int = 0):
    """Padded QGs of ``sizes`` items (6 features, grades 0..2), ``width`` slots each."""
    rng = np.random.default_rng(seed)
    width = width or max(sizes)
    features = np.zeros((len(sizes), width, 6), np.float32)
    grades = np.zeros((len(sizes), width), np.float32)
    mask = np.zeros((len(sizes), width), bool)
    for row, size in enumerate(sizes):
        features[row, :size] = rng.normal(size=(size, 6))
        grades[row, :size] = rng.integers(0, 3, size)
        mask[row, :size] = True
    return torch.from_numpy(features), torch.from_numpy(mask), torch.from_numpy(grades)


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# (a) off is what finetuning was


def test_weight_zero_is_bit_identical_to_a_run_without_the_keys(tmp_path) -> None:
    finetune(tmp_path / "without", *FRESH)
    finetune(tmp_path / "zero", *FRESH, "joint.weight=0")
    without, zero = report(tmp_path / "without"), report(tmp_path / "zero")
    for key in ("metrics", "history", "identity", "best_epoch", "parameters"):
        assert without[key] == zero[key], key
    assert "joint" not in zero
    a, b = weights(tmp_path / "without"), weights(tmp_path / "zero")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    scores = [np.load(tmp_path / name / "scores.npz") for name in ("without", "zero")]
    assert all(np.array_equal(scores[0][k], scores[1][k]) for k in scores[0].files)
    # the same run: joint.weight=0 in the folder of a run without the key is skipped
    assert finetune(tmp_path / "without", *FRESH, "joint.weight=0") is None


# (b) the loss learns, (c) whatever the padding, (d) from its seed


@pytest.mark.parametrize("objective", list(OBJECTIVES))
def test_joint_loss_decreases_on_a_toy_pool(objective: str) -> None:
    torch.manual_seed(0)
    net, projector = encoder(), Projector(in_dim=16, dim=8)
    optimizer = torch.optim.Adam([*net.parameters(), *projector.parameters()], lr=1e-2)
    features, mask, grades = batch(sizes=(8, 6, 7, 5))
    losses = []
    for step in range(40):
        loss = joint_loss(
            net,
            projector,
            features,
            mask,
            objective=objective,
            temperature=0.07,
            replace_p=0.8,
            generator=generator(step),
            grades=grades,
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5]), losses


@pytest.mark.parametrize("kind", ["resnet", "attention"])
@pytest.mark.parametrize("objective", list(OBJECTIVES))
@pytest.mark.parametrize("donors", ["qg", "grade"])
def test_joint_loss_is_the_same_whatever_the_padding(kind, objective, donors) -> None:
    torch.manual_seed(0)
    net, projector = encoder(kind).eval(), Projector(in_dim=16, dim=8)
    values = []
    for width in (None, 9):
        features, mask, grades = batch(width=width)
        value = joint_loss(
            net,
            projector,
            features,
            mask,
            objective=objective,
            temperature=0.07,
            replace_p=0.8,
            generator=generator(),
            grades=grades if donors == "grade" else None,
        )
        values.append(float(value.detach()))
    assert values[0] == pytest.approx(values[1], rel=1e-6, abs=1e-6)
    assert values[0] > 0


def test_views_come_from_their_generator() -> None:
    features, mask, grades = batch()
    items, groups = features[mask], torch.nonzero(mask)[:, 0]
    same = [joint_view(items, groups, p=0.8, generator=generator(3)) for _ in range(2)]
    other = joint_view(items, groups, p=0.8, generator=generator(4))
    assert torch.equal(same[0], same[1]) and not torch.equal(same[0], other)


# (e) target-aware donors


def test_grade_donors_come_from_the_same_grade_of_the_same_qg() -> None:
    """One QG graded [2, 2, 0, 0, 1] and a second [2, 0]: every replaced entry comes from an
    item of the same grade in the same QG, and the lone grade-1 item keeps its values."""
    grades = torch.tensor([2.0, 2, 0, 0, 1, 2, 0])
    groups = torch.tensor([0, 0, 0, 0, 0, 1, 1])
    # item i, feature j holds 100 i + j: a value names the item it came from
    items = 100 * torch.arange(7.0)[:, None] + torch.arange(4.0)[None, :]
    moved = torch.zeros(7, dtype=torch.bool)
    for seed in range(20):
        view = joint_view(items, groups, p=1.0, generator=generator(seed), grades=grades)
        source = torch.div(view - torch.arange(4.0), 100, rounding_mode="floor").long()
        assert torch.equal(view - 100 * source, torch.arange(4.0).expand(7, 4))  # same feature
        assert torch.equal(groups[source], groups[:, None].expand(7, 4))  # same QG
        assert torch.equal(grades[source], grades[:, None].expand(7, 4))  # same grade
        assert torch.equal(view[4], items[4]) and torch.equal(view[5:], items[5:])  # alone
        moved |= (source != torch.arange(7)[:, None]).any(dim=1)
    assert moved.tolist() == [True, True, True, True, False, False, False]
    # qg donors: any item of the QG
    view = joint_view(items, groups, p=1.0, generator=generator(0))
    source = torch.div(view, 100, rounding_mode="floor").long()
    assert torch.equal(groups[source], groups[:, None].expand(7, 4))
    assert not torch.equal(grades[source], grades[:, None].expand(7, 4))


# resume and warm starts


@pytest.fixture(scope="module")
def setup():
    cfg, _ = load_config(FinetuneConfig, [*DATA, "pretrained=none", *JOINT])
    prepared = prepare_data(cfg)
    return cfg, prepared, setup_runtime(amp=False, device="cpu"), joint_for(cfg, prepared, None)


def ranker(seed: int = 0) -> Ranker:
    torch.manual_seed(seed)
    net = build_encoder(EncoderConfig(width=16, hidden=32, n_blocks=2), n_features=12)
    return Ranker(encoder=net, head=build_head("mlp", in_dim=16, hidden=16, dropout=0.1))


def test_resume_after_interruption_ends_bit_identical(setup, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(loop, "CHECKPOINT_SECONDS", 0.0)
    cfg, prepared, runtime, joint = setup
    options = replace(cfg.train_options(), lr=1e-2)
    phases = [Phase("head", 1, False), Phase("full", 3, True)]
    straight = ranker()
    first = run_fit(straight, cfg, prepared, runtime, phases, options=options, joint=joint)

    class Stop(Exception):
        pass

    def crash(row: dict) -> None:
        if row["epoch"] == 3:
            raise Stop

    checkpoint = tmp_path / "checkpoint.pt"
    args = {"options": options, "joint": joint, "checkpoint": checkpoint}
    with pytest.raises(Stop):
        run_fit(ranker(), cfg, prepared, runtime, phases, log=crash, **args)
    assert "joint" in torch.load(checkpoint, weights_only=True)
    resumed = ranker(seed=123)  # weights come from the checkpoint, not from the init
    again = run_fit(resumed, cfg, prepared, runtime, phases, **args)
    assert again.history == first.history
    assert all(torch.equal(v, resumed.state_dict()[k]) for k, v in straight.state_dict().items())
    assert [row.get("joint_weight") for row in first.history] == [None, None, 0.5, 0.5, 0.5]


def test_unlabeled_per_epoch_draws_that_many_unlabeled_qgs_each_epoch(setup) -> None:
    """``joint.unlabeled_per_epoch``: every labeled QG of the batches each epoch, and that many
    unlabeled ones drawn anew with (seed, epoch): the same again for the same seed."""
    cfg, prepared, runtime, joint = setup
    subset = replace(joint, config=replace(joint.config, unlabeled_per_epoch=5))

    def epoch_groups(this: Joint, epoch: int, seed: int = 0) -> set[int]:
        run = JointRun.start(this, ranker(), prepared=prepared, runtime=runtime, seed=seed,
                             item_budget=1000)  # fmt: skip
        batches = run.epoch_batches(run.batches(1000, None), epoch)
        batches.set_epoch(epoch)
        return {int(g) for b in batches for g in b.groups}

    unlabeled = set(joint.unlabeled.tolist())
    labeled = set(joint.groups.tolist()) - unlabeled
    assert epoch_groups(joint, 0) == set(joint.groups.tolist())  # 0: every unlabeled QG
    drawn = [epoch_groups(subset, epoch) for epoch in range(3)]
    assert all(groups - unlabeled == labeled and len(groups & unlabeled) == 5 for groups in drawn)
    assert drawn[0] != drawn[1] and epoch_groups(subset, 1) == drawn[1]
    assert epoch_groups(subset, 1, seed=1) != drawn[1]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pretrain") / "simclr-rank"
    args = [*DATA, *small_encoder(), "epochs=1", "monitor.enabled=false", f"run_dir={out}"]
    run(["pretrain", "simclr-rank", *args])
    return out


# (f) end to end, (d) seeded


def test_a_joint_run_finishes_records_its_settings_and_saves_no_projector(
    tmp_path, pretrained
) -> None:
    finetune(tmp_path / "plain", *FRESH)
    finetune(tmp_path / "joint", *FRESH, *JOINT)
    got, plain = report(tmp_path / "joint"), report(tmp_path / "plain")
    assert got["joint"] | {"n_groups": 0} == {
        "weight": 0.5,
        "objective": "simclr",
        "replace_p": 0.8,
        "temperature": 0.07,
        "projector_dim": 16,
        "schedule": "constant",
        "donors": "grade",
        "unlabeled_per_epoch": 0,
        "n_groups": 0,
        "n_unlabeled_groups": 24,
        "pseudo_grades": "own scores",
        "levels": got["joint"]["levels"],
    }
    assert got["joint"]["n_groups"] >= 24 and got["joint"]["levels"] >= 2
    assert '"joint"' in got["identity"] and '"joint"' not in plain["identity"]
    full = [row for row in got["history"] if row["phase"] == "full"]
    assert full and all(row["joint_loss"] > 0 for row in full)
    # the head-only epochs are those of the run without it, draw for draw
    head = [row for row in got["history"] if row["phase"] in ("init", "head")]
    assert head == [row for row in plain["history"] if row["phase"] in ("init", "head")]
    # the scoring path is the ranker's: no projector in model.pt or the bundle
    assert weights(tmp_path / "joint").keys() == weights(tmp_path / "plain").keys()
    scores = load_ranker(tmp_path / "joint").predict(np.zeros((5, 12), np.float32))
    assert np.isfinite(scores).all()
    # seeded: the same command again gives the same numbers, another seed others
    finetune(tmp_path / "again", *FRESH, *JOINT)
    assert report(tmp_path / "again")["history"] == got["history"]
    finetune(tmp_path / "seed1", *FRESH, *JOINT, "seed=1")
    assert report(tmp_path / "seed1")["history"] != got["history"]
    # warm start from a pretrained encoder, decaying weight, in-QG negatives
    args = ["joint.weight=1", "joint.schedule=decay", "joint.objective=simclr-rank"]
    finetune(tmp_path / "warm", f"pretrained={pretrained}", *args)
    warm = report(tmp_path / "warm")
    assert warm["pretraining_method"] == "simclr-rank" and warm["joint"]["donors"] == "qg"
    assert [row["joint_weight"] for row in warm["history"] if "joint_weight" in row] == [1, 0.5]


def test_graders_a_teacher_run_and_the_student_taught_by_itself(tmp_path) -> None:
    finetune(tmp_path / "teacher", *FRESH)
    finetune(tmp_path / "taught", *FRESH, *JOINT, f"teacher={tmp_path / 'teacher'}")
    taught = report(tmp_path / "taught")
    assert taught["joint"]["pseudo_grades"] == "teacher" and taught["teacher"]["n_groups"] == 24
    finetune(tmp_path / "self", *FRESH, *JOINT, "teacher=self")
    assert report(tmp_path / "self")["joint"]["pseudo_grades"] == "own scores"


# (g) refusals


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["joint.weight=-1"], "joint.weight=-1.0: joint.weight must be >= 0"),
        (["joint.weight=1", "joint.objective=simsiam"], "joint.objective must be one of simclr"),
        (["joint.weight=1", "joint.donors=label"], "joint.donors must be one of qg, grade"),
        (["joint.weight=1", "joint.schedule=cosine"], "joint.schedule must be one of constant"),
        (["joint.weight=1", "joint.replace_p=1.5"], "joint.replace_p must be in"),
        (["joint.weight=1", "joint.temperature=0"], "joint.temperature must be > 0"),
        (["joint.weight=1", "joint.unlabeled_per_epoch=-1"], "joint.unlabeled_per_epoch"),
        (["joint.donors=grade"], "joint.donors=grade: joint.* is read only with joint.weight"),
        (["joint.weight=1", "full_epochs=0"], "joint.weight needs whole-network epochs"),
    ],
)
def test_bad_values_are_refused_naming_the_key(tmp_path, args, message) -> None:
    with pytest.raises(UserError, match=message):
        finetune(tmp_path / "x", *FRESH, *args)


def test_a_frozen_encoder_takes_no_joint_term(tmp_path) -> None:
    with pytest.raises(UserError, match="joint.weight is for full: lp never trains the encoder"):
        run(["finetune", "lp", *DATA, *FRESH, "joint.weight=1", f"run_dir={tmp_path / 'x'}"])


def test_weight_schedules() -> None:
    assert JointConfig(weight=0.5).weight_at(3, 4) == 0.5
    decay = JointConfig(weight=1.0, schedule="decay")
    assert [decay.weight_at(e, 4) for e in range(4)] == [1.0, 0.75, 0.5, 0.25]


def test_a_sweep_passes_the_per_model_override(tmp_path, capsys) -> None:
    args = ["sweep", "quick", "fractions=[0.5]", "seeds=[0]", "logger=none", "report=false"]
    args += ["--dry-run", f"run_dir={tmp_path / 's'}", "models=[scratch+full,simclr-rank+full]"]
    run([*args, "overrides.per_model.scratch+full=[joint.weight=0.5,joint.donors=grade]"])
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("[to run] finetune")]
    by_model = {Path(x.split("run_dir=")[1].split()[0]).parts[-3]: x for x in lines}
    assert "joint.weight=0.5 joint.donors=grade" in by_model["scratch+full"]
    assert "joint." not in by_model["simclr-rank+full"]


def test_a_config_file_sets_the_section(tmp_path, capsys) -> None:
    mine = tmp_path / "joint.yaml"
    mine.write_text("joint:\n  weight: 0.5\n  donors: grade\n  schedule: decay\n")
    args = ["finetune", "full", *DATA, *FRESH, "--config", str(mine), "joint.replace_p=0.5"]
    assert run([*args, "--print-config"]) is None
    printed = yaml.safe_load(capsys.readouterr().out)["joint"]
    assert printed | {"objective": None, "unlabeled_per_epoch": 0} == {
        "weight": 0.5,
        "donors": "grade",
        "schedule": "decay",
        "replace_p": 0.5,
        "objective": None,
        "temperature": 0.07,
        "projector_dim": 16,
        "unlabeled_per_epoch": 0,
    }
