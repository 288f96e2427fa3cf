"""The config of ``./run.sh baseline <name>``: common keys, the method, one section per family.

``configs/baseline/<name>.yaml`` sets ``method`` (equal to the file name) and the method's
defaults. A family of baselines keeps its own keys in a section of its own (``gbdt:`` for the
LightGBM ones); a new family adds a field here and a dataclass in its own module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from scarce_ltr.baselines.catboost.config import CatBoostOptions
from scarce_ltr.baselines.deep.config import DeepBaselineOptions
from scarce_ltr.baselines.gbdt.config import GBDTOptions
from scarce_ltr.baselines.hybrid.config import EmbeddingOptions
from scarce_ltr.baselines.xgboost.config import XGBoostOptions
from scarce_ltr.core.runs import RunIdentity, run_model
from scarce_ltr.data.stage_config import CommonConfig


@dataclass(frozen=True)
class BaselineConfig(CommonConfig):
    """Keys of every baseline run; ``method`` picks the entry in `baselines.run.BASELINES`."""

    method: str = "gbdt"
    gbdt: GBDTOptions = field(default_factory=GBDTOptions)
    catboost: CatBoostOptions = field(default_factory=CatBoostOptions)
    xgboost: XGBoostOptions = field(default_factory=XGBoostOptions)
    deep: DeepBaselineOptions = field(default_factory=DeepBaselineOptions)
    pretrained: str | None = None  # gbdt-ssl: a pretraining or finetuning run dir
    embedding: EmbeddingOptions = field(default_factory=EmbeddingOptions)  # gbdt-ssl

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.method:
            raise ValueError("method must name a baseline")
        if self.pretrained is not None and self.method != "gbdt-ssl":
            raise ValueError(f"pretrained is a key of gbdt-ssl, not of {self.method}")
        if self.method == "dasalc" and self.deep.hidden % self.deep.n_heads:
            raise ValueError(
                f"deep.n_heads ({self.deep.n_heads}) must divide deep.hidden ({self.deep.hidden})"
            )

    def identity(self) -> RunIdentity:
        """gbdt-ssl is named after its encoder's run (``gbdt-ssl+simclr-rank``), so that two
        encoders never share one folder."""
        model = self.method
        if self.method == "gbdt-ssl" and self.pretrained:
            encoder_model = run_model(self.pretrained) or Path(self.pretrained).name
            model = f"{self.method}+{encoder_model}"
        return RunIdentity(
            dataset=self.data.run_name,
            stage="baseline",
            model=model,
            setting=self.scarcity.tag,
            seed=self.seed,
        )
