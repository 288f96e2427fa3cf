"""Several search trials in one pass (`torch.func.vmap` over stacked models) against one at a
time: CPU ms per model and train step (issue 47's suggestion; measured, not kept).

Each of N models is a finetuned ResNet's size as a plain MLP (45 -> 128, three 128 -> 256 -> 128
blocks, a scalar head; same shapes, which stacking needs: a search's trials differ in head width,
so only their encoders could be stacked), one forward and backward on its own batch of
``items`` items, with a squared loss. One thread, CPU seconds (``time.process_time``), the
median of 5 interleaved rounds of 10 steps.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_stacked_trials.py [--models 4]
        [--items 200 1000]
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, stack_module_state, vmap


def mlp() -> nn.Sequential:
    sizes = [45, 128, 256, 128, 256, 128, 256, 128]
    layers: list[nn.Module] = []
    for a, b in zip(sizes, sizes[1:], strict=False):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(128, 1))


def per_model_ms(n_models: int, items: int) -> dict[str, float]:
    torch.manual_seed(0)
    models = [mlp() for _ in range(n_models)]
    x, y = torch.randn(n_models, items, 45), torch.randn(n_models, items, 1)

    def one_at_a_time() -> None:
        for model, xi, yi in zip(models, x, y, strict=True):
            model.zero_grad()
            (model(xi) - yi).square().mean().backward()

    params, buffers = stack_module_state(models)
    skeleton = copy.deepcopy(models[0]).to("meta")

    def loss(p, b, xi, yi):
        return (functional_call(skeleton, (p, b), (xi,)) - yi).square().mean()

    gradients = vmap(grad(loss))

    def stacked() -> None:
        gradients(params, buffers, x, y)

    runs = {"one at a time": one_at_a_time, "stacked (vmap)": stacked}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():
        fn()
    for _ in range(5):
        for name, fn in runs.items():
            start = time.process_time()
            for _ in range(10):
                fn()
            times[name].append((time.process_time() - start) / 10 / n_models * 1e3)
    return {name: float(np.median(values)) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=4)
    parser.add_argument("--items", type=int, nargs="+", default=[200, 1000])
    args = parser.parse_args()
    torch.set_num_threads(1)
    for items in args.items:
        result = per_model_ms(args.models, items)
        line = ", ".join(f"{name} {ms:.1f}" for name, ms in result.items())
        print(f"{args.models} models, {items} items: CPU ms per model-step: {line}")


if __name__ == "__main__":
    main()
