"""A portfolio of recipes in place of a search (``search.strategy=portfolio``,
``deep.search.strategy=portfolio``) and its mining (``./run.sh portfolio``): exactly the file's
recipes are trained, in order, the vali-best kept; a killed run resumes to the same choice; a bad
file is refused naming it; the mining command fills its matrix once and chooses greedily."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_search import DATA, DEEP_SEARCH, RESNET, _killed_run, _metrics, _trials
from tiny import letor_folder, small_encoder

from scarce_ltr.cli import run
from scarce_ltr.core.config import CONFIG_ROOT
from scarce_ltr.core.errors import UserError
from scarce_ltr.finetune.search_config import read_portfolio
from scarce_ltr.search.portfolio import cell_ranks, greedy_portfolio

# Numbers measured on the CPU, and children forked mid-run (tests/conftest.py).
pytestmark = pytest.mark.cpu

FULL = ["finetune", "full", *DATA, "pretrained=none", *small_encoder(), "head_hidden=16"]
# Three recipes of a few epochs each; the second names no head_epochs (the fixed recipe's 3)
# and the third sets head_hidden, which a linear head does not have.
RECIPES = [
    {"lr": 1e-3, "head_epochs": 2, "full_epochs": 1, "loss": "softmax"},
    {"lr": 1e-2, "full_epochs": 2, "weight_decay": 1e-4, "noise_std": 0.1},
    {"lr": 3e-4, "head_epochs": 1, "full_epochs": 2, "head_hidden": 8, "dropout": 0.1},
]
RECIPE_KEYS = ("lr", "weight_decay", "dropout", "head_epochs", "full_epochs", "loss",
               "noise_std", "head_hidden", "l2sp")  # fmt: skip


def portfolio_file(folder: Path, recipes: list[dict], name: str = "portfolio.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump({"recipes": recipes, "note": "records are not read"}))
    return path


def _params(report: dict) -> list[dict]:
    return [{k: t[k] for k in RECIPE_KEYS if k in t} for t in report["search"]["trials"]]


def test_a_portfolio_trains_exactly_its_recipes_and_keeps_the_vali_best(tmp_path: Path) -> None:
    path = portfolio_file(tmp_path, RECIPES)
    args = [*FULL, "head_epochs=3", "search.strategy=portfolio", f"search.portfolio={path}"]
    got = run([*args, f"run_dir={tmp_path / 'run'}"])
    assert sorted(p.name for p in (tmp_path / "run" / "grid").iterdir()) == [
        "trial=0", "trial=1", "trial=2",
    ]  # fmt: skip
    search = got["search"]
    assert search["n_trials"] == 3 and search["strategy"] == "portfolio"
    assert (
        search["portfolio"] == str(path)
        and search["portfolio_hash"] == read_portfolio(str(path)).digest
    )
    params = _params(got)
    for recipe, trained in zip(RECIPES, params, strict=True):
        assert {k: trained[k] for k in recipe} == recipe  # each recipe, in file order
    # the keys a recipe does not name keep the fixed recipe's values
    assert params[1]["head_epochs"] == 3 and params[0]["head_hidden"] == 16
    assert params[0]["weight_decay"] == 0.0 and params[0]["noise_std"] == 0.0
    vali = [t["best_vali_ndcg@5"] for t in search["trials"]]
    assert search["chosen_trial"] == vali.index(max(vali))
    assert search["chosen_params"] == params[search["chosen_trial"]]
    assert got["metrics"]["vali"]["ndcg@5"] == pytest.approx(max(vali), abs=1e-9)
    identity = json.loads(got["identity"])
    assert identity["search"]["strategy"] == "portfolio"
    # a linear head has no width nor dropout: those keys are dropped, as a search drops them
    lp = run(["finetune", "lp", *DATA, "pretrained=none", *small_encoder(), "head_epochs=2",
              "search.strategy=portfolio", f"search.portfolio={path}",
              f"run_dir={tmp_path / 'lp'}"])  # fmt: skip
    assert all("head_hidden" not in t and "dropout" not in t for t in _params(lp))
    assert [t["lr"] for t in _params(lp)] == [r["lr"] for r in RECIPES]


def test_a_deep_baseline_drops_the_keys_it_does_not_have(tmp_path: Path) -> None:
    path = portfolio_file(tmp_path, RECIPES)
    got = run([*RESNET, "deep.search.strategy=portfolio", f"deep.search.portfolio={path}",
               f"run_dir={tmp_path / 'resnet'}"])  # fmt: skip
    params = _params(got)
    assert [p["full_epochs"] for p in params] == [1, 2, 2]  # a deep baseline's max_epochs
    assert all("head_epochs" not in p for p in params)
    assert params[2]["head_hidden"] == 8 and got["search"]["strategy"] == "portfolio"


def test_the_shipped_portfolio_is_mined_on_both_real_data_sets() -> None:
    """configs/portfolio/deep.yaml, the default, is a mined portfolio: at most eight recipes that
    pass a run's checks, mined from searched cells of OHSUMED and Yandex, its record in the file."""
    shipped = read_portfolio("deep")
    assert shipped.path == CONFIG_ROOT / "portfolio" / "deep.yaml"
    assert 1 < len(shipped.recipes) <= 8
    assert all(set(recipe) <= set(RECIPE_KEYS) for recipe in shipped.recipes)
    record = yaml.safe_load(shipped.path.read_text())
    assert record["k"] == len(shipped.recipes) == len(record["mean_rank"])
    assert {cell["dataset"] for cell in record["mined_from"]} == {"ohsumed", "yandex"}
    chosen = [c["recipe"] for c in record["candidates"] if c["chosen"]]
    assert sorted(map(str, chosen)) == sorted(map(str, record["recipes"]))
    assert "placeholder" not in shipped.path.read_text().lower()


