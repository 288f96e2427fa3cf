"""Finetuning rankers on scarce labels. ``finetune.fit(cfg, data, encoder, labeled) ->
FinetunedRanker`` trains on in-memory splits (`scarce_ltr.finetune.train.fit`), imported when
first used: the command line reads this package's configs without importing the stage."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "fit":
        from scarce_ltr.finetune.train import fit

        return fit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
