"""The deep rankers' seeded Optuna search on vali (`finetune.search`, ``search.n_trials``):
seeded, resumable after a kill, chosen on vali, refused with a clear message when its space is
bad, reachable from a sweep's ``per_model`` overrides, and absent (nothing changed) when off."""

from __future__ import annotations

import json
import os
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import fork_or_skip, small_encoder, tiny_data

import scarce_ltr.finetune.grid as grid
from scarce_ltr.cli import STAGES, run
from scarce_ltr.core.config import CONFIG_ROOT, load_config
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import FAULT_AT_ENV, FAULT_COUNTER_ENV
from scarce_ltr.search.trial_scores import read_trial_scores
from scarce_ltr.sweeps.cells import plan_cells
from scarce_ltr.sweeps.sweep import SweepConfig

# Numbers measured on the CPU, and children forked mid-run (tests/conftest.py).
pytestmark = pytest.mark.cpu

DATA = [*tiny_data(), "logger=none"]
RESNET = ["baseline", "resnet", *DATA, *(f"deep.{o}" for o in small_encoder())]
# 3 trials of a few epochs each: a search of about a second
SEARCH = ["search.n_trials=3", "search.head_epochs=[1,3]", "search.full_epochs=[1,3]"]
DEEP_SEARCH = ["deep.search.n_trials=3", "deep.search.full_epochs=[1,3]", "epochs=3"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """The one pretrained encoder every trial starts from (as in test_finetune_cli)."""
    folder = tmp_path_factory.mktemp("pretrain") / "simclr-rank"
    torch.set_num_threads(1)
    run(["pretrain", "simclr-rank", *DATA, *small_encoder(), "epochs=1", "monitor.enabled=false"]
        + [f"run_dir={folder}"])  # fmt: skip
    return folder


def finetune(run_dir: Path, pretrained: Path, *args: str) -> dict:
    return run(["finetune", "full", *DATA, "head_hidden=16", f"pretrained={pretrained}",
                f"run_dir={run_dir}", *args])  # fmt: skip


def _metrics(report: dict) -> str:
    """The report's metrics as text (NaN, for no outlier QG, equals itself there)."""
    return json.dumps(report["metrics"], sort_keys=True)


def _trials(report: dict) -> list[dict]:
    """Every trial's params and vali scores (its seconds left out: they are timings)."""
    return [{k: v for k, v in t.items() if k != "seconds"} for t in report["search"]["trials"]]


def test_search_off_is_the_fixed_recipe(pretrained: Path, tmp_path: Path) -> None:
    """Numbers of the code before the search existed: off (the default) changes nothing."""
    got = finetune(tmp_path / "full", pretrained, "epochs=4")
    assert "search" not in got and not (tmp_path / "full" / "grid").exists()
    assert read_trial_scores(tmp_path / "full") is None  # one trial: nothing to cross-fit
    assert got["metrics"]["vali"]["ndcg@5"] == pytest.approx(0.23143515758643185, abs=1e-9)
    assert got["metrics"]["test"]["ndcg@5"] == pytest.approx(0.24737765238107673, abs=1e-9)
    assert '"search"' not in got["identity"]  # resumes and skips the runs made before it
    got = run([*RESNET, "epochs=3", f"run_dir={tmp_path / 'resnet'}"])
    assert "search" not in got and [p["lr"] for p in got["grid"]] == [1e-2, 1e-3, 1e-4]
    _, per_point = read_trial_scores(tmp_path / "resnet")  # a grid's points are its trials
    assert np.nanmean(per_point, axis=1) == pytest.approx(
        [p["best_vali_ndcg@5"] for p in got["grid"]], abs=1e-9
    )
    assert got["metrics"]["vali"]["ndcg@5"] == pytest.approx(0.45331623483043537, abs=1e-9)
    assert got["metrics"]["test"]["ndcg@5"] == pytest.approx(0.5368153420427116, abs=1e-9)


def test_search_is_seeded_and_keeps_the_vali_best_trial(
    pretrained: Path, tmp_path: Path, monkeypatch
) -> None:
    scored = []  # every scoring of test: once per run, by the chosen trial's model
    evaluation_report = grid.evaluation_report
    monkeypatch.setattr(
        grid, "evaluation_report", lambda *a: scored.append(1) or evaluation_report(*a)
    )
    first = finetune(tmp_path / "a", pretrained, *SEARCH)
    again = finetune(tmp_path / "b", pretrained, *SEARCH)
    assert len(scored) == 2
    trials = _trials(first)
    assert [t["trial"] for t in trials] == [0, 1, 2]
    assert trials == _trials(again)  # the same seed: the same trials, the same scores
    assert _metrics(first) == _metrics(again)
    # trial 0 is the fixed recipe (full.yaml's lr and loss; epochs clipped into the ranges)
    assert trials[0]["lr"] == 5e-5 and trials[0]["loss"] == "lambdarank"
    assert len({t["lr"] for t in trials}) == 3 and len({t["head_hidden"] for t in trials}) > 1
    vali = [t["best_vali_ndcg@5"] for t in trials]
    chosen = first["search"]["chosen_trial"]
    assert chosen == vali.index(max(vali))
    assert first["metrics"]["vali"]["ndcg@5"] == pytest.approx(vali[chosen], abs=1e-9)
    # Each trial's per-QG vali (trials.npz, for select rule=crossfit), scored from its model.
    qids, per_trial = read_trial_scores(tmp_path / "a")
    assert per_trial.shape == (3, len(qids))
    assert np.nanmean(per_trial, axis=1) == pytest.approx(vali, abs=1e-9)
    params = first["search"]["chosen_params"]
    assert first["learning_rate"] == params["lr"] and first["loss"]["name"] == params["loss"]
    assert first["phases"][0]["epochs"] == params["head_epochs"]
    model = tmp_path / "a" / "model.pt"
    assert (
        model.read_bytes()
        == (tmp_path / "a" / "grid" / f"trial={chosen}" / "model.pt").read_bytes()
    )
    other = finetune(tmp_path / "c", pretrained, *SEARCH, "seed=1")
    assert [t["lr"] for t in _trials(other)][1:] != [t["lr"] for t in trials][1:]


def test_the_first_trials_are_the_fixed_grid(tmp_path: Path) -> None:
    """resnet's search starts with its grid's three rates, the other keys as configured
    (weight decay 0 included): the same models, so vali can only choose at least as well."""
    fixed = run([*RESNET, "epochs=3", f"run_dir={tmp_path / 'fixed'}"])
    searched = run([*RESNET, *DEEP_SEARCH, f"run_dir={tmp_path / 'search'}"])
    trials = searched["search"]["trials"]
    assert [t["lr"] for t in trials] == [p["lr"] for p in fixed["grid"]]
    assert all(t["weight_decay"] == 0.0 and t["loss"] == "lambdarank" for t in trials)
    assert [t["best_vali_ndcg@5"] for t in trials] == [p["best_vali_ndcg@5"] for p in fixed["grid"]]
    assert _metrics(searched) == _metrics(fixed)


def _killed_run(args: list[str], tmp_path: Path, kill_at: int) -> int:
    """Run the command in a forked child killed (SIGKILL) at its ``kill_at``-th write; its
    exit code, negative for the signal; ``kill_at`` 0: run to the end, return the writes."""
    counter = tmp_path / f"counter-{kill_at}"
    pid = fork_or_skip()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)
            os.environ.update(
                {FAULT_COUNTER_ENV: str(counter), FAULT_AT_ENV: str(kill_at or 10**9)}
            )
            run(args)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if kill_at == 0:
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        return int(counter.read_text())
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def test_search_killed_in_a_trial_resumes_to_the_same_result(tmp_path: Path) -> None:
    """resnet's search (the deep-baseline path): killed inside its second trial, run again,
    it ends with the trials, scores and model of a search never killed."""
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    writes = _killed_run([*RESNET, *DEEP_SEARCH, f"run_dir={reference}"], tmp_path, 0)
    expected = json.loads((reference / "report.json").read_text())
    first_trial = sum(1 for _ in (reference / "grid").glob("trial=0/*"))
    code = _killed_run([*RESNET, *DEEP_SEARCH, f"run_dir={crashed}"], tmp_path, writes // 2)
    assert code == -9
    done = sorted(p.parent.name for p in (crashed / "grid").glob("*/DONE"))
    assert done and len(done) < 3 and not (crashed / "DONE").exists(), (done, first_trial)
    got = run([*RESNET, *DEEP_SEARCH, f"run_dir={crashed}"])
    assert _trials(got) == _trials(expected)
    assert _metrics(got) == _metrics(expected)
    assert got["search"]["chosen_trial"] == expected["search"]["chosen_trial"]
    assert (crashed / "model.pt").read_bytes() == (reference / "model.pt").read_bytes()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("search.lr=[1e-3]", r"search.lr must be \[low, high\]"),
        ("search.lr=[1e-2,1e-4]", r"search.lr must be \[low, high\] with low <= high"),
        ("search.lr=[0,1e-2]", "search.lr must be > 0"),
        ("search.dropout=[0,1]", "search.dropout must be >= 0 and < 1"),
        ("search.loss=[lambdarank,nope]", "search.loss: 'nope' is not a loss"),
        ("search.n_trials=-1", "search.n_trials must be >= 0"),
        ("search.momentum=[0,1]", "momentum"),
        ("search.head_epochs=[0,3]", "would train no epoch"),
    ],
)
def test_a_bad_search_space_is_named(tmp_path: Path, override: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        run(["finetune", "full", *DATA, "pretrained=none", "search.n_trials=2",
             "search.full_epochs=[0,3]", override, f"run_dir={tmp_path}"])  # fmt: skip
    with pytest.raises(UserError, match="deep.search.full_epochs"):
        run([*RESNET, "deep.search.n_trials=2", "deep.search.full_epochs=[0,3]"])
    if "head_epochs" not in override:  # one phase: a deep baseline does not search it
        with pytest.raises(UserError, match=message.replace("search.", "deep.search.")):
            run([*RESNET, "deep.search.n_trials=2", f"deep.{override}", f"run_dir={tmp_path}"])
    assert not any(tmp_path.iterdir())


def _planned_with_searches(models: list[str], folder: Path) -> list:
    """The jobs of the quick sweep of ``models`` (seed 0, 20 %) where simclr-rank+full and
    resnet search their recipes through ``per_model``."""
    per_model = {"simclr-rank+full": ["search.n_trials=30"], "resnet": ["deep.search.n_trials=30"]}
    cfg, _ = load_config(
        SweepConfig,
        ["name=quick", f"models={json.dumps(models)}", "seeds=[0]", "fractions=[0.2]"]
        + [f"overrides.per_model.{m}={json.dumps(o)}" for m, o in per_model.items()],
        stage_file=CONFIG_ROOT / "sweep" / "quick.yaml",
    )
    return plan_cells(cfg, folder)[0]


def test_a_sweep_reaches_the_search_through_per_model(tmp_path: Path) -> None:
    models = ["simclr-rank+full", "resnet"]
    jobs = _planned_with_searches(models, tmp_path)
    trials = {}
    for job in (j for j in jobs if j.stage in ("finetune", "baseline")):
        stage = STAGES[job.stage]
        overrides = [o for o in job.overrides if not o.startswith("pretrained=")]
        if job.stage == "finetune":  # the encoder's run is planned, not made
            overrides.append("pretrained=none")
        job_cfg, _ = load_config(
            stage.config(),
            [f"{stage.name_key}={job.name}", *overrides],
            stage_file=CONFIG_ROOT / stage.config_folder / f"{job.name}.yaml",
        )
        search = job_cfg.search if job.stage == "finetune" else job_cfg.deep.search
        trials[job.name] = search.n_trials
    assert trials == {"full": 30, "resnet": 30}


def test_recipe_from_trains_the_chosen_trial_of_a_searched_run(
    pretrained: Path, tmp_path: Path
) -> None:
    searched = finetune(tmp_path / "searched", pretrained, *SEARCH)
    source = f"search.recipe_from={tmp_path / 'searched'}"
    same_seed = finetune(tmp_path / "again", pretrained, *SEARCH, source)
    assert same_seed["search"]["n_trials"] == 1
    assert same_seed["search"]["chosen_params"] == searched["search"]["chosen_params"]
    assert "recipe" in same_seed["search"]["sampler"]
    # a trial trains from the run's seed: the same seed gives the searched run's chosen trial
    assert _metrics(same_seed) == _metrics(searched)
    other_seed = finetune(tmp_path / "seed1", pretrained, *SEARCH, source, "seed=1")
    assert other_seed["search"]["chosen_params"] == searched["search"]["chosen_params"]
    assert [p.name for p in (tmp_path / "seed1" / "grid").iterdir()] == ["trial=0"]
    # a deep baseline takes its recipe the same way
    run([*RESNET, *DEEP_SEARCH, f"run_dir={tmp_path / 'resnet'}"])
    again = run([*RESNET, *DEEP_SEARCH, f"deep.search.recipe_from={tmp_path / 'resnet'}",
                 "seed=1", f"run_dir={tmp_path / 'resnet1'}"])  # fmt: skip
    chosen = json.loads((tmp_path / "resnet" / "report.json").read_text())["search"]
    assert again["search"]["chosen_params"] == chosen["chosen_params"]


def test_a_recipe_from_no_searched_run_is_one_clear_error(pretrained: Path, tmp_path: Path):
    finetune(tmp_path / "fixed", pretrained, "epochs=1")
    with pytest.raises(UserError, match=r"recipe_from=.*fixed: not a finished run whose search"):
        finetune(tmp_path / "b", pretrained, *SEARCH, f"search.recipe_from={tmp_path / 'fixed'}")
    with pytest.raises(UserError, match=r"search.recipe_from trains .* give search.n_trials > 0"):
        finetune(tmp_path / "c", pretrained, f"search.recipe_from={tmp_path / 'fixed'}")
    run([*RESNET, *DEEP_SEARCH, f"run_dir={tmp_path / 'resnet'}"])
    with pytest.raises(UserError, match=r"its search chose .* this run searches"):
        finetune(tmp_path / "d", pretrained, *SEARCH, f"search.recipe_from={tmp_path / 'resnet'}")


def test_a_seed_ensemble_searches_its_first_member_and_the_others_take_its_recipe(
    tmp_path: Path,
) -> None:
    models = ["seed-ensemble:simclr-rank+full", "seed-ensemble:resnet", "seed-ensemble:scratch+mp"]
    jobs = _planned_with_searches(models, tmp_path)
    trained = {j.key: j for j in jobs if j.stage in ("finetune", "baseline")}
    for model, section in (
        ("simclr-rank+full", "search"),
        ("resnet", "deep.search"),
        ("scratch+mp", None),
    ):
        first = next(j for k, j in trained.items() if f"/{model}/" in k and k.endswith("seed=0"))
        others = [j for k, j in trained.items() if f"/{model}/" in k and j is not first]
        assert len(others) == 2, model
        for job in others:
            taken = [o for o in job.overrides if ".recipe_from=" in o]
            if section is None:  # a fixed recipe: the members are independent, as before
                assert taken == [] and first.key not in job.depends_on
            else:
                assert taken == [f"{section}.recipe_from={json.dumps(str(first.run_dir))}"]
                assert first.key in job.depends_on
        assert not any(".recipe_from=" in o for o in first.overrides)
