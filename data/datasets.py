"""Data sets by name: the synthetic default, any LETOR folder, and the public presets.

``configs/data/<name>.yaml`` fills `DataConfig`. ``synthetic`` is generated from its spec;
``letor`` reads ``data.path``; ``arrays`` reads folders of ``.npy`` arrays in the parsed cache's
form (`scarce_ltr.data.arrays`), ``table`` Parquet files and ``.npz`` columns
(`scarce_ltr.data.tables`), each through its format (``data.format``, `scarce_ltr.data.formats`:
how its files are found and read, the keys it reads); a preset reads ``data.path`` or, when that
is unset, ``$LTR_DATA_DIR/<name>/``, and stops with a message saying which files belong where and
where the data set is published when they are missing.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from scarce_ltr.core.config_fields import field_default
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.sizes import FLOAT32, check_fits, largest
from scarce_ltr.data.formats import FORMATS
from scarce_ltr.data.formats.base import LoadedData
from scarce_ltr.data.formats.base import check_label_range as check_label_range
from scarce_ltr.data.outliers import METHODS as OUTLIER_METHODS
from scarce_ltr.data.outliers.histogram import histogram_fits
from scarce_ltr.data.ranking_split import MAX_LABEL as MAX_LABEL
from scarce_ltr.data.ranking_split import RankingSplit
from scarce_ltr.data.synthetic import SyntheticSpec, generate
from scarce_ltr.data.transforms import TRANSFORMS

SPLITS = ("train", "vali", "test")


@dataclass(frozen=True)
class OutlierConfig:
    """How test QGs are flagged as outliers (paper 2.1, A.2.2)."""

    method: str = "histogram"  # histogram | knn | qids | none
    target_share: float = 0.01  # share of test QGs that G (or the knn cut) aims at
    gap: int | None = None  # G, the run of empty bins; None tunes it to target_share
    n_bins: int = 100
    max_tail_share: float = 0.01  # a tail beyond a gap must hold less than this share of vali
    knn_k: int = 10
    qids: list[int] = field(default_factory=list)  # method=qids: the user's outlier qids

    def __post_init__(self) -> None:
        if self.method not in OUTLIER_METHODS:
            raise ValueError(f"data.outliers.method must be one of {', '.join(OUTLIER_METHODS)}")
        if not 0 < self.target_share < 1:
            raise ValueError("data.outliers.target_share must be in (0, 1)")
        if self.gap is not None and self.gap < 1:
            raise ValueError("data.outliers.gap must be >= 1")


@dataclass(frozen=True)
class ValiFromTrain:
    """A vali split carved from train's QGs, for data published without one (``data.splits.vali``
    null): a seeded share of train's QGs, the same on every run, disjoint from what train keeps."""

    fraction: float | None = None  # share of train's QGs moved to vali; null: off
    seed: int = 0  # the carve's own seed (not the run's): every run and model sees one vali

    def __post_init__(self) -> None:
        if self.fraction is not None and not 0 < self.fraction < 1:
            raise ValueError("data.vali_from_train.fraction must be in (0, 1), or null (off)")


