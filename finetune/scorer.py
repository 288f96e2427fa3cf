"""A torch bundle's scorer: the finetuned rankers' and the deep baselines' (`BUNDLE_KIND`).

The family entries of both name `TorchScorer` (``finetune/family.py``, ``baselines/deep/``);
serving builds it from the bundle's manifest (`scarce_ltr.core.families.Scorer`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from scarce_ltr.core.bundle import read_tensors
from scarce_ltr.core.checkpointing import load_module_state
from scarce_ltr.core.device import Runtime
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.families import ScoringContext
from scarce_ltr.data import pieces
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.transforms import FeatureTransform
from scarce_ltr.finetune.model import build_model
from scarce_ltr.finetune.scoring import predict


class TorchScorer:
    """The module of the bundle's spec (its kind built by ``context.torch_builders`` when it is
    not the finetuned ranker's own) with the bundle's weights, scoring in eval mode."""

    def __init__(self, folder: Path, info: dict, context: ScoringContext) -> None:
        state = read_tensors(folder, info.get("weights"))
        try:
            self.module = built_like(
                lambda: build_model(info["spec"], kinds=context.torch_builders), state
            )
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise UserError(f"{folder}: bad model description ({exc})") from None
        load_module_state(self.module, state, path=folder, what="the bundle's weights")
        self.module.eval()
        self.item_budget = int(info["item_budget"])

    def score(self, raw: RankingSplit, transform: FeatureTransform) -> np.ndarray:
        """``[n_items]`` float64 scores of raw features, transformed and scored piece by piece."""
        return score_raw(self.module, raw, transform, item_budget=self.item_budget)


def score_raw(
    module: torch.nn.Module, raw: RankingSplit, transform: FeatureTransform, *, item_budget: int
) -> np.ndarray:
    """``[n_items]`` float64 scores of raw features on the CPU, transformed and scored piece by
    piece of ``item_budget`` items: a bundle's scores, and an in-memory ranker's the same."""
    runtime = Runtime(device=torch.device("cpu"))
    scores = np.zeros(raw.n_items, dtype=np.float64)
    buffer = None
    for rows, piece in pieces.pieces_of(raw, item_budget):
        buffer = pieces.piece_buffer(buffer, piece)
        split = transform(piece, out=buffer)
        scores[rows] = predict(module, split, runtime=runtime, item_budget=item_budget)
    return scores


def built_like(build: Callable[[], torch.nn.Module], state: dict[str, torch.Tensor]):
    """``build()``, once its module built without memory (``meta``) has the layers and widths
    of ``state``: a bundle's spec that disagrees with its weights, or asks for more memory than
    there is, is refused (`ValueError`) before anything of its size exists."""
    with torch.device("meta"):
        shapes = build().state_dict()
    if {k: tuple(v.shape) for k, v in shapes.items()} != {
        k: tuple(v.shape) for k, v in state.items()
    }:
        raise ValueError("its widths or layers differ from those of the weights")
    return build()
