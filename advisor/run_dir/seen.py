"""What the probe saw of the script and its machine, typed for its readers (the rules read these,
never the account's dicts): the environment (:class:`Env`), the objects the script built
(:class:`Observed`: its optimizers, DataLoaders, ``zero_grad`` calls) and the window's memory
(:class:`MemoryAccount`). The child writes them into probe.json (``advisor/probe/env.py``,
``hooks.py``, ``memory.py``); a trace read without the probe leaves them empty, and every field then
has its default: unknown (None), or what PyTorch's own default is.

:func:`typed` reads one from its dict: a field whose value is not of its type is left unknown,
never the whole description (a run from another version of advise still reads).
"""

from __future__ import annotations

from typing import Any, Optional, TypeVar

import msgspec


class Env(msgspec.Struct, kw_only=True):
    """The run's machine and PyTorch settings (probe/env.py; a trace's metadata without the probe)."""

    device: str = "cpu"
    device_name: Optional[str] = None
    device_capability: Any = None  # "8.0" on CUDA
    device_memory_bytes: Optional[int] = None  # the GPU's, or the host's RAM on a CPU
    hip: Optional[str] = None  # ROCm's version
    bf16_supported: Optional[bool] = None
    cudnn_benchmark: Optional[bool] = None
    cudnn_allow_tf32: Optional[bool] = None
    cuda_matmul_allow_tf32: Optional[bool] = None
    float32_matmul_precision: Optional[str] = None
    cuda_alloc_conf: Optional[str] = None  # PYTORCH_CUDA_ALLOC_CONF as the script started with it
    cpu_count: Optional[int] = None
    cpu_usable: Optional[int] = None  # the cores the affinity mask allows
    physical_cores: Optional[int] = None
    torch_threads: Optional[int] = None
    world_size: Optional[int] = None
    local_world_size: Optional[int] = None  # the ranks sharing this node's cores
    torch: Optional[str] = None  # torch.__version__


class OptimizerSeen(msgspec.Struct, kw_only=True):
    cls: str = msgspec.field(name="class", default="?")
    fused: Optional[bool] = None  # as constructed: None lets torch choose
    foreach: Optional[bool] = None
    n_params: int = 0
    n_elements: int = 0
    device: Optional[str] = None  # its first parameter's
    param_dtype: Optional[str] = None


class LoaderSeen(msgspec.Struct, kw_only=True):
    num_workers: int = 0
    pin_memory: bool = False
    batch_size: Optional[int] = None
    persistent_workers: bool = False
    prefetch_factor: Optional[int] = None
    dataset: Optional[str] = None  # its class
    dataset_len: Optional[int] = None
    iterable: bool = False
    batched: bool = True
    worker_start: Optional[str] = None


class ZeroGradSeen(msgspec.Struct, kw_only=True):
    calls: int = 0
    kept: int = 0  # calls with set_to_none=False


class Observed(msgspec.Struct, kw_only=True):
    """What the script built and did, as the probe's hooks saw it (hooks.Observed)."""

    device: str = "cpu"
    loss_dtype: Optional[str] = None
    optimizers: list[OptimizerSeen] = []
    dataloaders: list[LoaderSeen] = []
    zero_grad: dict[str, ZeroGradSeen] = {}  # by who called it: "Optimizer" or "Module"

    @property
    def max_workers(self) -> int:
        """The most workers any of the script's DataLoaders has."""
        return max((dl.num_workers for dl in self.dataloaders), default=0)


class Checkpointable(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What activation checkpointing would wrap (probe/memory.py)."""

    how: str  # blocks | gradient_checkpointing_enable
    model: Optional[str] = None
    path: Optional[str] = None
    blocks: int = 0
    block: Optional[str] = None


class MemoryAccount(msgspec.Struct, kw_only=True):
    """The memory half of probe.json: the window's peak and its basis, the budget, the tensors."""

    peak_memory_bytes: Optional[float] = None
    memory_basis: Optional[str] = None
    peak_rss_hwm_bytes: Optional[int] = None
    runtime_bytes: Optional[int] = None  # the interpreter's own, in an RSS peak
    budget_bytes: Optional[int] = None
    budget_source: Optional[str] = None  # option (--memory-budget), else the device
    device_total_bytes: Optional[int] = None
    peak_allocated_bytes: Optional[int] = None
    peak_reserved_bytes: Optional[int] = None
    tensors: dict[str, int] = {}  # parameters_bytes, gradients_bytes, optimizer_state_bytes, live_gradients_bytes
    checkpointable: Optional[Checkpointable] = None


T = TypeVar("T", bound=msgspec.Struct)


def typed(cls: type[T], data: Any) -> T:
    """`data` (a dict from probe.json) as `cls`; a field of the wrong type is left at its default."""
    data = data if isinstance(data, dict) else {}
    try:
        return msgspec.convert(data, cls, strict=False)
    except msgspec.ValidationError:
        names = {f.encode_name for f in msgspec.structs.fields(cls)}
        good = {}
        for key, value in data.items():
            if key in names:
                try:
                    msgspec.convert({key: value}, cls, strict=False)
                    good[key] = value
                except msgspec.ValidationError:
                    pass
        return msgspec.convert(good, cls, strict=False)
