"""Rankers with the conventions of LightGBM's, XGBoost's and scikit-learn's estimators.

    >>> ranker = PretrainedRanker("simclr-rank", "full", epochs=20, optimizer__lr=1e-4)
    >>> ranker.fit(X, y, qid, unlabeled=(X_u, qid_u), eval_set=(X_v, y_v, qid_v))
    >>> scores = ranker.predict(X_test, qid_test)       # [n_items], in the input order
    >>> ranker.score(X_test, y_test, qid_test)          # mean NDCG@5 (policy skip)
    >>> ranker.save("my-ranker")                        # the run's model bundle (+ columns)

One code path: `fit` writes the arrays as a `data=arrays` data set (`layout`) in a folder of its
own and runs the same commands as ``./run.sh`` (`stages.run_stage`, recorded in
``commands_``); `predict` scores with the run's model bundle (`scarce_ltr.serving.ranker`).
Keywords are config keys (docs/estimators.md); ``get_params``/``set_params`` make
`sklearn.base.clone` work, and every fitted attribute ends in ``_``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from scarce_ltr.api.base import NAN_TREES, Ranker
from scarce_ltr.serving.ranker import ESTIMATOR_FILE, load_ranker


class PretrainedRanker(Ranker):
    """A deep ranker: an encoder pretrained on every given QG (``method``, a pretraining method
    of ``./run.sh pretrain``; None: a fresh encoder), finetuned on the labeled QGs
    (``strategy``: ``lp``, ``mp`` or ``full``). ``pretrained=``: a `PretrainedEncoder`
    (``other.encoder_``), a fitted `PretrainedRanker` or a pretraining run folder, reused
    instead of pretraining. ``missing``: ``raise`` (default) or ``median``. Other keywords are
    config keys (``epochs=5``, ``optimizer__lr=1e-4``, ``pretrain__epochs=10``)."""

    _explicit = ("method", "strategy", "pretrained", "missing", "work_dir", "verbose")

    def __init__(
        self,
        method: str | None = "simclr-rank",
        strategy: str = "full",
        *,
        pretrained: Any = None,
        missing: str = "raise",
        work_dir: str | Path | None = None,
        verbose: bool = False,
        **config: Any,
    ) -> None:
        super().__init__(
            method=method,
            strategy=strategy,
            pretrained=pretrained,
            missing=missing,
            work_dir=work_dir,
            verbose=verbose,
            **config,
        )

    def _missing_policy(self) -> str:
        if self.missing == "keep":
            raise ValueError("missing='keep' is for the trees; deep models take raise or median")
        return super()._missing_policy()

    def _stages(self) -> tuple[str, ...]:
        pretrains = self.pretrained_source_ is None and self.method is not None
        return ("pretrain", "finetune") if pretrains else ("finetune",)

    def _run_stages(self, workspace, common, overrides, fraction, log) -> None:
        if self.strategy == "combine":
            raise ValueError(
                "strategy='combine' joins finetuned runs: use ./run.sh finetune combine"
            )
        source = self.pretrained_source_
        if source is None and self.method is not None:
            source = workspace.path / "pretrain"
            self._stage(log, ["pretrain", str(self.method), *common, *overrides["pretrain"],
                              f"run_dir={source}"])  # fmt: skip
        self.pretrain_run_ = source
        self.encoder_ = self._encoder_handle(source, workspace)
        self.run_ = workspace.path / "finetune"
        self.report_ = self._stage(log, [
            "finetune", self.strategy, *common, f"scarcity.fraction={fraction!r}",
            f"pretrained={source or 'none'}", *overrides["finetune"], f"run_dir={self.run_}",
        ])  # fmt: skip


class TreeRanker(Ranker):
    """A baseline of ``./run.sh baseline``: the trees ``gbdt`` (the paper's grid),
    ``gbdt-optuna``, ``catboost``, ``xgboost``, the hybrid ``gbdt-ssl`` (LightGBM on the
    features and a pretrained encoder's embeddings: ``pretrained=`` as for `PretrainedRanker`,
    else an encoder pretrained in fit with ``pretrain_method``) and the other baselines.
    ``missing``: the trees take NaN as missing (``keep``, their default), the others ``raise``
    or impute the train ``median``. The trees read raw features (``data__transform='none'``:
    trees do not need a monotone transform, and NaN stays NaN)."""

    _explicit = ("method", "pretrained", "pretrain_method", "missing", "work_dir", "verbose")

    def __init__(
        self,
        method: str = "gbdt",
        *,
        pretrained: Any = None,
        pretrain_method: str = "simclr-rank",
        missing: str | None = None,
        work_dir: str | Path | None = None,
        verbose: bool = False,
        **config: Any,
    ) -> None:
        super().__init__(
            method=method,
            pretrained=pretrained,
            pretrain_method=pretrain_method,
            missing=missing,
            work_dir=work_dir,
            verbose=verbose,
            **config,
        )

    def config_params(self) -> dict[str, Any]:
        defaults = {"data__transform": "none"} if self.method in NAN_TREES else {}
        return defaults | super().config_params()

    def _missing_policy(self) -> str:
        if self.missing is None:
            return "keep" if self.method in NAN_TREES else "raise"
        if self.missing == "keep" and self.method not in NAN_TREES:
            raise ValueError(f"{self.method} needs every value: missing='raise' or 'median'")
        return self.missing

    def _pretrained_source(self) -> Path | None:
        if self.method != "gbdt-ssl":
            if self.pretrained is not None:
                raise ValueError(f"pretrained= is for gbdt-ssl, not {self.method}")
            return None
        return super()._pretrained_source()

    def _stages(self) -> tuple[str, ...]:
        pretrains = self.method == "gbdt-ssl" and self.pretrained_source_ is None
        return ("pretrain", "baseline") if pretrains else ("baseline",)

    def _run_stages(self, workspace, common, overrides, fraction, log) -> None:
        source = self.pretrained_source_
        pretrained = []
        if self.method == "gbdt-ssl":
            if source is None:
                source = workspace.path / "pretrain"
                self._stage(log, ["pretrain", self.pretrain_method, *common,
                                  *overrides["pretrain"], f"run_dir={source}"])  # fmt: skip
            pretrained = [f"pretrained={source}"]
        self.pretrain_run_ = source
        self.encoder_ = self._encoder_handle(source, workspace)
        self.run_ = workspace.path / "baseline"
        self.report_ = self._stage(log, [
            "baseline", self.method, *common, f"scarcity.fraction={fraction!r}", *pretrained,
            *overrides["baseline"], f"run_dir={self.run_}",
        ])  # fmt: skip


def load_estimator(path: str | Path) -> Ranker:
    """A ranker `save` wrote, ready to `predict` and `score` (its columns matched by name)."""
    path = Path(path)
    try:
        info = json.loads((path / ESTIMATOR_FILE).read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no {ESTIMATOR_FILE}; not a folder that save() wrote") from None
    classes = {"PretrainedRanker": PretrainedRanker, "TreeRanker": TreeRanker}
    params = {k: v for k, v in info["params"].items() if k not in ("pretrained", "work_dir")}
    estimator = classes[info["estimator"]](**params)
    estimator.ranker_ = load_ranker(path)
    estimator.n_features_in_ = int(info["n_features"])
    if info.get("feature_names") is not None:
        estimator.feature_names_in_ = np.asarray(info["feature_names"], dtype=object)
    estimator.missing_ = info["missing"]
    medians = info.get("medians")
    estimator.medians_ = None if medians is None else np.asarray(medians, dtype=np.float32)
    return estimator
