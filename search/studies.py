"""An Optuna study on shared storage (``<section>.storage``, ``<section>.study_name``): a search's
trials mirrored into an Optuna RDB storage (SQLite, PostgreSQL, MySQL URL) that
``optuna.load_study`` and optuna-dashboard read.

The run folder is the truth, the storage its mirror. A search opens its study with
`create_study`: a study of that name that the same run folder left (a killed search) is deleted
and made again, and the search tells it its trials as it goes, the ones read back from the folder
first (`finetune.search`) or all again (a tree search, which keeps no trials on disk before it
ends). So the stored study holds exactly the run's trials, none twice, and the sampler sees what
it sees without a storage: the same trials, the same choice. A study of that name that another
run folder made is never touched (`UserError`): one study is one run's search. Without a storage
(the default) the study lives in memory, as it always did.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_identity import runs_root

# The study's user attribute naming the run folder whose search it mirrors.
OWNER = "scarce_ltr_run_folder"


def check_storage(key: str, url: str | None) -> None:
    """`ValueError` naming ``key`` unless ``url`` is None or looks like a database URL."""
    if url is None:
        return
    if not isinstance(url, str) or "://" not in url or url.startswith("://"):
        raise ValueError(
            f"{key} must be an Optuna storage URL (sqlite:///path/to/studies.db, "
            f"postgresql://user@host/db) or null, got {url!r}"
        )


@dataclass(frozen=True)
class StudyStore:
    """Where one search's study is kept: ``storage`` (the URL), ``name``, the run folder that
    owns it and the config key, for messages (``gbdt.storage``)."""

    storage: str
    name: str
    owner: str
    key: str

    @classmethod
    def of(
        cls, storage: str | None, study_name: str | None, folder: Path, *, key: str
    ) -> StudyStore | None:
        """The store of a run's search; None without a storage (an in-memory study). The name
        defaults to the run folder below the runs root (``<data>/<stage>/<model>/<setting>/
        seed=<s>``), its full path when it lies elsewhere: two runs never share a study."""
        if not storage:
            return None
        owner = os.path.abspath(folder)
        if not study_name:
            try:
                study_name = Path(owner).relative_to(os.path.abspath(runs_root())).as_posix()
            except ValueError:
                study_name = owner
        return cls(storage=storage, name=study_name, owner=owner, key=key)

    def part(self, suffix: str) -> StudyStore:
        """The store of another search of the same run (a second feature set, the pseudo-labels'
        search): ``<name>/<suffix>``."""
        return replace(self, name=f"{self.name}/{suffix}") if suffix else self


def create_study(optuna: Any, store: StudyStore | None, **kwargs: Any) -> Any:
    """``optuna.create_study(**kwargs)``, in ``store`` when given (see the module docstring)."""
    if store is None:
        return optuna.create_study(**kwargs)
    # The stored study's own name replaces a fixed one (`finetune.search`'s, which Hyperband's
    # brackets hash: `finetune.search` refuses Hyperband with a storage).
    kwargs.pop("study_name", None)
    try:
        storage = optuna.storages.RDBStorage(store.storage)
    except Exception as exc:  # a bad URL, a missing driver, a database it cannot reach
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"{store.key}={store.storage}: Optuna cannot open this storage ({why}); give an "
            "RDB URL such as sqlite:///path/to/studies.db"
        ) from None
    existing = {s.study_name: s for s in optuna.get_all_study_summaries(storage)}
    if store.name in existing:
        owner = existing[store.name].user_attrs.get(OWNER)
        if owner != store.owner:
            name_key = store.key.rsplit(".", 1)[0] + ".study_name"
            raise UserError(
                f"{store.key}={store.storage}: study {store.name!r} there holds the search of "
                f"{owner or 'no scarce-ltr run'}, not of {store.owner}; give {name_key}=<another "
                "name>, or delete that study"
            )
        optuna.delete_study(study_name=store.name, storage=storage)  # rebuilt from the folder
    study = optuna.create_study(storage=storage, study_name=store.name, **kwargs)
    study.set_user_attr(OWNER, store.owner)
    return study
