"""Finetuned rankers, and the ``model.pt`` file every finetuning run leaves in its run dir.

A `Ranker` is an encoder (pretrained or fresh) with a scoring head: ``forward(features [B, L, d],
mask [B, L]) -> scores [B, L]`` (0 at padding). A frozen encoder stays in eval mode and gets no
gradient, so its weights and BatchNorm statistics stay bit-identical. A `CombinedRanker` (paper
A.3.7) concatenates the final embeddings of finetuned rankers, normalizes them with BatchNorm,
applies dropout and one trainable linear layer; the rankers inside are frozen.

``model.pt`` holds ``{"format", "spec", "state_dict", "data", "source"}``: ``spec`` says how to
rebuild the module (`build_model`), ``data`` which data set, transform and feature count it was
trained on, ``source`` where it came from. It is loaded with ``weights_only=True``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn

from scarce_ltr.core.bundle import tensors_bytes
from scarce_ltr.core.checkpointing import (
    load_checkpoint,
    load_module_state,
    require_keys,
    save_checkpoint,
)
from scarce_ltr.core.dropout import Dropout
from scarce_ltr.core.errors import UserError
from scarce_ltr.finetune.heads import build_head
from scarce_ltr.pretrain.encoders import EncoderConfig, ItemwiseEncoder, build_encoder

MODEL_FILE = "model.pt"
# Builders of model kinds defined above this layer (the deep baselines pass theirs in).
ModelKinds = Mapping[str, Callable[[dict], nn.Module]]
FORMAT = "scarce-ltr/model/1"
WEIGHTS = "model.safetensors"  # in a bundle
BUNDLE_KIND = "torch"  # the model kind of a torch ranker's bundle (serving scores it)


class Ranker(nn.Module):
    """An encoder and a scoring head; ``set_phase`` freezes or unfreezes the encoder.

    An ensemble encoder (TabM: ``n_members`` k, each ``member_dim`` wide, side by side in its
    output) has one head per member (`head_on`); the ranker's score is the members' mean, and
    ``members=True`` gives the k scores themselves, which training ranks one by one.
    """

    def __init__(self, *, encoder: nn.Module, head: nn.Module) -> None:
        super().__init__()
        if not hasattr(encoder, "out_dim") or not hasattr(head, "embed_dim"):
            raise ValueError("encoder needs an out_dim and head an embed_dim attribute")
        self.encoder = encoder
        self.head = head
        self.n_members: int = getattr(encoder, "n_members", 1)
        self.embed_dim: int = head.embed_dim * self.n_members
        self.encoder_frozen = False

    def set_phase(self, *, train_encoder: bool) -> None:
        """Train the head alone (encoder frozen, in eval mode) or the whole network."""
        self.encoder_frozen = not train_encoder
        self.encoder.requires_grad_(train_encoder)
        self.train(self.training)

    def train(self, mode: bool = True) -> Ranker:
        super().train(mode)
        if self.encoder_frozen:
            self.encoder.eval()  # BatchNorm running statistics must not move either
        return self

    def encode(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[N, out_dim]``: the encoder's outputs for the N real items, in ``mask`` order."""
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.encoder_frozen):
            if isinstance(self.encoder, ItemwiseEncoder):
                return self.encoder.encode_items(features[mask])
            return self.encoder(features, mask)[mask]

    def _per_member(self, items: torch.Tensor) -> torch.Tensor:
        """``[N, k * member_dim] -> [N, k, member_dim]`` for an ensemble encoder."""
        return items if self.n_members == 1 else items.unflatten(-1, (self.n_members, -1))

    def score_items(self, items: torch.Tensor, *, members: bool = False) -> torch.Tensor:
        """``[N]`` scores of encoded items (``[N, k]`` with ``members`` and k members)."""
        scores = self.head.score(self.head.embed(self._per_member(items)))
        return scores.mean(-1) if self.n_members > 1 and not members else scores

    def embed_encoded(self, items: torch.Tensor) -> torch.Tensor:
        """``[N, embed_dim]``: the input of the head's last linear layer (the members' side by
        side) for encoded items."""
        embedding = self.head.embed(self._per_member(items))
        return embedding if self.n_members == 1 else embedding.flatten(-2)

    def score_encoded(
        self, items: torch.Tensor, mask: torch.Tensor, *, members: bool = False
    ) -> torch.Tensor:
        """``[B, L]`` scores (0 at padding) from `encode`'s output for the same ``mask``
        (``[B, L, k]`` with ``members``)."""
        return _scatter(self.score_items(items, members=members), mask)

    def embed_items(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[N, embed_dim]``: the input of the head's last linear layer, for the real items."""
        return self.embed_encoded(self.encode(features, mask))

    def embed(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """`embed_items` as ``[B, L, embed_dim]`` (0 at padding)."""
        return _scatter(self.embed_items(features, mask), mask)

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor, *, members: bool = False
    ) -> torch.Tensor:
        # The head runs on the real items only: QGs padded to the longest one in a batch are
        # mostly padding (12x on the synthetic default's vali QGs).
        return self.score_encoded(self.encode(features, mask), mask, members=members)


def head_on(encoder: nn.Module, kind: str, *, hidden: int, dropout: float) -> nn.Module:
    """A fresh head of ``kind`` for ``encoder``'s embeddings (one per member of an ensemble)."""
    members = getattr(encoder, "n_members", 1)
    in_dim = getattr(encoder, "member_dim", encoder.out_dim)
    return build_head(kind, in_dim=in_dim, hidden=hidden, dropout=dropout, members=members)


def _scatter(items: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[N, ...]`` values of the real items -> ``[B, L, ...]``, zeros at padding."""
    out = items.new_zeros(*mask.shape, *items.shape[1:])
    out[mask] = items
    return out


class CombinedRanker(nn.Module):
    """Frozen rankers' embeddings, concatenated -> BatchNorm -> dropout -> linear (trained)."""

    def __init__(self, *, members: list[Ranker], dropout: float) -> None:
        super().__init__()
        if len(members) < 2:
            raise ValueError(f"a combination needs at least 2 rankers, got {len(members)}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.members = nn.ModuleList(members)
        self.members.requires_grad_(False)
        dim = sum(m.embed_dim for m in members)
        # No affine parameters: the paper trains the final linear layer only. The members are
        # frozen, so their embeddings' statistics are fixed: a cumulative average (momentum
        # None) gets them exactly, however few batches an epoch has.
        self.norm = nn.BatchNorm1d(dim, affine=False, momentum=None)
        self.dropout = Dropout(dropout)
        self.out = nn.Linear(dim, 1)

    def train(self, mode: bool = True) -> CombinedRanker:
        super().train(mode)
        self.members.eval()
        return self

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            embedding = torch.cat([m.embed_items(features, mask) for m in self.members], dim=-1)
        # BatchNorm sees real items only, so padding never enters its statistics.
        return _scatter(self.out(self.dropout(self.norm(embedding.float()))).squeeze(-1), mask)


def ranker_spec(
    *, n_features: int, encoder: EncoderConfig, head: str, hidden: int, dropout: float
) -> dict:
    return {
        "kind": "ranker",
        "n_features": n_features,
        "encoder": encoder.to_dict(),
        "head": {"kind": head, "hidden": hidden, "dropout": dropout},
    }


def build_model(
    spec: dict, *, kinds: ModelKinds | None = None, features: np.ndarray | None = None
) -> nn.Module:
    """The (untrained) module a spec describes: a ranker, a combination, or one of ``kinds``
    (`scarce_ltr.baselines.deep.models` adds DeepFM and DCNv2). ``features``: the train items,
    for a fresh ranker whose encoder learns from the data (`pretrain.encoders.build_encoder`);
    not needed where a saved state is loaded next."""
    kind = spec.get("kind")
    if kind == "ranker":
        encoder = build_encoder(
            EncoderConfig(**spec["encoder"]), n_features=spec["n_features"], features=features
        )
        head = spec["head"]
        return Ranker(
            encoder=encoder,
            head=head_on(encoder, head["kind"], hidden=head["hidden"], dropout=head["dropout"]),
        )
    if kind == "combined":
        members = [build_model(member, kinds=kinds) for member in spec["members"]]
        return CombinedRanker(members=members, dropout=spec["dropout"])  # type: ignore[arg-type]
    if kinds and kind in kinds:
        return kinds[kind](spec)
    raise ValueError(f"unknown model kind {kind!r}")


def save_model(run_dir: Path, model: nn.Module, *, spec: dict, data: dict, source: dict) -> None:
    """Write ``model.pt`` atomically (the state of `model` as it is now)."""
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    payload = {"format": FORMAT, "spec": spec, "state_dict": state, "data": data, "source": source}
    save_checkpoint(Path(run_dir) / MODEL_FILE, payload)


def load_model(run_dir: str | Path, *, kinds: ModelKinds | None = None) -> tuple[nn.Module, dict]:
    """The model a finished run saved (CPU, eval mode) and the rest of its ``model.pt``."""
    payload = read_model(run_dir)
    return model_of(payload, Path(run_dir) / MODEL_FILE, kinds=kinds), payload


def read_model(run_dir: str | Path) -> dict:
    """A finished run's ``model.pt``, checked, before any module is built: a caller that takes
    only some kinds (gbdt-ssl's encoder source) refuses the others by ``spec.kind`` first."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run directory")
    path = run_dir / MODEL_FILE
    if not path.is_file():
        raise UserError(
            f"{run_dir}: no {MODEL_FILE}; not a finished finetuning run (run its ./run.sh "
            "finetune command again to finish it)"
        )
    advice = (
        "delete it and run the same ./run.sh finetune command again (a finished run rebuilds "
        f"{MODEL_FILE} from its checkpoint.pt)"
    )
    payload = load_checkpoint(path, what="saved model", advice=advice)
    require_keys(payload, ("format", "spec", "state_dict", "data"), path=path, what="saved model")
    if payload["format"] != FORMAT:
        raise UserError(f"{path}: format {payload['format']!r}, expected {FORMAT!r}")
    return payload


def model_of(payload: dict, path: Path, *, kinds: ModelKinds | None = None) -> nn.Module:
    """The module `read_model`'s ``payload`` (read from ``path``) describes, with its weights
    (CPU, eval mode)."""
    try:
        model = build_model(payload["spec"], kinds=kinds)
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{path}: bad model description ({exc})") from None
    load_module_state(model, payload["state_dict"], path=path, what="the stored model")
    model.eval()
    return model


def count_parameters(model: nn.Module) -> dict[str, int]:
    params = list(model.parameters())
    return {
        "total": sum(p.numel() for p in params),
        "trainable": sum(p.numel() for p in params if p.requires_grad),
    }


def torch_bundle(model: nn.Module, spec: dict, item_budget: int) -> tuple[dict, dict[str, bytes]]:
    """A torch model's part of a bundle: its spec, weights (safetensors) and scoring batch size
    (the same batches give the same scores, to the last bit, as the run saved)."""
    description = {
        "kind": BUNDLE_KIND,
        "spec": spec,
        "weights": WEIGHTS,
        "item_budget": item_budget,
    }
    return description, {WEIGHTS: tensors_bytes(model)}
