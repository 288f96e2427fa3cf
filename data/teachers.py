"""A finished run as a teacher: its scores on the unlabeled train QGs as targets for a student.

Every run that scores vali and test keeps its scores on every train item too (``scores.npz``
``train``; `data.evaluation.save_scores`), so a student reads a teacher without loading its
model, whatever kind it is (a tree, a deep ranker, an ensemble). The teacher must have seen the
student's data (name, files, splits, features) and exactly the student's labels: the same label
setting and the same label seed (unless the setting labels every QG). A teacher trained on other
labeled QGs would carry their labels into the student and enlarge its label budget; one on other
data would teach scores of other items. Either is refused with a message naming the key.

`TeachingConfig` is the student's ``teaching:`` section (deep rankers; trees bin the teacher's
scores with their own ``gbdt.pseudo_*`` keys).

``teacher=self`` (`SELF_TEACHER`, a deep student only): no run teaches; the student's own scores
on the clean unlabeled QGs are the targets for its scores on a noised copy of them, in every
batch (consistency regularisation, the Pi-model of Laine & Aila 2017 and Sajjadi et al. 2016,
listwise). It reads no labels of the unlabeled QGs, as a run teacher reads none either.

Pseudo-labels (`pseudo_labels`): a teacher scores the unlabeled train QGs, and its scores
become relevance levels 0..30 by binning them evenly into 31 buckets, lowest scores in level 0.
The bins are global, over the scores of all unlabeled items together, not per QG:

- the paper bins "the resulting scores" as one set;
- per-QG bins would stretch every QG over all 31 levels, so a QG whose items the teacher finds
  alike (or all irrelevant) would still get an item at level 30 and gains 2^30 apart, while
  global bins keep a QG's spread of levels in proportion to the teacher's spread of scores.

``width`` (default) cuts the score range ``[min, max]`` into equal-width bins; ``quantile`` puts
an equal share of items in each bin. Equal scores always share a level; constant scores all get
level 0, which LambdaMART ignores (a QG without a relevant item has no gradient).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from scarce_ltr.core.config_fields import NON_NEGATIVE, POSITIVE, changed_keys
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.run_config import read_config
from scarce_ltr.core.runs import is_done, run_model
from scarce_ltr.data.evaluation import read_train_scores
from scarce_ltr.data.pipeline import PreparedData
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.stage_config import CommonConfig

SCORES = "scores.npz"
# soft: a listwise distillation loss on the teacher's scores | buckets: the teacher's scores
# binned into relevance levels, learned with the run's own loss.
TARGETS = ("soft", "buckets")
# The feature transform is not among them: a teacher scored raw items through its own fitted
# transform, so a LightGBM on raw features teaches a standardized ResNet.
_DATA_KEYS = ("name", "path", "splits", "n_features")
# <student>~<teacher>: the student model also learns from a finished run of the teacher model
# (same data, labels and seed) on the unlabeled train QGs: simclr-rank+full~gbdt-optuna,
# gbdt-pseudo~ensemble:simclr-rank+full,gbdt-optuna. A teacher is never taught itself.
TEACHER_MARK = "~"
# A taught model mixes two models' knowledge: the report files it under hybrid.
TAUGHT_GROUP = "hybrid"
# teacher=self / <student>~self: the student's own clean-view scores teach its noised view.
SELF_TEACHER = "self"
# teacher=self's default teaching.noise: the std of the Gaussian noise on the student's view, in
# units of the (standardized) features. 1.0 would put the two views of an item about as far apart
# as two items of its QG (benchmarks/hybrid-log.md, "Why pretraining subtracts", item 5).
SELF_NOISE = 0.3


@dataclass(frozen=True)
class TeachingConfig:
    """How a deep student learns from ``teacher=<run dir>`` on the unlabeled train QGs.

    The taught QGs' loss is added to the labeled QGs' loss with ``weight`` in every batch;
    epochs and checkpoints are still chosen on the labeled vali QGs alone.
    """

    weight: float = 1.0  # of the taught QGs' loss against the labeled QGs' (1: equal)
    targets: str = "soft"  # soft | buckets
    temperature: float = 1.0  # soft: of the teacher's within-QG softmax (its z-scored scores)
    # buckets: relevance levels 0 .. levels - 1; 0: as many as the labeled train QGs' grades
    levels: int = 0
    # std of the Gaussian noise added to the taught QGs' features where the student scores them
    # (the teacher's targets stay those of the clean items); null: 0 with a run as teacher,
    # SELF_NOISE with teacher=self, which needs some (without noise it learns nothing)
    noise: float | None = None

    def __post_init__(self) -> None:
        POSITIVE.check("teaching.weight", self.weight)
        POSITIVE.check("teaching.temperature", self.temperature)
        NON_NEGATIVE.check("teaching.noise", self.noise)
        if self.targets not in TARGETS:
            raise ValueError(
                f"teaching.targets must be one of {', '.join(TARGETS)}, got {self.targets!r}"
            )
        if self.levels != 0 and not 2 <= self.levels <= 31:
            raise ValueError("teaching.levels must be 0 (the data's grades) or in [2, 31]")

    def student_noise(self, *, self_taught: bool) -> float:
        """The noise on the taught QGs' student view (``noise``, or its default)."""
        if self.noise is not None:
            return self.noise
        return SELF_NOISE if self_taught else 0.0

    def check_read(self, teacher: str | None) -> None:
        """Stop when a key is set away from its default and no ``teacher`` is there to read
        it (``teaching.weight=0.5`` without ``teacher=``: a silent no-op before)."""
        if not no_teacher(teacher):
            return
        changed = changed_keys("teaching", self, TeachingConfig())
        if changed:
            raise ValueError(
                f"{', '.join(changed)}: teaching.* is read only with a teacher (teacher=<run dir> "
                "or teacher=self); give one or leave teaching.* out"
            )

    def check_self_taught(self) -> None:
        """Stop unless these keys make sense for ``teacher=self``."""
        if self.targets != "soft":
            raise ValueError(
                "teacher=self learns its own scores (teaching.targets=soft), not buckets of them"
            )
        if self.student_noise(self_taught=True) == 0:
            raise ValueError(
                "teacher=self needs teaching.noise > 0: without noise the student's view equals "
                "the targets' and the consistency loss has no gradient"
            )


