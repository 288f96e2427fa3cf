"""A run's identity: what it is, and where its folder lies.

`RunIdentity` names everything about a run from its config: the model name sweeps and reports
use (``simclr-rank+full``, ``gbdt``, ``gbdt-ssl+simclr-rank``, ``ensemble:a,b``), the report
group (`GROUPS`), the default folder ``<runs root>/<data>/<stage>/<folder name>/<label
setting>/seed=<s>`` (`run_folder`, the one layout of run folders, under `runs_root`), the tracker's
name, group and tags, and the keys every ``report.json`` starts with. The model name is a plain
string here: each stage's config builds it with the marks its layer owns, and
`scarce_ltr.models.names` takes it apart.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scarce_ltr.core.config import PACKAGE_ROOT
from scarce_ltr.core.errors import UserError

RUNS_ENV = "LTR_RUNS_DIR"
STAGES = ("pretrain", "finetune", "baseline", "ensemble")

# The report groups: each stage config files its model under one (`RunIdentity.group`).
GROUPS = ("gbdt", "no-pretrain-dl", "pretrained-dl", "hybrid")


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
    parts = [dataset, stage, name, *([setting] if setting else [])]
    for part in parts:
        # Each part is folders of plain names (a sweep's fold: ``ohsumed/fold=1``): a run is
        # never written outside ``root`` (``..``, ``/x``).
        if any(piece in ("", ".", "..") or "\0" in piece for piece in part.split("/")):
            raise UserError(
                f"{part!r} cannot name a run folder (of {'/'.join(parts)}): plain names are "
                "needed, not '..' nor an absolute path"
            )
    return Path(root, *parts, f"seed={seed}")


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
