"""Teachers (issue 30, item 3): every run that scores vali and test also keeps its scores on
every train item (``scores.npz`` ``train``, ``train_offsets``, ``train_qids``), so that a later
run can learn from a finished one on the unlabeled train QGs without loading its model."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import small_encoder, tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.data.evaluation import read_train_scores
from scarce_ltr.data.pipeline import prepare_data
from scarce_ltr.data.ranking_split import rows_of_groups
from scarce_ltr.data.teachers import pseudo_labels
from scarce_ltr.ensembles.config import EnsembleConfig
from scarce_ltr.ensembles.score_fusion import NORMALIZERS, mix
from scarce_ltr.losses.distillation import distillation_loss
from scarce_ltr.models.names import ModelName, model_group

DATA = [*tiny_data(), "logger=none", "scarcity.fraction=0.5"]
GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=30", "gbdt.early_stopping_rounds=10"]
DEEP = ["epochs=2", "deep.lrs=[1e-3]", "deep.encoder.width=8", "deep.encoder.hidden=16"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Finished tiny runs: pretraining, gbdt, finetuning, resnet, and an ensemble of two."""
    root = tmp_path_factory.mktemp("teachers") / "runs"
    torch.set_num_threads(1)
    out = {name: root / name for name in ("pretrain", "gbdt", "finetune", "resnet", "ens")}
    run(["pretrain", "simclr-rank", *DATA, *small_encoder(), "epochs=1",
         "monitor.enabled=false", f"run_dir={out['pretrain']}"])  # fmt: skip
    run(["baseline", "gbdt", *DATA, *GBDT, f"run_dir={out['gbdt']}"])
    run(["finetune", "full", *DATA, "epochs=2", "head_hidden=16",
         f"pretrained={out['pretrain']}", f"run_dir={out['finetune']}"])  # fmt: skip
    run(["baseline", "resnet", *DATA, *DEEP, f"run_dir={out['resnet']}"])
    run(["ensemble", *DATA, f"runs=[{out['finetune']},{out['gbdt']}]", f"run_dir={out['ens']}"])
    return out


@pytest.fixture(scope="module")
def prepared():
    cfg, _ = load_config(EnsembleConfig, [*DATA, "runs=[a,b]"])
    return prepare_data(cfg)


@pytest.mark.parametrize("name", ["gbdt", "finetune", "resnet", "ens"])
def test_runs_keep_their_scores_on_every_train_item(runs, prepared, name) -> None:
    stored = read_train_scores(runs[name] / "scores.npz")
    assert stored is not None, f"{name} kept no train scores"
    train, offsets, qids = stored
    np.testing.assert_array_equal(offsets, prepared.train.offsets)
    np.testing.assert_array_equal(qids, prepared.train.qids)
    assert len(train) == prepared.train.n_items and np.isfinite(train).all()
    # Unlabeled QGs are scored too (not left at 0): the teacher's reason to be.
    unlabeled = np.flatnonzero(~prepared.labels.train_labeled)
    assert len(unlabeled) > 0
    assert np.ptp(train[offsets[unlabeled[0]] : offsets[unlabeled[0] + 1]]) > 0


def test_an_ensemble_mixes_its_members_train_scores(runs, prepared) -> None:
    report = json.loads((runs["ens"] / "report.json").read_text())
    weights = [report["weights"][str(m)] for m in (runs["finetune"], runs["gbdt"])]
    normalize = NORMALIZERS[report["normalize"]]
    offsets = prepared.train.offsets
    members = [read_train_scores(runs[m] / "scores.npz")[0] for m in ("finetune", "gbdt")]
    expected = mix(np.stack([normalize(s, offsets) for s in members]), weights)
    np.testing.assert_allclose(read_train_scores(runs["ens"] / "scores.npz")[0], expected)


