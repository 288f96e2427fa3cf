"""``./run.sh baseline gbdt-ssl pretrained=<run dir>``: LightGBM on features + encoder embeddings.

Trees and pretrained encoders see different things: trees split raw features well with many
labels, an encoder pretrained on every QG has seen the unlabeled items' structure. Each item's
embedding by the encoder of a pretraining or finetuning run (`embedding_features`) is
appended to its (transformed) features, whole or as its first k principal components (the PCA
fit on every train item's embedding), and the GBDT baselines' grid is trained on the labeled
train QGs for each candidate (`trees.lightgbm.config.GBDTOptions`, `EmbeddingOptions`).

The candidate (``none``, ``pca-<k>``, ``raw``), grid point and number of rounds are chosen on
NDCG@5 of the labeled vali QGs only; test is scored once, by the chosen model, through
`data.evaluation`. The run directory gets ``report.json``, ``scores.npz``, ``model.txt``,
``pca.npz`` (a PCA candidate) and ``DONE``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from scarce_ltr.core.bundle import tensors_bytes
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.files import npz_bytes
from scarce_ltr.core.runs import Outcome, Run
from scarce_ltr.core.tracking import Tracker
from scarce_ltr.data.evaluation import vali_selection_scores
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.search.studies import StudyStore
from scarce_ltr.trees.fitted import Bundle, FittedTrees, plain
from scarce_ltr.trees.lightgbm.fitted import LightGBMOutcome, fitted_lightgbm, save_chosen
from scarce_ltr.trees.lightgbm.grid import GridOutcome, LightGBMBackend, PointResult, run_search
from scarce_ltr.trees.lightgbm.hybrid.config import EmbeddingOptions
from scarce_ltr.trees.lightgbm.hybrid.embedding_features import (
    SPLITS,
    Embeddings,
    compute_embeddings,
    embed_split,
)
from scarce_ltr.trees.lightgbm.lightgbm_ranker import (
    BoosterOptions,
    Fit,
    RankingData,
    check_labels,
)
from scarce_ltr.trees.lightgbm.semi_supervised import PCAFeatures
from scarce_ltr.trees.lightgbm.train import (
    KEPT_FILES,
    check_rounds,
    gbdt_of,
    prepare_lightgbm_data,
)
from scarce_ltr.trees.tree_fit import prepare_tree_splits, tree_study
from scarce_ltr.trees.tree_run import (
    TreeRunConfig,
    search_store,
    section_of,
    tree_report,
    write_tree_run,
)

if TYPE_CHECKING:
    from scarce_ltr.pretrain.checkpoint import Encoder

EMBEDDING_WEIGHTS = "encoder.safetensors"  # in the bundle
EMBEDDING_PCA = "embedding_pca.npz"


@dataclass
class Candidate:
    name: str  # none | pca-<k> | raw
    k: int | None  # PCA components (0: no embedding), None: the raw embedding
    outcome: GridOutcome


class EmbeddingFeatures:
    """Each split's features with a candidate's embedding columns appended; ``item_budget``:
    the items of a batch of whole QGs the encoder embeds a new split in (`columns`)."""

    def __init__(
        self,
        prepared: PreparedData,
        embeddings: Embeddings,
        ks: list[int],
        *,
        seed: int,
        item_budget: int,
    ) -> None:
        self.prepared, self.embeddings, self.pca, self.projections = prepared, embeddings, None, {}
        self.item_budget = item_budget
        if ks:
            self.pca = PCAFeatures(embeddings.train, max_components=max(ks), seed=seed)
            self.projections = {s: self.pca.projection(getattr(embeddings, s)) for s in SPLITS}

    def split(self, name: str, k: int | None) -> RankingSplit:
        split = getattr(self.prepared, name)
        if k == 0:
            return split
        extra = getattr(self.embeddings, name) if k is None else self.projections[name][:, :k]
        features = np.hstack([np.asarray(split.features, dtype=np.float32), extra])
        return split.with_features(np.ascontiguousarray(features))

    def width(self, k: int | None) -> int:
        return self.embeddings.dim if k is None else k

    def columns(self, k: int | None) -> Callable[[RankingSplit], RankingSplit]:
        """What `split` makes of a prepared split, for any transformed split (a new file's):
        its items embedded by the encoder on the CPU, in batches of whole QGs."""
        encoder, budget, pca = self.embeddings.encoder, self.item_budget, self.pca
        if k == 0:
            return plain
        if encoder is None:
            raise ValueError("gbdt-ssl: the embeddings came without their encoder; none embeds")

        def extend(split: RankingSplit) -> RankingSplit:
            embedding = embed_split(encoder, split, item_budget=budget)
            extra = embedding if k is None else pca.projection(embedding)[:, :k]
            features = np.hstack([np.asarray(split.features, dtype=np.float32), extra])
            return split.with_features(np.ascontiguousarray(features))

        return extend


def main(cfg: TreeRunConfig, run: Run) -> Outcome:
    """The data set of ``cfg``, `fit_prepared` (the embeddings cached as ``embedding.cache``
    says), then the run: vali and test scored once by the chosen model, the run written."""
    start = time.perf_counter()
    pretrained_of(cfg)
    prepared = prepare_lightgbm_data(cfg)
    tracker = run.open_tracker(asdict(cfg))
    study = search_store(gbdt_of(cfg), run, "gbdt")  # one study per candidate, named after it
    fitted = fit_prepared(cfg, prepared, tracker, study=study, cache=embedding_of(cfg).cache)
    outcome: LightGBMOutcome = fitted.outcome
    scores = save_chosen(run, fitted)
    backend, candidates, chosen = outcome.backend, outcome.candidates, outcome.chosen
    report = _report(cfg, prepared, backend, outcome.features, candidates, chosen, scores)
    return write_tree_run(run, prepared, report, fitted.bundle(), keep=KEPT_FILES, start=start)


def fit(
    cfg: TreeRunConfig,
    splits: Mapping[str, RankingSplit],
    *,
    labeled: np.ndarray | None = None,
    run: Run | None = None,
    encoder: Encoder | None = None,
) -> FittedTrees:
    """`main`'s search on in-memory splits (`baselines.run.fit`). ``encoder``: a pretrained
    `Encoder` in memory (`pretrain.fit`'s), in place of the run folder ``pretrained=`` names
    (None: that folder's); no file is written for it. The embeddings are computed, never read
    from nor written to a run folder's cache (keyed on a data set's config, not on these
    splits). The same encoder's weights, from memory or its folder, give the same model."""
    if encoder is not None:
        named = f"<in memory: {encoder.method}>" if encoder.folder is None else encoder.folder
        # Its name in records; ``pretrained`` is a key of the baselines' config, the layer
        # above (`pretrained_of`), so it is set by name.
        cfg = replace(cfg, **{"pretrained": str(named)})
    pretrained_of(cfg)
    check_rounds(cfg)
    prepared = prepare_tree_splits(cfg, splits, labeled, check_labels)
    study = tree_study(gbdt_of(cfg), run, "gbdt")
    return fit_prepared(cfg, prepared, Tracker(), study=study, cache=False, encoder=encoder)


def fit_prepared(
    cfg: TreeRunConfig,
    prepared: PreparedData,
    tracker: Tracker,
    *,
    study: StudyStore | None,
    cache: bool,
    encoder: Encoder | None = None,
) -> FittedTrees:
    """Embed every split (by ``encoder``, else by the encoder of ``pretrained=``'s run folder),
    search each candidate's features, keep the vali-best of them all."""
    source: str | Path | Encoder = pretrained_of(cfg) if encoder is None else encoder
    embeddings = compute_embeddings(
        source,
        prepared,
        cfg.data,
        item_budget=embedding_of(cfg).item_budget,
        cache=cache,
    )
    # PCA sizes above the embedding's width (or the train items) are left out.
    options = embedding_of(cfg).candidates(min(embeddings.dim, prepared.train.n_items))
    ks = [k for _, k in options if k]
    budget = embedding_of(cfg).item_budget
    features = EmbeddingFeatures(prepared, embeddings, ks, seed=cfg.seed, item_budget=budget)
    training = BoosterOptions.from_config(cfg)
    backend = LightGBMBackend(gbdt_of(cfg), training)
    candidates = [
        _fit(cfg, prepared, features, n, k, training, tracker, study=study and study.part(n))
        for n, k in options
    ]

    def bundle(chosen: Candidate) -> Bundle:
        return _bundle(cfg, features, chosen, backend.bundle(chosen.outcome.best_fit))

    return fitted_lightgbm(
        cfg, prepared, backend, features, candidates, bundle=bundle,
        selected=lambda chosen: {"embedding": chosen.name},
    )  # fmt: skip


def embedding_of(cfg: TreeRunConfig) -> EmbeddingOptions:
    """``cfg.embedding``, read as `gbdt_of` reads ``cfg.gbdt``."""
    return section_of(cfg, EmbeddingOptions)


def pretrained_of(cfg: TreeRunConfig) -> str:
    """``pretrained=``, the run whose encoder embeds the items: a key of the baselines' config
    (a layer above, which this module does not import), read by name."""
    pretrained = getattr(cfg, "pretrained", None)
    if not pretrained or pretrained.lower() in ("none", "null"):
        raise UserError("gbdt-ssl needs pretrained=<pretraining or finetuning run dir>")
    return str(pretrained)


def _bundle(
    cfg: TreeRunConfig, features: EmbeddingFeatures, chosen: Candidate, booster: Bundle
) -> Bundle:
    """The booster, and (unless the chosen candidate reads no embedding) the encoder that
    embeds the transformed features, batched as here so a bundle scores exactly as this run,
    and the PCA of the embedding whose first k components the booster reads."""
    description, files = booster
    embeddings = features.embeddings
    if chosen.k == 0 or embeddings.encoder is None:
        return description, files
    description["embedding"] = {
        "encoder": {"n_features": features.prepared.n_features, **embeddings.encoder_config},
        "weights": EMBEDDING_WEIGHTS,
        "item_budget": embedding_of(cfg).item_budget,
        "pca": None if chosen.k is None else {"file": EMBEDDING_PCA, "k": int(chosen.k)},
    }
    files[EMBEDDING_WEIGHTS] = tensors_bytes(embeddings.encoder)
    if chosen.k is not None:
        assert features.pca is not None
        files[EMBEDDING_PCA] = npz_bytes(**features.pca.projector.to_arrays())
    return description, files


def _fit(
    cfg: TreeRunConfig,
    prepared: PreparedData,
    features: EmbeddingFeatures,
    name: str,
    k: int | None,
    training: BoosterOptions,
    tracker: Tracker,
    *,
    study: StudyStore | None = None,
) -> Candidate:
    """The GBDT grid on one candidate's features, trained on the labeled train QGs."""
    train, vali = features.split("train", k), features.split("vali", k)
    labels = prepared.labels

    def score_vali(model: Fit) -> tuple[float, np.ndarray]:
        scores = model.predict(vali.features, num_threads=training.num_threads)
        return vali_selection_scores(prepared, scores, cfg.metrics)

    def on_point(result: PointResult) -> None:
        tracker.log({"grid": {"embedding": name, **result.as_dict()}})

    data = RankingData(
        train=train.subset(np.flatnonzero(labels.train_labeled)),
        vali=vali.subset(np.flatnonzero(labels.vali_labeled)),
        num_threads=training.num_threads,
        params=training.params,
    )
    outcome = run_search(
        gbdt_of(cfg),
        data=data,
        training=training,
        score_vali=score_vali,
        phase="labeled",
        pca_components=k or 0,
        on_point=on_point,
        study=study,
    )
    best = outcome.best_result.vali_ndcg
    print(f"gbdt-ssl {name}: vali ndcg@5 {best:.4f} ({len(outcome.results)} fits)", file=sys.stderr)
    return Candidate(name=name, k=k, outcome=outcome)


def _report(
    cfg: TreeRunConfig,
    prepared: PreparedData,
    backend: LightGBMBackend,
    features: EmbeddingFeatures,
    candidates: list[Candidate],
    chosen: Candidate,
    scores: tuple[np.ndarray, np.ndarray],
) -> dict:
    """The tree pipeline's report, named after the encoder's run, with the embedding's keys."""
    source = features.embeddings.source
    best = chosen.outcome.best_result
    results = [(c.name, r) for c in candidates for r in c.outcome.results]
    return tree_report(
        cfg,
        prepared,
        scores,
        selected={"embedding": chosen.name, **best.as_dict()},
        trials=("grid", [{"embedding": name, **r.as_dict()} for name, r in results]),
        n_features=prepared.n_features + features.width(chosen.k),
        n_trees=best.best_rounds,
        seconds_fitting=sum(r.seconds for _, r in results),
        search=None,  # each candidate's own search; the report keeps the hybrid's keys
        method=f"gbdt-ssl+{source['model']}",  # the model name sweeps and reports use
        baseline="gbdt-ssl",
        pretrained=source["run"],
        pretraining_method=source["model"],
        embedding=source | {"candidates": [c.name for c in candidates]},
        **backend.describe(),
    )