def test_optuna_stays_the_default_and_its_identity_unchanged(tmp_path: Path) -> None:
    got = run([*RESNET, *DEEP_SEARCH, f"run_dir={tmp_path / 'search'}"])
    assert "strategy" not in got["search"] and got["search"]["sampler"].startswith("optuna")
    searched = run([*FULL, "search.n_trials=2", "search.head_epochs=[1,2]",
                    "search.full_epochs=[1,2]", f"run_dir={tmp_path / 'full'}"])  # fmt: skip
    # a search's identity (checkpoints, trials) is the one it had before portfolios existed
    assert not {"strategy", "portfolio"} & set(json.loads(searched["identity"])["search"])


def test_a_portfolio_killed_in_a_trial_resumes_to_the_same_choice(tmp_path: Path) -> None:
    path = portfolio_file(tmp_path, RECIPES)
    args = [*RESNET, "deep.search.strategy=portfolio", f"deep.search.portfolio={path}"]
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    writes = _killed_run([*args, f"run_dir={reference}"], tmp_path, 0)
    expected = json.loads((reference / "report.json").read_text())
    code = _killed_run([*args, f"run_dir={crashed}"], tmp_path, writes // 2)
    assert code == -9
    done = sorted(p.parent.name for p in (crashed / "grid").glob("*/DONE"))
    assert done and len(done) < 3 and not (crashed / "DONE").exists(), done
    got = run([*args, f"run_dir={crashed}"])
    assert _trials(got) == _trials(expected)
    assert _metrics(got) == _metrics(expected)
    assert got["search"]["chosen_trial"] == expected["search"]["chosen_trial"]
    assert (crashed / "model.pt").read_bytes() == (reference / "model.pt").read_bytes()


def test_a_recipe_may_name_a_fresh_encoders_options(tmp_path: Path) -> None:
    """A portfolio may mix encoders: a recipe's ``encoder`` options, over the run's fresh
    encoder, train the model a plain run with those ``encoder.*`` trains, bundle included; a
    pretrained encoder keeps its own (the key dropped, as any key a model does not search)."""
    pytest.importorskip("tabm", reason="the tabular extra is not installed")
    from scarce_ltr.serving.ranker import load_ranker

    tabm = {"kind": "tabm", "k": 2}
    short = {"lr": 1e-3, "head_epochs": 1, "full_epochs": 1}
    path = portfolio_file(tmp_path, [short, short | {"encoder": tabm}])
    fresh = ["finetune", "full", *DATA, "pretrained=none", "encoder.width=16",
             "encoder.n_blocks=2", "head_hidden=16", "head_epochs=1", "full_epochs=1"]  # fmt: skip
    mixed = run([*fresh, "search.strategy=portfolio", f"search.portfolio={path}",
                 f"run_dir={tmp_path / 'mixed'}"])  # fmt: skip
    trials = mixed["search"]["trials"]
    assert "encoder" not in trials[0] and trials[1]["encoder"] == tabm
    plain = run([*fresh, "encoder.kind=tabm", "encoder.k=2", "optimizer.lr=1e-3",
                 f"run_dir={tmp_path / 'plain'}"])  # fmt: skip
    assert trials[1]["best_vali_ndcg@5"] == pytest.approx(plain["metrics"]["vali"]["ndcg@5"])
    # the chosen trial's encoder is the bundle's: a one-recipe portfolio scores as the plain run
    alone = portfolio_file(tmp_path, [short | {"encoder": tabm}], "alone.yaml")
    run([*fresh, "search.strategy=portfolio", f"search.portfolio={alone}",
         f"run_dir={tmp_path / 'alone'}"])  # fmt: skip
    items = np.random.default_rng(0).normal(size=(7, 12)).astype(np.float32)
    np.testing.assert_allclose(
        load_ranker(tmp_path / "alone").predict(items),
        load_ranker(tmp_path / "plain").predict(items),
        rtol=1e-5,
    )
    # options this run's encoder cannot take: refused naming the recipe, before any trial trains
    bad = portfolio_file(tmp_path, [short, short | {"encoder": {"k": 4}}], "bad.yaml")
    with pytest.raises(UserError, match=r"recipes\[1\] .*encoder.k is read by encoder.kind"):
        run([*fresh, "search.strategy=portfolio", f"search.portfolio={bad}",
             f"run_dir={tmp_path / 'bad'}"])  # fmt: skip


def test_a_pretrained_or_baseline_space_drops_a_recipes_encoder() -> None:
    from scarce_ltr.finetune.search_config import SearchConfig
    from scarce_ltr.finetune.search_space import Space

    recipes = [{"lr": 1e-3, "encoder": {"kind": "tabm"}}]
    fixed = [{"lr": 2e-4}]
    kept = Space.of(SearchConfig(), ["lr"], fixed=fixed, recipe_keys=["encoder"])
    assert kept.fixed_trials(recipes) == [{"lr": 1e-3, "encoder": {"kind": "tabm"}}]
    assert kept.fixed_trials([{"lr": 1e-3}]) == [{"lr": 1e-3}]  # named only where given
    assert Space.of(SearchConfig(), ["lr"], fixed=fixed).fixed_trials(recipes) == [{"lr": 1e-3}]


def test_trials_at_once_train_the_same_recipes(tmp_path: Path) -> None:
    """``n_jobs`` with nothing sampled: the same trials and choice as one after another."""
    path = portfolio_file(tmp_path, RECIPES)
    args = [*RESNET, "deep.search.strategy=portfolio", f"deep.search.portfolio={path}"]
    one = run([*args, f"run_dir={tmp_path / 'one'}"])
    two = run([*args, "deep.search.n_jobs=2", f"run_dir={tmp_path / 'two'}"])
    assert _params(one) == _params(two)
    assert one["search"]["chosen_trial"] == two["search"]["chosen_trial"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"missing\.yaml: no such file"),
        ("recipes: [lr: 1e-3", r"bad\.yaml:\d+: not valid YAML"),
        ("recipes: []", r"bad\.yaml: a portfolio file holds 'recipes:'"),
        ("note: nothing", r"bad\.yaml: a portfolio file holds 'recipes:'"),
        ("recipes: [{lr: 1.0e-3}, {momentum: 0.9}]", r"bad\.yaml: recipes\[1\]: 'momentum'"),
        ("recipes: [{lr: 0}]", r"bad\.yaml: recipes\[0\]: lr=0.0: lr must be > 0"),
        ("recipes: [{dropout: 1.0}]", r"recipes\[0\]: dropout=1.0: dropout must be >= 0 and < 1"),
        ("recipes: [{head_epochs: 2.5}]", r"recipes\[0\]: head_epochs must be a whole number"),
        ("recipes: [{loss: nope}]", r"recipes\[0\]: loss 'nope' is not a loss"),
        ("recipes: [{lr: fast}]", r"recipes\[0\]: lr must be a finite number"),
        ("recipes: [{lr: 1.0e-3}, {lr: 1.0e-3}]", r"recipes\[1\] repeats recipes\[0\]"),
        ("recipes: [{encoder: tabm}]", r"recipes\[0\]: encoder must be a mapping of encoder"),
        ("recipes: [{encoder: {depth: 3}}]", r"recipes\[0\]: encoder.depth is no encoder option"),
        ("recipes: [{encoder: {k: eight}}]", r"recipes\[0\]: encoder.k must be a whole number"),
        ("recipes: [" + ", ".join(f"{{lr: {i}.0e-4}}" for i in range(1, 10)) + "]",
         r"bad\.yaml: 9 recipes; a portfolio holds at most 8"),
    ],
)  # fmt: skip
def test_a_bad_portfolio_is_refused_naming_the_file_and_key(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / ("missing.yaml" if content is None else "bad.yaml")
    if content is not None:
        path.write_text(content)
    out = tmp_path / "run"
    with pytest.raises(UserError, match=f"search.portfolio: .*{message}") as caught:
        run([*FULL, "search.strategy=portfolio", f"search.portfolio={path}", f"run_dir={out}"])
    assert "\n" not in str(caught.value)
    with pytest.raises(UserError, match=f"deep.search.portfolio: .*{message}"):
        run([*RESNET, "deep.search.strategy=portfolio", f"deep.search.portfolio={path}",
             f"run_dir={out}"])  # fmt: skip
    assert not out.exists()  # refused before the run folder is made


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["search.strategy=grid"], "search.strategy must be one of optuna, portfolio"),
        (["search.strategy=portfolio", "search.n_trials=30"],
         "search.n_trials=30 with search.strategy=portfolio: .* leave search.n_trials at 0"),
        (["search.strategy=portfolio", "search.pruner=median"], "search.pruner=median with"),
        (["search.portfolio=x.yaml"], "search.portfolio is read with search.strategy=portfolio"),
        (["search.strategy=portfolio", "search.portfolio=nope"],
         "'nope' is no file and no shipped portfolio .*deep"),
        # valid values, but no epoch for this model: refused before any trial trains
        (["search.strategy=portfolio", "search.portfolio=PATH"],
         r"portfolio\.yaml: recipes\[0\] .*: head_epochs \+ full_epochs must be >= 1"),
    ],
)  # fmt: skip
def test_portfolio_keys_are_checked(tmp_path: Path, overrides: list[str], message: str) -> None:
    path = portfolio_file(tmp_path, [{"lr": 1e-3, "head_epochs": 0, "full_epochs": 0}])
    overrides = [o.replace("PATH", str(path)) for o in overrides]
    with pytest.raises(UserError, match=message):
        run([*FULL, *overrides, f"run_dir={tmp_path / 'run'}"])


