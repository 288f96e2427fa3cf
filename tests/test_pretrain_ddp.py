"""DDP on two CPU processes (gloo): the cross-rank gather and BatchNorm give the global batch's
values and gradients, and pretraining keeps every rank's parameters identical while the loss
falls."""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from tiny import tiny_pretraining
from torch.nn import functional as F

WORLD = 2
# Two CPU ranks over gloo, also on a machine with one GPU (auto would give rank 1 no device).
TINY = [*tiny_pretraining(), "epochs=3", "item_budget=100", "device=cpu"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reference_per_anchor(z0: torch.Tensor, z1: torch.Tensor, tau: float) -> torch.Tensor:
    n = len(z0)
    z = F.normalize(torch.cat([z0, z1]), dim=-1)
    logits = (z @ z.T / tau).fill_diagonal_(float("-inf"))
    rows = torch.arange(2 * n)
    return torch.logsumexp(logits, 1) - logits[rows, (rows + n) % (2 * n)]


def _check_gather(rank: int) -> None:
    from scarce_ltr.pretrain.objectives.simclr import simclr_loss

    gen = torch.Generator().manual_seed(0)
    z0_all, z1_all = torch.randn(10, 4, generator=gen), torch.randn(10, 4, generator=gen)
    part = slice(0, 4) if rank == 0 else slice(4, 10)  # ranks hold different numbers of rows
    z0 = z0_all[part].clone().requires_grad_(True)
    simclr_loss(z0, z1_all[part], temperature=0.5).backward()
    # The global objective: mean over ranks of each rank's mean over items of l^0 + l^1.
    ref0 = z0_all.clone().requires_grad_(True)
    per_anchor = _reference_per_anchor(ref0, z1_all, 0.5)
    ranks = [slice(0, 4), slice(4, 10)]
    means = [(per_anchor[:10][s] + per_anchor[10:][s]).mean() for s in ranks]
    (sum(means) / WORLD).backward()
    # DDP then averages over ranks, so each rank holds WORLD times its share.
    torch.testing.assert_close(z0.grad, WORLD * ref0.grad[part], atol=1e-5, rtol=1e-4)


def _check_batchnorm(rank: int) -> None:
    from scarce_ltr.core.collectives import sync_batchnorm

    gen = torch.Generator().manual_seed(1)
    x_all = 3 * torch.randn(9, 5, generator=gen) + 1
    part = slice(0, 3) if rank == 0 else slice(3, 9)
    synced = sync_batchnorm(torch.nn.Sequential(torch.nn.BatchNorm1d(5)), torch.device("cpu"))
    plain = torch.nn.BatchNorm1d(5)
    torch.testing.assert_close(synced(x_all[part]), plain(x_all)[part], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(synced[0].running_var, plain.running_var, atol=1e-5, rtol=1e-4)


def _worker(rank: int, port: int, out: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(WORLD),
        WANDB_MODE="disabled",
    )
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        _check_gather(rank)
        _check_batchnorm(rank)
        from scarce_ltr.core.config import CONFIG_ROOT, load_config
        from scarce_ltr.core.runs import Run
        from scarce_ltr.pretrain.config import PretrainConfig
        from scarce_ltr.pretrain.train import pretrain

        results = []

        def main(cfg, run):  # the stage's main, keeping the objective to compare
            results.append(pretrain(cfg, run))
            return results[-1].outcome

        for method in ("simsiam", "simclr"):
            stage_file = CONFIG_ROOT / "pretrain" / f"{method}.yaml"
            cfg, resolved = load_config(PretrainConfig, TINY, stage_file=stage_file)
            run = Run.of(cfg, cfg.identity(), os.path.join(out, method))
            # every rank: rank 0 checks and writes the folder, and alone finishes the run
            report = run.execute(main, cfg, resolved)
            state = results[-1].objective.state_dict()
            torch.save(state, os.path.join(out, f"{method}-{rank}.pt"))
            if rank == 0:
                torch.save(report["loss_curve"], os.path.join(out, f"{method}-loss.pt"))
    finally:
        dist.destroy_process_group()


def test_two_process_ddp_pretraining(tmp_path):
    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    for method in ("simsiam", "simclr"):
        states = [
            torch.load(tmp_path / f"{method}-{r}.pt", weights_only=True) for r in range(WORLD)
        ]
        for key, value in states[0].items():
            if key.endswith("num_batches_tracked") or "running" in key:
                continue
            assert torch.equal(value, states[1][key]), (method, key)
        losses = torch.load(tmp_path / f"{method}-loss.pt", weights_only=True)
        assert len(losses) == 3 and losses[-1] < losses[0], (method, losses)
        assert (tmp_path / method / "DONE").is_file()
