"""Where ``predict`` and ``export`` may write (``out=``): anywhere but a run's own files.

A run folder (``config.yaml`` beside a report, ``DONE``, a checkpoint or a bundle) keeps what
its stages wrote and later ones read: ``config.yaml``, ``report.json``, ``DONE``, the result
files ``DONE`` lists (model, scores, the bundle), its log, lock and checkpoint; a run without
``DONE`` yet, every entry it holds. An ``out=`` that is one of them, or lies below one
(``<run>/report.json/p.csv``), is refused in one line naming the run and the entry, and nothing
is advised to be deleted: the files are the run's. The run's ``predictions/`` and ``export/``
folders (the commands' defaults) and new names beside its files are free. What kind of file the
target itself may be (a regular one) is the atomic write's check
(`scarce_ltr.core.files.refuse_foreign_target`).
"""

from __future__ import annotations

import json
from pathlib import Path

from scarce_ltr.core.bundle import BUNDLE_DIR
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_config import CONFIG
from scarce_ltr.core.runs import CHECKPOINT, DONE, NOT_RESULTS, REPORT

# Where predict and export write inside a run by default: their own folders.
COMMAND_FOLDERS = ("predictions", "export")
# A run's entries whatever its DONE lists (an unfinished run's too).
ALWAYS_THE_RUNS = (CONFIG, REPORT, BUNDLE_DIR, ".lock", *NOT_RESULTS)


def run_entry(path: Path) -> tuple[Path, str] | None:
    """``(run folder, entry)`` when ``path`` is, or lies below, an entry of a run folder that
    the run wrote (module docstring); None otherwise."""
    where = Path(path).resolve()
    for folder in where.parents:
        if not is_run_folder(folder):
            continue
        entry = where.relative_to(folder).parts[0]
        if entry not in COMMAND_FOLDERS and entry in _own_entries(folder):
            return folder, entry
    return None


def is_run_folder(folder: Path) -> bool:
    """``config.yaml`` and a trace of a run beside it (a report, ``DONE``, a checkpoint, a
    bundle): a folder of a user's that merely holds a ``config.yaml`` is none."""
    return (folder / CONFIG).is_file() and any(
        (folder / name).exists() for name in (DONE, REPORT, CHECKPOINT, BUNDLE_DIR)
    )


def _own_entries(folder: Path) -> set[str]:
    """The top-level names a run folder's run wrote: those ``DONE`` lists, else all it holds."""
    names = set(ALWAYS_THE_RUNS)
    try:
        listed = json.loads((folder / DONE).read_text()).get("files", [])
        names.update(str(name) for name in listed)
    except FileNotFoundError:
        names.update(p.name for p in folder.iterdir())  # not finished: all of it is the run's
    except (OSError, ValueError, AttributeError):
        names.update(p.name for p in folder.iterdir())
    return names


def refuse_run_files(target: Path, *, command: str, default: str) -> None:
    """A one-line `UserError` when ``out=`` ``target`` is, or lies below, a run's own file;
    ``default``: the command's folder in a run (``predictions``, ``export``)."""
    found = run_entry(target)
    if found is None:
        return
    folder, entry = found
    own = folder / entry
    where = "is" if Path(target).resolve() == own else f"lies below {entry}, which is"
    raise UserError(
        f"out={target} {where} one of the files of the run {folder} (what its stages wrote and "
        f"later ones read); {command} leaves them as they are: give out=<another path> (by "
        f"default {command} writes into {folder / default})"
    )
