"""Where a training stage runs: one CPU, one CUDA GPU, or several processes under DDP.

``setup_runtime`` picks CUDA when present (bf16 autocast of training steps switchable with
``amp``), else the CPU,
and joins the process group that ``torchrun`` describes in its environment variables (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``): NCCL on CUDA, gloo on the CPU.
Every stage calls it once inside ``main()`` and ``close()`` at the end. `check_device` refuses
``device=cuda`` on a machine without CUDA when the config loads, before a run folder is made.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

from scarce_ltr.core.errors import UserError

DEVICES = ("auto", "cpu", "cuda")  # the ``device`` key of every training stage; auto: CUDA if any


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    amp: bool = False  # bf16 autocast of training steps on CUDA (`train_autocast`)
    cpu_amp: bool = False  # bf16 autocast of training steps on the CPU (`cpu_bf16_supported`)
    owns_process_group: bool = False  # this runtime joined the group, so it leaves it

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def train_autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast of training steps: on CUDA when ``amp`` is on, on the CPU when
        ``cpu_amp`` is; a no-op otherwise. Scoring (vali selection, SSL Val, test, bundles) runs
        in fp32 on every device, so a run's reported scores are those its bundle gives on a CPU."""
        if self.amp and self.device.type == "cuda":
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        if self.cpu_amp and self.device.type == "cpu":
            return torch.autocast(device_type="cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        """Sums of the given numbers over all ranks (the numbers themselves on one process)."""
        if not self.distributed:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=self._collective_device)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is True on at least one."""
        return self.all_reduce_sum([float(flag)])[0] > 0

    @property
    def _collective_device(self) -> torch.device:
        # NCCL reduces CUDA tensors only; gloo takes CPU tensors.
        return self.device if self.device.type == "cuda" else torch.device("cpu")

    def describe(self) -> str:
        name = str(self.device)
        if self.device.type == "cuda":
            name += f" ({torch.cuda.get_device_name(self.device)})"
        if self.distributed:
            name += f", rank {self.rank} of {self.world_size}"
        bf16 = (self.amp and self.device.type == "cuda") or self.cpu_amp
        return name + (", bf16 autocast in training" if bf16 else "")

    def close(self) -> None:
        if self.owns_process_group and dist.is_initialized():
            dist.destroy_process_group()


def cpu_bf16_supported() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX; oneDNN's own check)."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(torch.backends.mkldnn.is_available() and check is not None and check())


def devices_here() -> list[str]:
    """The torch devices of this machine: ``cpu``, then ``cuda`` (with its count) and ``mps``."""
    found = ["cpu"]
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        found.append("cuda" if count == 1 else f"cuda ({count} GPUs)")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps (not used by this tool)")
    return found


def check_device_choice(key: str, value: str) -> None:
    """`ValueError` naming ``key`` unless ``value`` is one of `DEVICES` (a config's own check;
    `check_device` asks the machine)."""
    if value not in DEVICES:
        raise ValueError(f"{key} must be one of {', '.join(DEVICES)}, got {value}")


def check_device(key: str, value: str | None) -> None:
    """`UserError` when ``key=value`` asks for CUDA and this machine has none, saying which
    devices there are (a CPU-only torch build says so too)."""
    if not value or not value.startswith("cuda") or torch.cuda.is_available():
        return
    build = "; this torch is a CPU-only build" if torch.version.cuda is None else ""
    raise UserError(
        f"{key}={value}: no CUDA device here (torch.cuda.is_available() is False{build}); "
        f"devices here: {', '.join(devices_here())}; give {key}=cpu or {key}=auto"
    )


def setup_runtime(*, amp: bool = True, device: str | None = None, cpu_amp: bool = False) -> Runtime:
    """The runtime of this process; joins the DDP group when ``WORLD_SIZE`` > 1.

    Args:
        amp: bf16 autocast on CUDA (ignored on the CPU).
        device: force ``"cpu"`` or ``"cuda"``; default CUDA when available.
        cpu_amp: bf16 autocast of training steps on the CPU (ignored on CUDA); refused on a CPU
            without native bf16, where it would be slower than fp32.
    """
    use_cuda = torch.cuda.is_available() if device is None else device.startswith("cuda")
    check_device("device", device)
    if cpu_amp and not use_cuda and not cpu_bf16_supported():
        raise UserError(
            "cpu_amp=true needs a CPU with native bf16 (AVX512-BF16 or AMX); this one has "
            "none, and emulated bf16 is slower than fp32: leave cpu_amp=false"
        )
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    owns = False
    if use_cuda and local_rank >= torch.cuda.device_count():
        raise UserError(
            f"process {local_rank} of this machine under torchrun wants GPU {local_rank}, but "
            f"it has {torch.cuda.device_count()}: start at most that many processes a machine "
            f"(--nproc-per-node), or give device=cpu"
        )
    if dist.is_available() and dist.is_initialized():
        world_size, rank = dist.get_world_size(), dist.get_rank()
    elif world_size > 1:
        if use_cuda:
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
        owns = True
    if use_cuda:
        torch.cuda.set_device(local_rank)
        target = torch.device("cuda", local_rank)
    else:
        target = torch.device("cpu")
    return Runtime(
        device=target,
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        amp=amp and use_cuda,
        cpu_amp=cpu_amp and not use_cuda,
        owns_process_group=owns,
    )


@contextlib.contextmanager
def runtime_scope(*, amp: bool = True) -> Iterator[Runtime]:
    """``setup_runtime`` as a context manager that leaves the process group at the end."""
    runtime = setup_runtime(amp=amp)
    try:
        yield runtime
    finally:
        runtime.close()
