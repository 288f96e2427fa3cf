"""What ``./run.sh portfolio`` mines: the searched deep cells, their best trials as candidate
recipes, and each candidate's vali score on each cell (read back, or trained).

A cell is a finished run whose ``report.json`` holds an Optuna search (``search.trials``): a
finetuning run (``lp``, ``mp``, ``full``) or a deep baseline (`DEEP_BASELINES`). Runs that train
another run's recipe (``recipe_from``) or a portfolio searched nothing and are left out.

A candidate's score on a cell is the vali NDCG@5 of the recipe as a portfolio run of that cell
would train it (`finetune.search_space.Space.fixed_trials`: the keys the cell's model does not
search dropped, those the recipe does not name at the cell's fixed values). Where the cell's search
already trained exactly those params, its stored trial is the score; else a fixed-recipe run of
the cell's own config (search off, the params set as a trial's are, ``logger=none``) trains it
in ``<matrix>/<cell id>/<candidate id>/``, through the run lifecycle every stage uses: a
finished one is read back, a killed one resumes from its checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from scarce_ltr.baselines.config import DEEP_BASELINES, BaselineConfig
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.metrics import SELECTION_METRIC
from scarce_ltr.core.run_config import read_config, without_free_keys
from scarce_ltr.core.runs import DONE, Run, read_report
from scarce_ltr.finetune.config import FinetuneConfig
from scarce_ltr.finetune.grid import BEST_VALI
from scarce_ltr.finetune.search_config import RECIPE_KEYS, SearchConfig
from scarce_ltr.finetune.search_space import Space
from scarce_ltr.reports.results import REPORT, fold_of


@dataclass(frozen=True)
class Cell:
    """A searched run: where it lies, what it is, and its trials (params and vali score)."""

    folder: Path
    stage: str  # finetune | baseline
    dataset: str
    setting: str  # the label setting
    seed: int
    fold: int | None
    model: str
    trials: list[dict]

    def describe(self) -> dict:
        """The cell as the portfolio file's ``mined_from`` lists it."""
        return {
            "dataset": self.dataset,
            "label_setting": self.setting,
            "seed": self.seed,
            "fold": self.fold,
            "model": self.model,
            "folder": str(self.folder),
        }


@dataclass(frozen=True)
class Candidate:
    """A recipe taken from a cell's best trials (its params over `RECIPE_KEYS`)."""

    params: dict
    cell: Cell  # the first cell it came from
    trial: int

    @property
    def id(self) -> str:
        text = json.dumps(self.params, sort_keys=True)
        return f"recipe-{hashlib.sha256(text.encode()).hexdigest()[:10]}"

    def describe(self) -> dict:
        return {"id": self.id, "recipe": self.params, "from": str(self.cell.folder),
                "trial": self.trial}  # fmt: skip


def find_cells(folders: list[str]) -> list[Cell]:
    """Every searched deep cell under ``folders`` (each a run folder or a folder holding runs),
    once each, in path order; `UserError` naming a folder that does not exist."""
    found: dict[Path, Cell] = {}
    for given in folders:
        root = Path(given).expanduser()
        if not root.is_dir():
            raise UserError(f"{given}: no such folder (give run folders or folders holding them)")
        for report in sorted(root.rglob(REPORT)):
            folder = report.parent.resolve()
            cell = None if folder in found else _cell(folder)
            if cell is not None:
                found[folder] = cell
    return list(found.values())


def _cell(folder: Path) -> Cell | None:
    """The cell of a finished searched deep run; None for any other folder."""
    report = read_report(folder)
    search = (report or {}).get("search")
    if not (folder / DONE).is_file() or not isinstance(search, dict):
        return None  # unfinished, no search, or a tree's (its search is a name)
    searched = str(search.get("sampler", "")).startswith("optuna") and "strategy" not in search
    stage = report.get("stage")
    deep = stage == "finetune" or (stage == "baseline" and report.get("method") in DEEP_BASELINES)
    if not (searched and deep and isinstance(search.get("trials"), list)):
        return None
    return Cell(
        folder=folder,
        stage=stage,
        dataset=str(report.get("dataset")),
        setting=str(report.get("label_setting")),
        seed=int(report.get("seed", 0)),
        fold=fold_of(folder),
        model=str(report.get("model")),
        trials=search["trials"],
    )


