"""Collectives that keep gradients, for objectives that look across ranks under DDP.

- `gather_with_grad`: rows of every rank, concatenated in rank order, ranks may hold different
  numbers of rows. The backward pass sums every rank's gradient of this rank's rows, so with DDP's
  averaging of parameter gradients the result is the gradient of the mean of the ranks' losses
  (the batch-wide loss seen from all ranks), not just of the local part.
- `sync_batchnorm`: BatchNorm layers whose statistics cover the whole global batch. CUDA uses
  ``nn.SyncBatchNorm``; elsewhere (gloo on CPU, which ``nn.SyncBatchNorm`` refuses)
  `AllReduceBatchNorm1d` does the same with two all-reduces.
Both are plain pass-throughs when no process group is running.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class _AllReduceSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        out = tensor.clone()
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        # out = sum_r in_r on every rank, so d(sum_r loss_r)/d in = sum_r grad_r.
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum over ranks, differentiable; ``tensor`` itself on a single process."""
    return _AllReduceSum.apply(tensor) if _distributed() else tensor


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows: torch.Tensor, sizes: list[int]) -> torch.Tensor:  # type: ignore[override]
        # all_gather needs equal shapes: pad every rank's rows to the largest count.
        padded = rows.new_zeros((max(sizes), *rows.shape[1:]))
        padded[: rows.shape[0]] = rows
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded)
        ctx.sizes, ctx.rank = sizes, dist.get_rank()
        return torch.cat([part[:size] for part, size in zip(parts, sizes, strict=True)])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        start = sum(ctx.sizes[: ctx.rank])
        return grad[start : start + ctx.sizes[ctx.rank]], None


def gather_with_grad(rows: torch.Tensor) -> tuple[torch.Tensor, int]:
    """All ranks' ``rows`` (``[n_r, ...]`` each) concatenated, and where this rank's rows start.

    Returns:
        ``([sum_r n_r, ...], offset)``; ``(rows, 0)`` on a single process.
    """
    if not _distributed():
        return rows, 0
    count = torch.tensor([rows.shape[0]], device=rows.device)
    counts = [torch.zeros_like(count) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, count)
    sizes = [int(c.item()) for c in counts]
    return _GatherRows.apply(rows, sizes), sum(sizes[: dist.get_rank()])


class AllReduceBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d over ``[N, C]`` whose training statistics span every rank's rows.

    Same parameters and buffers as ``nn.BatchNorm1d`` (checkpoints load into either). Used where
    ``nn.SyncBatchNorm`` is unavailable (CPU processes joined by gloo).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and _distributed()):
            return super().forward(x)
        n = torch.tensor([float(x.shape[0])], device=x.device, dtype=torch.float32)
        xf = x.float()
        stats = all_reduce_sum(torch.cat([n, xf.sum(0), (xf * xf).sum(0)]))
        count = stats[0]
        mean = stats[1 : 1 + x.shape[1]] / count
        var = (stats[1 + x.shape[1] :] / count - mean * mean).clamp(min=0.0)
        if self.track_running_stats and self.running_mean is not None:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                momentum = self.momentum if self.momentum is not None else 0.1
                unbiased = var * count / (count - 1).clamp(min=1.0)
                self.running_mean.lerp_(mean.detach().to(self.running_mean.dtype), momentum)
                self.running_var.lerp_(unbiased.detach().to(self.running_var.dtype), momentum)
        out = (xf - mean) * torch.rsqrt(var + self.eps)
        if self.affine:
            out = out * self.weight + self.bias
        return out.to(x.dtype)


def sync_batchnorm(module: nn.Module, device: torch.device) -> nn.Module:
    """``module`` with every BatchNorm1d synchronised across ranks (unchanged on one process)."""
    if not _distributed():
        return module
    if device.type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(module)
    return _convert_cpu(module)


def _convert_cpu(module: nn.Module) -> nn.Module:
    if type(module) is nn.BatchNorm1d:
        new = AllReduceBatchNorm1d(
            module.num_features,
            eps=module.eps,
            momentum=module.momentum,
            affine=module.affine,
            track_running_stats=module.track_running_stats,
        )
        new.load_state_dict(module.state_dict())
        new.train(module.training)
        return new
    for name, child in module.named_children():
        module.add_module(name, _convert_cpu(child))
    return module
