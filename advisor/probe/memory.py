"""The child's memory instruments: a per-window peak, what the live model and optimizer hold, and
activation checkpointing switched on and off without editing the script.

Peak: on CUDA ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``; on CPU the
kernel's resident-set high-water mark (``VmHWM`` in ``/proc/self/status``), reset by writing 5
to ``/proc/self/clear_refs`` after ``malloc_trim`` hands freed heap back, so each window's peak
is its own and not an earlier window's.

Checkpointing: a Hugging Face model through ``gradient_checkpointing_enable()``; any other
model by giving each block of its largest ``nn.ModuleList`` / ``nn.Sequential`` of repeated
blocks an instance ``forward`` that runs the class's forward under
``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``. Deleting that attribute
restores the block, so a window can switch it off at a step boundary.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import json
import os
import re
import tempfile
import weakref
from typing import Any, Callable, Iterable

import psutil
import torch
from torch.utils.checkpoint import checkpoint

from . import profiler_start

_HWM = re.compile(r"VmHWM:\s+(\d+)\s+kB")
_RSS = re.compile(r"VmRSS:\s+(\d+)\s+kB")


def _status_kb(pattern: re.Pattern) -> int | None:
    try:
        with open("/proc/self/status") as f:
            match = pattern.search(f.read())
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def rss_bytes() -> int | None:
    return _status_kb(_RSS)


def rss_high_water() -> int | None:
    """The process's peak resident set since start, or since the last reset (WindowPeak.start)."""
    return _status_kb(_HWM)


def _trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class WindowPeak:
    """Peak memory between :meth:`start` and :meth:`read`, and the basis it was measured on.

    On CPU the resident-set high-water mark is always read, but glibc keeps freed heap pages, so
    it follows the allocator loosely; where one step of the window ran under
    :meth:`profile_step` (an untimed warm-up step), the peak is the allocator's instead: the
    model's persistent tensors at the step boundary plus the most the step allocated on top
    (the profiler's memory events).

    The heap is trimmed at every :meth:`start`, whatever the basis: each window then starts from
    the same allocator state. Trimming only where the high-water mark was needed spared chargpt
    2-4 slow first steps a window, but left each window the heap its predecessor (a bf16 arm, a
    larger batch) shaped: word_language_model's baseline windows drifted 0.06-0.25 against
    0.02-0.12 with the trim, and bf16 verified in 2 of 7 runs against 7 of 7.
    """

    def __init__(self, device: str | None = None) -> None:
        self.device = device
        self.step_peak: int | None = None
        self.persistent = 0
        self._prof: torch.profiler.profile | None = None

    def _cuda(self) -> bool:
        return self.device == "cuda" and torch.cuda.is_available() and torch.cuda.is_initialized()

    def start(self) -> None:
        self.step_peak, self._prof = None, None
        if self._cuda():
            torch.cuda.reset_peak_memory_stats()
            return
        _trim()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass

    def profile_step(self, persistent_bytes: int) -> None:
        """The next step runs under a memory-only profiler (CPU; call :meth:`end_step` after it)."""
        if self._cuda():
            return
        self.persistent = persistent_bytes
        try:
            with profiler_start.starting():
                self._prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                    profile_memory=True)
                self._prof.start()
        except Exception:  # noqa: BLE001 - another profiler is on: the RSS figure stands
            self._prof = None

    def end_step(self) -> None:
        prof, self._prof = self._prof, None
        if prof is None:
            return
        try:
            prof.stop()
            peak = _allocator_peak(prof)
        except Exception:  # noqa: BLE001 - torch's profiler may raise anything: the peak is unknown
            return
        if peak is not None:
            self.step_peak = max(self.step_peak or 0, peak)

    def read(self) -> tuple[int | None, str | None]:
        if self._cuda():
            return int(torch.cuda.max_memory_allocated()), "cuda-max-allocated"
        if self.step_peak is not None:
            return self.persistent + self.step_peak, "cpu-allocator"
        peak = _status_kb(_HWM)
        return (peak, "rss-high-water") if peak else (None, None)


