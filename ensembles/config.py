"""The config of ``./run.sh ensemble runs=[<run>,<run>,...] [key=value ...]``.

The data, label setting and seed keys are those of every stage and must match the member runs
(`ensembles.ensemble` checks and names the key to pass when they do not).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from scarce_ltr.core.run_identity import RunIdentity
from scarce_ltr.core.runs import run_model
from scarce_ltr.data.stage_config import CommonConfig
from scarce_ltr.ensembles.score_fusion import NORMALIZERS, grid_size
from scarce_ltr.models.names import ENSEMBLE, STACK, TOPK, ModelName

WEIGHTINGS = ("grid", "uniform", "crossfit", "topk")
# The options that make an ensemble the sweep model of each learned mix
# (``stack:<model>,...``, ``topk:<model>,...``; `EnsembleConfig.mix_kind`).
MIX_OPTIONS = {
    STACK: ("normalize=rank", "weights=crossfit"),
    TOPK: ("normalize=rank", "weights=topk"),
}
MAX_WEIGHT_VECTORS = 20000  # each one is scored on vali


@dataclass(frozen=True)
class EnsembleConfig(CommonConfig):
    runs: list[str] = field(default_factory=list)  # finished finetuning / baseline / ensemble runs
    normalize: str = "zscore"  # rank | zscore: within each QG, before mixing
    # grid: simplex grid, chosen on vali NDCG@5 | uniform: plain average | crossfit: the grid
    # chosen fold by fold over the vali QGs, reporting the cross-fitted vali NDCG@5 | topk:
    # the plain average of the vali-best k runs, k cross-fitted over the vali QGs
    weights: str = "grid"
    step: float = 0.1  # grid, crossfit: weights are multiples of step summing to 1
    crossfit_folds: int = 5  # crossfit, topk: folds of the labeled vali QGs (at most one per QG)

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.runs) < 2:
            raise ValueError("an ensemble needs runs=[<run dir>,<run dir>,...] (two or more)")
        if self.normalize not in NORMALIZERS:
            raise ValueError(f"normalize must be one of {', '.join(NORMALIZERS)}")
        if self.weights not in WEIGHTINGS:
            raise ValueError(f"weights must be one of {', '.join(WEIGHTINGS)}")
        if isinstance(self.crossfit_folds, bool) or self.crossfit_folds < 2:
            raise ValueError(f"crossfit_folds must be 2 or more, got {self.crossfit_folds}")
        steps = 1.0 / self.step if 0 < self.step <= 1 else 0.0
        if steps < 1 or abs(steps - round(steps)) > 1e-6:
            raise ValueError(f"step must be 1/n for a whole n (0.1, 0.25, 0.5), got {self.step}")
        n_vectors = grid_size(len(self.runs), self.step)
        if self.weights in ("grid", "crossfit") and n_vectors > MAX_WEIGHT_VECTORS:
            raise ValueError(
                f"step={self.step} gives {n_vectors} weight vectors for {len(self.runs)} runs "
                f"(at most {MAX_WEIGHT_VECTORS}); raise step"
            )

    @property
    def mix_kind(self) -> str:
        """The kind of mix its model name says: ``stack`` or ``topk`` for the options of
        `MIX_OPTIONS`, else ``ensemble``."""
        options = (f"normalize={self.normalize}", f"weights={self.weights}")
        return next((kind for kind, o in MIX_OPTIONS.items() if o == options), ENSEMBLE)

    def identity(self) -> RunIdentity:
        """``ensemble:<member model>,...`` (``stack:...``, ``topk:...`` for those mixes); every
        ensemble keeps its runs in ``ensemble/``."""
        members = [ModelName.parse(run_model(run) or Path(run).name) for run in self.runs]
        model = ModelName(self.mix_kind, parts=tuple(members))
        return RunIdentity(
            dataset=self.data.run_name,
            stage="ensemble",
            model=str(model),
            setting=self.scarcity.tag,
            seed=self.seed,
            group=model.group(strict=False),
            folder_name="ensemble",
        )
