"""Label scarcity, the one definition shared by every stage.

Crowdsourced labels (paper 4.1.1): a seeded random fraction of the train QGs is labeled, all
items of a labeled QG carry their labels. The draw is a seeded permutation of the train QGs and
a fraction takes its first ``ceil(fraction * n_groups)`` QGs (at least one), so for one seed the
0.1% draw is inside the 0.5% draw, which is inside the 10% draw, and so on.

Implicit binary feedback (paper 4.1.2, A.2.4): ``y = 1{t * r + G1 > t * tau + G0}`` with
standard Gumbels ``G0, G1`` drawn per item from the seed, ``t = 4``; applied to train and vali,
test keeps its graded labels. Labeled QGs are those with at least one positive (among the drawn
fraction, which is 1.0 by default in this setting).

Validation labels: ``full`` (every vali QG labeled, as in the paper) or ``same`` (a seeded draw
at the train fraction, what a user with scarce labels really has).

The seed is the run's (``seed=``) unless ``scarcity.seed`` fixes it: runs of other seeds (other
initialisations and data orders) then see the same labeled QGs, as a seed ensemble must.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scarce_ltr.data.ranking_split import RankingSplit

VAL_SETTINGS = ("full", "same")
# Separate random streams so that changing one setting never moves another's draw.
_TRAIN_STREAM, _VALI_STREAM, _GUMBEL_STREAM = 11, 12, 13


@dataclass(frozen=True)
class ScarcityConfig:
    fraction: float = 1.0  # share of train QGs with labels, drawn at random with the seed
    val: str = "full"  # vali labels: full (the paper's) | same (the train fraction)
    binary_tau: float | None = None  # implicit feedback: binary labels from Gumbel noise at tau
    binary_temperature: float = 4.0  # temperature of the implicit-feedback Gumbel draw
    # The seed of the labeled QGs (and the Gumbel noise); None: the run's seed. Fixing it lets
    # runs that differ in their seed see the same labels: a seed ensemble under label scarcity.
    seed: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"scarcity.fraction must be in (0, 1], got {self.fraction}")
        if self.val not in VAL_SETTINGS:
            allowed = ", ".join(VAL_SETTINGS)
            raise ValueError(f"scarcity.val must be one of {allowed}, got {self.val}")
        if self.binary_temperature <= 0:
            raise ValueError("scarcity.binary_temperature must be positive")
        if self.seed is not None and self.seed < 0:
            raise ValueError(f"scarcity.seed must be >= 0 (or null), got {self.seed}")

    def label_seed(self, run_seed: int) -> int:
        """The seed that draws the labels of a run seeded ``run_seed``."""
        return run_seed if self.seed is None else self.seed

    @property
    def tag(self) -> str:
        """The label setting's name in run directories, e.g. ``frac=0.01`` or ``tau=4.5``."""
        tag = f"frac={self.fraction:g}"
        if self.binary_tau is not None:
            tag = f"tau={self.binary_tau:g}" + ("" if self.fraction == 1.0 else f",{tag}")
        tag += "" if self.val == "full" else ",val=same"
        return tag + ("" if self.seed is None else f",labels={self.seed}")


@dataclass(frozen=True)
class LabelSetting:
    """What the learner may see. Masks are ``[n_groups]`` bool over the full splits."""

    train: RankingSplit  # labels possibly binarized
    vali: RankingSplit  # labels possibly binarized
    train_labeled: np.ndarray
    vali_labeled: np.ndarray
    config: ScarcityConfig

    def labeled_train(self) -> RankingSplit:
        return self.train.subset(np.flatnonzero(self.train_labeled))

    def labeled_vali(self) -> RankingSplit:
        return self.vali.subset(np.flatnonzero(self.vali_labeled))

    def trained_groups(self) -> np.ndarray:
        """``[n]`` indices of the labeled train QGs with a relevant item: those a supervised
        loss learns from (the others give no gradient to any loss)."""
        return np.flatnonzero(self.train_labeled & self.train.groups_with_relevant())

    def summary(self) -> dict:
        labeled = self.labeled_train()
        positives = np.zeros(0)
        if labeled.n_items:
            positives = np.add.reduceat(labeled.labels > 0, labeled.offsets[:-1])
        return {
            "setting": self.config.tag,
            "train_labeled_groups": int(self.train_labeled.sum()),
            "train_groups": self.train.n_groups,
            "train_labeled_items": labeled.n_items,
            "train_labeled_groups_with_relevant": int(labeled.groups_with_relevant().sum()),
            "mean_positives_per_labeled_group": float(positives.mean()) if len(positives) else 0.0,
            "vali_labeled_groups": int(self.vali_labeled.sum()),
            "vali_groups": self.vali.n_groups,
        }


def draw_groups(n_groups: int, fraction: float, *, seed: int, stream: int) -> np.ndarray:
    """``[n_groups]`` bool: a seeded share ``fraction`` of the QGs (at least one, rounded up),
    nested across fractions for one (seed, stream). Draws the labeled QGs of a label budget
    and the pretraining pool of ``pool_fraction``."""
    order = np.random.default_rng([seed, stream]).permutation(n_groups)
    n_labeled = min(n_groups, max(1, math.ceil(fraction * n_groups)))
    mask = np.zeros(n_groups, dtype=bool)
    mask[order[:n_labeled]] = True
    return mask


def binarize_labels(
    labels: np.ndarray, *, tau: float, temperature: float, seed: int, stream: int
) -> np.ndarray:
    """Implicit binary feedback: ``1{t*r + G1 > t*tau + G0}``, P(y=1) = sigmoid(t (r - tau))."""
    rng = np.random.default_rng([seed, _GUMBEL_STREAM, stream])
    g1, g0 = rng.gumbel(size=(2, len(labels)))
    clicked = temperature * np.asarray(labels, dtype=np.float64) + g1 > temperature * tau + g0
    return clicked.astype(np.float32)


def apply_scarcity(
    train: RankingSplit,
    vali: RankingSplit,
    config: ScarcityConfig,
    *,
    seed: int,
    labeled: np.ndarray | None = None,
) -> LabelSetting:
    """The label setting of ``config`` on ``train`` and ``vali``; ``labeled`` (``[n_train_groups]``
    bool): the train QGs that carry labels, given (an estimator's, a notebook's) instead of drawn
    at ``config.fraction``."""
    fraction, seed = config.fraction, config.label_seed(seed)
    if labeled is None:
        train_mask = draw_groups(train.n_groups, fraction, seed=seed, stream=_TRAIN_STREAM)
    else:
        train_mask = np.array(labeled, dtype=bool, copy=True)
        if train_mask.shape != (train.n_groups,):
            raise ValueError(
                f"labeled must be a [n_groups] bool mask over train's {train.n_groups} QGs, "
                f"got shape {train_mask.shape}"
            )
    if config.val == "same":
        vali_mask = draw_groups(vali.n_groups, fraction, seed=seed, stream=_VALI_STREAM)
    else:
        vali_mask = np.ones(vali.n_groups, dtype=bool)
    if config.binary_tau is not None:
        options = dict(tau=config.binary_tau, temperature=config.binary_temperature, seed=seed)
        train = train.with_labels(binarize_labels(train.labels, stream=_TRAIN_STREAM, **options))
        vali = vali.with_labels(binarize_labels(vali.labels, stream=_VALI_STREAM, **options))
        train_mask &= train.groups_with_relevant()
        vali_mask &= vali.groups_with_relevant()
    return LabelSetting(train, vali, train_mask, vali_mask, config)