@dataclass(frozen=True)
class DataConfig:
    name: str = "synthetic"  # the data set; data=<name> loads configs/data/<name>.yaml
    path: str | None = None  # folder holding the split files (letor and presets)
    # letor: LETOR/SVMlight text files | arrays: a folder per split of .npy arrays (data=arrays)
    # | table: a Parquet file (or folder of parts) or an .npz of columns per split (data=table);
    # the formats: data/formats/ (`FORMATS`)
    format: str = "letor"
    qid: str = "qid"  # data=table: the column of query ids (rows in any order)
    label: str = "label"  # data=table: the column of relevance labels
    features: list[str] = field(default_factory=list)  # data=table: feature columns; []: all others
    # data=table: a column naming each row's split (its values: data.splits), all splits in the
    # folder's one table; null: a table per split
    split_column: str | None = None
    # File of each split inside `path` (vali null: no file, data.vali_from_train carves one);
    # ".txt" and ".txt.gz" are tried after the name itself.
    splits: dict[str, str | None] = field(default_factory=lambda: {s: s for s in SPLITS})
    vali_from_train: ValiFromTrain = field(default_factory=ValiFromTrain)
    # Features, fit on train: none | standardize | log1p | log1p-standardize | qg-standardize.
    transform: str = "log1p-standardize"
    clip: float | None = None  # after the transform, clip values to [-clip, clip]
    n_features: int | None = None  # expected feature count (checked when set)
    source: str = ""  # where the data set is published, for the missing-files message
    synthetic: SyntheticSpec = field(default_factory=SyntheticSpec)
    outliers: OutlierConfig = field(default_factory=OutlierConfig)
    # finetune combine's dropout on this data set (paper A.3.7); null: combine's own default
    combine_dropout: float | None = None

    def __post_init__(self) -> None:
        if self.transform not in TRANSFORMS:
            raise ValueError(f"data.transform must be one of {', '.join(TRANSFORMS)}")
        if set(self.splits) != set(SPLITS):
            raise ValueError(f"data.splits must name exactly {', '.join(SPLITS)}")
        if self.format not in FORMATS:
            raise ValueError(f"data.format must be one of {', '.join(FORMATS)}")
        if self.name in ("", ".", "..") or any(c in self.name for c in "/\\\0"):
            # It names a folder of the runs folder: '../x' or '/x' would write runs elsewhere.
            raise ValueError(
                f"data.name={self.name!r} must be a plain name (no '/', not '..'): it names the "
                "runs' folder inside the runs folder"
            )
        self._check_vali_source()
        if self.name == "synthetic" and self.path:  # it would be ignored: the data is generated
            raise ValueError(
                f"data.path={self.path}: the synthetic data set (the default) is generated and "
                "reads no files; read files with data=letor (or a preset, e.g. data=ohsumed, "
                "data=table) and data.path=<folder>"
            )
        self._check_sizes()
        # Last, so that a config with another error too is refused for that one, as before.
        self._check_format()

    @property
    def known_features(self) -> int:
        """The data's feature count where the config says it (the synthetic spec's, or a
        declared ``data.n_features``), else 1, the least: the size estimates' (`core.sizes`)."""
        if self.name == "synthetic":
            return self.synthetic.n_features
        return self.n_features or 1

    def _check_sizes(self) -> None:
        """Sizes beyond this machine's memory, refused before anything is generated or read
        (`core.sizes`): the synthetic data's items, the outlier histograms' bins."""
        if self.name == "synthetic":
            spec = self.synthetic
            groups = spec.n_train_groups + spec.n_vali_groups + spec.n_test_groups
            items = int(groups * spec.mean_group_size)
            keys = ("n_train_groups", "n_vali_groups", "n_test_groups", "n_features")
            what = f"the synthetic data ({items:,} items x {spec.n_features:,} features)"
            needed = items * spec.n_features * FLOAT32
            check_fits(largest("data.synthetic.", spec, keys), needed, what)
        if self.outliers.method == "histogram":
            histogram_fits(self.outliers.n_bins, self.known_features)

    def _check_format(self) -> None:
        """A format's key (`FORMATS`' options) set away from its default for a format that does
        not read it (or for the synthetic data, which reads no file) is an error naming the keys
        the chosen format reads, not a silent no-op; then the chosen format's own checks, and a
        file as ``data.path`` refused unless the format reads one (`DataFormat.one_file`)."""
        schema = {f.name: f for f in fields(self)}

        def changed(key: str) -> list[str]:
            value = getattr(self, key)
            return [] if value == field_default(schema[key]) else [f"data.{key}={value}"]

        if self.name == "synthetic":  # generated: it reads no file, nor a format's keys
            FORMATS.check_unread(
                [], changed, prefix="data.", made="data=synthetic", also_read=["data.synthetic.*"]
            )
            return
        FORMATS.check_unread(
            self.format, changed, prefix="data.", also_read=["data.path", "data.splits"]
        )
        chosen = FORMATS[self.format]
        chosen.options_of(self)
        if self.path and not chosen.one_file and Path(self.path).is_file():
            # UserError, not ValueError: the message stands as it is, with no config prefix.
            raise UserError(
                f"data.path={self.path}: a file; data={self.name} reads a folder holding its "
                "train, vali and test splits (give data.path=<that folder>)"
            )

    def _check_vali_source(self) -> None:
        """Exactly one source of vali QGs: a file (``data.splits.vali``) or the carve."""
        for split in ("train", "test"):
            if not self.splits[split]:
                raise ValueError(f"data.splits.{split} must name the {split} file")
        carve = self.vali_from_train.fraction is not None
        if carve and self.name == "synthetic":
            raise ValueError(
                "data.vali_from_train: the synthetic data set generates its own vali QGs"
            )
        if carve and self.splits["vali"]:
            raise ValueError(
                f"data.vali_from_train.fraction={self.vali_from_train.fraction:g} carves vali "
                f"from train's QGs, but data.splits.vali={self.splits['vali']} names a vali "
                "file: give one or the other (data.splits.vali=null to carve)"
            )
        if not carve and not self.splits["vali"]:
            raise ValueError(
                "data.splits.vali is null (no vali file): set data.vali_from_train.fraction="
                "<share of train's QGs> (and .seed) to carve vali from train, or name a vali file"
            )

    @property
    def run_name(self) -> str:
        """The data set's name in run folders and reports: ``data.name``, except that
        ``data=letor`` takes its folder's name (``letor-ohsumed-letor3``), so two folders read
        with ``data=letor`` never share (and refuse) one run folder; so does ``data=arrays``."""
        if self.name not in FORMATS or not self.path:
            return self.name
        parts = [p for p in Path(self.path).expanduser().resolve().parts if p not in ("/", "")]
        # A fold folder (Fold1) says little alone: keep its parent's name too.
        tail = parts[-2:] if parts and re.fullmatch(r"(?i)fold\d+", parts[-1]) else parts[-1:]
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(tail)).strip("_")
        return f"{self.name}-{slug}" if slug else self.name


