"""A synthetic learning-to-rank data set with the shape of real web-search data.

Generative model (one "world" of parameters, then train, vali and test splits drawn from it):

1. QG sizes: ``round(LogNormal(mu, group_size_sigma))`` clipped to
   ``[min_group_size, max_group_size]``, with ``mu`` such that the mean size is
   ``mean_group_size``.
2. Latents: item ``i`` of QG ``q`` has ``z_i = c_q + u_i`` in ``R^latent_dim`` with a query
   centre ``c_q ~ N(0, 0.5^2 I)`` (the query's topic) and ``u_i ~ N(0, I)``.
3. Relevance: ``f(z) = w1.z + nonlinearity * (0.8 sin(1.5 w2.z) + 0.4 (w3.z)^2)`` with
   orthonormal ``w1, w2, w3``, standardised, plus ``label_noise * N(0, 1)``: the noisy score
   ``s_i``.
4. Labels are relative to the query: a QG has no relevant item with probability
   ``frac_groups_without_relevant``, otherwise a fraction ``p_q ~ Beta`` (mean ``frac_relevant``)
   of its items, those with the highest ``s_i``, is relevant; relevant items get grade 1-4 from
   thresholds on ``s_i + b_q`` (``b_q`` a per-query quality shift). Small QGs often round to no
   relevant item, so roughly 10-30 % of QGs have none.
5. Features are noisy non-linear transforms of random projections of ``z``. Each informative
   feature ``j`` sees ``p_j = a_j.z + sin(b_j.z) + t_qj + feature_noise * N(0, 1)``, where
   ``|b_j|`` is in [0.3, 0.8], ``a_j`` is a unit vector with at most ``max_alignment`` cosine
   with ``w1`` (no single feature is a good ranker; the signal is spread redundantly over many
   features) and ``t_qj ~ N(0, query_shift^2)`` is a per-QG offset. ``p_j`` is then mapped to a
   kind of feature seen in LETOR data: ``count`` (Poisson term/link counts), ``score``
   (BM25-like, log-normal times a per-QG scale), ``ratio`` (sigmoid, in (0, 1)),
   ``categorical`` (2 or 3 distinct values). Two more kinds carry no item-level signal:
   ``query`` (constant within a QG: query length, number of documents) and ``noise``
   (heavy-tailed, independent of ``z``).
6. Rare extremes: in vali and test, ``ceil(outlier_group_rate * n_groups)`` QGs get one item
   whose value in one unbounded feature is 10-100 times the largest value in the data, far
   beyond a gap, for outlier detectors to find.

A model that knows ``z`` ranks well; a linear model on raw features is mediocre; a tree model
needs many labels to piece ``f`` together from the noisy features, while the unlabeled items
(their joint structure is a ``latent_dim``-dimensional manifold in feature space) let
self-supervised learning recover ``z``. Everything is drawn from ``seed``: the same spec gives
bit-identical arrays (with one numpy version on one platform); each split has its own random
stream, so the train split does not change when the size of vali or test does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from scarce_ltr.data.ranking_split import RankingSplit

SPLITS = ("train", "vali", "test")
_CENTRE_STD = 0.5
_GRADE_THRESHOLDS = np.array([1.4, 2.15, 2.9])  # on s + b_q; tuned for ~55/28/12/5 % of grades
_QUALITY_STD = 0.5
_UNBOUNDED_KINDS = ("count", "score", "noise")


@dataclass(frozen=True)
class SyntheticSpec:
    """Sizes and knobs of the synthetic data set (see the module docstring for the model)."""

    n_train_groups: int = 300
    n_vali_groups: int = 100
    n_test_groups: int = 100
    n_features: int = 40
    mean_group_size: float = 20.0
    max_group_size: int = 300
    min_group_size: int = 2
    group_size_sigma: float = 0.9  # log-normal sigma of QG sizes: a few to a few hundred items
    latent_dim: int = 4
    feature_noise: float = 0.8  # per-feature noise std; the latent signal has std about 1.1
    query_shift: float = 0.5  # std of per-QG offsets of each feature
    max_alignment: float = 0.5  # largest |cos(a_j, w1)|, so no single feature ranks well alone
    nonlinearity: float = 1.0  # weight of the non-linear terms of the relevance function
    label_noise: float = 0.3
    frac_relevant: float = 0.15  # mean fraction of relevant items in QGs that have some
    frac_groups_without_relevant: float = 0.1  # QGs forced to have none (small QGs add more)
    outlier_group_rate: float = 0.005  # of vali and test QGs; at least one QG when above 0
    seed: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            allowed = int if f.type == "int" else (int, float)
            if not isinstance(value, allowed) or isinstance(value, bool):
                raise ValueError(f"{f.name} must be of type {f.type}, got {value!r}")
        positive = ("n_train_groups", "n_vali_groups", "n_test_groups", "mean_group_size")
        positive += ("min_group_size", "group_size_sigma")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("feature_noise", "query_shift", "nonlinearity", "label_noise"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.latent_dim < 3:
            raise ValueError(f"latent_dim must be >= 3, got {self.latent_dim}")
        if self.n_features < 8:
            raise ValueError(f"n_features must be >= 8 (one of each kind), got {self.n_features}")
        if not self.min_group_size < self.mean_group_size < self.max_group_size:
            raise ValueError("mean_group_size must lie strictly between min_ and max_group_size")
        if not 0 <= self.max_alignment <= 1:
            raise ValueError(f"max_alignment must be in [0, 1], got {self.max_alignment}")
        if not 0 < self.frac_relevant < 1:
            raise ValueError(f"frac_relevant must be in (0, 1), got {self.frac_relevant}")
        for name in ("frac_groups_without_relevant", "outlier_group_rate"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")


def feature_kinds(spec: SyntheticSpec) -> list[str]:
    """``[n_features]`` kind of each column: count, score, ratio, categorical, query or noise."""
    d = spec.n_features
    n_query, n_cat, n_noise = max(1, round(0.05 * d)), max(1, round(0.075 * d)), max(1, d // 10)
    n_informative = d - n_query - n_cat - n_noise
    n_count, n_score = round(0.35 * n_informative), round(0.4 * n_informative)
    kinds = ["count"] * n_count + ["score"] * n_score
    kinds += ["ratio"] * (n_informative - n_count - n_score)
    kinds += ["categorical"] * n_cat + ["query"] * n_query + ["noise"] * n_noise
    # Interleave kinds so that no block of columns is special; fixed by the seed.
    order = np.random.default_rng(_streams(spec.seed)["kinds"]).permutation(d)
    return [kinds[i] for i in order]


@dataclass(frozen=True)
class _World:
    """Parameters shared by all splits. Vectors are ``[latent_dim]``, matrices ``[d, L]``."""

    kinds: list[str]
    w: np.ndarray  # [3, L] orthonormal directions of the relevance function
    f_mean: float
    f_std: float
    proj: np.ndarray  # [d, L]
    warp: np.ndarray  # [d, L], norms in [0.3, 0.8]: the frequency of the sine warp
    slope: np.ndarray  # [d]
    bias: np.ndarray  # [d]
    cuts: np.ndarray  # [d, 2] cut points of categorical features (inf = unused)
    variant: np.ndarray  # [d] bool: ternary vs binary, query length vs document count


def _streams(seed: int) -> dict[str, np.random.SeedSequence]:
    """Independent random streams, so that e.g. the train split ignores the size of test."""
    names = ("kinds", "world", *SPLITS, "outliers_vali", "outliers_test")
    return dict(zip(names, np.random.SeedSequence(seed).spawn(len(names)), strict=True))


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _relevance(*, z: np.ndarray, w: np.ndarray, nonlinearity: float) -> np.ndarray:
    """``[n]`` un-standardised relevance of latents ``z`` ``[n, L]``."""
    proj = z @ w.T.astype(z.dtype)
    nonlinear = 0.8 * np.sin(1.5 * proj[:, 1]) + 0.4 * proj[:, 2] ** 2
    return proj[:, 0] + nonlinearity * nonlinear


def _make_world(*, spec: SyntheticSpec, rng: np.random.Generator) -> _World:
    d, dim = spec.n_features, spec.latent_dim
    # Orthonormal relevance directions, so that the linear and non-linear parts do not mix.
    w = np.linalg.qr(rng.standard_normal((dim, 3)))[0].T
    # Standardise f on a fixed sample of z so that the label thresholds mean the same anywhere.
    z = rng.standard_normal((20000, dim)) * math.sqrt(1 + _CENTRE_STD**2)
    f = _relevance(z=z, w=w, nonlinearity=spec.nonlinearity)
    proj = _unit(rng.standard_normal((d, dim)))
    # Cap each feature's alignment with the main relevance direction, then renormalise.
    along = proj @ w[0]
    capped = np.clip(along, -spec.max_alignment, spec.max_alignment)
    rest = _unit(proj - along[:, None] * w[0] + 1e-12)
    proj = capped[:, None] * w[0] + np.sqrt(1 - capped**2)[:, None] * rest
    warp = _unit(rng.standard_normal((d, dim))) * rng.uniform(0.3, 0.8, size=(d, 1))
    kinds = feature_kinds(spec)
    # Alternate the variants within each kind, so that every kind with 2+ columns has both.
    variant = np.array([kinds[:j].count(kind) % 2 == 1 for j, kind in enumerate(kinds)])
    cut_low = rng.uniform(0.3, 1.0, size=d)
    cuts = np.stack([cut_low, np.where(variant, cut_low + 0.8, np.inf)], axis=1)
    return _World(
        kinds=kinds,
        w=w,
        f_mean=float(f.mean()),
        f_std=float(f.std()),
        proj=proj,
        warp=warp,
        slope=rng.uniform(0.5, 0.9, size=d),
        bias=rng.uniform(-1.0, 2.5, size=d),
        cuts=cuts,
        variant=variant,
    )


def _phi(x: float) -> float:
    """The standard normal CDF."""
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _clipped_lognormal_mean(*, mu: float, sigma: float, low: float, high: float) -> float:
    """Mean of ``clip(X, low, high)`` for ``X ~ LogNormal(mu, sigma)``."""
    a, b = (math.log(low) - mu) / sigma, (math.log(high) - mu) / sigma
    inside = math.exp(mu + sigma**2 / 2) * (_phi(b - sigma) - _phi(a - sigma))
    return low * _phi(a) + high * (1.0 - _phi(b)) + inside


def _group_sizes(*, spec: SyntheticSpec, n_groups: int, rng: np.random.Generator) -> np.ndarray:
    """``[n_groups]`` int64 QG sizes from a clipped log-normal whose mean is mean_group_size."""
    sigma, low, high = spec.group_size_sigma, spec.min_group_size, spec.max_group_size
    # Clipping moves the mean, so find mu by bisection (the clipped mean grows with mu).
    lo, hi = math.log(low) - 10 * sigma, math.log(high) + 10 * sigma
    for _ in range(100):
        mu = (lo + hi) / 2
        if _clipped_lognormal_mean(mu=mu, sigma=sigma, low=low, high=high) < spec.mean_group_size:
            lo = mu
        else:
            hi = mu
    sizes = np.rint(rng.lognormal(mu, sigma, size=n_groups))
    return sizes.clip(spec.min_group_size, spec.max_group_size).astype(np.int64)


def _labels(
    *,
    s: np.ndarray,
    offsets: np.ndarray,
    group: np.ndarray,
    spec: SyntheticSpec,
    rng: np.random.Generator,
) -> np.ndarray:
    """``[n_items]`` float32 grades 0-4: the top fraction ``p_q`` of each QG by ``s`` is relevant.

    ``s`` is ``[n_items]``, ``offsets`` ``[n_groups + 1]``, ``group`` ``[n_items]`` (the QG index).
    """
    n_groups = len(offsets) - 1
    sizes = np.diff(offsets)
    mean = spec.frac_relevant
    frac = rng.beta(2.0, 2.0 * (1 - mean) / mean, size=n_groups)
    frac[rng.random(n_groups) < spec.frac_groups_without_relevant] = 0.0
    # Stochastic rounding keeps the expected count p_q * size, so small QGs often get none.
    n_relevant = np.floor(frac * sizes + rng.random(n_groups)).astype(np.int64)
    quality = rng.normal(0.0, _QUALITY_STD, size=n_groups)
    order = np.lexsort((-s, group))  # by QG, then by decreasing s
    rank = np.empty(len(s), dtype=np.int64)
    rank[order] = np.arange(len(s)) - offsets[group]  # group is sorted, so group[order] == group
    grade = 1 + np.searchsorted(_GRADE_THRESHOLDS, s + quality[group])
    return np.where(rank < n_relevant[group], grade, 0).astype(np.float32)


def _feature(
    *,
    j: int,
    world: _World,
    spec: SyntheticSpec,
    z: np.ndarray,
    group: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """``[n_items]`` values of feature ``j`` for latents ``z`` ``[n_items, L]``.

    ``group`` is the ``[n_items]`` QG index of each item, sorted.
    """
    kind, n, n_groups = world.kinds[j], len(group), int(group[-1]) + 1
    if kind == "query":
        # Constant within a QG and heavy-tailed across QGs (query length, document counts).
        if world.variant[j]:
            return (rng.poisson(1.5, size=n_groups) + 1.0)[group]
        return rng.lognormal(8.0, 1.5, size=n_groups)[group]
    if kind == "noise":
        return rng.lognormal(world.bias[j], world.slope[j], size=n).astype(np.float32)
    p = z @ world.proj[j].astype(np.float32)
    p += np.sin(z @ world.warp[j].astype(np.float32))
    p += (rng.standard_normal(n_groups, dtype=np.float32) * spec.query_shift)[group]
    p += rng.standard_normal(n, dtype=np.float32) * spec.feature_noise
    a, b = np.float32(world.slope[j]), np.float32(world.bias[j])
    if kind == "count":
        return rng.poisson(np.exp(a * p + b - 1.0)).astype(np.float32)
    if kind == "score":
        scale = rng.lognormal(0.0, 0.3, size=n_groups).astype(np.float32)[group]
        return scale * np.exp(a * p + b)
    if kind == "ratio":
        return 1.0 / (1.0 + np.exp(-(a * p + b - 1.0)))
    if kind == "categorical":
        return np.searchsorted(world.cuts[j], p).astype(np.float32)
    raise ValueError(f"unknown feature kind {kind!r}")


def _split(
    *, spec: SyntheticSpec, world: _World, n_groups: int, name: str, rng: np.random.Generator
) -> tuple[RankingSplit, np.ndarray]:
    """One split and its ``[n_items]`` noise-free standardised relevance ``f(z)``."""
    sizes = _group_sizes(spec=spec, n_groups=n_groups, rng=rng)
    offsets = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    group = np.repeat(np.arange(n_groups, dtype=np.int64), sizes)
    n = int(offsets[-1])
    centres = rng.standard_normal((n_groups, spec.latent_dim), dtype=np.float32) * _CENTRE_STD
    z = centres[group] + rng.standard_normal((n, spec.latent_dim), dtype=np.float32)
    f = (_relevance(z=z, w=world.w, nonlinearity=spec.nonlinearity) - world.f_mean) / world.f_std
    s = f + rng.standard_normal(n, dtype=np.float32) * spec.label_noise
    labels = _labels(s=s, offsets=offsets, group=group, spec=spec, rng=rng)
    features = np.empty((n, spec.n_features), dtype=np.float32)
    for j in range(spec.n_features):
        features[:, j] = _feature(j=j, world=world, spec=spec, z=z, group=group, rng=rng)
    qids = np.arange(n_groups, dtype=np.int64) + 1 + 10_000_000 * SPLITS.index(name)
    return RankingSplit(features, labels, offsets, qids, name), f.astype(np.float32)


def _inject_outliers(
    *, splits: dict[str, RankingSplit], kinds: list[str], rate: float, seed: int
) -> None:
    """Give ``ceil(rate * n_groups)`` vali and test QGs one far-out value each, in place."""
    if rate == 0:
        return
    columns = np.array([j for j, kind in enumerate(kinds) if kind in _UNBOUNDED_KINDS])
    # A reduction over whole rows is fast on C-ordered features; column gathers copy.
    bulk_max = np.max([s.features.max(axis=0) for s in splits.values()], axis=0)[columns]
    for name in ("vali", "test"):
        split, rng = splits[name], np.random.default_rng(_streams(seed)[f"outliers_{name}"])
        chosen = rng.choice(split.n_groups, size=math.ceil(rate * split.n_groups), replace=False)
        for g in np.sort(chosen):
            row = split.offsets[g] + rng.integers(split.group_sizes[g])
            c = rng.integers(len(columns))
            # 10-100 x the largest value anywhere: a wide empty gap on a linear or log scale.
            split.features[row, columns[c]] = (bulk_max[c] + 1.0) * 10 ** rng.uniform(1, 2)


def generate_with_oracle(
    spec: SyntheticSpec,
) -> tuple[dict[str, RankingSplit], dict[str, np.ndarray]]:
    """Splits "train", "vali", "test" and, per split, the ``[n_items]`` noise-free relevance
    ``f(z)`` (an upper-bound ranker, for diagnostics only)."""
    streams = _streams(spec.seed)
    world = _make_world(spec=spec, rng=np.random.default_rng(streams["world"]))
    sizes = (spec.n_train_groups, spec.n_vali_groups, spec.n_test_groups)
    splits, oracle = {}, {}
    for name, n_groups in zip(SPLITS, sizes, strict=True):
        rng = np.random.default_rng(streams[name])
        splits[name], oracle[name] = _split(
            spec=spec, world=world, n_groups=n_groups, name=name, rng=rng
        )
    _inject_outliers(splits=splits, kinds=world.kinds, rate=spec.outlier_group_rate, seed=spec.seed)
    return splits, oracle


def generate(spec: SyntheticSpec) -> dict[str, RankingSplit]:
    """Splits "train", "vali", "test" drawn from ``spec`` (deterministic in ``spec.seed``)."""
    return generate_with_oracle(spec)[0]
