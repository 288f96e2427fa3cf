"""A deep ranker's recipe, declared once: the keys finetuning and the deep baselines share.

`RankerRecipe` holds what a ranker that `finetune.loop.fit` trains is made of and trained with,
beyond the training keys of `data.stage_config.TrainingKeys`: its network (a fresh encoder and
the head), its loss (`LossConfig`, the ``loss:`` section), its learning-rate grid and its recipe
search. `finetune.config.FinetuneConfig` holds them at the top (``lrs=``, ``head=``,
``encoder.*``, ``loss.*``, ``search.*``) and the deep baselines in their ``deep:`` section
(`baselines.deep.config.DeepBaselineOptions`: ``deep.lrs=``, ``deep.head=`` ...), the same keys
with the same help lines and checks: ``./run.sh baseline resnet`` is finetuning's
``scratch+full`` recipe (a fresh encoder, the whole network trained) under the baseline's name.
A section whose default differs redeclares that field alone (the deep baselines' ``lrs``), and
one that reads a key under some of its choices only marks it with `reading`.
"""

from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field, fields

from scarce_ltr.core.config_fields import POSITIVE
from scarce_ltr.data.stage_config import TrainingKeys
from scarce_ltr.finetune.heads import HEADS
from scarce_ltr.finetune.search_config import SearchConfig
from scarce_ltr.losses import LOSSES
from scarce_ltr.losses.base import BoundLoss, LossOptions
from scarce_ltr.pretrain.encoders import EncoderConfig


# The loss and its options: ``loss.name`` picks a loss of `losses.LOSSES`, whose
# options (`losses.base.LossOptions`) read and check the keys below it needs; one set
# away from its default for a loss that does not read it is refused (`check_taken`).
@dataclass(frozen=True)
class LossConfig:
    # lambdarank|ranknet|softmax|approx-ndcg|neural-ndcg|lambdaloss|listmle|listnet|rmse
    name: str = "lambdarank"
    sigma: float = 1.0  # lambdarank, ranknet, lambdaloss: steepness of the pairwise logistic
    k: int | None = None  # lambdarank, lambdaloss, neural-ndcg: truncation; None: the whole list
    # approx-ndcg, neural-ndcg: smoothness of the approximate ranks / sort. None: the loss's own
    # default (0.1 for approx-ndcg, allRank's 1.0 for neural-ndcg), so one key serves both.
    temperature: float | None = None
    mu: float = 10.0  # lambdaloss: weight of the NDCGLoss2 term in NDCGLoss2++ (allRank's 10)

    def __post_init__(self) -> None:
        if self.name not in LOSSES:
            raise ValueError(f"loss.name must be one of {', '.join(LOSSES)}, got {self.name!r}")
        # Each key's value is checked by the options of the losses that read it, the chosen
        # loss's first: a bad value is named as such even where the key is then refused.
        for loss in (LOSSES[self.name], *LOSSES.values()):
            loss.options.of(self)

    @property
    def options(self) -> LossOptions:
        """The chosen loss's options: the keys of this section it reads, checked."""
        return LOSSES[self.name].options.of(self)

    def check_taken(self, names: list[str], *, prefix: str = "") -> None:
        """A ``loss.<key>`` set away from its default that none of the losses ``names`` (the
        config's, and the search's when it searches) reads is an error naming the losses that
        do and the keys these read (`core.registry.check_unread`), not a silent no-op
        (``prefix``: the section's, ``deep.``)."""

        def changed(key: str) -> list[str]:
            value = getattr(self, key)
            return [] if value == _LOSS_DEFAULTS[key] else [f"{prefix}loss.{key}={value}"]

        LOSSES.check_unread(names, changed, prefix=f"{prefix}loss.")

    def build(self) -> BoundLoss:
        """The chosen loss with its options bound: ``f(scores, labels, *, mask)``. An option left
        at None is not passed, so the loss's own default applies."""
        return LOSSES[self.name].build(self.options)


_LOSS_DEFAULTS = {f.name: f.default for f in fields(LossConfig)}


# The training keys come first (`TrainingKeys`, with their help lines); in --help these follow.
@dataclass(frozen=True)
class RankerRecipe(TrainingKeys):
    # a fresh encoder's (finetuning: pretrained=none; the deep baselines: resnet)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    head: str = "mlp"  # linear | mlp (linear for binary labels, paper 4.1.2)
    head_hidden: int = 128
    head_dropout: float = 0.0
    loss: LossConfig = field(default_factory=LossConfig)
    # A learning-rate grid, e.g. [5e-5,2e-4,1e-3]: one model per rate, the vali-best kept.
    # Empty (finetuning's default): optimizer.lr alone, the paper's protocol.
    lrs: list[float] = field(default_factory=list)
    # A seeded Optuna search on vali over lr, weight decay, dropout, epochs, loss, input noise
    # and width instead of the grid (search.n_trials trials, the grid's points first); off by
    # default (n_trials 0). docs/finetune.md "Searching the recipe".
    search: SearchConfig = field(default_factory=SearchConfig)

    def check_recipe(self, prefix: str = "") -> None:
        """`ValueError` naming the key (``prefix``: where the keys sit, ``deep.`` for the
        baselines); the config calls it where its checks have always run these."""
        if self.head not in HEADS:
            raise ValueError(f"{prefix}head must be one of {', '.join(HEADS)}, got {self.head!r}")
        if self.head_hidden < 1 or not 0 <= self.head_dropout < 1:
            raise ValueError(f"{prefix}head_hidden must be >= 1 and {prefix}head_dropout in [0, 1)")
        self.check_training_keys(prefix)
        self.search.check(f"{prefix}search.")
        for lr in self.lrs:
            POSITIVE.check(f"{prefix}lrs", lr)
        if len(set(self.lrs)) != len(self.lrs):
            raise ValueError(f"{prefix}lrs must list distinct positive learning rates")


RECIPE_FIELDS = {f.name: f for f in fields(RankerRecipe)}


def reading(name: str, metadata: dict) -> Field:
    """The recipe's field ``name`` as a section extending it redeclares it to say which of its
    choices read it (``metadata``: `core.config_fields.read_with`): the same default, the same
    help line (the recipe's comment), its place kept."""
    recipe = RECIPE_FIELDS[name]
    if recipe.default_factory is not MISSING:
        return field(default_factory=recipe.default_factory, metadata=metadata)
    return field(default=recipe.default, metadata=metadata)
