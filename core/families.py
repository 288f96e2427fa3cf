"""What a model family tells the layers above it: one `ModelFamily` entry per family.

A family (the finetuned torch rankers, each deep baseline kind, each tree backend, the hybrid,
ensembles) declares its entry as ``FAMILY`` in its own package (``trees/lightgbm/family.py``) or
module (a tree backend's: ``trees/xgboost.py``), next to the code it names;
`scarce_ltr.families` collects every entry in one table, from which the command line's baseline
names, serving's bundle kinds, their scorers and export formats, and the report groups derive.
The type lives here, below every family, so that each can declare one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scarce_ltr.core.run_identity import GROUPS, STAGES


@dataclass(frozen=True)
class ScoringContext:
    """What serving hands a bundle's scorer beside its folder and its manifest's ``model`` entry:
    what only the layers above the families know."""

    # Every family's torch builders (`ModelFamily.torch_builders`): a torch bundle's spec kind
    # may be another family's (a deep baseline's bundle is the finetuned rankers' kind).
    torch_builders: Mapping[str, Callable[[dict], Any]]
    # A bundle folder -> its ranker (`serving.ranker.BundledRanker`): an ensemble's members.
    load_bundle: Callable[[Path], Any]


# A bundle kind's scorer: ``scorer(folder, manifest["model"], context)`` loads the model
# (a `UserError` naming the file when it cannot), and its ``score(raw, transform)`` gives the
# ``[n_items]`` float64 scores of a split of raw features through the bundle's fitted transform.
Scorer = Callable[[Path, dict, ScoringContext], Any]


@dataclass(frozen=True)
class ModelFamily:
    """One family of models and everything the layers above need to know of it."""

    # Its command-line names: ``./run.sh baseline <name>``, ``./run.sh finetune <strategy>``;
    # each is also the name of its config file (configs/<stage>/<name>.yaml).
    names: tuple[str, ...]
    stage: str  # the ./run.sh stage that trains it (core.run_identity.STAGES)
    train: Callable[..., Any]  # the stage's entry point for it, main(cfg, run or folder)
    # The report group of its models; None where the members decide (an ensemble's).
    group: str | None
    bundle_kind: str  # the model kind its runs' bundle manifests name (serving scores it)
    # The scorer of that kind, one per kind: the family that owns the kind defines it, the
    # others writing that kind name the same object (tests/test_families.py checks).
    scorer: Scorer
    export_formats: tuple[str, ...] = ()  # ./run.sh export format= that its bundles take
    # A torch bundle's spec kind -> the builder of its (untrained) module, for the kinds that
    # are not the finetuned ranker's own (`finetune.model.build_model` builds those).
    torch_builders: Mapping[str, Callable[[dict], Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.names:
            raise ValueError("a model family names at least one model")
        if self.stage not in STAGES:
            raise ValueError(f"stage must be one of {', '.join(STAGES)}, got {self.stage!r}")
        if self.group is not None and self.group not in GROUPS:
            raise ValueError(f"group must be one of {', '.join(GROUPS)}, got {self.group!r}")
