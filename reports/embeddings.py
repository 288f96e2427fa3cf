"""Item embeddings of a run's encoder on test QGs, and their 2-D t-SNE (paper Figure 4).

A pretraining run (``encoder.pt``) gives the encoder's output; a finetuning run (``model.pt``)
gives the input of its scoring head's last linear layer (`finetune.model.Ranker.embed`), the
"pre-final layer" of the paper. The run's ``config.yaml`` says which data and transform to
rebuild. Whole test QGs are drawn at random (seeded) until ``max_items`` items are gathered, so
that an encoder that attends across a QG sees its lists whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scarce_ltr.core.errors import UserError

ITEM_BUDGET = 4096  # items per forward pass


@dataclass(frozen=True)
class Embedded:
    run_dir: Path
    title: str
    points: np.ndarray  # [n_items, 2] t-SNE coordinates
    labels: np.ndarray  # [n_items] graded test labels


def tsne_of_run(run_dir: Path, *, max_items: int, perplexity: float, seed: int) -> Embedded:
    """The t-SNE of ``run_dir``'s test-item embeddings; `UserError` when it has no encoder."""
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    embed, title = _embedder(run_dir)
    split = _test_split(run_dir)
    vectors, labels = _embed_items(embed, split, max_items=max_items, seed=seed)
    if len(vectors) < 5:
        raise UserError(f"{run_dir}: only {len(vectors)} test items to embed")
    tsne = TSNE(
        n_components=2,
        perplexity=min(perplexity, (len(vectors) - 1) / 3),
        init="pca",
        random_state=seed,
    )
    # One OpenMP thread: on a busy machine sklearn's Barnes-Hut loop spends most of its time in
    # thread barriers (120 items: 14 s on 2 threads, 0.4 s on one).
    with threadpool_limits(limits=1, user_api="openmp"):
        points = tsne.fit_transform(vectors.astype(np.float64))
    return Embedded(run_dir, title, points, labels)


def _embedder(run_dir: Path):
    """``(function (features [B, L, d], mask [B, L]) -> [B, L, e], title)``."""
    if (run_dir / "encoder.pt").is_file():
        from scarce_ltr.pretrain.checkpoint import load_pretrained_encoder

        encoder, info = load_pretrained_encoder(run_dir)
        return encoder, f"{info['method']} (pretrained encoder)"
    if (run_dir / "model.pt").is_file():
        from scarce_ltr.baselines.deep.models import load_model

        model, payload = load_model(run_dir)
        if not hasattr(model, "embed"):
            kind = payload["spec"].get("kind")
            raise UserError(f"{run_dir}: a {kind} model has no item embedding to plot")
        source = payload.get("source") or {}
        setting = source.get("label_setting", "?")
        if source.get("pretrained"):
            return model.embed, f"{source.get('method')} pretrained, finetuned ({setting})"
        return model.embed, f"{source.get('method') or 'ranker'}, no pretraining ({setting})"
    raise UserError(
        f"{run_dir}: neither encoder.pt nor model.pt; t-SNE needs a pretraining or finetuning run"
    )


def _test_split(run_dir: Path):
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from scarce_ltr.data.pipeline import prepare_data
    from scarce_ltr.data.stage_config import CommonConfig

    path = run_dir / "config.yaml"
    try:
        saved = OmegaConf.to_container(OmegaConf.load(path))
        keys = {k: saved[k] for k in ("data", "scarcity", "seed") if k in saved}
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(CommonConfig), keys))
    except (OSError, OmegaConfBaseException, TypeError, ValueError) as exc:
        raise UserError(f"{path}: cannot rebuild the run's data config ({exc})") from None
    return prepare_data(cfg).test


def _embed_items(embed, split, *, max_items: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``[n, e]`` embeddings and ``[n]`` labels of whole random test QGs, about ``max_items``."""
    import torch

    from scarce_ltr.data.batching import QueryGroupBatcher

    order = np.random.default_rng(seed).permutation(split.n_groups)
    sizes = split.group_sizes[order]
    keep = order[: max(1, int(np.searchsorted(np.cumsum(sizes), max_items)) + 1)]
    vectors, labels = [], []
    with torch.no_grad():
        for batch in QueryGroupBatcher(split, item_budget=ITEM_BUDGET, groups=np.sort(keep)):
            out = embed(batch.features, batch.mask)
            vectors.append(out[batch.mask].float().numpy())
            labels.append(batch.labels[batch.mask].numpy())
    return np.concatenate(vectors)[:max_items], np.concatenate(labels)[:max_items]