def _allocator_peak(prof: torch.profiler.profile) -> int | None:
    """The most CPU memory the profiled span had allocated above its start (its memory events)."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="advise-mem-")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents") or []
    finally:
        os.unlink(path)
    totals = [e["args"].get("Total Allocated") for e in events if e.get("name") == "[memory]"
              and (e.get("args") or {}).get("Device Type") == 0]
    totals = [t for t in totals if isinstance(t, (int, float))]
    return int(max(totals)) if totals else None


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def tensor_bytes(modules: Iterable[torch.nn.Module], optimizers: Iterable[torch.optim.Optimizer]) -> dict:
    """Bytes held by the parameters, gradients and optimizer state of the live model and optimizers
    (each tensor once, by storage identity). Gradients count once per trainable parameter: they
    exist at the peak even where ``zero_grad(set_to_none=True)`` has freed them right now."""
    params: dict[int, torch.Tensor] = {}
    for module in modules:
        for p in module.parameters():
            params[id(p)] = p
    state: dict[int, torch.Tensor] = {}
    for opt in optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                params[id(p)] = p
        for per_param in opt.state.values():
            for value in per_param.values():
                if isinstance(value, torch.Tensor) and value.numel() > 1:
                    state[id(value)] = value
    return {"parameters_bytes": sum(_nbytes(p) for p in params.values()),
            "gradients_bytes": sum(_nbytes(p) for p in params.values() if p.requires_grad),
            "optimizer_state_bytes": sum(_nbytes(t) for t in state.values()),
            "live_gradients_bytes": sum(_nbytes(p.grad) for p in params.values() if p.grad is not None)}


def persistent_bytes(parts: dict) -> int:
    """What lives across a step boundary: parameters, the gradients alive then, optimizer state."""
    return parts["parameters_bytes"] + parts["live_gradients_bytes"] + parts["optimizer_state_bytes"]


# --- activation checkpointing ------------------------------------------------------------------

def _is_hf(module: torch.nn.Module) -> bool:
    return bool(getattr(module, "supports_gradient_checkpointing", False)) and hasattr(module, "gradient_checkpointing_enable")


def find_blocks(module: torch.nn.Module) -> tuple[str, list[torch.nn.Module]] | None:
    """(path, blocks): the ModuleList / Sequential with the most parameters whose children are two or
    more blocks of one class (each with parameters), or None."""
    best, best_size = None, 0
    for name, child in module.named_modules():
        if not isinstance(child, (torch.nn.ModuleList, torch.nn.Sequential)):
            continue
        blocks = list(child.children())
        if len(blocks) < 2 or len({type(b) for b in blocks}) != 1:
            continue
        if not all(any(True for _ in b.parameters()) for b in blocks):
            continue
        size = sum(p.numel() for b in blocks for p in b.parameters())
        if size > best_size:
            best, best_size = (name or type(module).__name__, blocks), size
    return best


def checkpoint_target(modules: Iterable[torch.nn.Module]) -> dict | None:
    """What checkpointing would wrap in the biggest model seen: probe.json's ``checkpointable``."""
    for module in sorted(modules, key=lambda m: -sum(p.numel() for p in m.parameters())):
        if _is_hf(module):
            return {"how": "gradient_checkpointing_enable", "model": type(module).__name__}
        found = find_blocks(module)
        if found:
            path, blocks = found
            return {"how": "blocks", "model": type(module).__name__, "path": path, "blocks": len(blocks),
                    "block": type(blocks[0]).__name__}
    return None


def _checkpointed(block: torch.nn.Module) -> Callable[..., Any]:
    forward = type(block).forward.__get__(block)

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled():
            return checkpoint(forward, *args, use_reentrant=False, **kwargs)
        return forward(*args, **kwargs)

    run._advise_checkpoint = True  # type: ignore[attr-defined]  # a mark on the function, read back by getattr
    return run


