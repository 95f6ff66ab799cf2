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

import os
from typing import Annotated, Any, Optional, TypeVar, Union

import msgspec
from msgspec import Meta


class Said(msgspec.Struct, kw_only=True, dict=True):
    """A part of probe.json, typed: read once (:meth:`read`, from any version's dict), written back as it
    was said (:meth:`record`: the keys read, in their order, unknown and mistyped ones included; a field
    set since replaces its value, a field given a value since is added). Built by the child with
    :meth:`given`: its record holds the fields given, in their declared order."""

    @classmethod
    def read(cls: type[S], data: object) -> S:
        """`data` (a dict from probe.json) as `cls`; a field of the wrong type is left at its default."""
        if isinstance(data, cls):
            return data
        data = data if isinstance(data, dict) else {}
        out = _convert(cls, data)
        out.__dict__["_said"] = (data, msgspec.to_builtins(out))
        return out

    @classmethod
    def given(cls: type[S], **fields: object) -> S:
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

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:  # a pickled copy (a forked reader's) keeps what was said
        return _restore, (type(self), msgspec.structs.asdict(self), self.__dict__.get("_said"))

    def __copy__(self: S) -> S:
        return _restore(type(self), msgspec.structs.asdict(self), self.__dict__.get("_said"))


def _restore(cls: type[S], fields: dict, said: object) -> S:
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
    """The machine and the torch build the script ran on (probe/env.py writes them in this order; a
    trace's metadata, :func:`advisor.profile.env_from_trace`, without the probe)."""

    python: Optional[str] = None
    torch: Optional[str] = None  # torch.__version__
    cuda: Optional[str] = None  # torch.version.cuda
    platform: Optional[str] = None
    hostname: Optional[str] = None
    cpu_count: Optional[int] = None
    cpu_usable: Annotated[Optional[int], Meta(description="the CPUs the script's process may run on (its affinity mask: a "
                                                          "cgroup, taskset, srun --cpu-bind)")] = None
    physical_cores: Optional[int] = None
    torch_threads: Optional[int] = None
    device: str = "cpu"
    device_name: Optional[str] = None
    device_capability: Annotated[Union[list[int], str, None], Meta(
        description="\"8.0\" from the probe and a trace's deviceProperties ([major, minor] in older reports)")] = None
    device_memory_bytes: Optional[int] = None  # the GPU's, or the host's RAM on a CPU
    float32_matmul_precision: Optional[str] = None
    cudnn_benchmark: Optional[bool] = None
    cuda_matmul_allow_tf32: Optional[bool] = None
    cudnn_allow_tf32: Optional[bool] = None
    bf16_supported: Optional[bool] = None
    cuda_alloc_conf: Annotated[Optional[str], Meta(description="PYTORCH_CUDA_ALLOC_CONF as the script started with it")] = None
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


class SourceSite(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A line of the user's code and what was called there during the captured step; the fields
    after `count` are the category's (absent where it has none)."""

    file: str
    line: int
    function: str
    op: str  # what was called there (``aten::mm``, ``.to()``, ``DataLoader fetch``), or the class built there
    count: int
    device: Optional[str] = None  # host-sync, matmul, h2d-copy: the tensor's (the copy's target)
    dtype: Optional[str] = None  # matmul: the dtype it ran in (autocast's where it was on)
    pinned: Optional[bool] = None  # h2d-copy: the source's pin state
    non_blocking: Optional[bool] = None  # h2d-copy
    params: Optional[int] = None  # model-call: the module's parameter count
    via: Optional[str] = None  # *-built: the library function the object was built inside


class Sources(msgspec.Struct, kw_only=True):
    """sources.json: where in the user's code each thing a rule or a fix names happens, by category
    (host-sync, matmul, h2d-copy, dataloader, model-call, backward, dataloader-built, optimizer-built),
    most calls first. Written by the probe over one warm-up step (advisor/probe/sources.py), or
    derived from a trace's Python frames (:func:`advisor.analysis.sources.from_trace`)."""

    captured_by: str = ""
    precision: str = "line"  # line (the probe's) or function (a trace's frames name where a function starts)
    step_s: Optional[float] = None
    skipped: Optional[str] = None  # why the probe did not record the step's lines
    sites: dict[str, list[SourceSite]] = {}
    main: Optional[str] = None  # the script's own file

    def rows(self, category: str) -> list[SourceSite]:
        return self.sites.get(category, [])

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Sources | None":
        """A run dir's sources.json, or None when the probe wrote none (or it is unreadable)."""
        try:
            with open(path, "rb") as f:
                return msgspec.json.decode(f.read(), type=cls)
        except (OSError, msgspec.DecodeError):
            return None


def typed(cls: type[S], data: object) -> S:
    """`data` (a dict from probe.json) as `cls` (:meth:`Said.read`)."""
    return cls.read(data)