def test_greedy_choice_on_a_hand_made_matrix() -> None:
    scores = np.array([
        [0.90, 0.90, 0.10, 0.10],  # a specialist of cells 0 and 1
        [0.60, 0.60, 0.60, 0.60],  # the generalist: never the best, never the worst
        [0.10, 0.10, 0.90, 0.50],  # a specialist of cell 2
        [0.10, 0.10, 0.50, 0.90],  # a specialist of cell 3
    ])  # fmt: skip
    ranks = cell_ranks(scores)
    assert ranks[:, 0].tolist() == [1.0, 2.0, 3.5, 3.5]  # ties share their mean rank
    chosen, steps = greedy_portfolio(scores, 4)
    # step 1: the generalist, rank 2 everywhere (2.0 against 2.5, 2.75, 2.75)
    # step 2: with cells 0, 1 covered: [1, 1, 2, 2] -> 1.5, against [2, 2, 1, 2] -> 1.75
    # step 3: the specialists of cells 2 and 3 tie at [1, 1, 1, 2] -> 1.25: the earlier wins
    assert chosen == [1, 0, 2, 3]
    assert steps == [2.0, 1.5, 1.25, 1.0]
    assert greedy_portfolio(scores, 8)[0] == chosen  # k above the candidates: all of them
    with_nan = scores.copy()
    with_nan[1, 0] = np.nan  # not scored on cell 0: ranks below every score there
    assert cell_ranks(with_nan)[1, 0] == 4.0


