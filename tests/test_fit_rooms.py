"""The estimators' ``fit`` path visits at most 3 rooms, downhill (issue 63's goal), measured on
the calls a tiny fit makes.

A room is a top-level package of ``scarce_ltr`` (docs/architecture.md's layer table,
`test_architecture.LAYERS`; ``cli.py`` and its ``cli_*`` modules are ``cli``), as the issue
names them when it draws the old path, ``api -> cli -> core -> cli -> core -> api``. The fit
path is every call stack the fit goes through (`sys.setprofile`), read from the estimator's
``fit`` down as the rooms its frames lie in, consecutive frames of one room one visit. The
floor rooms, ``core``, ``search``, ``data`` and ``losses`` (the layers below the first stage),
are left out of the reading: every stage stands on them (config loading, the epoch loop,
metrics, the choosers, the data), so api -> finetune -> data -> core would count four where
the hand-offs are two, and a call from them into a room above runs that room's own code
handed down (a config class's checks when `core.config` builds it, an epoch's hooks in
`core.training`): api -> core -> pretrain reads api -> pretrain.

Downhill: each visit lies in a room of a lower layer than the one before (no climb back, no
room visited twice on one stack); no frame of ``cli`` runs at all (the floor included).
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from types import FrameType

import numpy as np
import pytest
from test_architecture import LAYERS, layer_of
from tiny import tiny_data

from scarce_ltr.api import PretrainedRanker, TreeRanker
from scarce_ltr.core.config import load_config
from scarce_ltr.data.datasets import load_dataset
from scarce_ltr.data.stage_config import CommonConfig

FLOOR = LAYERS[: LAYERS.index("pretrain")]  # core, search, data, losses
MAX_ROOMS = 3
ENCODER = {"encoder__width": 8, "encoder__hidden": 16, "encoder__n_blocks": 1}
GBDT = {"gbdt__num_threads": 1, "gbdt__max_rounds": 20, "gbdt__early_stopping_rounds": 5}
DEEP = {**ENCODER, "epochs": 2, "head_hidden": 16, "pretrain__monitor__enabled": False}
RESNET = {"deep__full_epochs": 2, "deep__lrs": [1e-3], "deep__head_hidden": 8}
RESNET |= {f"deep__{k}": v for k, v in ENCODER.items()}


def _room(frame: FrameType) -> str | None:
    return layer_of(frame.f_globals.get("__name__", ""))


def _where(frame: FrameType) -> str:
    return f"{frame.f_globals['__name__']}.{frame.f_code.co_qualname}"


class RoomTrace:
    """The rooms a block's calls run in: ``paths`` (each stack's rooms above the floor, outer
    first, one visit per run of frames in one room: how many calls went that way), ``seen``
    (every room whose code ran, the floor too) and ``climbs`` (``(caller, callee)`` of each
    call into a room above the nearest room above the floor on its stack)."""

    def __init__(self) -> None:
        self.paths: Counter[tuple[str, ...]] = Counter()
        self.seen: set[str] = set()
        self.climbs: set[tuple[str, str]] = set()

    def __enter__(self) -> RoomTrace:
        sys.setprofile(self._call)
        threading.setprofile(self._call)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)
        threading.setprofile(None)

    def _call(self, frame: FrameType, event: str, arg) -> None:
        if event != "call" or (room := _room(frame)) is None:
            return
        self.seen.add(room)
        if room in FLOOR:
            return
        caller = frame.f_back
        while caller is not None and _room(caller) in (None, *FLOOR):
            caller = caller.f_back
        if caller is None or _room(caller) == room:
            return  # the fit's own frame, or a call inside one room: no new visit
        if LAYERS.index(room) > LAYERS.index(_room(caller)):
            self.climbs.add((_where(caller), _where(frame)))
        self.paths[stack_rooms(frame)] += 1


def stack_rooms(frame: FrameType | None) -> tuple[str, ...]:
    """The rooms above the floor of ``frame``'s stack, outermost first, one per visit."""
    rooms: list[str] = []
    while frame is not None:
        room = _room(frame)
        if room is not None and room not in FLOOR and (not rooms or rooms[-1] != room):
            rooms.append(room)
        frame = frame.f_back
    return tuple(reversed(rooms))


