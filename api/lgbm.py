"""`lightgbm.LGBMRanker`'s fit arguments and fitted attributes, as the estimators read them.

``eval_set`` as LightGBM gives it (``[(X_v, y_v)]`` with ``eval_group=[sizes]``) or as the
project does (``(X_v, y_v, qid_v)``); ``callbacks`` of LightGBM that have a meaning here
(`lightgbm.early_stopping`, `lightgbm.log_evaluation`, `lightgbm.record_evaluation`);
``evals_result_`` recomputed from the kept booster, round by round, on the eval set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scarce_ltr.api.stages import leaves

LGBM_EVAL_AT = (1, 2, 3, 4, 5)  # LGBMRanker's default eval_at


@dataclass
class EvalSet:
    """One eval set: raw X, y and its raw query ids (qid or group sizes)."""

    name: str
    X: Any
    y: Any
    qid: Any = None
    group: Any = None


def eval_sets(eval_set, eval_group, eval_names) -> list[EvalSet]:
    """``eval_set`` in either form; more than one set is refused (the stages validate on one)."""
    if eval_set is None:
        if eval_group is not None:
            raise ValueError("eval_group is given without eval_set")
        return []
    if isinstance(eval_set, list) and eval_set and all(isinstance(v, tuple) for v in eval_set):
        sets = list(eval_set)
    else:
        sets = [eval_set]
    if len(sets) != 1:
        raise ValueError(
            f"eval_set holds {len(sets)} sets; the estimators choose rounds, epochs and grid "
            "points on one: give one (X_v, y_v, qid_v) or [(X_v, y_v)] with eval_group"
        )
    groups = _one_per_set(eval_group, "eval_group", len(sets))
    names = _one_per_set(eval_names, "eval_names", len(sets))
    out = []
    for i, item in enumerate(sets):
        if not isinstance(item, tuple | list) or len(item) not in (2, 3):
            raise ValueError("eval_set must be (X_v, y_v, qid_v), or [(X_v, y_v)] with eval_group")
        name = str(names[i]) if names is not None else f"valid_{i}"
        group = groups[i] if groups is not None else None
        if len(item) == 2:
            if group is None:
                raise ValueError("eval_set [(X_v, y_v)] needs eval_group=[sizes] (or a qid_v)")
            out.append(EvalSet(name, item[0], item[1], group=group))
        else:
            if group is not None:
                raise ValueError("eval_set has its qid_v; eval_group is given too: pass one")
            out.append(EvalSet(name, *item))
    return out


def joined_eval_set(eval_set, eval_X, eval_y):
    """LightGBM 4.7's ``eval_X``/``eval_y`` as ``eval_set`` pairs."""
    if eval_X is None and eval_y is None:
        return eval_set
    if eval_set is not None:
        raise ValueError("eval_set and eval_X/eval_y are both given: pass one")
    if eval_X is None or eval_y is None:
        raise ValueError("eval_X and eval_y go together")
    xs = list(eval_X) if isinstance(eval_X, tuple | list) else [eval_X]
    ys = list(eval_y) if isinstance(eval_y, tuple | list) else [eval_y]
    if len(xs) != len(ys):
        raise ValueError(f"eval_X holds {len(xs)} sets, eval_y {len(ys)}")
    return list(zip(xs, ys, strict=True))


def _one_per_set(value, arg: str, n: int) -> list | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence | np.ndarray):
        raise ValueError(f"{arg} must be a list with one entry per eval set")
    if len(value) != n:
        raise ValueError(f"{arg} has {len(value)} entries; eval_set holds {n}")
    return list(value)


def eval_at(value) -> tuple[int, ...]:
    if value is None:
        return LGBM_EVAL_AT
    ks = (value,) if isinstance(value, int | np.integer) else tuple(value)
    if not ks or not all(isinstance(k, int | np.integer) and k >= 1 for k in ks):
        raise ValueError(f"eval_at must be positive integers (ranks k of NDCG@k), got {value!r}")
    return tuple(int(k) for k in ks)


def refuse_unsupported(**given: Any) -> None:
    """LGBMRanker's fit arguments without a counterpart: anything but their default refused."""
    why = {
        "sample_weight": "the stages train without weights (every QG counts the same)",
        "eval_sample_weight": "the eval set is scored without weights",
        "init_score": "boosting starts from zero in every fit",
        "eval_init_score": "boosting starts from zero in every fit",
        "init_model": "every fit trains from scratch (continue training with lightgbm itself)",
    }
    for arg, value in given.items():
        if arg == "eval_metric":
            if value not in (None, "ndcg", "lambdarank", ["ndcg"]):
                raise ValueError(
                    f"eval_metric={value!r}: every choice is made on NDCG@5 of the eval set; "
                    "eval_at says which NDCG@k evals_result_ holds"
                )
        elif arg == "feature_name":
            if not (isinstance(value, str) and value == "auto"):
                raise ValueError(
                    "feature_name: only 'auto' (a DataFrame's columns name the features)"
                )
        elif value is not None:
            raise ValueError(f"{arg} is not supported: {why[arg]}")


