"""``./run.sh portfolio <folder> [<folder> ...] [k=8] [out=<file>] [exclude=<data set>]``: mine
a portfolio of training recipes from the searched deep cells under the folders, TabRepo's way.

1. Cells: every finished searched deep run below the folders (`portfolio_cells.find_cells`);
   ``exclude=<data set>`` leaves that data set's out, for the leave-one-data-set-out check (mine
   without Yandex, judge the portfolio on Yandex).
2. Candidates: the ``per_cell`` (2) best trials by vali of each cell, each recipe once.
3. The matrix candidate x cell of vali NDCG@5: read back where a cell's search trained the
   recipe or a matrix run finished, else trained, one fixed-recipe run per entry in
   ``<out_dir>/matrix/<cell id>/<candidate id>/`` (at most candidates x cells trainings; a
   second call trains nothing new, a killed one resumes). ``dry_run=true`` counts the missing
   trainings and stops.
4. ``k`` recipes chosen greedily for the best mean vali rank over cells
   (`search.portfolio.greedy_portfolio`), written atomically to ``out`` with what they were mined
   from: the file ``search.strategy=portfolio search.portfolio=<file>`` trains.

Only vali scores are read; test metrics never enter.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import atomic_write_text
from scarce_ltr.core.run_identity import runs_root
from scarce_ltr.finetune.search_config import MAX_RECIPES, read_portfolio
from scarce_ltr.search.portfolio import greedy_portfolio
from scarce_ltr.sweeps.portfolio_cells import Candidate, Cell, Matrix, candidates, find_cells

MATRIX = "matrix"  # <out_dir>/matrix/<cell id>/<candidate id>/: the trained entries
RULE = (
    "greedy (TabRepo): each step adds the candidate that minimises the mean over cells of the "
    "rank, among all candidates on that cell's vali NDCG@5, of the portfolio's best member "
    "there; ties to the earlier candidate. Candidates: the {per_cell} best trials by vali of "
    "each cell; test metrics never enter"
)


@dataclass(frozen=True)
class PortfolioConfig:
    # required: run folders, or folders holding them (a sweep's, runs/<data set>/...); given
    # as the command's first arguments: ./run.sh portfolio <folder> [<folder> ...]
    folders: list[str] = field(default_factory=list)
    k: int = MAX_RECIPES  # the recipes to choose (at most 8; fewer when fewer candidates)
    per_cell: int = 2  # each cell's best trials by vali that become candidates
    exclude: str | None = None  # a data set whose cells are left out (mined without it)
    # where the matrix's runs go (<out_dir>/matrix/); default <runs root>/portfolio
    out_dir: str | None = None
    # the portfolio file; default <out_dir>/portfolio.yaml (portfolio-without-<exclude>.yaml)
    out: str | None = None
    dry_run: bool = False  # count the trainings the matrix misses; train and write nothing

    def __post_init__(self) -> None:
        if not self.folders:
            raise ValueError(
                "folders is required: ./run.sh portfolio <folder> [<folder> ...] (run folders "
                "or folders holding searched runs)"
            )
        if not 1 <= self.k <= MAX_RECIPES:
            raise ValueError(f"k must be >= 1 and <= {MAX_RECIPES}, got {self.k}")
        if self.per_cell < 1:
            raise ValueError(f"per_cell must be >= 1, got {self.per_cell}")

    @property
    def root(self) -> Path:
        return Path(self.out_dir).expanduser() if self.out_dir else runs_root() / "portfolio"

    @property
    def path(self) -> Path:
        """Where the portfolio is written."""
        if self.out:
            return Path(self.out).expanduser()
        name = f"portfolio-without-{self.exclude}" if self.exclude else "portfolio"
        return self.root / f"{name}.yaml"


def main(cfg: PortfolioConfig, out_dir: Path | None = None) -> dict:
    """Mine, train the matrix's missing entries, choose and write; returns what was written
    (with ``dry_run``: the counts)."""
    cells = _cells(cfg)
    pool = candidates(cells, cfg.per_cell)
    columns = [Matrix(cell, cfg.root / MATRIX) for cell in cells]
    scores, missing = _known(pool, columns)
    total = scores.size
    print(
        f"portfolio: {len(cells)} cells x {len(pool)} candidates: {total - len(missing)} of "
        f"{total} scores known, {len(missing)} trainings missing ({cfg.root / MATRIX})",
        file=sys.stderr,
    )
    if cfg.dry_run:
        return {"cells": len(cells), "candidates": len(pool), "missing": len(missing)}
    for step, (row, col) in enumerate(missing, 1):
        column, candidate = columns[col], pool[row]
        print(
            f"portfolio matrix {step}/{len(missing)}: {candidate.id} on {column.id}",
            file=sys.stderr,
            flush=True,
        )
        scores[row, col] = column.train(candidate)
    chosen, steps = greedy_portfolio(scores, cfg.k)
    written = _portfolio(cfg, cells, pool, chosen, steps)
    _write(cfg.path, written)
    read_portfolio(str(cfg.path))  # what a run reads back: the file passes its checks
    print(
        f"portfolio: {len(chosen)} recipes, mean vali rank {steps[-1]:.2f} of {len(pool)} over "
        f"{len(cells)} cells -> {cfg.path}",
        file=sys.stderr,
    )
    return written


def _cells(cfg: PortfolioConfig) -> list[Cell]:
    """The searched cells under ``cfg.folders``, without ``cfg.exclude``'s."""
    cells = find_cells(cfg.folders)
    if not cells:
        raise UserError(
            f"no searched deep cell under {', '.join(cfg.folders)} (a finished finetune or deep "
            "baseline run whose report.json holds search.trials: search.n_trials > 0)"
        )
    if cfg.exclude is None:
        return cells
    kept = [c for c in cells if c.dataset != cfg.exclude]
    if len(kept) == len(cells):
        found = sorted({c.dataset for c in cells})
        raise UserError(
            f"exclude={cfg.exclude}: no cell of that data set; the cells' data sets: "
            f"{', '.join(found)}"
        )
    if not kept:
        raise UserError(f"exclude={cfg.exclude} leaves no cell to mine")
    return kept


