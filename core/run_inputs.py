"""The data files a run read, fingerprinted: ``inputs.json`` in its folder.

A stage's config names its data; its ``inputs()`` (`scarce_ltr.data.inputs.data_inputs`) gives
every file the run reads, each with its size and SHA-256 (the parse cache's key, so a file is
hashed once per process), keyed by its role (``train``, ``train.query``, ``train/features.npy``),
so that a data folder moved whole (another ``LTR_DATA_DIR``) is the same data. `Run.execute`
records them when a run starts and compares them when it resumes or is skipped as finished:
a file changed, gone, added or read from another name is refused in one line naming it
(`changed_input`), never a "finished before; skipped" over other data, never a resume that trains
on after an edit. A sweep compares its finished jobs the same way (`scarce_ltr.sweeps.stale`).

What is not known is accepted: a run of a version before fingerprints (no ``inputs.json``) is
taken as it is and a finished one is left unwritten; data that cannot be found now is not
compared (a finished run is skipped; a resume stops where it reads, naming the missing files);
synthetic data reads no file and records nothing. ``inputs.json`` is no result of the run
(`scarce_ltr.core.runs.NOT_RESULTS`): deleting it is deleting the fingerprint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import file_error, write_json

INPUTS = "inputs.json"
# What a fingerprint holds: {"files": {role: {"path": absolute path, "size": n, "sha256": hex}}}.
Inputs = dict[str, dict[str, Any]]


def read_inputs(folder: Path) -> Inputs | None:
    """The fingerprints a run recorded; None when it recorded none (an older version's run). A
    file that is not ours (not JSON, not the layout `write_inputs` writes) is refused, naming it:
    it is never taken for "unknown" and overwritten."""
    path = Path(folder) / INPUTS
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise file_error(exc, "read", path) from None
    try:
        files = json.loads(text)["files"]
        if not isinstance(files, dict) or not all(
            isinstance(f, dict) and {"path", "size", "sha256"} <= set(f) for f in files.values()
        ):
            raise ValueError("not a mapping of files")
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(
            f"{path}: not the data fingerprints this tool writes ({exc}); delete it to accept "
            "the data as it is now"
        ) from None
    return files


def write_inputs(folder: Path, files: Inputs) -> None:
    write_json(Path(folder) / INPUTS, {"files": files})


def changed_input(saved: Inputs, now: Inputs) -> str | None:
    """How the files read now differ from those a run read (``<file>: changed since the run read
    it``), naming the first; None when they are the same content under the same roles."""
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


def refusal(folder: Path, change: str) -> UserError:
    """The one line refusing a run folder whose data changed (``change``: `changed_input`)."""
    return UserError(
        f"{folder} was run on other data ({change}); give run_dir=<another folder>, or delete "
        "that folder to run again on the data as it is now"
    )


def check_inputs(folder: Path, now: Inputs | None, *, done: bool, started: bool) -> None:
    """Refuse a run whose recorded data differs from ``now`` (None: not known now); record
    ``now`` for a run not finished. A run that did not get going (``started`` false: nothing but
    its config and log) protects nothing: the data may have been fixed after an error."""
    saved = read_inputs(folder)
    if saved is not None and now is not None and (done or started):
        change = changed_input(saved, now)
        if change:
            raise refusal(folder, change)
    if not done and now and saved != now:
        write_inputs(folder, now)