def test_old_scores_without_train_still_read(runs, tmp_path) -> None:
    """A member written before train scores were kept joins an ensemble, which then keeps none."""
    old = tmp_path / "old"
    shutil.copytree(runs["gbdt"], old)
    with np.load(runs["gbdt"] / "scores.npz") as stored:
        arrays = {k: stored[k] for k in stored.files if not k.startswith("train")}
    np.savez(old / "scores.npz", **arrays)
    assert read_train_scores(old / "scores.npz") is None
    ens = tmp_path / "ens"
    report = run(["ensemble", *DATA, f"runs=[{runs['finetune']},{old}]", f"run_dir={ens}"])
    assert report["metrics"]["test"]["ndcg@5"] > 0
    assert read_train_scores(ens / "scores.npz") is None


# --- the distillation loss and the taught batch loss ------------------------------------------


def test_distillation_loss_by_hand() -> None:
    mask = torch.tensor([[True, True], [True, True]])
    scores = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    teacher = torch.tensor([[0.0, math.log(3.0)], [0.0, 0.0]])
    # QG 0: p = [1/4, 3/4], uniform student: log 2; QG 1: p = [1/2, 1/2], q = [3/4, 1/4].
    expected = (math.log(2.0) - (math.log(0.75) + math.log(0.25)) / 2) / 2
    loss = distillation_loss(scores, teacher, mask=mask)
    assert float(loss) == pytest.approx(expected, abs=1e-6)
    # Temperature 2 on QG 0's teacher: p = softmax([0, ln 3 / 2]) = [1, sqrt 3] / (1 + sqrt 3).
    p = np.array([1.0, math.sqrt(3.0)]) / (1 + math.sqrt(3.0))
    hot = distillation_loss(scores[:1], teacher[:1], mask=mask[:1], temperature=2.0)
    assert float(hot) == pytest.approx(-(p * np.log([0.5, 0.5])).sum(), abs=1e-6)
    # A shift of the teacher's scores changes nothing; the loss is lowest at the teacher's order.
    shifted = distillation_loss(scores, teacher + 5.0, mask=mask)
    assert float(shifted) == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError, match="temperature must be positive"):
        distillation_loss(scores, teacher, mask=mask, temperature=0.0)


def test_distillation_loss_ignores_padding() -> None:
    torch.manual_seed(0)
    scores, teacher = torch.randn(3, 4), torch.randn(3, 4)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    wide = torch.full((3, 7), float("nan"))
    wide_teacher = torch.full((3, 7), float("inf"))
    wide[:, :4], wide_teacher[:, :4] = scores, teacher
    wide_mask = torch.zeros(3, 7, dtype=torch.bool)
    wide_mask[:, :4] = mask
    narrow = distillation_loss(scores.requires_grad_(), teacher, mask=mask)
    padded = distillation_loss(wide.requires_grad_(), wide_teacher, mask=wide_mask)
    assert float(narrow.detach()) == pytest.approx(float(padded.detach()), abs=1e-6)
    (grad,) = torch.autograd.grad(padded, wide)
    assert torch.isfinite(grad).all() and (grad[~wide_mask] == 0).all()


def test_a_batch_adds_the_taught_qgs_loss_with_its_weight() -> None:
    from scarce_ltr.data.teachers import TeachingConfig
    from scarce_ltr.finetune.teacher import Teaching
    from scarce_ltr.losses import LOSSES

    torch.manual_seed(1)
    scores, labels = torch.randn(4, 5), torch.randint(0, 3, (4, 5)).float()
    labels[:, 0] = 2.0
    mask = torch.ones(4, 5, dtype=torch.bool)
    taught = np.array([False, True, False, True, False, False])  # train QGs 1 and 3
    groups = torch.tensor([0, 1, 2, 3])
    loss_fn = LOSSES["softmax"]
    for targets, weight in (("soft", 0.5), ("buckets", 2.0)):
        config = TeachingConfig(weight=weight, targets=targets)
        teaching = Teaching(split=None, groups=None, taught=taught, config=config, summary={})
        got = teaching.loss(loss_fn, scores, labels, mask=mask, groups=groups)
        rows = torch.tensor([True, False, True, False])
        part = loss_fn if targets == "buckets" else distillation_loss
        expected = loss_fn(scores[rows], labels[rows], mask=mask[rows]) + weight * part(
            scores[~rows], labels[~rows], mask=mask[~rows]
        )
        assert float(got) == pytest.approx(float(expected), abs=1e-6)
    # A batch of labeled QGs alone: the run's own loss, as without a teacher.
    only = teaching.loss(loss_fn, scores[:1], labels[:1], mask=mask[:1], groups=groups[:1])
    assert float(only) == pytest.approx(float(loss_fn(scores[:1], labels[:1], mask=mask[:1])))


