"""What a run read, fingerprinted: ``inputs.json`` in its folder.

Two kinds of input, each a mapping from its role to ``{"path", "size", "sha256"}``:

- ``files``, the data: a stage's config gives every data file the run reads (its ``inputs()``,
  `scarce_ltr.data.inputs.data_inputs`), each with its size and SHA-256 (the parse cache's key,
  so a file is hashed once per process), keyed by its role (``train``, ``train.query``,
  ``train/features.npy``), so that a data folder moved whole (another ``LTR_DATA_DIR``) is the
  same data;
- ``sources``, the finished runs it is built from (`SOURCE_RUNS`: an encoder, a teacher, the
  members of an ensemble or a combination, the run whose search chose the recipe), each by its
  ``report.json``, which a run written again (deleted and rerun) writes anew.

`Run.execute` records them when a run starts and compares them when it resumes or is skipped as
finished: a data file changed, gone, added or read under another name, or a source run run again,
is refused in one line naming it (`changed_input`, `changed_source`), never a "finished before;
skipped" over other data, never a resume that trains on after an edit. A sweep compares its
finished jobs the same way (`scarce_ltr.sweeps.stale`).

What is not known is accepted: a run of a version before fingerprints (no ``inputs.json``) is
taken as it is and a finished one is left unwritten; data that cannot be found now is not compared
(a finished run is skipped; a resume stops where it reads, naming the missing files), nor is a
source run that is gone (its folder moved or deleted); synthetic data reads no file. ``inputs.json``
is no result of the run (`scarce_ltr.core.runs.NOT_RESULTS`): deleting it deletes the fingerprints.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import file_error, write_json

INPUTS = "inputs.json"
# Fingerprints by role: {role: {"path": absolute path, "size": bytes, "sha256": hex}}.
Inputs = dict[str, dict[str, Any]]
# The config keys naming the finished runs a run is built from (a list: each of its runs).
SOURCE_RUNS = (
    "pretrained", "runs", "teacher", "gbdt.teacher", "search.recipe_from",
    "deep.search.recipe_from",
)  # fmt: skip
NO_RUN = ("", "none", "self")  # values of those keys that name no run
_FIELDS = {"path", "size", "sha256"}


def source_inputs(resolved: DictConfig | Mapping) -> Inputs:
    """The ``report.json`` of each finished run ``resolved`` names (`SOURCE_RUNS`) that is there
    now, fingerprinted: ``{"pretrained": ...}``, ``{"runs[0]": ..., "runs[1]": ...}``."""
    config = resolved if isinstance(resolved, DictConfig) else OmegaConf.create(dict(resolved))
    found: Inputs = {}
    for key in SOURCE_RUNS:
        value = OmegaConf.select(config, key, default=None)
        listed = OmegaConf.is_list(value)
        for i, run in enumerate(list(value) if listed else [value]):
            report = Path(str(run)) / "report.json"
            if not isinstance(run, str) or run in NO_RUN or not report.is_file():
                continue
            try:
                data = report.read_bytes()
            except OSError:
                continue
            role = f"{key}[{i}]" if listed else key
            found[role] = {
                "path": str(report.absolute()),
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
    return found


def read_inputs(folder: Path) -> dict[str, Inputs] | None:
    """The fingerprints a run recorded (``files``, ``sources``); None when it recorded none (an
    older version's run). A file that is not ours (not JSON, not the layout `write_inputs`
    writes) is refused, naming it: it is never taken for "unknown" and overwritten."""
    path = Path(folder) / INPUTS
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise file_error(exc, "read", path) from None
    try:
        recorded = json.loads(text)
        kinds = {"files": recorded["files"], "sources": recorded.get("sources", {})}
        for kind in kinds.values():
            if not isinstance(kind, dict) or not all(
                isinstance(f, dict) and _FIELDS <= set(f) for f in kind.values()
            ):
                raise ValueError("not a mapping of files")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(
            f"{path}: not the fingerprints of a run's inputs ({exc}); delete it to accept the "
            "data as it is now"
        ) from None
    return kinds


def changed_input(saved: Inputs, now: Inputs) -> str | None:
    """How the data files read now differ from those a run read (``<file>: changed since the
    run read it``), naming the first; None when they are the same content under the same roles."""
    for role in sorted(set(saved) | set(now)):
        old, new = saved.get(role), now.get(role)
        if new is None:
            return f"{old['path']}: read by the run, gone now"  # type: ignore[index]
        if old is None:
            return f"{new['path']}: a file the run did not read"
        if (old["size"], old["sha256"]) == (new["size"], new["sha256"]):
            continue
        if Path(old["path"]).name != Path(new["path"]).name:
            return f"{new['path']}: not the file the run read ({old['path']})"
        return f"{new['path']}: changed since the run read it"
    return None


def changed_source(saved: Inputs, now: Inputs) -> str | None:
    """The first source run, of those known both then and now, that was run again since the run
    read it (its ``report.json`` differs); None when none was."""
    for role in sorted(set(saved) & set(now)):
        if (saved[role]["size"], saved[role]["sha256"]) != (now[role]["size"], now[role]["sha256"]):
            return f"{role}={Path(now[role]['path']).parent} was run again since the run read it"
    return None


def refusal(folder: Path, change: str, what: str = "data") -> UserError:
    """The one line refusing a run folder whose inputs changed (``change``: `changed_input` or
    `changed_source`; ``what``: data or runs)."""
    return UserError(
        f"{folder} was run on other {what} ({change}); give run_dir=<another folder>, or delete "
        f"that folder to run again on the {what} as {'it is' if what == 'data' else 'they are'} "
        "now"
    )


def input_change(
    folder: Path, saved: dict[str, Inputs], files: Inputs | None, sources: Inputs
) -> UserError | None:
    """The refusal of a run folder whose recorded inputs (``saved``, `read_inputs`) differ from
    ``files`` (None: not known now) and ``sources``; None when they do not."""
    change = changed_input(saved["files"], files) if files is not None else None
    if change:
        return refusal(folder, change)
    change = changed_source(saved["sources"], sources)
    return refusal(folder, change, "runs") if change else None


def check_inputs(
    folder: Path, files: Inputs | None, sources: Inputs, *, done: bool, started: bool
) -> None:
    """Refuse a run whose recorded inputs differ from ``files`` (None: not known now) and
    ``sources``; record them for a run not finished. A run that did not get going (``started``
    false: nothing but its config and log) protects nothing: the data may have been fixed after
    an error."""
    saved = read_inputs(folder)
    if saved is not None and (done or started):
        error = input_change(folder, saved, files, sources)
        if error is not None:
            raise error
    record = {"files": files, "sources": sources}
    if not done and files is not None and (files or sources) and saved != record:
        write_json(Path(folder) / INPUTS, record)