@pytest.fixture(scope="module")
def searched_cells(tmp_path_factory) -> Path:
    """Two searched cells of 3 trials (a fresh full and a resnet), as a sweep leaves them."""
    root = tmp_path_factory.mktemp("cells")
    run([*FULL, "search.n_trials=3", "search.head_epochs=[1,2]", "search.full_epochs=[1,2]",
         f"run_dir={root / 'synthetic' / 'full'}"])  # fmt: skip
    letor = letor_folder(root / "data" / "other")  # a second data set: letor-other
    run(["baseline", "resnet", "data=letor", f"data.path={letor}", "logger=none",
         *(f"deep.{o}" for o in small_encoder()), *DEEP_SEARCH,
         f"run_dir={root / 'other' / 'resnet'}"])  # fmt: skip
    return root


def test_mining_fills_the_matrix_once_and_writes_the_portfolio(
    searched_cells: Path, tmp_path: Path, capsys
) -> None:
    args = ["portfolio", str(searched_cells / "synthetic"), str(searched_cells / "other"),
            f"out_dir={tmp_path}"]  # fmt: skip
    counted = run([*args, "dry_run=true"])
    # 2 candidates of each cell; each is known on its own cell (its trial): 2 x 2 to train
    assert counted == {"cells": 2, "candidates": 4, "missing": 4}
    assert not (tmp_path / "matrix").exists() and not (tmp_path / "portfolio.yaml").exists()
    written = run([*args, "k=3"])
    assert len(list((tmp_path / "matrix").glob("*/*/DONE"))) == 4
    path = tmp_path / "portfolio.yaml"
    on_disk = yaml.safe_load(path.read_text())
    assert on_disk["recipes"] == written["recipes"] and on_disk["k"] == 3
    assert [len(on_disk[k]) for k in ("mined_from", "candidates", "mean_rank")] == [2, 4, 3]
    assert {c["dataset"] for c in on_disk["mined_from"]} == {"synthetic", "letor-other"}
    assert on_disk["mean_rank"] == sorted(on_disk["mean_rank"], reverse=True)
    assert "greedy" in on_disk["rule"] and on_disk["date"]
    assert read_portfolio(str(path)).recipes  # a file search.portfolio= reads
    # the recipes are the greedy choice over the matrix of the runs' vali scores
    ids = [c["id"] for c in on_disk["candidates"]]
    chosen = [c["recipe"] for c in on_disk["candidates"] if c["chosen"]]
    assert sorted(map(json.dumps, chosen)) == sorted(map(json.dumps, on_disk["recipes"]))
    assert len(set(ids)) == 4
    capsys.readouterr()
    again = run([*args, "k=3"])  # a second call trains nothing new
    err = capsys.readouterr().err
    assert "4 trainings missing" not in err and "0 trainings missing" in err
    assert "portfolio matrix" not in err
    assert again["recipes"] == written["recipes"]
    # leave-one-data-set-out: the other data set's cell alone, its own portfolio file
    without = run([*args, "exclude=synthetic", "k=2"])
    assert [c["dataset"] for c in without["mined_from"]] == ["letor-other"]
    assert len(without["candidates"]) == 2
    assert (tmp_path / "portfolio-without-synthetic.yaml").is_file()
    with pytest.raises(UserError, match="exclude=nope: no cell of that data set; .*letor-other"):
        run([*args, "exclude=nope"])


def test_mining_without_searched_cells_is_one_line(tmp_path: Path) -> None:
    run([*RESNET, "epochs=1", f"run_dir={tmp_path / 'fixed'}"])  # a fixed recipe: no trials
    with pytest.raises(UserError, match="no searched deep cell under"):
        run(["portfolio", str(tmp_path), f"out_dir={tmp_path / 'out'}"])
    with pytest.raises(UserError, match="no such folder"):
        run(["portfolio", str(tmp_path / "nope")])
    with pytest.raises(UserError, match="folders is required"):
        run(["portfolio", "k=2"])
    with pytest.raises(UserError, match="k must be >= 1 and <= 8"):
        run(["portfolio", str(tmp_path), "k=9"])