def test_teaching_config_is_checked() -> None:
    from scarce_ltr.data.teachers import TeachingConfig

    for key, value, message in (
        ("targets", "hard", "teaching.targets must be one of soft, buckets"),
        ("weight", 0.0, "teaching.weight"),
        ("temperature", -1.0, "teaching.temperature"),
        ("levels", 40, "teaching.levels"),
    ):
        with pytest.raises(ValueError, match=message):
            TeachingConfig(**{key: value})


@pytest.mark.parametrize(
    ("stage", "overrides"),
    [
        ("baseline", ["method=resnet", "teaching.weight=0.5"]),
        ("baseline", ["method=gbdt-pseudo", "teaching.targets=buckets"]),
        ("finetune", ["strategy=full", "pretrained=none", "teaching.levels=3"]),
    ],
)
def test_teaching_keys_without_a_teacher_are_refused(stage, overrides) -> None:
    """``teaching.*`` is read only with ``teacher=``: set without one, it names the keys and
    what is missing (before: the run ignored it)."""
    from scarce_ltr.baselines.config import BaselineConfig
    from scarce_ltr.finetune.config import FinetuneConfig

    schema = BaselineConfig if stage == "baseline" else FinetuneConfig
    refused = r"teaching\.\w+=[\w.]+: teaching\.\* is read only with a teacher"
    with pytest.raises(UserError, match=refused):
        load_config(schema, overrides)
    if "method=gbdt-pseudo" not in overrides:  # its teacher is gbdt.teacher; it reads none
        cfg, _ = load_config(schema, [*overrides, "teacher=self", "teaching.noise=0.1"])
        assert cfg.teaching.noise == 0.1  # with a teacher it is read


# --- taught runs end to end -------------------------------------------------------------------


def _same_scores(a: Path, b: Path) -> bool:
    with np.load(a / "scores.npz") as x, np.load(b / "scores.npz") as y:
        return all(np.array_equal(x[k], y[k]) for k in ("vali", "test", "train"))


FINETUNE = ["finetune", "full", *DATA, "epochs=2", "head_hidden=16"]


@pytest.mark.parametrize("targets", ["soft", "buckets"])
def test_a_finetuned_ranker_taught_by_a_tree(runs, tmp_path, targets) -> None:
    args = [*FINETUNE, f"pretrained={runs['pretrain']}", f"teacher={runs['gbdt']}"]
    args += [f"teaching.targets={targets}", "teaching.weight=0.5"]
    first = run([*args, f"run_dir={tmp_path / 'a'}"])
    run([*args, f"run_dir={tmp_path / 'b'}"])
    assert _same_scores(tmp_path / "a", tmp_path / "b")  # deterministic
    assert first["model"] == "simclr-rank+full~gbdt" and first["group"] == "hybrid"
    assert first["pretraining_method"] == "simclr-rank"  # the encoder's, not the model's prefix
    assert first["teacher"]["model"] == "gbdt" and first["teacher"]["targets"] == targets
    assert first["teacher"]["n_groups"] == 15  # the unlabeled half of 30 train QGs
    # The teacher changed training: the scores differ from the untaught run's.
    with np.load(tmp_path / "a/scores.npz") as a, np.load(runs["finetune"] / "scores.npz") as u:
        assert not np.array_equal(a["vali"], u["vali"])