def no_teacher(teacher: str | None) -> bool:
    """``teacher`` left out (None, ``none``, empty): the run learns from its labels alone."""
    return teacher is None or teacher.strip().lower() in ("", "none", "null")


def self_taught(teacher: str | None) -> bool:
    """``teacher=self``: the student teaches itself (consistency on the unlabeled QGs)."""
    return teacher is not None and teacher.strip().lower() == SELF_TEACHER


def taught_model(student: str, teacher: str) -> str:
    """The model name of ``student`` taught by the run ``teacher``: ``<student>~<its model>``
    (a taught run never shares a folder with the untaught one, nor with one of another
    teacher); the run's folder name stands in for a run without a report; ``teacher=self``
    gives ``<student>~self``."""
    if self_taught(teacher):
        return f"{student}{TEACHER_MARK}{SELF_TEACHER}"
    return f"{student}{TEACHER_MARK}{run_model(teacher) or Path(teacher).name}"


def teacher_train_scores(
    teacher: str, cfg: CommonConfig, prepared: PreparedData, *, key: str = "teacher"
) -> np.ndarray:
    """``[n_train_items]`` float64 scores of the finished run ``teacher`` on ``prepared.train``,
    after checking that it saw the student's data and labels (`UserError` naming ``key``)."""
    check_teacher(teacher, cfg, key=key)
    path = Path(teacher) / SCORES
    try:
        stored = read_train_scores(path)
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"{key}: {teacher}: {SCORES} is not a scores file ({exc})") from None
    if stored is None:
        raise UserError(
            f"{key}: {teacher}: its {SCORES} has no train scores (a run made before runs kept "
            "them); run the teacher again"
        )
    return aligned_train_scores(teacher, stored, prepared, key=key, who="this run's")