def load_dataset(cfg: DataConfig) -> dict[str, RankingSplit]:
    """The raw (untransformed) train, vali and test splits, with one feature count."""
    return load_data(cfg).splits


def load_data(cfg: DataConfig) -> LoadedData:
    """`load_dataset` with the feature names and missing values of the files (`LoadedData`)."""
    if cfg.name == "synthetic":
        return LoadedData(_same_width(generate(cfg.synthetic), cfg))
    check_files(cfg)
    folder = _folder(cfg)
    # A split named null (vali, with data.vali_from_train) is carved from train below.
    files = {split: _find(cfg, folder, cfg.splits[split]) for split in SPLITS if cfg.splits[split]}
    return _with_vali(FORMATS[cfg.format].load(cfg, files), cfg)


def _with_vali(loaded: LoadedData, cfg: DataConfig) -> LoadedData:
    """The splits as read (and checked), vali carved from train where the data has none
    (``data.vali_from_train``), of one width. A carved vali's missing values stay counted in
    train's file, whose rows they are."""
    splits, files = dict(loaded.splits), loaded.files
    if "vali" not in splits:
        splits["train"], splits["vali"] = carve_vali(splits["train"], cfg, files["train"])
    return replace(loaded, splits=_same_width(splits, cfg, files))


def carve_vali(
    train: RankingSplit, cfg: DataConfig, path: Path | None = None
) -> tuple[RankingSplit, RankingSplit]:
    """``(train, vali)``: ``data.vali_from_train.fraction`` of train's QGs (rounded, at least one
    and one left), drawn by ``data.vali_from_train.seed`` alone, moved to vali; both keep the
    file's QG order."""
    carve = cfg.vali_from_train
    if train.n_groups < 2:
        raise UserError(
            f"{path or 'train'}: data.vali_from_train needs at least 2 train QGs to carve vali "
            f"from, the file holds {train.n_groups}"
        )
    n_vali = min(max(round(carve.fraction * train.n_groups), 1), train.n_groups - 1)
    chosen = np.random.default_rng(carve.seed).permutation(train.n_groups)[:n_vali]
    is_vali = np.zeros(train.n_groups, dtype=bool)
    is_vali[chosen] = True
    vali = train.subset(np.flatnonzero(is_vali))
    return train.subset(np.flatnonzero(~is_vali)), replace(vali, name="vali")


def check_files(cfg: DataConfig) -> None:
    """Raise the missing-files `UserError` of `load_dataset` without reading anything."""
    if cfg.name == "synthetic":
        return
    folder = _folder(cfg)
    what = FORMATS[cfg.format].pattern
    missing = [
        f"{folder / cfg.splits[s]}{what}"
        for s in SPLITS
        if cfg.splits[s] and _find(cfg, folder, cfg.splits[s]) is None
    ]
    if missing:
        raise UserError(_missing_message(cfg, folder, missing))


