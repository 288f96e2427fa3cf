"""A key of a section the method reads, but that only another method (or another search) of the
section reads, is refused naming the key, the choice made and the choices that read it, as a
whole section of another method is (`baselines.config`, `core.config_fields.read_by`): set away
from its default it was a silent no-op. Its default value stays accepted (the config files of
the methods set defaults)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from scarce_ltr import cli
from scarce_ltr.baselines.config import BaselineConfig
from scarce_ltr.core.config import load_config
from scarce_ltr.core.errors import UserError

CONFIGS = Path(__file__).parent.parent / "configs" / "baseline"
RESNET = ["baseline", "resnet", "epochs=1", "deep.lrs=[1e-3]", "logger=none"]


def _load(method: str, overrides: list[str]) -> BaselineConfig:
    """A baseline's config as the command line builds it: its config file, then ``overrides``."""
    stage_file = CONFIGS / f"{method}.yaml"
    return load_config(BaselineConfig, overrides, stage_file=stage_file)[0]


@pytest.mark.parametrize(
    ("method", "overrides", "refused"),
    [
        # the search's keys: the paper grid draws no trials, a drawn search walks no grid
        ("gbdt", ["gbdt.n_trials=5"], "gbdt.n_trials=5: gbdt.search=paper-grid does not read "
         "it (read with gbdt.search=optuna or random)"),
        ("gbdt", ["gbdt.objectives=[lambdarank]"], "gbdt.objectives=['lambdarank']: "
         "gbdt.search=paper-grid does not read it"),
        ("gbdt", ["gbdt.study_name=x"], "gbdt.study_name=x: gbdt.search=paper-grid"),
        ("gbdt-optuna", ["gbdt.grid=full"], "gbdt.grid=full: gbdt.search=optuna does not read "
         "it (read with gbdt.search=paper-grid)"),
        ("gbdt-optuna", ["gbdt.num_leaves=[63]"], "gbdt.num_leaves=[63]: gbdt.search=optuna"),
        ("gbdt", ["gbdt.search=random", "gbdt.objective=rank_xendcg"],
         "gbdt.objective=rank_xendcg: gbdt.search=random does not read it"),
        # the method's keys
        ("gbdt", ["gbdt.pca_components=[5]"], "gbdt.pca_components=[5]: method=gbdt does not "
         "read it (read with method=gbdt-pca or gbdt-pca-pseudo)"),
        ("gbdt-pca", ["gbdt.pseudo_levels=5"], "gbdt.pseudo_levels=5: method=gbdt-pca does not "
         "read it (read with method=gbdt-pseudo or gbdt-pca-pseudo)"),
        ("gbdt-ssl", ["gbdt.pseudo_binning=quantile"], "gbdt.pseudo_binning=quantile: "
         "method=gbdt-ssl"),
        ("resnet", ["deep.cross_layers=[2]"], "deep.cross_layers=[2]: method=resnet does not "
         "read it (read with method=dcnv2)"),
        ("resnet", ["deep.hidden=64"], "deep.hidden=64: method=resnet does not read it (read "
         "with method=deepfm, dcnv2 or dasalc)"),
        ("dcnv2", ["deep.encoder.width=64"], "deep.encoder.width=64: method=dcnv2 does not read "
         "it (read with method=resnet)"),
        ("deepfm", ["deep.n_heads=2"], "deep.n_heads=2: method=deepfm does not read it (read "
         "with method=dasalc)"),
        ("dasalc", ["deep.embedding_dim=4"], "deep.embedding_dim=4: method=dasalc"),
        ("dasalc", ["deep.head_hidden=64"], "deep.head_hidden=64: method=dasalc"),
    ],
)  # fmt: skip
def test_a_key_of_another_method_in_a_section_the_method_reads_is_refused(
    method, overrides, refused
) -> None:
    with pytest.raises(UserError, match=re.escape(refused)):
        _load(method, overrides)


@pytest.mark.parametrize(
    ("method", "overrides"),
    [
        # defaults, as config files and sweeps' common keys set them
        ("resnet", ["deep.cross_layers=[2,3,4]", "deep.hidden=128", "deep.n_heads=4"]),
        ("gbdt", ["gbdt.n_trials=40", "gbdt.objectives=[lambdarank,rank_xendcg]"]),
        ("gbdt-optuna", ["gbdt.grid=paper", "gbdt.objective=lambdarank"]),
        ("gbdt", ["gbdt.pca_components=[5,10,15]", "gbdt.pseudo_levels=31"]),
        # keys the choice reads
        ("dcnv2", ["deep.cross_layers=[2]", "deep.hidden=64", "deep.embedding_dim=4"]),
        ("dasalc", ["deep.n_heads=2", "deep.hidden=64"]),
        ("resnet", ["deep.encoder.width=64", "deep.head_hidden=64"]),
        ("gbdt-pca-pseudo", ["gbdt.pca_components=[5]", "gbdt.pseudo_levels=5"]),
        ("gbdt-optuna", ["gbdt.n_trials=5", "gbdt.objectives=[lambdarank]"]),
        ("gbdt", ["gbdt.grid=full", "gbdt.num_leaves=[63]", "gbdt.objective=rank_xendcg"]),
    ],
)
def test_defaults_and_keys_the_choice_reads_are_taken(method, overrides) -> None:
    _load(method, overrides)


@pytest.mark.parametrize("config", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_baseline_config_file_loads(config: Path) -> None:
    _load(config.stem, [])


def test_the_command_line_refuses_it_in_one_line_before_a_run_folder(
    tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("LTR_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(sys, "argv", ["scarce-ltr", *RESNET, "deep.cross_layers=[2]"])
    with pytest.raises(SystemExit) as stop:
        cli.main()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert stop.value.code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: ") and "deep.cross_layers=[2]: method=resnet" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_an_estimators_objective_is_the_one_a_drawn_search_chooses_among() -> None:
    """``TreeRanker("gbdt-optuna", objective=...)``: the search draws the objective from
    ``gbdt.objectives``, so LightGBM's ``objective`` is that list of one (``gbdt.objective``,
    which the search does not read, is refused)."""
    from scarce_ltr.api.aliases import resolve

    assert resolve("gbdt-optuna", {"objective": "rank_xendcg"}, set()) == {
        "gbdt__objectives": ["rank_xendcg"]
    }
    drawn = resolve("gbdt", {"objective": "rank_xendcg", "gbdt__search": "random"}, {"gbdt"})
    assert drawn["gbdt__objectives"] == ["rank_xendcg"] and "gbdt__objective" not in drawn
    assert resolve("gbdt", {"objective": "rank_xendcg"}, set()) == {
        "gbdt__objective": "rank_xendcg"
    }