def aligned_train_scores(
    run: str, stored: tuple, prepared: PreparedData, *, key: str, who: str
) -> np.ndarray:
    """A run's stored ``(scores, offsets, qids)`` on the train items, checked to be one finite
    score per item of ``prepared``'s train QGs (a teacher's, or an ensemble member's)."""
    scores, offsets, qids = stored
    train = prepared.train
    if not (np.array_equal(offsets, train.offsets) and np.array_equal(qids, train.qids)):
        raise UserError(
            f"{key}: {run}: its train scores belong to other train QGs than {who} data "
            "(another data set, split or file)"
        )
    if len(scores) != train.n_items or not np.isfinite(scores).all():
        raise UserError(f"{key}: {run}: its train scores are not one finite score per train item")
    return np.asarray(scores, dtype=np.float64)


def check_teacher(teacher: str, cfg: CommonConfig, *, key: str = "teacher") -> None:
    """Stop unless ``teacher`` is a finished run with scores on ``cfg``'s data and labels."""
    check_scored_run(teacher, cfg, key=key, role="a teacher is", who="this run")


def check_scored_run(
    run: str, cfg: CommonConfig, *, key: str, role: str, who: str, **label_message: str
) -> None:
    """Stop unless ``run`` finished with saved scores (``scores.npz``) on ``cfg``'s data and
    labels: what a teacher and an ensemble's member must be. ``role`` ("a teacher is", "an
    ensemble takes") opens the hint for a run that scored nothing; ``label_message`` passes
    ``use``/``remedy`` to `check_same_labels`."""
    path = Path(run)
    if not path.is_dir():
        raise UserError(f"{key}: {run}: no such run directory")
    if not (path / SCORES).is_file():
        raise UserError(
            f"{key}: {run}: no {SCORES}; {role} a finished finetuning, baseline or ensemble run "
            "(pretraining runs score no item)"
        )
    if not is_done(path):
        raise UserError(f"{key}: {run}: has not finished (no DONE); finish it first")
    config = asdict(read_config(path, CommonConfig))
    check_same_data(run, config["data"], cfg, key=key, who=who)
    check_same_labels(run, config, cfg, key=key, who=who, **label_message)


def check_same_data(run: str, data: dict, cfg: CommonConfig, *, key: str, who: str) -> None:
    """``run`` (whose config's ``data`` section is ``data``) read ``cfg``'s data set."""
    mine, theirs = _data_identity(asdict(cfg.data)), _data_identity(data)
    differ = [k for k in mine if mine[k] != theirs.get(k)]
    if differ:
        found = " ".join(f"data.{k}={theirs.get(k)}" for k in differ)
        here = " ".join(f"data.{k}={mine[k]}" for k in differ)
        raise UserError(
            f"{key}: {run}: trained on other data ({found}; {who} has {here}); pass "
            "the run's data keys (data=<name> data.path=...) or leave the run out"
        )


def _data_identity(data: dict) -> dict:
    out = {k: data.get(k) for k in _DATA_KEYS}
    if out["path"]:
        out["path"] = str(Path(str(out["path"])).expanduser().resolve())
    if out["splits"] is not None:
        out["splits"] = dict(out["splits"])
    if out["name"] == "synthetic":  # one key per knob, so that a message names the knob
        out |= {f"synthetic.{k}": v for k, v in (data.get("synthetic") or {}).items()}
    return out