def test_resnet_and_gbdt_pseudo_taught_by_runs(runs, prepared, tmp_path) -> None:
    resnet = ["baseline", "resnet", *DATA, *DEEP, f"teacher={runs['ens']}"]
    report = run([*resnet, f"run_dir={tmp_path / 'r1'}"])
    run([*resnet, f"run_dir={tmp_path / 'r2'}"])
    assert _same_scores(tmp_path / "r1", tmp_path / "r2")
    assert report["model"] == "resnet~ensemble:simclr-rank+full,gbdt"
    gbdt = ["baseline", "gbdt-pseudo", *DATA, *GBDT, f"gbdt.teacher={runs['finetune']}"]
    report = run([*gbdt, f"run_dir={tmp_path / 'g1'}"])
    run([*gbdt, f"run_dir={tmp_path / 'g2'}"])
    assert _same_scores(tmp_path / "g1", tmp_path / "g2")
    assert report["model"] == "gbdt-pseudo~simclr-rank+full" and report["group"] == "hybrid"
    assert {row["phase"] for row in report["grid"]} == {"pseudo"}  # no GBDT of its own taught
    # The pseudo-labels are the finetuned run's train scores on the unlabeled QGs, binned.
    train = read_train_scores(runs["finetune"] / "scores.npz")[0]
    unlabeled = np.flatnonzero(~prepared.labels.train_labeled)
    rows = rows_of_groups(prepared.train.offsets, unlabeled)
    counts = np.bincount(pseudo_labels(train[rows]).astype(int), minlength=31)
    assert report["pseudo_labels"]["level_counts"] == counts.tolist()
    assert report["teacher"]["model"] == "simclr-rank+full"


def test_teachers_of_other_data_or_labels_are_refused(runs, tmp_path) -> None:
    ft = [*FINETUNE, f"pretrained={runs['pretrain']}", f"run_dir={tmp_path / 'x'}"]
    gbdt, teacher = runs["gbdt"], f"teacher={runs['gbdt']}"
    with pytest.raises(UserError, match=f"teacher: {gbdt}: trained on other data .*n_train_groups"):
        run([*ft, teacher, "data.synthetic.n_train_groups=20"])
    with pytest.raises(UserError, match=f"teacher: {gbdt}: trained with another label setting"):
        run([*ft, teacher, "scarcity.fraction=0.4"])
    with pytest.raises(UserError, match=f"teacher: {gbdt}: seed 0 draws other labeled QGs"):
        run([*ft, teacher, "seed=1"])
    with pytest.raises(UserError, match=f"teacher: {runs['pretrain']}: no scores.npz"):
        run([*ft, f"teacher={runs['pretrain']}"])
    with pytest.raises(UserError, match="no such run directory"):
        run([*ft, f"teacher={tmp_path / 'nope'}"])
    old = tmp_path / "old"
    shutil.copytree(gbdt, old)
    with np.load(gbdt / "scores.npz") as stored:
        np.savez(old / "scores.npz", **{k: stored[k] for k in stored.files if k != "train"})
    with pytest.raises(UserError, match="has no train scores .*run the teacher again"):
        run([*ft, f"teacher={old}"])
    pseudo = ["baseline", "gbdt-pseudo", *DATA, *GBDT, f"run_dir={tmp_path / 'g'}"]
    with pytest.raises(UserError, match=f"gbdt.teacher: {gbdt}: trained with another label"):
        run([*pseudo, f"gbdt.teacher={gbdt}", "scarcity.fraction=0.4"])
    with pytest.raises(UserError, match="gbdt.teacher is a key of gbdt-pseudo"):
        run(["baseline", "gbdt", *DATA, f"gbdt.teacher={gbdt}"])
    with pytest.raises(UserError, match="teacher is gbdt.teacher, not a key of gbdt-pseudo"):
        run([*pseudo, teacher])


# --- sweeps -----------------------------------------------------------------------------------


