"""Options of the non-pretrained deep baselines: the ``deep:`` section of a baseline config.

The section is finetuning's recipe (`finetune.recipe.RankerRecipe`: the training keys,
``encoder.*``, ``head``, ``head_hidden``, ``head_dropout``, ``loss.*``, ``lrs``, ``search.*``,
declared and checked there once) under ``deep.``, plus finetuning's ``full_epochs`` (one phase,
the whole network: ``head_epochs=0``) and ``optimizer.*`` (Adam at a constant rate; its rate
each of ``lrs``), under finetuning's names, and the keys of the models that are not an encoder
with a head. ``resnet`` is ``./run.sh finetune full pretrained=none`` with these values
(`baselines.deep.train.finetuning`), filed as a baseline. Runs saved before spell two keys the
old way, ``deep.max_epochs`` and ``deep.weight_decay``: read as these
(`core.run_config.KEY_ALIASES`).
``deep.search.n_trials`` searches as finetuning's ``search.*`` does, over one phase:
``head_hidden`` is resnet's head and the others' ``hidden``.

``./run.sh baseline resnet|deepfm|dcnv2|dasalc deep.<key>=<value>`` (paper 4.1.1, A.2.3): the
tabular ResNet with the 3-layer MLP head from random init, 300 epochs, lr in {1e-2, 1e-3, 1e-4};
DeepFM with lr in {5e-2, 5e-3, 5e-4}; DCNv2 with lr in {5e-2, 5e-3, 5e-4} and cross layers in
{2, 3, 4}; DASALC (qin2021, `baselines.deep.dasalc`) with the lrs of its config.
Near-categorical features (at most ``max_categories`` distinct train values) are
embedded in ``embedding_dim`` dimensions by DeepFM and DCNv2. Every grid point is trained with
early stopping on vali NDCG@5, and the point with the best vali NDCG@5 is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from scarce_ltr.core.config_fields import (
    MAX_EPOCHS,
    Allowed,
    OptimizerConfig,
    allowed,
    check_allowed,
    read_with,
)
from scarce_ltr.core.sizes import largest, model_fits
from scarce_ltr.finetune.heads import check_head_size
from scarce_ltr.finetune.recipe import RankerRecipe, reading
from scarce_ltr.pretrain.encoders import EncoderConfig

# The deep baselines train with Adam at a constant rate (paper A.2.3) and choose the rate on vali
# (``lrs``, or the search): ``deep.optimizer.lr`` is refused, the rest is finetuning's optimizer.
DEEP_OPTIMIZER = OptimizerConfig(name="adam", schedule="constant")
# Who reads a key of one model (`read_with`): another method refuses it set away from its default.
RESNET = read_with("method", "resnet")
FIELD_EMBEDDINGS = read_with("method", "deepfm", "dcnv2")  # near-categorical features embedded
DEEP_PART = read_with("method", "deepfm", "dcnv2", "dasalc")  # a tower of hidden x n_layers
DASALC = read_with("method", "dasalc")


# The recipe finetuning has too (`RankerRecipe`, finetune/recipe.py, on `TrainingKeys`: the
# training keys, the network, loss.*, lrs, search.*), with its defaults and help lines; in --help
# it comes first. Redeclared, each keeping its place: ``lrs`` and ``patience``, whose defaults
# differ (from scratch: a grid of three rates, training stopped early), and the network, which
# resnet alone reads (`reading`: the others build their own model from the keys below).
@dataclass(frozen=True)
class DeepBaselineOptions(RankerRecipe):
    # The baselines whose runs read this section (``deep.*``): the from-scratch deep rankers.
    read_by: ClassVar[tuple[str, ...]] = ("resnet", "deepfm", "dcnv2", "dasalc")

    encoder: EncoderConfig = reading("encoder", RESNET)
    head: str = reading("head", RESNET)
    head_hidden: int = reading("head_hidden", RESNET)
    head_dropout: float = reading("head_dropout", RESNET)
    lrs: list[float] = field(default_factory=lambda: [1e-2, 1e-3, 1e-4])  # Adam, the grid
    patience: int | None = 30  # epochs without a better vali NDCG@5 that end a model's training
    # finetuning's full_epochs with head_epochs=0 (one phase); `epochs` caps it further when set
    full_epochs: int = field(default=300, metadata=allowed(Allowed(1, MAX_EPOCHS)))
    # finetuning's optimizer; its lr is each of lrs (deep.optimizer.lr is refused)
    optimizer: OptimizerConfig = field(default_factory=lambda: DEEP_OPTIMIZER)
    # dcnv2: the grid of cross layers
    cross_layers: list[int] = field(
        default_factory=lambda: [2, 3, 4], metadata=read_with("method", "dcnv2")
    )
    # deepfm, dcnv2: features of at most max_categories distinct train values embedded
    embedding_dim: int = field(default=8, metadata=FIELD_EMBEDDINGS)
    max_categories: int = field(default=3, metadata=FIELD_EMBEDDINGS)
    # deepfm, dcnv2, dasalc
    hidden: int = field(default=128, metadata=DEEP_PART)  # width of the deep part
    n_layers: int = field(default=2, metadata=DEEP_PART)  # layers of the deep part
    dropout: float = field(default=0.1, metadata=DEEP_PART)
    # dasalc: its tower is hidden x n_layers (above), its context these attention layers
    attention_layers: int = field(default=3, metadata=DASALC)
    n_heads: int = field(default=4, metadata=DASALC)  # attention heads; must divide hidden

    def __post_init__(self) -> None:
        if not self.lrs:
            raise ValueError("deep.lrs must be a non-empty list of positive learning rates")
        if not self.cross_layers or min(self.cross_layers) < 1:
            raise ValueError("deep.cross_layers must be a non-empty list of integers >= 1")
        check_allowed(self, "deep.")  # full_epochs
        if self.optimizer.lr != DEEP_OPTIMIZER.lr:
            raise ValueError(
                f"deep.optimizer.lr={self.optimizer.lr}: the deep baselines train at each rate "
                f"of deep.lrs, the vali-best kept; give deep.lrs=[{self.optimizer.lr}]"
            )
        if min(self.embedding_dim, self.hidden, self.n_layers) < 1:
            raise ValueError("deep.embedding_dim, hidden and n_layers must be >= 1")
        if min(self.attention_layers, self.n_heads) < 1:
            raise ValueError("deep.attention_layers and deep.n_heads must be >= 1")
        if self.max_categories < 1:
            raise ValueError("deep.max_categories must be >= 1")
        if not 0 <= self.dropout < 1:
            raise ValueError("deep.dropout must be in [0, 1)")
        # the network's keys, the training keys, deep.search.*, deep.lrs (finetune.recipe)
        self.check_recipe("deep.")
        if self.search.l2sp:
            raise ValueError(
                "deep.search.l2sp: the deep baselines train from scratch; L2-SP needs a "
                "pretrained encoder (finetune full pretrained=<run>)"
            )
        if self.search.on and self.search.full_epochs and self.search.full_epochs[0] < 1:
            raise ValueError("deep.search.full_epochs must start at >= 1")
        self.loss.check_taken(
            [self.loss.name, *(self.search.loss if self.search.on else [])], prefix="deep."
        )

    def check_size(self, method: str, n_features: int) -> None:
        """`ValueError` naming the size key when ``method``'s model on ``n_features`` features
        would pass this machine's memory in training (`core.sizes`)."""
        if method == "resnet":
            self.encoder.check_size("deep.encoder.", n_features)
            if self.head == "mlp":
                width, members = self.encoder.width, self.encoder.out_dim // self.encoder.width
                key = f"deep.head_hidden={self.head_hidden}"
                check_head_size(key, in_dim=width, hidden=self.head_hidden, members=members)
            return
        hidden, n_in = self.hidden, n_features * self.embedding_dim
        parameters = n_in * hidden + self.n_layers * hidden * hidden  # the deep part
        if method == "dasalc":
            parameters += self.attention_layers * 4 * hidden * hidden
        if method == "dcnv2":
            parameters += max(self.cross_layers) * n_in * n_in
        keys = ("hidden", "n_layers", "embedding_dim", "attention_layers")
        model_fits(largest("deep.", self, keys), parameters, f"the {method} model")
