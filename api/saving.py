"""An estimator's model on disk and in a pickle: `save` (the bundle + ``estimator.json``),
pickling with the bundle's files, and the folders a fit or an unpickled estimator keeps.

A fresh fit's model is in memory (`api.fitted.InMemory`); a loaded or unpickled one is a bundle
folder (`serving.ranker.BundledRanker`); both are saved and pickled as the same files."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

from scarce_ltr import __version__
from scarce_ltr.api.fitted import bundle_files, write_bundle
from scarce_ltr.core.files import file_error, temp_folder_beside
from scarce_ltr.serving.ranker import ESTIMATOR_FILE, load_ranker

# The form of estimator.json; `load_estimator` refuses a newer one. Raise it when a reader of
# this version would misread a new file (a key's meaning changes, a key it needs is added).
ESTIMATOR_FORMAT = 1


class Workspace:
    """A folder of the estimator's: ``<work_dir>/fit-*`` or a temporary folder removed with its
    last user (an unpickled model's bundle; the LightGBM face's booster)."""

    def __init__(self, work_dir: str | Path | None) -> None:
        if work_dir is None:
            self.path = Path(tempfile.mkdtemp(prefix="scarce-ltr-fit-"))
            weakref.finalize(self, shutil.rmtree, str(self.path), ignore_errors=True)
        else:
            try:
                Path(work_dir).mkdir(parents=True, exist_ok=True)
                self.path = Path(tempfile.mkdtemp(prefix="fit-", dir=work_dir))
            except OSError as exc:  # named by the user's path, not the fit folder's random name
                raise path_error(
                    exc, "make the fit's folder in", f"work_dir={work_dir}", key="work_dir"
                ) from None
        self.temporary = work_dir is None

    def __deepcopy__(self, memo: dict) -> Workspace:
        return self


class Saving:
    """`save` and pickling of a `scarce_ltr.api.base.Ranker` (``ranker_`` its model)."""

    def save(self, path: str | Path) -> Path:
        """Write the model's bundle to ``path`` (a new folder, or one an earlier `save` wrote,
        replaced as LightGBM's ``save_model`` and ``torch.save`` replace their file), with
        ``estimator.json``: `load_estimator` and `scarce_ltr.load_ranker` read it. Written
        beside ``path`` and renamed into place: a crash leaves the earlier save or the new one,
        never a mix or half of one."""
        ranker = self._fitted()
        path = Path(path)
        if path.exists() and not (path / ESTIMATOR_FILE).is_file():
            if not path.is_dir() or any(path.iterdir()):
                raise ValueError(f"{path} exists and holds no saved ranker; give a new folder")
        if ranker.folder is not None and not Path(ranker.folder).is_dir():
            raise ValueError(
                f"the model's folder {ranker.folder} is gone (a temporary folder removed); fit "
                "again, or save before it is removed"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = temp_folder_beside(path)
        except OSError as exc:
            raise path_error(exc, "save the ranker to", str(path), key="path") from None
        try:
            write_bundle(ranker, tmp)
            (tmp / ESTIMATOR_FILE).write_text(json.dumps(self._description(), indent=1) + "\n")
            _replace_folder(tmp, path)
        except OSError as exc:  # the temp folder's name is no concern of the user's
            shutil.rmtree(tmp, ignore_errors=True)
            raise path_error(exc, "save the ranker to", str(path), key="path") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path

    # ---- pickling: the model travels as its bundle's files ----------------------------------
    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())  # object's is the instance's own __dict__
        ranker = state.get("ranker_")
        if ranker is not None:
            state["ranker_"] = None
            state["_bundle_files"] = bundle_files(ranker)
        return state

    def __setstate__(self, state: dict) -> None:
        files = state.pop("_bundle_files", None)
        super().__setstate__(state)
        if files is not None:
            workspace = Workspace(None)
            for name, data in files.items():
                target = workspace.path / "bundle" / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            self._bundle_workspace = workspace  # removed with the estimator
            self.ranker_ = load_ranker(workspace.path / "bundle")

    def _description(self) -> dict:
        names = getattr(self, "feature_names_in_", None)
        run = getattr(self, "run_", None)
        return {
            "format": ESTIMATOR_FORMAT,
            "version": __version__,
            "estimator": type(self).__name__,
            "params": {k: _jsonable(v) for k, v in self._saved_params().items()},
            "n_features": self.n_features_in_,
            "feature_names": None if names is None else [str(n) for n in names],
            "categories": {str(j): [_jsonable(c) for c in cats]
                           for j, cats in (getattr(self, "categories_", None) or {}).items()},
            "missing": self.missing_,
            "medians": None if self.medians_ is None else self.medians_.tolist(),
            "run": "" if run is None else str(run),
        }  # fmt: skip

    def _saved_params(self) -> dict[str, Any]:
        """The parameters ``estimator.json`` keeps: a numpy ``random_state`` as the seed it
        gave this fit."""
        params = self.get_params(deep=False)
        if "random_state" in params and not isinstance(params["random_state"], int | None):
            params["random_state"] = int(self._config["seed"])
        return params


def path_error(exc: OSError, operation: str, where: str, *, key: str) -> OSError:
    """``exc`` as an `OSError` of its class and errno whose message is ``cannot <operation>
    <where>: <reason>``: the user's path (never a temp folder beside it) and, where the reason
    suggests it, what to do with the argument ``key`` (`core.files.file_error`'s words)."""
    return type(exc)(exc.errno, str(file_error(exc, operation, where, key=key)))


def _replace_folder(new: Path, path: Path) -> None:
    """Put the filled folder ``new`` at ``path``: the earlier folder there is renamed aside, not
    removed, until the new one is in place (a folder cannot be renamed onto a non-empty one),
    and is put back if that fails; a process killed between the two renames leaves it whole
    beside ``path`` (``.<name>.<random>.tmp``)."""
    old = None
    if path.exists():
        old = temp_folder_beside(path)
        try:
            os.replace(path, old)  # onto the empty folder: one rename
        except BaseException:
            old.rmdir()  # still empty: the earlier save stays where it was
            raise
    try:
        os.replace(new, path)
    except BaseException:
        if old is not None:
            os.replace(old, path)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    folder = getattr(value, "folder", None)  # a PretrainedEncoder: its run folder, if any
    if folder is not None and not isinstance(value, str):
        return str(folder)
    if hasattr(value, "item") and not isinstance(value, str):  # a numpy scalar
        return _jsonable(value.item())
    return str(value)