def check_same_labels(
    run: str,
    config: dict,
    cfg: CommonConfig,
    *,
    key: str,
    who: str,
    use: str = "learning from it",
    remedy: str = "give a run of the same seed, or fix the labels with scarcity.seed=<n> in both",
) -> None:
    """Same label setting; same label seed unless the setting labels every QG whatever the seed
    (labels drawn with another seed would enlarge the label budget). The label seed is the one
    that draws the labels, ``scarcity.seed`` or else the run's: a run of seed 3 and one of
    ``scarcity.seed=3`` see the same labeled QGs (a seed ensemble's first member is the plain
    run of its seed). ``use`` and ``remedy`` finish the message on a seed: what the caller does
    with the run, and what to do instead."""
    mine, theirs = asdict(cfg.scarcity), dict(config.get("scarcity") or {})
    differ = [k for k in mine if k != "seed" and mine[k] != theirs.get(k)]
    if differ:
        found = " ".join(f"scarcity.{k}={theirs.get(k)}" for k in differ)
        raise UserError(
            f"{key}: {run}: trained with another label setting ({found}; {who} has "
            f"{cfg.scarcity.tag}); pass the same scarcity keys or leave the run out"
        )
    seed_free = cfg.scarcity.fraction == 1.0 and cfg.scarcity.binary_tau is None
    theirs_seed = theirs.get("seed")
    label_seed = config.get("seed") if theirs_seed is None else theirs_seed
    if not seed_free and label_seed != cfg.scarcity.label_seed(cfg.seed):
        raise UserError(
            f"{key}: {run}: seed {label_seed} draws other labeled QGs than {who}'s seed "
            f"{cfg.scarcity.label_seed(cfg.seed)} in setting {cfg.scarcity.tag}; {use} would use "
            f"more labels than the budget ({remedy})"
        )


def pseudo_labels(scores: np.ndarray, *, levels: int = 31, binning: str = "width") -> np.ndarray:
    """Relevance levels of scored items.

    Args:
        scores: ``[n_items]`` teacher scores of the unlabeled items, all QGs together.
        levels: number of levels; the result lies in ``0 .. levels - 1``.
        binning: ``width`` (equal-width bins of ``[min, max]``) or ``quantile`` (equal counts).

    Returns:
        ``[n_items]`` float32 integer-valued levels; higher score, higher or equal level.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size == 0:
        return np.zeros(0, dtype=np.float32)
    if not np.isfinite(scores).all():
        raise ValueError("pseudo_labels: scores must be finite")
    low, high = scores.min(), scores.max()
    if high == low:
        return np.zeros(len(scores), dtype=np.float32)
    if binning == "width":
        level = np.floor((scores - low) / (high - low) * levels)
    elif binning == "quantile":
        edges = np.quantile(scores, np.arange(1, levels) / levels)
        level = np.searchsorted(edges, scores, side="left").astype(np.float64)
    else:
        raise ValueError(f"unknown binning {binning!r}; allowed: width, quantile")
    return np.clip(level, 0, levels - 1).astype(np.float32)


def with_pseudo_labels(
    train: RankingSplit, labeled: np.ndarray, pseudo: np.ndarray
) -> RankingSplit:
    """Every train QG: true labels on labeled QGs, ``pseudo`` on the others.

    Args:
        train: ``[n_items]`` rows; the labels of unlabeled QGs are never read.
        labeled: ``[n_groups]`` bool, the QGs whose labels the learner may see.
        pseudo: ``[n_unlabeled_items]`` levels of the unlabeled QGs' items, in train order.
    """
    item_labeled = np.repeat(labeled, train.group_sizes)
    if int((~item_labeled).sum()) != len(pseudo):
        raise ValueError(f"{len(pseudo)} pseudo-labels for {(~item_labeled).sum()} unlabeled items")
    labels = np.zeros(train.n_items, dtype=np.float32)
    labels[item_labeled] = np.asarray(train.labels)[item_labeled]
    labels[~item_labeled] = pseudo
    return train.with_labels(labels)
