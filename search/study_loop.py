"""The one study loop every Optuna search of the project runs: the tree backends'
(`strategies.study.optuna_search`) and the deep rankers' (`finetune.search.run_search`).

`start_study` opens the study, maximizing the vali score, in memory (`studies.create_study`;
with a storage, recorded there as well: `studies.StoredStudy`), and enqueues its first points
(the defaults, the fixed recipe's), so they are its first trials. `run_study` runs its trials in
batches (`trial_batches.batches`): each trial of a batch is asked in trial order and drawn by
the caller (``draw``), the batch trains at once (``train``), then, in trial order, the caller
settles each trained trial (``settle``: its score or pruned, after what must come first, such
as its epochs reported to the pruner), the study is told it (pruned; completed with its score;
failed when the score is not finite: the sampler learns nothing from it) and the caller sees it
(``on_trial``). A stored study checks or records each trial once it is drawn and once it is
told (`StoredStudy.drawn`, `StoredStudy.ended`). Without a study (a run that trains another
run's chosen recipe) nothing is asked or told: ``draw`` gets None.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar

from scarce_ltr.search.studies import StoredStudy, StudyStore, create_study
from scarce_ltr.search.trial_batches import batches

Drawn = TypeVar("Drawn")  # an asked trial as the caller drew it
Trained = TypeVar("Trained")  # a drawn trial as the caller trained it


class Verdict(NamedTuple):
    """What a trained trial tells its study: its vali score (NaN: none), or that it was pruned."""

    value: float
    pruned: bool = False


def start_study(
    optuna: Any,
    store: StudyStore | None,
    *,
    sampler: Any,
    pruner: Any = None,
    first: Iterable[dict] = (),
    study_name: str | None = None,
    n_trials: int = 0,
) -> Any:
    """A study maximizing the vali score, drawn by ``sampler``, pruned by ``pruner`` (None:
    Optuna's default, which a trial that reports nothing never meets), its first trials
    ``first`` in order, recorded in ``store`` (None: in memory only) for a search of
    ``n_trials``. ``study_name``: a fixed name of the in-memory study (Hyperband's brackets
    hash it; a stored study is named by its store)."""
    options: dict[str, Any] = {"direction": "maximize", "sampler": sampler}
    if pruner is not None:
        options["pruner"] = pruner
    if study_name is not None:
        options["study_name"] = study_name
    study = create_study(optuna, store, n_trials=n_trials, **options)
    for point in first:
        study.enqueue_trial(point)
    return study


def run_study(
    study: Any,
    n_trials: int,
    n_jobs: int,
    *,
    draw: Callable[[int, Any], Drawn],
    train: Callable[[list[Drawn]], Sequence[Trained]],
    settle: Callable[[Drawn, Trained], Verdict],
    on_trial: Callable[[Drawn, Trained], None],
) -> None:
    """``n_trials`` trials of ``study`` (None: none asked or told), ``n_jobs`` at once.

    Args:
        draw: ``(number, trial)`` -> trial ``number`` as the caller trains it; ``trial`` the
            Optuna trial just asked (None without a study), whose ``suggest_*`` it calls.
        train: the batch's drawn trials -> each trained, in order.
        settle: a drawn trial and what training gave -> what the study is told of it.
        on_trial: the same, once the study was told: the caller keeps and reports it.
    """
    for batch in batches(n_trials, n_jobs):
        # asked in trial order, trained at once, told in trial order (search.trial_batches)
        asked: list[Any] = []
        drawn: list[Drawn] = []
        for number in batch:
            asked.append(study.ask() if study is not None else None)
            drawn.append(draw(number, asked[-1]))
            if isinstance(study, StoredStudy):
                study.drawn(number, asked[-1])
        trained = train(drawn)
        for number, trial, item, done in zip(batch, asked, drawn, trained, strict=True):
            verdict = settle(item, done)
            if study is not None:
                _tell(study, trial, verdict)
            if isinstance(study, StoredStudy):
                study.ended(number, trial)
            on_trial(item, done)


def _tell(study: Any, trial: Any, verdict: Verdict) -> None:
    """``trial``'s end told to ``study``: pruned, completed with its score, or failed (no finite
    score: nothing for the sampler to learn)."""
    from optuna.trial import TrialState

    if verdict.pruned:
        study.tell(trial, state=TrialState.PRUNED)
    elif math.isfinite(verdict.value):
        study.tell(trial, verdict.value)
    else:
        study.tell(trial, state=TrialState.FAIL)