def downhill(path: tuple[str, ...]) -> bool:
    """Each visit in a room of a lower layer than the visit before."""
    layers = [LAYERS.index(room) for room in path]
    return all(lower < upper for upper, lower in zip(layers, layers[1:], strict=False))


@pytest.fixture(scope="module")
def splits():
    cfg, _ = load_config(CommonConfig, [*tiny_data(), "logger=none"])
    data = load_dataset(cfg.data)

    def arrays(split):
        qid = np.repeat(split.qids, split.group_sizes)
        return np.asarray(split.features), np.asarray(split.labels), qid

    return arrays(data["train"]), arrays(data["vali"])


def _fit(estimator, splits) -> RoomTrace:
    train, vali = splits
    with RoomTrace() as trace:
        estimator.fit(*train, eval_set=vali)
    return trace


def test_the_checker_refuses_the_old_path() -> None:
    """The reading fails the path the issue found (api -> cli -> core -> cli -> core -> api,
    read above the floor: api -> cli -> cli -> api) and a stage calling a stage above."""
    assert not downhill(("api", "cli", "api"))
    assert not downhill(("api", "finetune", "baselines"))
    assert downhill(("api", "baselines", "trees")) and downhill(("api", "finetune", "pretrain"))


@pytest.mark.parametrize(
    ("make", "stages"),
    [
        (
            lambda: PretrainedRanker("simclr-rank", "full", **DEEP),
            {"pretrain", "finetune"},  # pretraining, then finetuning (its ranker: -> pretrain)
        ),
        # baselines.fit -> the tree backend (trees); the deep: section's recipe
        # (finetune/recipe.py) is checked with every baseline config: -> finetune
        (lambda: TreeRanker("gbdt", **GBDT), {"baselines"}),
        (lambda: TreeRanker("gbdt-optuna", **GBDT, gbdt__n_trials=2), {"baselines"}),
    ],
    ids=["PretrainedRanker", "TreeRanker-gbdt", "TreeRanker-gbdt-optuna"],
)
def test_a_fit_visits_at_most_three_rooms_downhill(splits, make, stages: set[str]) -> None:
    trace = _fit(make(), splits)
    assert "cli" not in trace.seen, "a fit ran the command line's code"
    assert all(path[0] == "api" for path in trace.paths), trace.paths
    assert not trace.climbs, trace.climbs
    assert [p for p in trace.paths if not downhill(p)] == []
    assert max(len(path) for path in trace.paths) <= MAX_ROOMS, max(trace.paths, key=len)
    # api hands the fit to the stage's function: its package is a room right after api
    assert stages <= {path[1] for path in trace.paths if len(path) > 1}, trace.paths


def test_a_deep_baselines_fit_climbs_once_to_build_its_model(splits) -> None:
    """The deep baselines are finetuned rankers: ``baselines.fit`` hands the grid to
    finetuning's (`finetune.grid.train_point`), which builds each point's model by the
    baseline's own builder (`baselines.deep.train._candidate`; DeepFM, DCNv2 and DASALC are
    the baselines' networks): one climb, finetune -> baselines, and four rooms with the
    encoder's (pretrain). Measured here as it is, so that a second climb, or this one gone,
    is seen; issue 63's 3 rooms downhill hold for the estimators above, not for this path."""
    trace = _fit(TreeRanker("resnet", **RESNET), splits)
    assert "cli" not in trace.seen
    builder = "scarce_ltr.baselines.deep.train._candidate.<locals>.build"
    assert trace.climbs == {("scarce_ltr.finetune.grid.train_point", builder)}
    assert max(trace.paths, key=len) == (
        "api", "baselines", "finetune", "baselines", "finetune", "pretrain"
    )  # fmt: skip
