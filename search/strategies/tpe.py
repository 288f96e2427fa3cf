"""``optuna``: a seeded TPE study (Optuna's default sampler) over the backend's space; each trial
is drawn where the earlier trials scored well on vali (`study.optuna_search`)."""

from __future__ import annotations

from types import ModuleType
from typing import Any


def sampler(optuna: ModuleType, seed: int) -> Any:
    return optuna.samplers.TPESampler(seed=seed)