def test_model_names_of_taught_models() -> None:
    taught = ModelName.parse("gbdt-pseudo~ensemble:a,b")
    assert (str(taught.student), str(taught.teacher)) == ("gbdt-pseudo", "ensemble:a,b")
    assert (str(ModelName.parse("resnet").student), ModelName.parse("resnet").teacher) == (
        "resnet",
        None,
    )
    assert model_group("simclr-rank+full~gbdt-optuna") == "hybrid"
    assert model_group("resnet~gbdt-optuna") == "hybrid"
    assert model_group("gbdt-pseudo~ensemble:simclr-rank+full,gbdt-optuna") == "hybrid"
    assert model_group("ensemble:resnet~gbdt,gbdt") == "hybrid"
    for bad, message in (
        ("gbdt~resnet", "gbdt cannot learn from a teacher"),
        ("resnet~gbdt-pseudo~gbdt", "is taught itself"),
        ("resnet~nope", "unknown sweep model 'nope'"),
        ("resnet~", "a taught model is <student>~<teacher>"),
    ):
        with pytest.raises(UserError, match=message):
            model_group(bad)


def test_a_sweep_plans_a_taught_model_after_its_teacher(tmp_path, capsys) -> None:
    args = ["sweep", "quick", "fractions=[0.5]", "seeds=[0]", "logger=none", "report=false"]
    args += ["--dry-run", f"run_dir={tmp_path / 's'}"]
    taught_by_ensemble = "'gbdt-pseudo~ensemble:resnet,gbdt'"
    models = f"models=[{taught_by_ensemble},resnet~gbdt,'ensemble:resnet,gbdt',gbdt,resnet]"
    cells = run([*args, models])
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("[to run]")]
    root = tmp_path / "s/synthetic"
    order = [x.split("run_dir=")[1] for x in lines]
    where = {Path(o).parts[-3]: i for i, o in enumerate(order)}
    assert where["gbdt-pseudo~ensemble:resnet,gbdt"] > where["ensemble:resnet,gbdt"]
    assert where["resnet~gbdt"] > where["gbdt"]
    taught = lines[where["gbdt-pseudo~ensemble:resnet,gbdt"]]
    assert f'gbdt.teacher="{root}/ensemble/ensemble:resnet,gbdt/frac=0.5/seed=0"' in taught
    assert lines[where["resnet~gbdt"]].startswith("[to run] baseline resnet ")
    assert f'teacher="{root}/baseline/gbdt/frac=0.5/seed=0"' in lines[where["resnet~gbdt"]]
    assert {c["model"]: c["group"] for c in cells}["resnet~gbdt"] == "hybrid"
    with pytest.raises(UserError, match="its teacher 'gbdt-optuna' is not a model of this sweep"):
        run([*args, "models=[resnet~gbdt-optuna,resnet]"])
    with pytest.raises(UserError, match="seed ensemble"):
        run([*args, "models=[resnet~seed-ensemble:gbdt,seed-ensemble:gbdt]"])


def test_an_ensemble_of_a_taught_model_keeps_its_teacher(tmp_path, capsys) -> None:
    """A taught model as a member of `topk:` (or any ensemble) is its own cell's job: taught
    (the planner once planned it a second time untaught into the same folder, and that one ran)."""
    args = ["sweep", "quick", "fractions=[0.5]", "seeds=[0]", "logger=none", "report=false"]
    args += ["--dry-run", f"run_dir={tmp_path / 's'}"]
    root = tmp_path / "s/synthetic"
    teacher = f'teacher="{root}/baseline/gbdt/frac=0.5/seed=0"'
    run([*args, "models=[gbdt,resnet,resnet~gbdt,'topk:gbdt,resnet,resnet~gbdt']"])
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("[to run]")]
    taught = [x for x in lines if "/resnet~gbdt/" in x.split("run_dir=")[1]]
    assert len(taught) == 1 and teacher in taught[0]


def test_a_sweep_runs_a_taught_model(tmp_path) -> None:
    """The planned jobs run: the taught folder (with ``~``) finishes with its teacher named."""
    args = ["sweep", "quick", "fractions=[0.5]", "seeds=[0]", "logger=none", "report=false"]
    args += [f"run_dir={tmp_path / 's'}", *[f"overrides.common=[{','.join(tiny_data())}]"]]
    args += ["models=[gbdt,gbdt-pseudo~gbdt]", "overrides.baseline=[gbdt.max_rounds=20]"]
    run(args)
    folder = tmp_path / "s/synthetic/baseline/gbdt-pseudo~gbdt/frac=0.5/seed=0"
    report = json.loads((folder / "report.json").read_text())
    assert report["teacher"]["model"] == "gbdt" and (folder / "DONE").is_file()


