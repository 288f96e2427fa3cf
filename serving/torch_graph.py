"""One torch module from raw features to scores: the bundle's fitted transform, then the model.

This is what `scarce_ltr.serving.export` hands to ONNX and TorchScript. Its signature is
``forward(features [B, L, d] float32, mask [B, L] bool) -> scores [B, L] float32`` (0 at
padding): a batch of B query groups of up to L items, both dynamic, raw features as the user has
them. It scores exactly like the bundle, up to float rounding:

- the transform runs in float64 and is cast to float32 before clipping, as
  `scarce_ltr.data.transforms.FeatureTransform` does;
- an item-wise ranker (ResNet or MLP encoder with a head, and the combinations of such rankers)
  runs on every slot of the ``[B, L]`` grid and the padding is zeroed afterwards. In eval mode
  that is the same per-item arithmetic as scoring the real items only, without the masked gather
  and scatter that exporters handle badly;
- DASALC's item tower runs on the grid too, its self-attention with the mask;
- the other models (the attention encoder, DeepFM, DCNv2) run as they are, with the mask.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from scarce_ltr.baselines.deep.dasalc import DASALC
from scarce_ltr.data.transforms import FeatureTransform
from scarce_ltr.finetune.model import CombinedRanker, Ranker
from scarce_ltr.pretrain.encoders import ItemwiseEncoder


class RawFeatureTransform(nn.Module):
    """The fitted `FeatureTransform` as torch operations (constants baked in as buffers)."""

    def __init__(self, transform: FeatureTransform, n_features: int) -> None:
        super().__init__()
        self.log1p = transform.kind in ("log1p", "log1p-standardize")
        self.standardize = transform.kind in ("standardize", "log1p-standardize")
        self.within_groups = transform.kind == "qg-standardize"
        self.clip = transform.clip
        mean = transform.mean if transform.mean is not None else np.zeros(n_features)
        std = transform.std if transform.std is not None else np.ones(n_features)
        self.register_buffer("mean", torch.as_tensor(np.asarray(mean, dtype=np.float64)))
        self.register_buffer("std", torch.as_tensor(np.asarray(std, dtype=np.float64)))

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.unsqueeze(-1)
        # Padding slots may hold anything; zero them so nothing non-finite enters the model.
        x = torch.where(keep, features, 0.0).double()
        if self.log1p:
            x = torch.sign(x) * torch.log1p(torch.abs(x))
        if self.standardize:
            x = (x - self.mean) / self.std
        if self.within_groups:
            x = _standardize_within_groups(x, keep.double())
        out = x.float()
        if self.clip is not None:
            out = torch.clamp(out, -self.clip, self.clip)
        return torch.where(keep, out, 0.0)


def _standardize_within_groups(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Each QG's real items standardized by their own mean and std (population std, 1 where a
    feature is constant within the QG), as the data layer's ``qg-standardize``."""
    count = weight.sum(dim=1, keepdim=True).clamp(min=1.0)
    mean = (x * weight).sum(dim=1, keepdim=True) / count
    mean_sq = (x * x * weight).sum(dim=1, keepdim=True) / count
    std = torch.sqrt(torch.clamp(mean_sq - mean * mean, min=0.0))
    std = torch.where(std < 1e-12, torch.ones_like(std), std)
    return (x - mean) / std


class DenseRanker(nn.Module):
    """A `Ranker` with an item-wise encoder, run on every slot of the grid."""

    def __init__(self, ranker: Ranker) -> None:
        super().__init__()
        self.ranker = ranker

    def _items(self, features: torch.Tensor) -> torch.Tensor:
        batch, length, width = features.shape
        return self.ranker.encoder.encode_items(features.reshape(batch * length, width))

    def embed(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, _ = features.shape
        return self.ranker.embed_encoded(self._items(features)).reshape(batch, length, -1)

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, _ = features.shape
        return self.ranker.score_items(self._items(features)).reshape(batch, length)


class DenseCombinedRanker(nn.Module):
    """A `CombinedRanker` whose members are item-wise or context-aware, run on the grid."""

    def __init__(self, combined: CombinedRanker) -> None:
        super().__init__()
        self.members = nn.ModuleList([_dense(member) for member in combined.members])
        self.norm = combined.norm
        self.out = combined.out

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        embedding = torch.cat([m.embed(features, mask) for m in self.members], dim=-1)
        batch, length, width = embedding.shape
        flat = self.norm(embedding.reshape(batch * length, width).float())
        return self.out(flat).reshape(batch, length)


class DenseDASALC(nn.Module):
    """The DASALC baseline with its item tower run on every slot of the grid (the attention
    part takes the mask, as in the model)."""

    def __init__(self, model: DASALC) -> None:
        super().__init__()
        self.model = model

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = self.model
        batch, length, width = features.shape
        context = m.norm(m.context(m.project(features), src_key_padding_mask=~mask))
        items = m.tower(features.reshape(batch * length, width)).reshape(batch, length, -1)
        return m.score((1.0 + context) * items).squeeze(-1)


class _ContextRanker(nn.Module):
    """A ranker whose encoder needs the mask (attention): ``embed`` as `Ranker.embed`."""

    def __init__(self, ranker: Ranker) -> None:
        super().__init__()
        self.ranker = ranker

    def embed(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.ranker.embed(features, mask)

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.ranker(features, mask)


def _dense(model: nn.Module) -> nn.Module:
    if isinstance(model, CombinedRanker):
        return DenseCombinedRanker(model)
    if isinstance(model, Ranker):
        if isinstance(model.encoder, ItemwiseEncoder):
            return DenseRanker(model)
        return _ContextRanker(model)
    if isinstance(model, DASALC):
        return DenseDASALC(model)
    return model  # DeepFM, DCNv2: item-wise arithmetic on the padded grid already


class RawFeatureRanker(nn.Module):
    """``forward(features [B, L, d], mask [B, L]) -> scores [B, L]``, raw features in."""

    def __init__(self, transform: FeatureTransform, model: nn.Module, n_features: int) -> None:
        super().__init__()
        self.transform = RawFeatureTransform(transform, n_features)
        self.model = _dense(model)
        self.n_features = n_features
        self.eval()

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores = self.model(self.transform(features, mask), mask)
        return torch.where(mask, scores.float(), 0.0)
