"""The figures behind tests/test_cuda.py, measured rather than asserted, on a machine with a GPU.

Usage (from the project root, where CUDA is; ``benchmarks/gpu_checks.sh`` runs it)::

    python benchmarks/gpu_checks.py --out checks.json

* bf16 autocast against fp32: the loss of one fixed MSLR-shaped batch (32 QGs of up to 120 items,
  136 features, the paper's encoder) for every pretraining method, and the relative gap;
* determinism: a tiny pretraining run twice and once interrupted and resumed on the GPU, the
  largest weight difference of each against the first;
* deployment: a ranker pretrained and finetuned on the GPU (bf16 training steps) scored on the
  CPU by its bundle, against the test scores its run wrote: largest difference and the QGs whose
  order differs.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

PRETRAIN = ["data.synthetic.n_train_groups=30", "data.synthetic.n_vali_groups=10",
            "data.synthetic.n_test_groups=10", "data.synthetic.n_features=12", "logger=none",
            "encoder.width=8", "encoder.hidden=16", "encoder.n_blocks=1", "monitor.n_items=64",
            "device=cuda"]  # fmt: skip


def bf16_gaps() -> dict:
    from scarce_ltr.core.config import load_config
    from scarce_ltr.core.device import setup_runtime
    from scarce_ltr.pretrain.config import PretrainConfig
    from scarce_ltr.pretrain.objectives import OBJECTIVES, build_objective

    cuda = torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    sizes = torch.randint(5, 121, (32,), generator=gen)
    features = torch.randn(32, 120, 136, generator=gen).to(cuda)
    mask = (torch.arange(120)[None, :] < sizes[:, None]).to(cuda)
    runtime = setup_runtime(amp=True, device="cuda")
    gaps = {}
    for method in OBJECTIVES:
        torch.manual_seed(0)
        cfg, _ = load_config(PretrainConfig, [f"method={method}", "encoder.width=136",
                                              "encoder.dropout=0.0"])  # fmt: skip
        objective = build_objective(cfg, n_features=136).to(cuda).train()
        fp32 = objective(features, mask, generator=torch.Generator(cuda).manual_seed(1)).item()
        with runtime.train_autocast():
            bf16 = objective(features, mask, generator=torch.Generator(cuda).manual_seed(1)).item()
        gaps[method] = {"fp32": fp32, "bf16": bf16, "relative_gap": abs(bf16 - fp32) / abs(fp32)}
        gap = gaps[method]["relative_gap"]
        print(f"bf16 {method:14s} fp32 {fp32:.5f} bf16 {bf16:.5f} gap {gap:.2%}")
    return gaps


def _largest_difference(a: Path, b: Path) -> float:
    first = torch.load(a / "encoder.pt", weights_only=True)["state_dict"]
    second = torch.load(b / "encoder.pt", weights_only=True)["state_dict"]
    return max(float((first[k].float() - second[k].float()).abs().max()) for k in first)


def determinism(root: Path) -> dict:
    from scarce_ltr.cli import run
    from scarce_ltr.pretrain.train import CRASH_ENV, SimulatedCrash

    out = {}
    for method in ("simclr-rank", "simsiam"):
        args = [*PRETRAIN, "epochs=3", "item_budget=150", "encoder.dropout=0.2",
                "length_buckets=true"]  # fmt: skip
        folders = {name: root / method / name for name in ("first", "again", "resumed")}
        first = run(["pretrain", method, *args, f"run_dir={folders['first']}"])
        run(["pretrain", method, *args, f"run_dir={folders['again']}"])
        os.environ[CRASH_ENV] = str(first["history"][0]["steps"] + 2)
        try:
            run(["pretrain", method, *args, f"run_dir={folders['resumed']}"])
        except SimulatedCrash:
            pass
        del os.environ[CRASH_ENV]
        run(["pretrain", method, *args, f"run_dir={folders['resumed']}"])
        out[method] = {
            "rerun_largest_difference": _largest_difference(folders["first"], folders["again"]),
            "resumed_largest_difference": _largest_difference(folders["first"], folders["resumed"]),
        }
        print(f"determinism {method}: {out[method]}")
    return out


def deployment(root: Path) -> dict:
    import scarce_ltr
    from scarce_ltr.cli import run
    from scarce_ltr.core.config import load_config
    from scarce_ltr.data.datasets import load_dataset
    from scarce_ltr.data.stage_config import CommonConfig

    data = [a for a in PRETRAIN if a.startswith(("data.", "logger"))]
    run(["pretrain", "simclr-rank", *data, "encoder.width=16", "encoder.hidden=32",
         "epochs=2", "device=cuda", f"run_dir={root / 'pre'}"])  # fmt: skip
    run(["finetune", "full", *data, "epochs=3", "head_hidden=16", "device=cuda",
         f"pretrained={root / 'pre'}", f"run_dir={root / 'full'}"])  # fmt: skip
    cfg, _ = load_config(CommonConfig, data)
    test = load_dataset(cfg.data)["test"]
    on_cpu = scarce_ltr.load_ranker(root / "full").score_split(test)
    with np.load(root / "full" / "scores.npz") as saved:
        reported = saved["test"]
    reordered = sum(
        not np.array_equal(np.argsort(-on_cpu[a:b], kind="stable"),
                           np.argsort(-reported[a:b], kind="stable"))
        for a, b in zip(test.offsets[:-1], test.offsets[1:], strict=True)
    )  # fmt: skip
    out = {
        "largest_score_difference": float(np.abs(on_cpu - reported).max()),
        "score_scale": float(np.abs(reported).max()),
        "query_groups_reordered": int(reordered),
        "query_groups": int(test.n_groups),
    }
    print(f"deployment: {out}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("LTR_CACHE_DIR", str(Path(tmp) / "cache"))
        os.environ.setdefault("LTR_RUNS_DIR", str(Path(tmp) / "runs"))
        result = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
        for name, check in (("bf16", bf16_gaps), ("determinism", determinism),
                            ("deployment", deployment)):  # fmt: skip
            try:
                result[name] = check() if name == "bf16" else check(Path(tmp) / name)
            except Exception as error:  # noqa: BLE001 - report every check, whatever one does
                result[name] = {"error": f"{type(error).__name__}: {error}"}
                print(f"{name} failed: {error!r}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