def test_a_taught_model_can_train_the_recipe_its_students_search_chose(tmp_path, capsys) -> None:
    """``taught_recipe: student``: the taught model trains the recipe the untaught student's
    cell chose on vali (``search.recipe_from``, after that cell), not a search of its own."""
    args = ["sweep", "quick", "fractions=[0.5]", "seeds=[0]", "logger=none", "report=false"]
    args += ["--dry-run", f"run_dir={tmp_path / 's'}", "overrides.finetune=[epochs=2]"]
    args += ["overrides.per_model.scratch+full=[search.n_trials=2]"]
    root = tmp_path / "s/synthetic"
    student = f'search.recipe_from="{root}/finetune/scratch+full/frac=0.5/seed=0"'
    models = "models=[gbdt,scratch+full,scratch+full~gbdt,scratch+full~self]"

    def planned(*more: str) -> dict[str, str]:
        run([*args, models, *more])
        lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("[to run]")]
        return {Path(x.split("run_dir=")[1]).parts[-3]: x for x in lines}

    own = planned()
    assert all("recipe_from" not in line for line in own.values())  # the default: own search
    taught = planned("taught_recipe=student")
    assert "recipe_from" not in taught["scratch+full"]
    for model in ("scratch+full~gbdt", "scratch+full~self"):
        assert student in taught[model] and "search.n_trials=2" in taught[model]
    # A taught model that turns the search off cannot take the student's searched recipe.
    with pytest.raises(UserError, match="scratch\\+full~gbdt.*do not search"):
        off = "overrides.per_model.scratch+full~gbdt=[search.n_trials=0]"
        planned("taught_recipe=student", off)
    with pytest.raises(UserError, match="taught_recipe must be one of own, student"):
        planned("taught_recipe=teacher")


def test_a_sweep_trains_a_taught_model_on_its_students_recipe(tmp_path) -> None:
    """The planned jobs run: the taught run's one trial is the recipe the student's search chose."""
    args = ["sweep", "quick", "fractions=[0.5]", "seeds=[0]", "logger=none", "report=false"]
    args += [f"run_dir={tmp_path / 's'}", f"overrides.common=[{','.join(tiny_data())}]"]
    args += ["models=[scratch+full,scratch+full~self]", "taught_recipe=student"]
    args += ["overrides.finetune=[epochs=2,head_hidden=8,encoder.width=8,encoder.hidden=16]"]
    searched = 'search.n_trials=2,"search.head_epochs=[1,2]","search.full_epochs=[1,2]"'
    args += [f"overrides.per_model.scratch+full=[{searched}]"]
    run(args)
    folder = tmp_path / "s/synthetic/finetune"
    chosen = json.loads((folder / "scratch+full/frac=0.5/seed=0/report.json").read_text())
    taught = json.loads((folder / "scratch+full~self/frac=0.5/seed=0/report.json").read_text())
    assert taught["search"]["n_trials"] == 1
    assert taught["search"]["chosen_params"] == chosen["search"]["chosen_params"]


def test_waves_put_a_taught_model_after_its_teacher() -> None:
    from scarce_ltr.sweeps.jobs import Job, job_waves

    def job(key: str, stage: str, *depends: str) -> Job:
        return Job(key, stage, key, [], Path(key), list(depends))

    jobs = [
        job("pre", "pretrain"),
        job("gbdt", "baseline"),
        job("ft", "finetune", "pre"),
        job("ft~gbdt", "finetune", "pre", "gbdt"),
        job("ens", "ensemble", "ft", "gbdt"),
        job("gp~ens", "baseline", "ens"),
        job("ens2", "ensemble", "gp~ens", "gbdt"),
    ]
    waves = [[j.key for j in wave] for wave in job_waves(jobs)]
    assert waves == [["pre"], ["gbdt", "ft"], ["ft~gbdt"], ["ens"], ["gp~ens"], ["ens2"]]
    # Without taught models: the four stage waves, as sweeps always ran them.
    assert [[j.key for j in w] for w in job_waves(jobs[:3] + jobs[4:5])] == [
        ["pre"], ["gbdt", "ft"], [], ["ens"]
    ]  # fmt: skip