def candidates(cells: list[Cell], per_cell: int) -> list[Candidate]:
    """The ``per_cell`` best trials by vali of each cell (a trial with no score never), their
    params over `RECIPE_KEYS`, each recipe once (where it first appears), in cell order."""
    out: list[Candidate] = []
    for cell in cells:
        scored = [t for t in cell.trials if _finite(t.get(BEST_VALI))]
        best = sorted(scored, key=lambda t: -t[BEST_VALI])[:per_cell]  # stable: earlier first
        for trial in best:
            params = {k: trial[k] for k in RECIPE_KEYS if k in trial}
            if all(c.params != params for c in out):
                out.append(Candidate(params, cell, int(trial["trial"])))
    return out


@dataclass(frozen=True)
class StageCode:
    """What mining needs of a stage: its config class, its searched space and how a trial's
    params set a config (the search's own functions), and its ``main``."""

    schema: type
    space: Callable[[Any], Space]
    with_params: Callable[[Any, dict], Any]
    search_off: Callable[[Any], Any]
    main: Callable[[Any, Run], Any]


def stage_code(stage: str) -> StageCode:
    if stage == "finetune":
        from scarce_ltr.finetune import train

        return StageCode(
            FinetuneConfig,
            space=train.search_space,
            with_params=train.with_params,
            search_off=lambda cfg: replace(cfg, search=SearchConfig()),
            main=train.main,
        )
    from scarce_ltr.baselines.deep import train as deep
    from scarce_ltr.baselines.run import main

    return StageCode(
        BaselineConfig,
        space=lambda cfg: deep.search_space(cfg.method, cfg.deep),
        with_params=deep.with_params,
        search_off=lambda cfg: replace(cfg, deep=replace(cfg.deep, search=SearchConfig())),
        main=main,
    )


class Matrix:
    """One cell's column of the matrix: each candidate's params on it and where its score is."""

    def __init__(self, cell: Cell, root: Path) -> None:
        self.cell = cell
        self.code = stage_code(cell.stage)
        self.cfg = read_config(cell.folder, self.code.schema)
        self.space = self.code.space(self.cfg)
        settings = json.dumps(without_free_keys(asdict(self.cfg)), sort_keys=True, default=str)
        digest = hashlib.sha256(settings.encode()).hexdigest()[:8]
        place = [cell.dataset, *([f"fold={cell.fold}"] if cell.fold is not None else [])]
        parts = [*place, cell.model, cell.setting, f"seed={cell.seed}", digest]
        # the cell's settings' hash: a moved runs tree keeps its entries, two sweeps' cells of
        # one name do not share them
        self.id = "_".join(parts).replace("/", "-")
        self.folder = root / self.id

    def params(self, candidate: Candidate) -> dict:
        """The candidate as a portfolio run of this cell would train it."""
        return self.space.fixed_trials([candidate.params])[0]

    def known(self, candidate: Candidate) -> float | None:
        """The candidate's vali score on this cell when known: a trial of the cell's search with
        the same params, or a finished run in the matrix; None: to train."""
        params = self.params(candidate)
        for trial in self.cell.trials:  # a pruned trial was not scored to its end: train
            if {k: trial.get(k) for k in params} == params and _finite(trial.get(BEST_VALI)):
                return float(trial[BEST_VALI])
        folder = self.folder / candidate.id
        if (folder / DONE).is_file():
            return run_score(folder)
        return None

    def train(self, candidate: Candidate) -> float:
        """A fixed-recipe run of the cell's config with the candidate's params; its score."""
        folder = self.folder / candidate.id
        cfg = self.code.with_params(self.code.search_off(self.cfg), self.params(candidate))
        cfg = replace(cfg, run_dir=str(folder), logger="none")
        run = Run.of(cfg, cfg.identity())
        run.execute(self.code.main, cfg, OmegaConf.structured(cfg))
        return run_score(folder)


def run_score(folder: Path) -> float:
    """A finished fixed-recipe run's vali NDCG@5, the score its trial would have had."""
    report = read_report(folder) or {}
    selected = report.get("selected") or {}  # a deep baseline's chosen grid point
    score = report.get(BEST_VALI, selected.get(BEST_VALI))
    if score is None:
        score = (report.get("metrics") or {}).get("vali", {}).get(SELECTION_METRIC)
    if score is None:
        print(f"{folder}: no vali {SELECTION_METRIC} in its report; none", file=sys.stderr)
        return math.nan
    return float(score)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)
