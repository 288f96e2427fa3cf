"""One point of a grid or one trial of a search, trained inside a run in a folder of its own
(``<run>/grid/<name>/``: ``lr=0.001``, ``trial=3``) and finished on its own (``result.json`` +
``DONE``, `core.runs.mark_done`): an interrupted grid or search reads the finished ones back and
resumes after them (`finetune.grid`, `finetune.search`)."""

from __future__ import annotations

import json
from pathlib import Path

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import write_json
from scarce_ltr.core.runs import is_done, mark_done

POINT_RESULT = "result.json"
GRID_DIR = "grid"


class GridPoint:
    """One point of a grid trained inside a run, in ``<run>/grid/<name>/``: finished on its own
    (``result.json`` + ``DONE``), so an interrupted grid resumes after it."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    @classmethod
    def within(cls, run_folder: Path, name: str) -> GridPoint:
        return cls(Path(run_folder) / GRID_DIR / name)

    def result(self) -> dict | None:
        """The result of a finished point; None when it has not finished."""
        if not is_done(self.folder):
            return None
        try:
            return json.loads((self.folder / POINT_RESULT).read_text())
        except (OSError, ValueError) as exc:
            raise UserError(
                f"{self.folder / POINT_RESULT}: unreadable ({exc}); delete {self.folder} to "
                "train that point again"
            ) from None

    def finish(self, result: dict) -> None:
        write_json(self.folder / POINT_RESULT, result)
        mark_done(self.folder)