# --- teacher=self: consistency on the unlabeled QGs ---------------------------------------------


class _Sum(torch.nn.Module):
    """A ranker scoring an item by the sum of its features times one weight."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(1.0))

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.w * features.sum(dim=-1)


def _self_teaching(noise: float, *, by_itself: bool = True):
    from scarce_ltr.data.teachers import TeachingConfig
    from scarce_ltr.finetune.teacher import Teaching

    taught = np.array([False, True, False])  # train QG 1 is unlabeled
    config = TeachingConfig(noise=noise)
    return Teaching(None, None, taught, config, {}, by_itself=by_itself)


def test_self_teaching_targets_are_the_clean_scores_of_the_taught_rows() -> None:
    model = _Sum()
    features = torch.arange(2 * 3 * 2, dtype=torch.float32).reshape(2, 3, 2)
    labels = torch.tensor([[2.0, 0.0, 1.0], [0.0, 0.0, 0.0]])  # row 1's are never read
    mask = torch.ones(2, 3, dtype=torch.bool)
    groups = torch.tensor([0, 1])
    generator = torch.Generator().manual_seed(0)
    teaching = _self_teaching(0.5)
    view, targets = teaching.student_view(
        model, features, labels, mask=mask, groups=groups, generator=generator
    )
    assert torch.equal(view[0], features[0]) and torch.equal(targets[0], labels[0])  # labeled
    assert torch.equal(targets[1], features[1].sum(dim=-1))  # the model's clean scores
    assert not targets.requires_grad
    # the taught row's view: the clean items plus N(0, 0.5^2), drawn over the batch's real items
    drawn = 0.5 * torch.randn((6, 2), generator=torch.Generator().manual_seed(0))
    assert torch.allclose(view[1] - features[1], drawn[3:], atol=1e-6)
    assert torch.equal(labels[1], torch.zeros(3))  # the batch's own labels stay untouched


def test_a_run_teachers_targets_stay_with_a_noised_view() -> None:
    """``teaching.noise`` with a run as teacher: the taught rows are noised, their targets (the
    teacher's scores) and the labeled rows are not touched."""
    features = torch.ones(2, 3, 2)
    features[1, 2] = 0.0  # padding, zero as the batcher pads
    labels = torch.tensor([[2.0, 0.0, 1.0], [0.5, -0.5, 0.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    generator = torch.Generator().manual_seed(1)
    view, targets = _self_teaching(0.2, by_itself=False).student_view(
        _Sum(), features, labels, mask=mask, groups=torch.tensor([0, 1]), generator=generator
    )
    assert torch.equal(targets, labels) and torch.equal(view[0], features[0])
    assert (view[1, :2] != 1.0).all() and torch.equal(view[1, 2], torch.zeros(2))  # not padding
    same, _ = _self_teaching(0.0, by_itself=False).student_view(
        _Sum(), features, labels, mask=mask, groups=torch.tensor([0, 1]), generator=generator
    )
    assert torch.equal(same, features)  # no noise: the batch as it came


def test_self_teaching_learns_only_from_a_noised_view() -> None:
    """Without noise the student's scores are its targets and the consistency term has no
    gradient (why teacher=self needs teaching.noise > 0); with noise it has one."""
    from scarce_ltr.losses import LOSSES

    features = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [3.0, 1.0]]] * 2)
    labels = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0]])
    mask = torch.ones(2, 3, dtype=torch.bool)
    groups = torch.tensor([1, 1])  # both rows taught: the loss is the consistency term alone
    grads = []
    for noise in (0.0, 0.5):
        model, teaching = _Sum(), _self_teaching(noise)
        generator = torch.Generator().manual_seed(3)
        view, targets = teaching.student_view(
            model, features, labels, mask=mask, groups=groups, generator=generator
        )
        scores = model(view, mask)
        loss = teaching.loss(LOSSES["softmax"], scores, targets, mask=mask, groups=groups)
        loss.backward()
        grads.append(float(model.w.grad))
    assert grads[0] == pytest.approx(0.0, abs=1e-7) and abs(grads[1]) > 1e-4


