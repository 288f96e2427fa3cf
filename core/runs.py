"""A run's life, written once for every stage (TabR's ``start`` ... ``finish``).

A run is one job of a stage (pretraining, finetuning, a baseline, an ensemble) in a folder of its
own, named by its `RunIdentity` (`scarce_ltr.core.run_identity`). `Run` lives it out:

- `Run.of` names the folder, refusing one no file system could hold
  (`scarce_ltr.core.folder_checks`);
- `Run.execute` is the life the command line gives every stage's run: the folder's lock
  (`scarce_ltr.core.locks`), `start`, a skip when the run finished before, then the stage's
  ``main(cfg, run)``, which trains and hands back its `Outcome`, and `finish` with it;
- `Run.start` makes the folder, removes temp files that interrupted writes left, and writes
  ``config.yaml``, refusing a folder that holds a run with other settings
  (`scarce_ltr.core.run_config`: the `FREE_KEYS` that may change between a run and its resume);
- `Run.check_inputs` records the fingerprints of the data files and the finished runs the run
  reads (``inputs.json``) and refuses a finished run, or a resume, whose data changed since, or
  whose encoder, teacher or members were run again (`scarce_ltr.core.run_inputs`);
- `Run.open_tracker` starts the W&B run (or nothing) under the identity's names;
- `Run.finish` writes ``report.json`` (the identity keys first, the same in every stage), closes
  the tracker and writes ``DONE`` last, so a finished run is skipped and an unfinished one
  resumes from its checkpoint. ``DONE`` lists the files the run finished with: a run whose
  ``DONE`` names a file that is gone (deleted because it was corrupt) is not finished, and running
  it again rebuilds it (from its checkpoint when ``keep_checkpoints=true`` kept it, else by
  training it again from the start);

`read_report` reads a run's ``report.json`` back; `run_model` names the model of a finished run.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from scarce_ltr.core.bundle import BUNDLE_DIR
from scarce_ltr.core.config import to_yaml
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import (
    atomic_write_text,
    file_error,
    make_folder,
    remove_stale_temps,
    write_json,
)
from scarce_ltr.core.folder_checks import check_run_folder
from scarce_ltr.core.locks import FolderLock, is_rank_zero
from scarce_ltr.core.progress import final_block
from scarce_ltr.core.run_config import CONFIG, changed_settings
from scarce_ltr.core.run_identity import RunIdentity
from scarce_ltr.core.run_inputs import INPUTS, check_inputs, source_inputs
from scarce_ltr.core.tracking import Tracker, start_tracker

REPORT = "report.json"
DONE = "DONE"
CHECKPOINT = "checkpoint.pt"  # what a run (or a grid point in it) resumes from; nothing else
# Files that are no result of a run: DONE does not list them, so a run stays finished without
# them. A finished run's checkpoints are removed (`Run.finish`, unless keep_checkpoints=true);
# ``wandb/`` (its offline W&B run) may be deleted once synced; ``inputs.json`` (the data's
# fingerprints, `core.run_inputs`): a run without one is taken as it is.
NOT_RESULTS = (DONE, "log.txt", CHECKPOINT, "wandb", INPUTS)


@dataclass(frozen=True)
class Outcome:
    """What a stage's ``main(cfg, run)`` hands back to `Run.execute`, which finishes the run with
    it: the body of ``report.json`` (its identity keys come from the run) and the summary the
    tracker closes with. A stage writes its result files (scores, bundle) before it returns."""

    body: dict[str, Any]
    summary: dict[str, Any] | None = None


class Run:
    """A run's folder and life: `start`, `open_tracker`, `finish` (see the module docstring)."""

    def __init__(
        self,
        identity: RunIdentity,
        folder: Path,
        *,
        logger: str = "none",
        keep_checkpoints: bool = False,
    ) -> None:
        self.identity = identity
        self.folder = Path(folder)
        self.logger = logger
        self.keep_checkpoints = keep_checkpoints
        self.tracker = Tracker(None)
        self.started = time.monotonic()  # the final block's seconds: this process's share
        self.cpu_started = time.process_time()  # report.json's cpu_seconds, likewise

    @classmethod
    def of(cls, cfg: Any, identity: RunIdentity, folder: Path | None = None) -> Run:
        """The run of a stage config (``run_dir``, ``logger``): ``folder`` when given, else
        ``cfg.run_dir``, else the identity's default folder."""
        if folder is None:
            folder = Path(cfg.run_dir) if cfg.run_dir else identity.default_folder()
        check_run_folder(folder)
        keep = bool(getattr(cfg, "keep_checkpoints", False))
        return cls(identity, folder, logger=cfg.logger, keep_checkpoints=keep)

    @property
    def done(self) -> bool:
        return is_done(self.folder)

    def execute(
        self,
        main: Callable[[Any, Run], Outcome],
        cfg: Any,
        resolved: DictConfig,
        *,
        defaults: DictConfig | None = None,
        report_when_done: bool = False,
    ) -> Any:
        """The one life of every stage's run: hold the folder's lock, `start` (refusing other
        settings), skip the run when it finished before, else ``main(cfg, self)``, which trains
        and hands back its `Outcome`, and `finish` with it; the tracker is closed whatever
        happens. Under DDP only rank 0 finishes (it alone writes the folder).

        A skipped run answers with its ``report.json`` when ``report_when_done`` (pretraining:
        its callers read the encoder's report), else None; a finished one with its report."""
        with FolderLock(self.folder, what=f"{self.identity.stage} run"):
            self.start(resolved, defaults=defaults)
            self.check_inputs(cfg, resolved)
            if self.done:
                print(f"{self.folder}: finished before (DONE present); skipped", file=sys.stderr)
                return (read_report(self.folder) or {}) if report_when_done else None
            try:
                outcome = main(cfg, self)
                if not is_rank_zero():
                    return self.report(outcome.body)
                return self.finish(outcome.body, summary=outcome.summary)
            finally:
                self.close()

    def start(self, resolved: DictConfig, *, defaults: DictConfig | None = None) -> None:
        """Make the folder, clear stale temp files and write ``config.yaml``; refuse a folder
        holding other settings. Call it holding the folder's lock.

        ``defaults``: the stage's config as the user left it (`core.config.merge_config`,
        ``defaults_only``). A key the folder's ``config.yaml`` lacks (a version before the key
        wrote it) is no change where ``resolved`` holds its default: the key's default keeps
        what that version did. Without ``defaults`` every missing key is a change."""
        make_folder(self.folder)
        if not is_rank_zero():  # DDP: rank 0 checks and writes the folder, and holds its lock
            return
        for stale in remove_stale_temps(self.folder):
            print(f"removed {stale} (left by an interrupted write)", file=sys.stderr)
        missing = missing_results(self.folder)
        if missing:
            print(
                f"{self.folder}: DONE, but {', '.join(missing)} is gone; running again to "
                "rebuild it",
                file=sys.stderr,
            )
            (self.folder / DONE).unlink()
        path = self.folder / CONFIG
        if path.is_file() and got_going(self.folder):
            changed = changed_settings(OmegaConf.load(path), resolved, defaults=defaults)
            if changed:
                raise UserError(
                    f"{self.folder} holds a run with other settings ({', '.join(changed[:8])} "
                    "differ); give run_dir=<another folder>, or delete that folder to start over"
                )
        atomic_write_text(path, to_yaml(resolved))

    def check_inputs(self, cfg: Any, resolved: DictConfig) -> None:
        """Refuse a finished run, or a resume, whose data files changed since it read them, or
        whose source runs (``resolved``'s encoder, teacher, members) were run again; record
        their fingerprints for a run that goes on (`core.run_inputs.check_inputs`). A config
        without data files (``inputs``) records nothing. Call it after `start`."""
        inputs = getattr(cfg, "inputs", None)
        if inputs is None or not is_rank_zero():
            return
        files, sources = inputs(), source_inputs(resolved)
        started = got_going(self.folder)
        check_inputs(self.folder, files, sources, done=self.done, started=started)

    def open_tracker(
        self, config: dict[str, Any], *, run_id: str | None = None, enabled: bool = True
    ) -> Tracker:
        """Start the tracker under the identity's name, group and tags (``enabled=False`` on
        every DDP rank but the first); `finish` closes it."""
        identity = self.identity
        self.tracker = start_tracker(
            self.logger,
            run_dir=self.folder,
            name=identity.tracker_name,
            config=config,
            group=identity.tracker_group,
            tags=identity.tags,
            job_type=identity.stage,
            run_id=run_id,
            enabled=enabled,
        )
        return self.tracker

    def report(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` after the identity keys, which a body never overrides."""
        keys = self.identity.report_keys()
        return keys | body | keys

    def write_report(self, body: dict[str, Any]) -> dict[str, Any]:
        """Write ``report.json`` without finishing (a partial report during training)."""
        report = self.report(body)
        write_json(self.folder / REPORT, report)
        return report

    def finish(self, body: dict[str, Any], *, summary: dict[str, Any] | None = None) -> dict:
        """Write ``report.json``, close the tracker (with ``summary``), then write ``DONE``; then
        remove the run's checkpoints, which only a resume reads, unless ``keep_checkpoints``.

        The report gets ``cpu_seconds``: the CPU time (user + system, every thread) this
        process spent since the run began (a resumed run's share only), what a sweep's and a
        report's cost lines sum (`sweeps.report_text.cost_text`)."""
        report = self.report(body)
        report["cpu_seconds"] = round(time.process_time() - self.cpu_started, 3)
        try:
            if summary:
                self.tracker.summary(summary)
            self.tracker.log_folder(self.folder / BUNDLE_DIR, name=self.identity.tracker_name)
        finally:
            self.tracker.finish()
        write_json(self.folder / REPORT, report)
        mark_done(self.folder)
        if not self.keep_checkpoints:  # after DONE: a crash before leaves a resumable run
            remove_checkpoints(self.folder)
        # Last, on stdout: what a user reads after nohup or in a sweep cell's log.txt.
        print(final_block(report, self.folder, time.monotonic() - self.started), flush=True)
        return report

    def close(self) -> None:
        """Close the tracker of a run that did not finish (an error); nothing is marked done."""
        self.tracker.finish()


def got_going(folder: Path) -> bool:
    """Whether a run left more than its config, log and data fingerprints: only such a run is
    protected against other settings and other data."""
    return any(
        p.name not in (CONFIG, "log.txt", INPUTS) and not p.name.startswith(".")
        for p in Path(folder).iterdir()
    )


def is_done(folder: Path) -> bool:
    """``DONE`` is there and every result file it lists is too."""
    return (Path(folder) / DONE).is_file() and not missing_results(folder)


def missing_results(folder: Path) -> list[str]:
    """The files a ``DONE`` marker lists that are gone (none without a marker)."""
    try:
        text = (Path(folder) / DONE).read_text()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise file_error(exc, "read", Path(folder) / DONE) from None
    try:
        listed = json.loads(text).get("files", []) if text.strip() else []
    except (ValueError, AttributeError):
        listed = []  # a marker of an older version: nothing listed
    # A marker of an older version may list what is no result (wandb/): that may go.
    return [
        name for name in listed if name not in NOT_RESULTS and not (Path(folder) / name).exists()
    ]


def mark_done(folder: Path) -> None:
    """Write ``DONE`` last, listing the run's result files (`missing_results`)."""
    folder = Path(folder)
    files = sorted(
        p.name for p in folder.iterdir() if p.name not in NOT_RESULTS and not p.name.startswith(".")
    )
    atomic_write_text(folder / DONE, json.dumps({"files": files}) + "\n")


def remove_checkpoints(folder: Path) -> list[Path]:
    """Delete the ``checkpoint.pt`` files of a finished run (its own and its grid points' or
    trials'); the bundle, ``report.json``, scores and ``encoder.pt`` stay. Returns them."""
    removed = []
    for path in sorted(Path(folder).rglob(CHECKPOINT)):
        if path.is_file() and "wandb" not in path.relative_to(folder).parts:
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def read_report(folder: str | Path) -> dict | None:
    try:
        report = json.loads((Path(folder) / REPORT).read_text())
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def run_model(folder: str | Path) -> str | None:
    """The model name a run's report gives; None when it has no readable report."""
    report = read_report(folder)
    return report_model(report) if report else None


def report_model(report: dict) -> str | None:
    """The model a report names (``model``; older reports: derived from their other keys)."""
    if report.get("model"):
        return str(report["model"])
    if report.get("stage") == "finetune":
        strategy, method = report.get("strategy", "full"), report.get("pretraining_method")
        if strategy == "combine":
            return f"{method or 'combined'}+combine"
        return f"{method}+{strategy}" if report.get("pretrained") else f"scratch+{strategy}"
    return str(report["method"]) if report.get("method") else None
