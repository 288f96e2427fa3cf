"""``random``: a seeded random search (Bergstra & Bengio, 2012), the baseline a tuner has to beat.

Every trial after trial 0 (the backend's defaults) is drawn independently from the backend's
space, uniformly or log-uniformly as ``suggest`` declares each key, whatever the earlier trials
scored; trials, pruning and choosing on vali are the TPE search's (`study.optuna_search`). With
a few dozen labeled vali QGs, vali NDCG@5 is noisy: TPE draws more trials where earlier ones
scored well, chance highs included, while random search spreads its budget over the space. Run
both on the same backend and seed to see whether the sampler matters at a label budget:
``./run.sh baseline gbdt-optuna gbdt.search=random``, ``catboost.search=random``,
``xgboost.search=random``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


def sampler(optuna: ModuleType, seed: int) -> Any:
    return optuna.samplers.RandomSampler(seed=seed)
