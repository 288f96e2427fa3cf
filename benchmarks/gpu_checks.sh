#!/usr/bin/env bash
# The GPU checks in one command, on a lent NVIDIA machine (benchmarks/LOG.md, "The CUDA path"): its
# own python3 holds torch; the project's other needs travel as wheels in .whl/ (made here with
# `pip download --python-version 3.12 ...`, the list in benchmarks/LOG.md). Each step has its own time
# limit and leaves its log in $OUT, so one slow step costs no other's figures.
set -u
OUT=${OUT:-/tmp/gpu-checks}
mkdir -p "$OUT" /tmp/pkg
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
ln -sfn "$PWD" /tmp/pkg/scarce_ltr  # the repository root is the package
export PYTHONPATH=/tmp/pkg:/tmp/site PYTHONUNBUFFERED=1 WANDB_MODE=disabled
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())'
timeout -s INT 80 python3 -m pytest -m cuda -n 0 -p no:cacheprovider -rA tests/test_cuda.py \
    >"$OUT/pytest-cuda.log" 2>&1
tail -5 "$OUT/pytest-cuda.log"
timeout -s INT 70 python3 benchmarks/gpu_checks.py --out "$OUT/checks.json" 2>&1 | tail -20
timeout -s INT 190 python3 benchmarks/bench_pretrain.py --device cuda --out "$OUT/bench.json" \
    2>&1 | tee "$OUT/bench.log"
timeout -s INT "${SUITE_SECONDS:-150}" python3 -m pytest -n 14 -p no:cacheprovider -m "not cuda" \
    --ignore=tests/test_ray_sweep.py -rfE >"$OUT/suite.log" 2>&1
tail -40 "$OUT/suite.log"