def test_a_ranker_taught_by_itself(runs, tmp_path) -> None:
    args = [*FINETUNE, "pretrained=none", "teacher=self"]
    first = run([*args, f"run_dir={tmp_path / 'a'}"])
    run([*args, f"run_dir={tmp_path / 'b'}"])
    assert _same_scores(tmp_path / "a", tmp_path / "b")  # deterministic
    assert first["model"] == "scratch+full~self" and first["group"] == "hybrid"
    assert first["teacher"] == {
        "run": "self",
        "model": "self",
        "targets": "soft",
        "weight": 1.0,
        "n_groups": 15,
        "noise": 0.3,
        "temperature": 1.0,
    }
    plain = run([*FINETUNE, "pretrained=none", f"run_dir={tmp_path / 'plain'}"])
    assert plain["model"] == "scratch+full"
    with np.load(tmp_path / "a/scores.npz") as a, np.load(tmp_path / "plain/scores.npz") as u:
        assert not np.array_equal(a["vali"], u["vali"])  # the consistency term changed training
    resnet = run(["baseline", "resnet", *DATA, *DEEP, "teacher=self", f"run_dir={tmp_path / 'r'}"])
    assert resnet["model"] == "resnet~self" and resnet["teacher"]["noise"] == 0.3


def test_self_teaching_keys_are_checked(tmp_path) -> None:
    args = [*FINETUNE, "pretrained=none", "teacher=self", f"run_dir={tmp_path / 'x'}"]
    with pytest.raises(UserError, match="teacher=self learns its own scores"):
        run([*args, "teaching.targets=buckets"])
    with pytest.raises(UserError, match="teacher=self needs teaching.noise > 0"):
        run([*args, "teaching.noise=0"])
    with pytest.raises(UserError, match="teaching.noise"):
        run([*args, "teaching.noise=-1"])
    with pytest.raises(UserError, match="gbdt.teacher=self: a pseudo-labeling GBDT teaches"):
        run(["baseline", "gbdt-pseudo", *DATA, *GBDT, "gbdt.teacher=self"])
    assert model_group("scratch+full~self") == model_group("resnet~self") == "hybrid"
    for bad in ("gbdt-pseudo~self", "gbdt~self", "ensemble:resnet,gbdt~self"):
        with pytest.raises(UserError):
            model_group(bad)


def test_a_sweep_plans_a_self_taught_model_without_a_teacher_job(tmp_path, capsys) -> None:
    args = ["sweep", "quick", "fractions=[0.5]", "seeds=[0]", "logger=none", "report=false"]
    args += ["--dry-run", f"run_dir={tmp_path / 's'}", "overrides.finetune=[epochs=2]"]
    args += ["overrides.per_model.scratch+full=[teaching.weight=0.5]"]
    run([*args, "models=[scratch+full~self,resnet~self]"])
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("[to run]")]
    assert len(lines) == 2  # no teacher job
    by_model = {Path(x.split("run_dir=")[1]).parts[-3]: x for x in lines}
    assert " teacher=self " in f"{by_model['scratch+full~self']} "
    assert "pretrained=none" in by_model["scratch+full~self"]
    assert "teaching.weight=0.5" in by_model["scratch+full~self"]  # the student's per_model list
    assert by_model["resnet~self"].startswith("[to run] baseline resnet ")
    # A seed ensemble of a self-taught model: every member teaches itself (no teacher run).
    run([*args, "models=[seed-ensemble:scratch+full~self]"])
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("[to run]")]
    members = [x for x in lines if x.startswith("[to run] finetune ")]
    assert len(members) == 3 and all(" teacher=self " in f"{x} " for x in members)
