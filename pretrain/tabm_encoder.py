"""TabM (Gorishniy et al., ICLR 2025): k MLPs in one network, from the `tabm` package.

The k members share their weights but for rank-one adapters (``tabm``: BatchEnsemble adapters on
every linear layer, TabM's initialisation; ``tabm-mini``: one elementwise scaling per member at
the input, the rest shared), and see the same items. Trained together, each member with its own
loss, they make one network an ensemble at the cost of one training.

Here TabM is an item encoder like the ResNet: ``encode_items([N, d]) -> [N, k * width]``, the k
members' embeddings side by side (``n_members = k``, ``member_dim = width``). A `Ranker` on it
gives each member its own head (`finetune.heads` through `tabm.ensemble_linear_layers_`), trains
every member on the ranking loss (the mean over members, `finetune.loop`) and scores with the
members' mean. Pretraining objectives see the side-by-side embedding as one vector, so every
member learns from the same self-supervised loss. Numerical embeddings (`num_embeddings`) sit in
front, shared by the members, as in the package's ``TabM(num_embeddings=...)``.
"""

from __future__ import annotations

import numpy as np
import torch

from scarce_ltr.core.extras import require
from scarce_ltr.pretrain.itemwise import ItemwiseEncoder
from scarce_ltr.pretrain.num_embeddings import check_fitted, make_embeddings, track_fitted


class TabMEncoder(ItemwiseEncoder):
    """``tabm.TabM`` without its output layer: ``[N, d] -> [N, k * width]``."""

    def __init__(
        self,
        kind: str,
        *,
        n_features: int,
        k: int,
        width: int,
        n_blocks: int,
        dropout: float,
        num_embeddings: str,
        embedding: dict,
        features: np.ndarray | None,
    ) -> None:
        """``kind``: ``tabm`` or ``tabm-mini``; ``num_embeddings`` and ``embedding``: the
        numerical embeddings in front and their options (`num_embeddings.make_embeddings`)."""
        super().__init__()
        tabm = require("tabm", f"encoder.kind={kind}")
        if n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        embeddings = None
        if num_embeddings != "none":  # the package takes the rtdl module itself
            embeddings = make_embeddings(
                num_embeddings, n_features=n_features, features=features, **embedding
            )
        track_fitted(self, num_embeddings != "piecewise" or features is not None)
        self.net = tabm.TabM.make(
            n_num_features=n_features,
            d_out=None,
            num_embeddings=embeddings,
            k=k,
            n_blocks=n_blocks,
            d_block=width,
            dropout=dropout,
            arch_type=kind,
        )
        self.n_members = k
        self.member_dim = width
        self.out_dim = k * width

    def encode_items(self, x: torch.Tensor) -> torch.Tensor:
        check_fitted(self)
        return self.net(x).flatten(1)
