"""A run's identity and life, written once for every stage (TabR's ``start`` ... ``finish``).

A run is one job of a stage (pretraining, finetuning, a baseline, an ensemble) in a folder of its
own. `RunIdentity` names everything about it from its config: the model name sweeps and reports
use (``simclr-rank+full``, ``gbdt``, ``gbdt-ssl+simclr-rank``, ``ensemble:a,b``), the report
group, the default folder ``<runs root>/<data>/<stage>/<folder name>/<label setting>/seed=<s>``,
and the tracker's name, group and tags. `Run` lives it out:

- `Run.of` names the folder, refusing one no file system could hold: a name longer than the file
  system allows, or a folder on a kernel file system (``/proc``, ``/sys``) that holds no files;
- `Run.execute` is the life the command line gives every stage's run: the folder's lock
  (`scarce_ltr.core.locks`), `start`, a skip when the run finished before, then the stage's
  ``main(cfg, run)``, which trains and hands back its `Outcome`, and `finish` with it;
- `Run.start` makes the folder, removes temp files that interrupted writes left, and writes
  ``config.yaml``, refusing a folder that holds a run with other settings; the `FREE_KEYS`
  (device, AMP, the scoring batch size, the logger, the folder itself) may change between a run
  and its resume, and one data folder spelled two ways, relative or absolute, with or without a
  trailing ``/``, is one ``data.path``;
- `Run.open_tracker` starts the W&B run (or nothing) under the identity's names;
- `Run.finish` writes ``report.json`` (the identity keys first, the same in every stage), closes
  the tracker and writes ``DONE`` last, so a finished run is skipped and an unfinished one
  resumes from its checkpoint. ``DONE`` lists the files the run finished with: a run whose
  ``DONE`` names a file that is gone (deleted because it was corrupt) is not finished, and running
  it again redoes its finish from its checkpoint;
- `GridPoint` is one resumable point of a grid inside a run (``result.json`` + ``DONE``).

`read_config` reads a run's ``config.yaml`` back as a typed object; `run_model` names the model of
a finished run. The model name is a plain string here: each stage's config builds it with the
marks its layer owns, and `scarce_ltr.models.names` takes it apart.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from scarce_ltr.core.bundle import BUNDLE_DIR
from scarce_ltr.core.config import PACKAGE_ROOT, to_yaml
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import (
    atomic_write_text,
    file_error,
    make_folder,
    remove_stale_temps,
    write_json,
)
from scarce_ltr.core.locks import FolderLock, is_rank_zero
from scarce_ltr.core.progress import final_block
from scarce_ltr.core.tracking import Tracker, start_tracker

CONFIG = "config.yaml"
REPORT = "report.json"
DONE = "DONE"
POINT_RESULT = "result.json"
GRID_DIR = "grid"
RUNS_ENV = "LTR_RUNS_DIR"
STAGES = ("pretrain", "finetune", "baseline", "ensemble")
# The settings that may change between a run and its resume, or its skip once finished: where it
# runs and logs (device, AMP, the tracker), how many items it scores at once (a QG's scores do not
# depend on the others in its batch), and its folder (moved or copied). A free key is one of
# these at the top of a stage's config or of a family's section (``deep.device``), never inside a
# pass-through mapping of a backend's own options (``xgboost.params.device`` is a setting).
FREE_KEYS = ("logger", "run_dir", "device", "amp", "cpu_amp", "eval_item_budget")
# Files that are no result of a run: DONE does not list them (a checkpoint may be deleted to
# save space once the run is finished).
NOT_RESULTS = (DONE, "log.txt", "checkpoint.pt")
# Keys naming the run folders a run is built from: they may differ when those folders moved.
SOURCE_KEYS = ("pretrained", "runs")
# Kernel file systems that hold no files of a user's (their mount types in /proc/self/mounts).
KERNEL_FILE_SYSTEMS = {
    "proc": "the kernel's view of its processes",
    "sysfs": "the kernel's view of its devices and drivers",
    "devtmpfs": "the device nodes",
    "devpts": "the terminals",
    "cgroup": "the control groups",
    "cgroup2": "the control groups",
    "debugfs": "the kernel's debug files",
    "tracefs": "the kernel's trace files",
    "securityfs": "the security modules' files",
    "configfs": "the kernel's configuration objects",
    "bpf": "the BPF objects",
    "pstore": "the kernel's crash records",
    "efivarfs": "the firmware's variables",
    "mqueue": "the message queues",
}

# The report groups: each stage config files its model under one (`RunIdentity.group`).
GROUPS = ("gbdt", "no-pretrain-dl", "pretrained-dl", "hybrid")

ConfigT = TypeVar("ConfigT")
# A key a config does not hold (`_changed_keys`), told apart from one holding None.
_ABSENT: Any = object()


@dataclass(frozen=True)
class Outcome:
    """What a stage's ``main(cfg, run)`` hands back to `Run.execute`, which finishes the run with
    it: the body of ``report.json`` (its identity keys come from the run) and the summary the
    tracker closes with. A stage writes its result files (scores, bundle) before it returns."""

    body: dict[str, Any]
    summary: dict[str, Any] | None = None


def runs_root() -> Path:
    """``$LTR_RUNS_DIR``, else ``./runs`` (``run.sh`` points it at the checkout's ``runs/``)."""
    return Path(os.environ.get(RUNS_ENV) or Path.cwd() / "runs")


def run_folder(
    root: Path, *, dataset: str, stage: str, name: str, setting: str | None, seed: int
) -> Path:
    """``<root>/<dataset>/<stage>/<name>/[<setting>/]seed=<seed>``: the one layout of run folders.

    A sweep's pretraining runs leave the label setting out (they see no label and serve every
    setting of the sweep).
    """
    folder = root / dataset / stage / name
    return (folder / setting if setting else folder) / f"seed={seed}"


def git_revision() -> str | None:
    """The checkout's commit; None for an installed package (it is not a git checkout)."""
    if not (PACKAGE_ROOT / ".git").exists():
        return None
    try:
        command = ["git", "rev-parse", "HEAD"]
        out = subprocess.run(command, cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def project_version() -> str:
    from scarce_ltr import __version__

    return __version__


@dataclass(frozen=True)
class RunIdentity:
    """What a run is: names its folder, tracker and report keys."""

    dataset: str
    stage: str  # pretrain | finetune | baseline | ensemble
    model: str  # the name sweeps and reports use
    setting: str  # the label setting's tag (frac=0.02, tau=4.5,frac=1, ...)
    seed: int
    group: str  # the report group the stage files its model under (GROUPS)
    folder_name: str | None = None  # the folder's <name> part when it is not the model's

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"stage must be one of {', '.join(STAGES)}, got {self.stage!r}")
        if self.group not in GROUPS:
            raise ValueError(f"group must be one of {', '.join(GROUPS)}, got {self.group!r}")

    def default_folder(self) -> Path:
        return run_folder(
            runs_root(),
            dataset=self.dataset,
            stage=self.stage,
            name=self.folder_name or self.model,
            setting=self.setting,
            seed=self.seed,
        )

    @property
    def tracker_name(self) -> str:
        return f"{self.tracker_group}/seed={self.seed}"

    @property
    def tracker_group(self) -> str:
        """The seeds of one (data set, stage, model, label setting) share a tracker group.
        Pretraining sees no label: its tracker names carry no label setting."""
        return "/".join([self.dataset, self.stage, self.model, *self._labels()])

    @property
    def tags(self) -> list[str]:
        return [self.dataset, self.stage, self.model, *self._labels()]

    def _labels(self) -> list[str]:
        return [] if self.stage == "pretrain" else [self.setting]

    def report_keys(self) -> dict[str, Any]:
        """The keys every ``report.json`` starts with."""
        return {
            "stage": self.stage,
            "model": self.model,
            "group": self.group,
            "dataset": self.dataset,
            "label_setting": self.setting,
            "seed": self.seed,
            "version": project_version(),
            "git": git_revision(),
        }


class Run:
    """A run's folder and life: `start`, `open_tracker`, `finish` (see the module docstring)."""

    def __init__(self, identity: RunIdentity, folder: Path, *, logger: str = "none") -> None:
        self.identity = identity
        self.folder = Path(folder)
        self.logger = logger
        self.tracker = Tracker(None)
        self.started = time.monotonic()  # the final block's seconds: this process's share

    @classmethod
    def of(cls, cfg: Any, identity: RunIdentity, folder: Path | None = None) -> Run:
        """The run of a stage config (``run_dir``, ``logger``): ``folder`` when given, else
        ``cfg.run_dir``, else the identity's default folder."""
        if folder is None:
            folder = Path(cfg.run_dir) if cfg.run_dir else identity.default_folder()
        check_run_folder(folder)
        return cls(identity, folder, logger=cfg.logger)

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
        # Only a run that got going (it left more than its config and log) is protected.
        started = any(
            p.name not in (CONFIG, "log.txt") and not p.name.startswith(".")
            for p in self.folder.iterdir()
        )
        if path.is_file() and started:
            old = _plain(OmegaConf.load(path))
            new = _plain(resolved)
            default = _ABSENT if defaults is None else _plain(defaults)
            changed = [
                k
                for k in _changed_keys(old, new, default=default)
                if not (k in SOURCE_KEYS and sources_moved(old.get(k), new.get(k)))
            ]
            if changed:
                raise UserError(
                    f"{self.folder} holds a run with other settings ({', '.join(changed[:8])} "
                    "differ); give run_dir=<another folder>, or delete that folder to start over"
                )
        atomic_write_text(path, to_yaml(resolved))

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
        """Write ``report.json``, close the tracker (with ``summary``), then write ``DONE``."""
        report = self.report(body)
        try:
            if summary:
                self.tracker.summary(summary)
            self.tracker.log_folder(self.folder / BUNDLE_DIR, name=self.identity.tracker_name)
        finally:
            self.tracker.finish()
        write_json(self.folder / REPORT, report)
        mark_done(self.folder)
        # Last, on stdout: what a user reads after nohup or in a sweep cell's log.txt.
        print(final_block(report, self.folder, time.monotonic() - self.started), flush=True)
        return report

    def close(self) -> None:
        """Close the tracker of a run that did not finish (an error); nothing is marked done."""
        self.tracker.finish()


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
    return [name for name in listed if not (Path(folder) / name).exists()]


def mark_done(folder: Path) -> None:
    """Write ``DONE`` last, listing the run's result files (`missing_results`)."""
    folder = Path(folder)
    files = sorted(
        p.name for p in folder.iterdir() if p.name not in NOT_RESULTS and not p.name.startswith(".")
    )
    atomic_write_text(folder / DONE, json.dumps({"files": files}) + "\n")


def read_config(folder: str | Path, schema: type[ConfigT]) -> ConfigT:
    """A run's ``config.yaml`` as a ``schema`` object (keys the schema lacks are left out, so a
    stage's config reads as the `CommonConfig` every stage shares); `UserError` when unreadable."""
    path = Path(folder) / CONFIG
    written = "a ./run.sh command wrote: runs/<data>/<stage>/<model>/<setting>/seed=<s>"
    if Path(folder).is_file():
        raise UserError(f"{folder}: a file, not a run folder (give the folder {written})")
    if path.is_dir():
        raise UserError(f"{path}: a folder where the run's config file belongs; not a run folder")
    try:
        saved = OmegaConf.load(path)
    except FileNotFoundError:
        raise UserError(
            f"{folder}: no {CONFIG}; not a run folder (give the folder {written}, or its run_dir=)"
        ) from None
    except OSError as exc:
        raise file_error(exc, "read", path) from None
    except OmegaConfBaseException as exc:
        raise UserError(f"{path}: not readable ({exc})") from None
    if not isinstance(saved, DictConfig):
        raise UserError(f"{path}: not a mapping")
    base = OmegaConf.structured(schema)
    known = [k for k in saved.keys() if k in base]
    try:
        merged = OmegaConf.merge(base, OmegaConf.masked_copy(saved, known))
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except (OmegaConfBaseException, ValueError, TypeError) as exc:
        raise UserError(f"{path}: not a config this version reads ({exc})") from None


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


def sources_moved(old: Any, new: Any) -> bool:
    """Whether the source run folders ``old`` names (a path or a list of paths) are all gone
    and ``new`` names as many: they moved (a moved or copied runs/ tree), they did not change."""
    olds = old if isinstance(old, list) else [old]
    news = new if isinstance(new, list) else [new]
    paths = [p for p in olds if p not in (None, "", "none")]
    if len(olds) != len(news) or len(paths) != len(olds):
        return False
    if any(p in (None, "", "none") for p in news):
        return False
    return not any(Path(p).exists() for p in paths)


def check_run_folder(folder: Path) -> None:
    """`UserError` for a run folder no file system could hold: a name longer than the file
    system allows (ENAMETOOLONG, said before a folder is made), or a folder on a kernel file
    system (``/proc``, ``/sys``), where "no such file" or "not permitted" would mislead."""
    path = Path(os.path.abspath(folder))
    existing = next((p for p in (path, *path.parents) if _exists(p)), Path("/"))
    name_max = _path_limit(existing, "PC_NAME_MAX", 255)
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > name_max:
            short = part if len(part) <= 40 else f"{part[:20]}...{part[-12:]}"
            raise UserError(
                f"the run folder's path holds a name of {size} bytes ({short!r}); this file "
                f"system allows {name_max} bytes per name: give run_dir=<a shorter path>"
            )
    path_max = _path_limit(existing, "PC_PATH_MAX", 4096)
    if len(os.fsencode(str(path))) >= path_max:
        raise UserError(
            f"run folder {str(path)[:40]}...: a path of {len(os.fsencode(str(path)))} bytes; this "
            f"file system allows {path_max - 1}: give run_dir=<a shorter path>"
        )
    mount, kind = _mount_of(existing.resolve())
    if kind in KERNEL_FILE_SYSTEMS:
        raise UserError(
            f"run folder {folder}: {mount} is the {kind} file system ({KERNEL_FILE_SYSTEMS[kind]}"
            "), which holds no files of yours: give run_dir=<a folder on a disk>"
        )


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long to look up (ENAMETOOLONG): not there
        return False


def _path_limit(folder: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(folder, name)
    except (OSError, ValueError):  # no such limit here (another system): the usual one
        return default


def _mount_of(path: Path) -> tuple[str, str | None]:
    """The mount point holding ``path`` and its file system type (Linux's /proc/self/mounts);
    ``("", None)`` where there is no mount table to read."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return "", None
    best, kind = "", None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        # Spaces and tabs in mount points are written as octal escapes (\040).
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
        inside = point == "/" or path == Path(point) or Path(point) in path.parents
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return best, kind


def _plain(config: Any) -> dict:
    """A run's settings, free keys left out and ``data.path`` in a normal form: a config saved
    before paths were made absolute (`core.config.load_config`) compares equal to the same
    folder given now."""
    plain = OmegaConf.to_container(config)
    assert isinstance(plain, dict)
    data = plain.get("data")
    if isinstance(data, dict) and isinstance(data.get("path"), str) and data["path"]:
        data["path"] = os.path.abspath(os.path.expanduser(data["path"]))
    return without_free_keys(plain)


def without_free_keys(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` (a stage's config as plain values) without its `FREE_KEYS`: those at the top
    and those of a section one level down."""
    return {
        key: {k: v for k, v in value.items() if k not in FREE_KEYS}
        if isinstance(value, dict)
        else value
        for key, value in settings.items()
        if key not in FREE_KEYS
    }


def _changed_keys(
    old: object, new: object, prefix: str = "", default: object = _ABSENT
) -> list[str]:
    """The dotted keys whose values differ between ``old`` and ``new``. A key ``old`` lacks is
    no change where ``new`` holds its ``default`` (`_ABSENT`: none known); a section ``old``
    lacks is compared key by key with its defaults, naming the keys set otherwise."""
    if old is _ABSENT and default is not _ABSENT and new == default:
        return []
    if isinstance(new, dict) and (
        isinstance(old, dict) or (old is _ABSENT and isinstance(default, dict))
    ):
        olds = old if isinstance(old, dict) else {}
        defaults = default if isinstance(default, dict) else {}
        keys = sorted(set(olds) | set(new))
        return [
            c
            for k in keys
            for c in _changed_keys(
                olds.get(k, _ABSENT), new.get(k), f"{prefix}{k}.", defaults.get(k, _ABSENT)
            )
        ]
    was = None if old is _ABSENT else old
    return [] if was == new else [prefix.rstrip(".")]