def _known(pool: list[Candidate], columns: list[Matrix]) -> tuple[np.ndarray, list]:
    """The matrix ``[candidates, cells]`` as far as known (NaN elsewhere) and the entries to
    train, ``(row, column)`` in column order (one cell's runs together)."""
    scores = np.full((len(pool), len(columns)), np.nan)
    missing = []
    for col, column in enumerate(columns):
        for row, candidate in enumerate(pool):
            score = column.known(candidate)
            if score is None:
                missing.append((row, col))
            else:
                scores[row, col] = score
    return scores, missing


def _portfolio(
    cfg: PortfolioConfig,
    cells: list[Cell],
    pool: list[Candidate],
    chosen: list[int],
    steps: list[float],
) -> dict:
    """The portfolio file's content: the recipes first, then what they were mined from."""
    return {
        "recipes": [pool[i].params for i in chosen],
        "k": len(chosen),
        "rule": RULE.format(per_cell=cfg.per_cell),
        "mean_rank": [round(s, 4) for s in steps],  # after each step, of len(candidates)
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "exclude": cfg.exclude,
        "matrix": str((cfg.root / MATRIX).resolve()),
        "mined_from": [cell.describe() for cell in cells],
        "candidates": [c.describe() | {"chosen": i in chosen} for i, c in enumerate(pool)],
    }


def _write(path: Path, content: dict) -> None:
    header = (
        "# A portfolio mined by ./run.sh portfolio (sweeps/portfolio.py): train it with\n"
        f"# search.strategy=portfolio search.portfolio={path}\n"
    )
    body = yaml.dump(content, Dumper=_Plain, sort_keys=False, default_flow_style=None, width=100)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, header + body)


class _Plain(yaml.SafeDumper):
    """YAML without anchors: a chosen recipe is written out in ``recipes`` and again in
    ``candidates``, not as ``&id001`` and a reference to it."""

    def ignore_aliases(self, data: object) -> bool:
        return True
