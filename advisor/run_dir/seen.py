"""What the probe saw of the script and its machine, typed for its readers (the rules read these,
never the account's dicts): the environment (:class:`Env`), the objects the script built
(:class:`Observed`: its optimizers, DataLoaders, ``zero_grad`` calls) and the window's memory
(:class:`MemoryAccount`). The child writes them into probe.json (``advisor/probe/env.py``,
``hooks.py``, ``memory.py``); a trace read without the probe leaves them empty, and every field then
has its default: unknown (None), or what PyTorch's own default is.

:meth:`Said.read` reads one from its dict, once (the Profile holds it typed): a field whose value is
not of its type is left unknown, never the whole description (a run from another version of advise
still reads), and :meth:`Said.record` writes it back as it was read (report.json's ``env`` and
``observed`` blocks).
"""

from __future__ import annotations

from typing import Any, Optional, TypeVar

import msgspec


class Said(msgspec.Struct, kw_only=True, dict=True):
    """A part of probe.json, typed: read once (:meth:`read`, from any version's dict), written back as it
    was said (:meth:`record`: the keys read, in their order, unknown and mistyped ones included; a field
    set since replaces its value, a field given a value since is added). Built by the child with
    :meth:`given`: its record holds the fields given, in their declared order."""

    @classmethod
    def read(cls: type[S], data: Any) -> S:
        """`data` (a dict from probe.json) as `cls`; a field of the wrong type is left at its default."""
        if isinstance(data, cls):
            return data
        data = data if isinstance(data, dict) else {}
        out = _convert(cls, data)
        out.__dict__["_said"] = (data, msgspec.to_builtins(out))
        return out

    @classmethod
    def given(cls: type[S], **fields: Any) -> S:
        """The child's account: `fields` alone are said (the others keep their defaults, unsaid)."""
        out = cls(**fields)
        now = msgspec.to_builtins(out)
        names = {f.name: f.encode_name for f in msgspec.structs.fields(cls)}
        said = {names[name] for name in fields}
        out.__dict__["_said"] = ({k: v for k, v in now.items() if k in said}, now)
        return out

    def record(self) -> dict:
        """The dict probe.json and report.json hold (see the class)."""
        now = msgspec.to_builtins(self)
        said = self.__dict__.get("_said")
        if said is None:
            return now
        raw, then = said
        out = {key: now[key] if key in now and now[key] != then.get(key) else value for key, value in raw.items()}
        out.update((key, value) for key, value in now.items() if key not in raw and value != then.get(key))
        return out

    def __reduce__(self):  # a pickled copy (a forked reader's) keeps what was said
        return _restore, (type(self), msgspec.structs.asdict(self), self.__dict__.get("_said"))

    def __copy__(self):
        return _restore(type(self), msgspec.structs.asdict(self), self.__dict__.get("_said"))


def _restore(cls: type[S], fields: dict, said: Any) -> S:
    out = cls(**fields)
    if said is not None:
        out.__dict__["_said"] = said
    return out


S = TypeVar("S", bound=Said)


def _convert(cls: type[S], data: dict) -> S:
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


class Env(Said, kw_only=True):
    """The run's machine and PyTorch settings (probe/env.py writes them in this order; a trace's
    metadata, :func:`advisor.profile.env_from_trace`, without the probe)."""

    python: Optional[str] = None
    torch: Optional[str] = None  # torch.__version__
    cuda: Optional[str] = None  # torch.version.cuda
    platform: Optional[str] = None
    hostname: Optional[str] = None
    cpu_count: Optional[int] = None
    cpu_usable: Optional[int] = None  # the cores the affinity mask allows
    physical_cores: Optional[int] = None
    torch_threads: Optional[int] = None
    device: str = "cpu"
    device_name: Optional[str] = None
    device_capability: Any = None  # "8.0" on CUDA
    device_memory_bytes: Optional[int] = None  # the GPU's, or the host's RAM on a CPU
    float32_matmul_precision: Optional[str] = None
    cudnn_benchmark: Optional[bool] = None
    cuda_matmul_allow_tf32: Optional[bool] = None
    cudnn_allow_tf32: Optional[bool] = None
    bf16_supported: Optional[bool] = None
    cuda_alloc_conf: Optional[str] = None  # PYTORCH_CUDA_ALLOC_CONF as the script started with it
    rank: Optional[int] = None
    local_rank: Optional[int] = None
    world_size: Optional[int] = None
    local_world_size: Optional[int] = None  # the ranks sharing this node's cores
    node: Optional[int] = None  # the node's rank (a launched job)
    cudnn: Optional[int] = None  # torch.backends.cudnn.version() (CUDA)
    device_count: Optional[int] = None  # a trace's devices
    hip: Optional[str] = None  # ROCm's version


class OptimizerSeen(msgspec.Struct, kw_only=True):
    cls: str = msgspec.field(name="class", default="?")
    fused: Optional[bool] = None  # as constructed: None lets torch choose
    foreach: Optional[bool] = None
    n_params: int = 0
    n_elements: int = 0
    device: Optional[str] = None  # its first parameter's
    param_dtype: Optional[str] = None
    built_at: Optional[dict] = None  # the user's line that built it (advisor.probe.hooks.built_at)


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
    built_at: Optional[dict] = None


class ZeroGradSeen(msgspec.Struct, kw_only=True):
    calls: int = 0
    kept: int = 0  # calls with set_to_none=False
    cls: Optional[str] = msgspec.field(name="class", default=None)  # the first caller's class


class Observed(Said, kw_only=True):
    """What the script built and did, as the probe's hooks saw it (hooks.Observed)."""

    device: str = "cpu"
    loss_dtype: Optional[str] = None
    zero_grad: dict[str, ZeroGradSeen] = {}  # by who called it: "Optimizer" or "Module"
    optimizers: list[OptimizerSeen] = []
    dataloaders: list[LoaderSeen] = []
    framework: Optional[dict] = None  # the framework that steps (advisor.probe.framework.detect)

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


class MemoryAccount(Said, kw_only=True):
    """The memory half of probe.json: the window's peak and its basis, the budget, the tensors."""

    peak_allocated_bytes: Optional[int] = None  # CUDA: torch.cuda.max_memory_allocated
    peak_reserved_bytes: Optional[int] = None
    device_total_bytes: Optional[int] = None
    device_free_bytes: Optional[int] = None
    error: Optional[str] = None  # what could not be read
    peak_memory_bytes: Optional[int] = None
    memory_basis: Optional[str] = None
    peak_rss_hwm_bytes: Optional[int] = None
    runtime_bytes: Optional[int] = None  # the interpreter's own, in an RSS peak
    budget_bytes: Optional[int] = None
    budget_source: Optional[str] = None  # option (--memory-budget), else the device
    tensors: dict[str, int] = {}  # parameters_bytes, gradients_bytes, optimizer_state_bytes, live_gradients_bytes
    checkpointable: Optional[Checkpointable] = None


def typed(cls: type[S], data: Any) -> S:
    """`data` (a dict from probe.json) as `cls` (:meth:`Said.read`)."""
    return cls.read(data)