@dataclass
class CallbackChoices:
    early_stopping_rounds: int | None = None
    show_progress: bool = False
    records: list[dict] = field(default_factory=list)


def read_callbacks(callbacks) -> CallbackChoices:
    """The LightGBM callbacks that have a meaning here; any other one is refused, named."""
    out = CallbackChoices()
    for callback in callbacks or ():
        kind = type(callback).__name__
        if kind == "_EarlyStoppingCallback":
            if getattr(callback, "min_delta", 0.0) not in (0, 0.0, [0.0]):
                raise ValueError("callbacks: early_stopping's min_delta is not supported (0 only)")
            out.early_stopping_rounds = int(callback.stopping_rounds)
        elif kind == "_LogEvaluationCallback":
            out.show_progress = callback.period > 0
        elif kind == "_RecordEvaluationCallback":
            out.records.append(callback.eval_result)
        else:
            name = getattr(callback, "__name__", kind)
            raise ValueError(
                f"callbacks: {name} is not supported (the stages run the boosting): "
                "lightgbm.early_stopping, log_evaluation and record_evaluation are"
            )
    return out


def booster_of(ranker) -> Any:
    """The LightGBM booster of a bundle (None for another kind or one with extra columns)."""
    model = getattr(ranker, "model", None)
    if ranker.kind != "lightgbm" or model is None or not hasattr(model, "booster"):
        return None
    return model.booster


def per_round_ndcg(ranker, split, ks: tuple[int, ...], policy: str) -> dict[str, list[float]]:
    """``{"ndcg@k": [after round 1, 2, ...]}`` of the bundle's booster on a split (None when
    the bundle is no plain LightGBM booster on the features)."""
    from scarce_ltr.core.metrics import mean_ndcg_at

    booster = booster_of(ranker)
    model = ranker.model
    if booster is None or model.pca is not None or model.embedding is not None:
        return {}
    features = ranker.transform(split).features
    n_rounds = booster.current_iteration()
    total = np.zeros(split.n_items, dtype=np.float64)
    curves: dict[str, list[float]] = {f"ndcg@{k}": [] for k in ks}
    labels = np.asarray(split.labels)
    for i in range(n_rounds):
        total += booster.predict(features, start_iteration=i, num_iteration=1, raw_score=True)
        values = mean_ndcg_at(total, labels, split.offsets, ks=ks, policy=policy)
        for k in ks:  # as given: a k listed twice is recorded twice, as before
            curves[f"ndcg@{k}"].append(float(values[k]))
    return curves


class LightGBMAttributes:
    """LGBMRanker's fitted attributes of a `scarce_ltr.api.base.Ranker` (``ranker_``,
    ``report_`` and ``n_features_in_`` set by its fit)."""

    def _set_lightgbm_attributes(self, vali, sets, ks, chosen) -> None:
        selected = (self.report_ or {}).get("selected") or {}
        rounds = selected.get("rounds")
        self.best_iteration_ = None if rounds is None else int(rounds)
        policy = dict(leaves(self._config)).get("metrics.policy", "skip")
        curves = per_round_ndcg(self.ranker_, vali, ks, policy)
        name = sets[0].name if sets else "valid_0"
        self.evals_result_ = {name: curves} if curves else {}
        self.best_score_ = {name: {m: c[-1] for m, c in curves.items()}} if curves else {}
        for record in chosen.records:
            record.clear()
            record.update(self.evals_result_)

    @property
    def booster_(self):
        """The LightGBM booster of a LightGBM method (its kept rounds)."""
        booster = booster_of(self._fitted())
        if booster is None:
            raise AttributeError(f"booster_ is LightGBM's; this model is {self.ranker_.kind}")
        return booster

    @property
    def n_estimators_(self) -> int | None:
        """The rounds of the booster (LightGBM's: its trees, which early stopping cuts to the
        best round; the searched methods keep the chosen rounds); other models: the rounds
        kept, or None."""
        booster = booster_of(self._fitted())
        if booster is not None:
            return int(booster.current_iteration())
        return getattr(self, "best_iteration_", None)

    n_iter_ = n_estimators_

    @property
    def n_features_(self) -> int:
        self._fitted()
        return self.n_features_in_

    @property
    def feature_name_(self) -> list[str]:
        """The feature names, LightGBM's ``Column_<j>`` for arrays."""
        self._fitted()
        names = getattr(self, "feature_names_in_", None)
        if names is None:
            return [f"Column_{j}" for j in range(self.n_features_in_)]
        return [str(n) for n in names]

    @property
    def objective_(self) -> str:
        """The LightGBM objective of the kept booster (``lambdarank``, ``rank_xendcg``)."""
        text = self.booster_.model_to_string(num_iteration=0)
        line = next(ln for ln in text.splitlines() if ln.startswith("objective="))
        return line.partition("=")[2].split()[0]

    @property
    def feature_importances_(self) -> np.ndarray:
        """``[n_features_in_]`` LightGBM's importances (``importance_type``: split or gain)
        of the input features (a hybrid's extra columns left out)."""
        booster = self.booster_
        kind = getattr(self, "importance_type", "split")
        values = booster.feature_importance(importance_type=kind)
        return np.asarray(values[: self.n_features_in_])
