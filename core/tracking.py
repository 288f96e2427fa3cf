"""Where a run's numbers go besides ``report.json``: Weights & Biases, and a progress bar.

`start_tracker` opens a wandb run in the run directory: online when the user is logged in
(``WANDB_API_KEY`` or a ``~/.netrc`` entry for api.wandb.ai), offline otherwise (``wandb sync``
uploads it later; its files are in ``<run_dir>/wandb/offline-run-*``, and a sweep ends with
`offline_note` saying so). ``WANDB_MODE`` always wins; ``logger=none`` or
``WANDB_MODE=disabled`` skip wandb entirely. A resumed run passes the id kept in its checkpoint
and continues the same wandb run. wandb never ends a run: any failure is a warning, after which
the tracker does nothing; wandb not installed (the extra ``scarce-ltr[wandb]``) is one line,
once per process.
"""

from __future__ import annotations

import netrc
import os
import re
import secrets
import sys
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from scarce_ltr.core.extras import missing_message

PROJECT = "scarce-ltr"
OFFLINE_RUNS = "offline-run-*"  # wandb's folder of an offline run, in <run_dir>/wandb/


class Tracker:
    """A wandb run, or nothing (``enabled`` False). Every method is safe to call either way."""

    def __init__(self, run: Any = None, run_id: str | None = None, *, online: bool = False) -> None:
        self._run = run
        self.run_id = run_id
        self.online = online  # artifacts are uploaded only then: offline they would copy files

    @property
    def enabled(self) -> bool:
        return self._run is not None

    def log(self, values: dict[str, Any], *, step: int | None = None) -> None:
        self._call("log", _flatten(values), step=step)

    def summary(self, values: dict[str, Any]) -> None:
        if self._run is not None:
            try:
                self._run.summary.update(_flatten(values))
            except Exception as exc:  # wandb must never end a run
                self._fail(exc)

    def log_folder(self, folder: Path, *, name: str, kind: str = "model") -> None:
        """Upload ``folder`` (a run's model bundle) as a W&B artifact, when online."""
        if self._run is None or not self.online or not Path(folder).is_dir():
            return
        try:
            import wandb

            artifact = wandb.Artifact(name=artifact_name(name), type=kind)
            artifact.add_dir(str(folder))
            self._run.log_artifact(artifact)
        except Exception as exc:  # wandb must never end a run
            self._fail(exc)

    def finish(self) -> None:
        self._call("finish")
        self._run = None

    def _call(self, method: str, *args: Any, **kwargs: Any) -> None:
        if self._run is None:
            return
        try:
            getattr(self._run, method)(*args, **kwargs)
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        warnings.warn(f"wandb failed ({exc}); continuing without it", stacklevel=3)
        self._run = None


def start_tracker(
    logger: str,
    *,
    run_dir: Path,
    name: str,
    config: dict[str, Any],
    group: str | None = None,
    tags: list[str] | None = None,
    job_type: str | None = None,
    run_id: str | None = None,
    enabled: bool = True,
) -> Tracker:
    """A `Tracker`; pass ``enabled=False`` on every DDP rank but the first.

    Args:
        logger: ``wandb`` or ``none``.
        run_id: the id of a run to continue (kept in the training checkpoint); new when None.
    """
    mode = os.environ.get("WANDB_MODE")
    if not enabled or logger == "none" or mode == "disabled":
        return Tracker(None, run_id)
    run_id = run_id or secrets.token_hex(4)
    try:
        import wandb
    except ImportError as exc:
        _say_once(f"warning: {missing_message('wandb', 'logger=wandb', exc)}; runs are not "
                  "tracked (logger=none or WANDB_MODE=disabled hides this line)")  # fmt: skip
        return Tracker(None, run_id)
    # A sweep groups its runs and tags them through the environment; that wins over the stage's.
    group = os.environ.get("WANDB_RUN_GROUP") or group
    env_tags = [t for t in os.environ.get("WANDB_TAGS", "").split(",") if t]
    tags = list(dict.fromkeys([*(tags or []), *env_tags])) or None
    # wandb's ~25-line banner buries a run's own output; WANDB_SILENT=false brings it back.
    os.environ.setdefault("WANDB_SILENT", "true")
    mode = mode or ("online" if _logged_in() else "offline")
    try:
        run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", PROJECT),
            dir=str(run_dir),
            id=run_id,
            resume="allow",
            name=name,
            group=group,
            tags=tags,
            job_type=job_type,
            config=config,
            mode=mode,  # type: ignore[arg-type]
        )
        _define_metrics(run)
    except Exception as exc:
        warnings.warn(f"wandb could not start ({exc}); continuing without it", stacklevel=2)
        return Tracker(None, run_id)
    return Tracker(run, run_id, online=mode == "online")


_SAID: set[str] = set()


def _say_once(line: str) -> None:
    """Print ``line`` to stderr once per process (a sweep's job server runs many stages)."""
    if line not in _SAID:
        _SAID.add(line)
        print(line, file=sys.stderr, flush=True)


# The metrics a run is chosen by, and how W&B should sum each up (its run table's column): vali
# NDCG@5 picks epochs, grid points and rounds; the pretraining loss has no labels to pick by.
SUMMARIES = {
    "vali_ndcg@5": "max",
    "best_vali_ndcg@5": "max",
    "grid/vali_ndcg@5": "max",
    "round/vali_ndcg@5": "max",
    "monitor/knn_ndcg@5": "max",
    "train_loss": "min",
    "loss": "min",
}


def _define_metrics(run: Any) -> None:
    for name, summary in SUMMARIES.items():
        run.define_metric(name, summary=summary)


def offline_runs(folder: Path) -> list[Path]:
    """The W&B offline runs under ``folder``: every run's ``wandb/offline-run-*`` folders."""
    return sorted(
        p for p in Path(folder).rglob(OFFLINE_RUNS) if p.is_dir() and p.parent.name == "wandb"
    )


def offline_note(folder: Path) -> str | None:
    """One line saying where the offline runs under ``folder`` are, how to upload them and how
    to turn them off; None when there are none."""
    runs = offline_runs(folder)
    if not runs:
        return None
    return (
        f"W&B: {len(runs)} offline run(s) under {folder} (<run>/wandb/{OFFLINE_RUNS}, kept "
        f"locally without a W&B login); upload: find {folder} -type d -name '{OFFLINE_RUNS}' "
        "-exec wandb sync {} +; turn off: logger=none or WANDB_MODE=disabled"
    )


def artifact_name(name: str) -> str:
    """W&B artifact names allow letters, digits, ``-``, ``_`` and ``.`` only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")[:128]


def _logged_in() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}/"))
        elif isinstance(value, int | float | bool | str) or value is None:
            flat[name] = value
    return flat


class ProgressBar:
    """Iterate over ``items`` with a tqdm bar (stderr, terminals only) and a settable postfix."""

    def __init__(
        self, items: Iterable, *, total: int | None, desc: str, enabled: bool = True
    ) -> None:
        self._bar = None
        self._items = items
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(items, total=total, desc=desc, leave=False, file=sys.stderr)

    def __iter__(self) -> Iterator:
        return iter(self._bar if self._bar is not None else self._items)

    def set_postfix(self, **values: Any) -> None:
        if self._bar is not None:
            self._bar.set_postfix(**values, refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