def split_file(cfg: DataConfig, split: str) -> Path | None:
    """The file holding ``split`` of a file-based data set (None: synthetic, no file named (a
    carved vali), or not found)."""
    if cfg.name == "synthetic" or not cfg.splits[split]:
        return None
    return _find(cfg, _folder(cfg), cfg.splits[split])


def _find(cfg: DataConfig, folder: Path, stem: str) -> Path | None:
    """A split's file, folder or table, as its format finds it (`DataFormat.find`)."""
    return FORMATS[cfg.format].find(cfg, folder, stem)


def _folder(cfg: DataConfig) -> Path:
    if cfg.path:
        return Path(cfg.path).expanduser()
    if cfg.name in FORMATS:  # the generic data sets, named after their format
        raise UserError(
            f"data={cfg.name} needs data.path=<folder holding train, vali and test "
            f"{FORMATS[cfg.format].kinds}>"
        )
    root = os.environ.get("LTR_DATA_DIR")
    if not root:
        raise UserError(
            f"data set '{cfg.name}': set LTR_DATA_DIR (the folder holding {cfg.name}/) "
            f"or data.path=<folder>; the data set is published at {cfg.source or 'its home page'}"
        )
    return Path(root).expanduser() / cfg.name


def _missing_message(cfg: DataConfig, folder: Path, missing: list[str]) -> str:
    lines = [f"data set '{cfg.name}': missing {FORMATS[cfg.format].kinds}:"]
    lines += [f"  {m}" for m in missing]
    hints = [
        f"data.splits.{split}={stem}"
        for split in SPLITS
        if cfg.splits[split] and _find(cfg, folder, cfg.splits[split]) is None
        for stem in _likely_files(folder, split, cfg.splits[split])[:1]
    ]
    if hints:
        lines.append(f"{folder} holds files that look like them; try {' '.join(hints)}")
    if cfg.source:
        lines.append(f"Download it from {cfg.source} and put the files there")
        lines.append(
            f"(or point data.path=<folder> elsewhere; LTR_DATA_DIR/{cfg.name} is the default)."
        )
    return "\n".join(lines)


# Other names a split's file goes by (valid.txt, dev.txt, ...).
SPLIT_ALIASES = {
    "train": ("training", "trn"),
    "vali": ("valid", "validation", "val", "dev", "development"),
    "test": ("testing", "tst", "eval"),
}


def _likely_files(folder: Path, split: str, expected: str) -> list[str]:
    """Files beside ``expected`` (the split's configured file) that may hold ``split``
    (``valid`` for vali), as ``data.splits`` values, best first."""
    where = Path(expected).parent
    if not (folder / where).is_dir():
        return []
    stems = {}
    for path in sorted((folder / where).iterdir()):
        if path.is_file():
            stem = re.sub(r"(\.txt)?(\.gz)?$", "", path.name)
            stems.setdefault(stem.lower(), (where / stem).as_posix())
    return [stems[alias] for alias in SPLIT_ALIASES[split] if alias in stems]


def _same_width(
    splits: dict[str, RankingSplit], cfg: DataConfig, files: dict | None = None
) -> dict[str, RankingSplit]:
    """Pad splits whose highest feature index is lower (absent features are 0).

    Sparse files leave out trailing zero features, so differing counts are legal; but a split
    holding features that train lacks may also be a file of another data set, so the padding
    is announced unless ``data.n_features`` declares the width.
    """
    import numpy as np

    width = max(s.n_features for s in splits.values())
    widths = {name: s.n_features for name, s in splits.items()}
    if cfg.n_features is None and len(set(widths.values())) > 1:
        where = files or {}
        found = ", ".join(f"{where.get(n, n)}: {w}" for n, w in widths.items())
        print(
            f"warning: data set '{cfg.name}': the splits' highest feature indices differ "
            f"({found}); the narrower ones are padded with zero features to {width} (set "
            f"data.n_features={width} to declare the width)",
            file=sys.stderr,
        )
    if cfg.n_features is not None:
        if width > cfg.n_features:
            raise UserError(
                f"data set '{cfg.name}': files hold {width} features, "
                f"data.n_features says {cfg.n_features}"
            )
        width = cfg.n_features
    out = {}
    for name, split in splits.items():
        if split.n_features < width:
            pad = np.zeros((split.n_items, width - split.n_features), dtype=np.float32)
            split = split.with_features(np.hstack([np.asarray(split.features), pad]))
        out[name] = split
    return out