class CheckpointSwitch:
    """Switches activation checkpointing on the models seen so far (`models`: a live collection)."""

    def __init__(self, models: Iterable[torch.nn.Module]) -> None:
        self.models = models
        self.wrapped: list = []  # weakrefs to blocks given a checkpointed forward
        self.hf: list = []  # weakrefs to HF models switched on here

    def checkpoint_biggest(self, overrides: dict, applied: dict) -> bool:
        """Checkpoint the biggest model seen that has blocks to wrap; False when none has."""
        if not overrides.get("activation_checkpointing"):
            return True
        models = sorted(list(self.models), key=lambda m: -sum(p.numel() for p in m.parameters()))
        return any(self.enable(module, applied) for module in models)

    def enable(self, module: torch.nn.Module, applied: dict) -> bool:
        if _is_hf(module):
            if not getattr(module, "is_gradient_checkpointing", False):
                module.gradient_checkpointing_enable(  # type: ignore[operator]  # a Hugging Face model's (_is_hf)
                    gradient_checkpointing_kwargs={"use_reentrant": False})
                self.hf.append(weakref.ref(module))
            applied["activation_checkpointing"] = {"how": "gradient_checkpointing_enable", "model": type(module).__name__}
            return True
        found = find_blocks(module)
        if not found:
            return False
        path, blocks = found
        for block in blocks:
            if not getattr(block.__dict__.get("forward"), "_advise_checkpoint", False):
                block.forward = _checkpointed(block)
                self.wrapped.append(weakref.ref(block))
        applied["activation_checkpointing"] = {"how": "blocks", "model": type(module).__name__, "path": path,
                                               "blocks": len(blocks)}
        return True

    def off(self) -> None:
        for ref in self.wrapped:
            block = ref()
            if block is not None and "forward" in block.__dict__:
                del block.__dict__["forward"]
        for ref in self.hf:
            model = ref()
            if model is not None:
                model.gradient_checkpointing_disable()
        self.wrapped, self.hf = [], []


# --- the run's account, for probe.json ---------------------------------------------------------

def live_models(optimizers: Iterable[torch.optim.Optimizer]) -> list[torch.nn.Module]:
    """The outermost modules whose parameters the optimizers train (found once, off the clock)."""
    trained = {id(p) for opt in optimizers for g in opt.param_groups for p in g["params"]}
    if not trained:
        return []
    # type(), not isinstance(): isinstance reads __class__, which some lazy torch objects warn about
    owners = [o for o in gc.get_objects() if issubclass(type(o), torch.nn.Module)
              and any(id(p) in trained for p in o.parameters())]
    inner = {id(m) for o in owners for m in o.modules() if m is not o}
    return [o for o in owners if id(o) not in inner]


def account(device: str | None, optimizers: Iterable[torch.optim.Optimizer], runtime_bytes: int | None, budget_bytes: int | None,
            models: Iterable[torch.nn.Module] = (), peak: WindowPeak | None = None) -> dict:
    """The memory half of probe.json at the end of the measured window: the window's peak and its
    basis, the budget, what parameters / gradients / optimizer state hold, and what checkpointing
    would wrap."""
    optimizers = list(optimizers)
    models = list(models) or live_models(optimizers)
    peak = peak or WindowPeak()
    peak.device = device
    value, basis = peak.read()
    out: dict = {"peak_memory_bytes": value, "memory_basis": basis, "peak_rss_hwm_bytes": rss_high_water(),
                 "runtime_bytes": runtime_bytes}
    if budget_bytes:
        out["budget_bytes"], out["budget_source"] = int(budget_bytes), "option"
    elif device == "cuda" and torch.cuda.is_available() and torch.cuda.is_initialized():
        out["budget_bytes"], out["budget_source"] = int(torch.cuda.mem_get_info()[1]), "device"
    else:
        try:
            out["budget_bytes"], out["budget_source"] = int(psutil.virtual_memory().total), "device"
        except Exception:  # noqa: BLE001 - no budget to judge by
            pass
    out["tensors"] = tensor_bytes(models, optimizers)
    out["checkpointable"] = checkpoint_target(models)
    return out
