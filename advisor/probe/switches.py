"""One switch per group of override keys, shared by both ways a fix is measured.

A switch turns its knobs on and off in a live process at a step boundary (an in-process arm,
:mod:`advisor.probe.arms`), and a fresh run is the same switch turned on before the script starts
(``live=False``, :func:`advisor.probe.overrides.apply`): there the switch acts where the script
makes the choice (a DataLoader or an optimizer built with the keyword, the code change the user
will make). Which switch carries a key is the vocabulary's (``Knob.switch`` in
:mod:`advisor.overrides`); a switch that cannot do something in a live process raises
:class:`NotSwitchable` with the reason, and that key is measured in a fresh run.

- ``backend``: matmul precision, cudnn.benchmark, intra-op threads (held against the script's own
  ``torch.set_num_threads`` while on);
- ``optimizer``: fused / foreach;
- ``zero_grad``: ``zero_grad(set_to_none=False)`` calls get ``set_to_none=True``;
- ``checkpointing``: a Hugging Face model's gradient checkpointing, else the repeated blocks;
- ``module``: autocast, compile, channels_last at top-level module calls (float16 needs a
  GradScaler around the script's own backward/step: only from the start); in a Lightning job,
  autocast is the Trainer's own precision plugin (:mod:`advisor.probe.trainer_precision`);
- ``dataloader``: DataLoader keywords and the batch size.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import os
import time
import weakref
from collections import deque
from typing import Any, Callable, Protocol

import torch
import torch.utils.data.dataloader as dl
from torch.optim.optimizer import _device_dtype_check_for_fused

from advisor.overrides import VOCABULARY, live_loader_refusal, unmirrorable, validate
from .hooks import loader_kind
from .memory import CheckpointSwitch
from .module_call import AUTOCAST_DTYPES, ModuleCallSwitch
from .trainer_precision import PRECISION, TrainerPrecision


class NotSwitchable(Exception):
    """This key cannot be switched in this process (the reason is the message)."""


# --- backend settings -------------------------------------------------------------------------

def tf32_blocked() -> bool:
    """NVIDIA_TF32_OVERRIDE=0 makes cuBLAS/cuDNN ignore torch's TF32 setting: the switch does nothing.

    On an H100 image a TF32 arm measured 1.00x on an fp32-matmul-bound MLP; a precision the
    libraries ignore must read "not applied", not "no gain"."""
    return os.environ.get("NVIDIA_TF32_OVERRIDE") == "0"



class BackendSwitch:
    """Matmul precision, cudnn.benchmark and intra-op threads: set, and restored after."""

    def __init__(self) -> None:
        self.saved: dict[str, Any] = {}
        self.threads: int | None = None  # held while on
        self.applied: dict = {}

    def install(self) -> None:
        """The thread count holds against the script's own ``torch.set_num_threads``: a script
        that sets threads after start-up (cpu_one_thread.py sets 1) would otherwise undo the
        override (a fresh run read 1.09x where the arm, switched after that call, read 1.79x).
        DataLoader workers (other processes) still set their own."""
        original, pid, switch = torch.set_num_threads, os.getpid(), self

        def set_num_threads(k: int) -> None:
            if switch.threads is None or os.getpid() != pid:
                return original(k)
            switch.applied["torch_threads_script_asked"] = int(k)  # held at the experiment's value

        self._set_threads = original
        torch.set_num_threads = set_num_threads

    def on(self, overrides: dict, applied: dict, *, live: bool = True) -> None:
        self.applied = applied
        if "float32_matmul_precision" in overrides:
            self.saved["float32_matmul_precision"] = torch.get_float32_matmul_precision()
            torch.set_float32_matmul_precision(overrides["float32_matmul_precision"])
            if not tf32_blocked():
                applied["float32_matmul_precision"] = torch.get_float32_matmul_precision()
        if overrides.get("cudnn_benchmark"):
            self.saved["cudnn_benchmark"] = torch.backends.cudnn.benchmark
            torch.backends.cudnn.benchmark = True
            applied["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
        if "torch_threads" in overrides:
            self.saved["torch_threads"] = torch.get_num_threads()
            getattr(self, "_set_threads", torch.set_num_threads)(int(overrides["torch_threads"]))
            self.threads = int(overrides["torch_threads"])
            applied["torch_threads"] = torch.get_num_threads()

    def off(self) -> None:
        saved, self.saved, self.threads = self.saved, {}, None
        if "float32_matmul_precision" in saved:
            torch.set_float32_matmul_precision(saved["float32_matmul_precision"])
        if "cudnn_benchmark" in saved:
            torch.backends.cudnn.benchmark = saved["cudnn_benchmark"]
        if "torch_threads" in saved:
            getattr(self, "_set_threads", torch.set_num_threads)(saved["torch_threads"])


# --- optimizers: foreach / fused --------------------------------------------------------------------

def _with_flag(defaults: dict, options: dict) -> dict:
    defaults = dict(defaults)
    for key in ("fused", "foreach"):
        if options.get(key) and key in defaults:
            defaults[key] = True
            other = "foreach" if key == "fused" else "fused"
            if other in defaults and key == "fused":  # torch refuses both at once
                defaults[other] = False
    return defaults


class OptimizerSwitch:
    """``fused`` / ``foreach``: set on the live optimizers' param_groups (their ``step`` state moved
    where the fused kernels want it), or, on from the start, on every optimizer the script builds."""

    def __init__(self) -> None:
        self.construct: dict | None = None  # on from the start: the flag new optimizers are built with
        self.applied: dict = {}
        self.optimizers: weakref.WeakSet = weakref.WeakSet()
        self.saved: list[tuple[dict, str, Any]] = []  # (group, key, old value)
        self.moved: list[tuple[dict, torch.Tensor]] = []  # (state, old step tensor)

    def install(self) -> None:
        original = torch.optim.Optimizer.__init__
        switch = self

        def __init__(self, params, defaults, *args, **kwargs):
            if switch.construct is not None:  # on from the start: the optimizer is built with the flag
                defaults = _with_flag(defaults, switch.construct)
            original(self, params, defaults, *args, **kwargs)
            switch.optimizers.add(self)
            if switch.construct is not None and switch.flag(switch.construct) in self.defaults:
                switch.applied.setdefault("optimizers", []).append(
                    {"class": type(self).__name__, "fused": self.defaults.get("fused"), "foreach": self.defaults.get("foreach")})

        torch.optim.Optimizer.__init__ = __init__

    @staticmethod
    def flag(options: dict) -> str:
        return "fused" if options.get("fused") else "foreach"

    def on(self, overrides: dict, applied: dict, *, live: bool = True) -> None:
        options = overrides["optimizer"]
        if not live:  # before the script: every optimizer it builds gets the flag
            self.construct, self.applied = options, applied
            applied.setdefault("optimizers", [])  # none built: the override did not apply
            return
        key = self.flag(options)
        other = "foreach" if key == "fused" else "fused"
        optimizers = [o for o in list(self.optimizers) if key in o.defaults]
        if not optimizers:
            raise NotSwitchable(f"no live optimizer has {key}=")
        seen = applied.setdefault("optimizers", [])
        try:
            for opt in optimizers:
                for group in opt.param_groups:
                    if key == "fused":
                        for p in group["params"]:
                            _device_dtype_check_for_fused(p)
                            state = opt.state.get(p, {})
                            step = state.get("step")
                            if isinstance(step, torch.Tensor) and (step.device != p.device or step.dtype != torch.float32):
                                self.moved.append((state, step))
                                state["step"] = step.to(device=p.device, dtype=torch.float32)
                        if group.get("differentiable"):
                            raise NotSwitchable("fused does not support differentiable=True")
                    self.saved.append((group, key, group.get(key)))
                    group[key] = True
                    if other in group and group[other]:
                        self.saved.append((group, other, group[other]))
                        group[other] = False
                seen.append({"class": type(opt).__name__, "fused": opt.param_groups[0].get("fused"),
                             "foreach": opt.param_groups[0].get("foreach")})
        except NotSwitchable:
            self.off()
            applied.pop("optimizers", None)
            raise
        except Exception as exc:  # noqa: BLE001 - torch refused: this process cannot have it
            self.off()
            applied.pop("optimizers", None)
            raise NotSwitchable(f"{type(exc).__name__}: {exc}") from exc

    def off(self) -> None:
        self.construct = None
        for group, key, old in reversed(self.saved):
            group[key] = old
        for state, old in reversed(self.moved):
            if isinstance(state.get("step"), torch.Tensor):
                state["step"] = state["step"].to(device=old.device, dtype=old.dtype)
        self.saved, self.moved = [], []


# --- zero_grad(set_to_none=False) -> set_to_none=True ------------------------------------------------

def force_set_to_none(active) -> None:
    """Patch ``Optimizer.zero_grad`` and ``Module.zero_grad``: while ``active()`` returns a dict
    (the window's `applied`), a call that asks to keep the gradients (``set_to_none=False``)
    drops them instead, counted in ``applied["zero_grad_set_to_none"]``. A call that already
    sets them to None is left alone, so an override that changed nothing reads "not applied"."""
    for cls in (torch.optim.Optimizer, torch.nn.Module):
        original = cls.zero_grad

        @functools.wraps(original)
        def zero_grad(self, set_to_none: bool = True, _original=original):
            applied = active()
            if applied is not None and not set_to_none:
                set_to_none = True
                applied["zero_grad_set_to_none"] = int(applied.get("zero_grad_set_to_none") or 0) + 1
            return _original(self, set_to_none)

        cls.zero_grad = zero_grad



class ZeroGradSwitch:
    def __init__(self) -> None:
        self.applied: dict | None = None  # the window's applied while switched on

    def install(self) -> None:
        force_set_to_none(lambda: self.applied)

    def on(self, overrides: dict, applied: dict, *, live: bool = True) -> None:
        self.applied = applied

    def off(self) -> None:
        self.applied = None


# --- the model's calls: autocast, compile, channels_last; activation checkpointing ---------------------

class ModuleSwitch(ModuleCallSwitch):
    """:class:`ModuleCallSwitch`, with float16's GradScaler: only from the start, where it can wrap
    the script's own backward and step. In a Lightning job autocast is the Trainer's own precision
    plugin instead (:mod:`advisor.probe.trainer_precision`), once the first step has found it."""

    def __init__(self, observed: Any = None) -> None:
        super().__init__()
        self.trainer: TrainerPrecision | None = None
        if observed is not None:
            observed.on_trainer.append(self._found)

    def _found(self, trainer: Any) -> None:
        self.trainer = TrainerPrecision(trainer)
        if self.autocast is torch.bfloat16 and self._plugin(self.autocast, self.applied):
            self.autocast = None  # a fresh run: the Trainer's form from here on (float16 keeps its scaler)

    def _plugin(self, dtype: torch.dtype, applied: dict) -> bool:
        if self.trainer is None or not self.trainer.on(dtype):
            return False
        applied["autocast"] = str(dtype).replace("torch.", "")
        applied["autocast_precision"] = PRECISION[dtype]
        return True

    def on(self, overrides: dict, applied: dict, *, live: bool = True) -> None:
        dtype = AUTOCAST_DTYPES.get(overrides.get("autocast") or "")
        if dtype is not None and self._plugin(dtype, applied):
            overrides = {k: v for k, v in overrides.items() if k != "autocast"}
        elif dtype is torch.float16:
            if live:
                raise NotSwitchable("float16 autocast needs a GradScaler: a fresh run")
            _install_grad_scaler(applied)
        super().on(overrides, applied)

    def off(self) -> None:
        if self.trainer is not None:
            self.trainer.off()
        super().off()


class Checkpointing(CheckpointSwitch):
    """Live: the biggest model seen so far is checkpointed. From the start: each model at its first
    call (through the module switch's first-call hook)."""

    def __init__(self, module: ModuleSwitch) -> None:
        super().__init__(module.top)
        self.module = module

    def install(self) -> None:
        """Nothing to patch: it wraps the models the module switch sees."""

    def on(self, overrides: dict, applied: dict, *, live: bool = True) -> None:
        if not overrides.get("activation_checkpointing"):
            return
        if not live:
            self.module.first_call = self.enable
            self.module.applied = applied
            return
        if not super().on(overrides, applied):
            raise NotSwitchable("no Hugging Face model and no ModuleList/Sequential of repeated blocks seen")

    def off(self) -> None:
        self.module.first_call = None
        super().off()


def _install_grad_scaler(applied: dict) -> None:
    """fp16 needs loss scaling: scale in backward(), unscale/skip/update around optimizer.step()."""
    scaler = torch.amp.GradScaler("cuda" if torch.cuda.is_available() else "cpu")
    original_backward = torch.autograd.backward
    original_step_init = torch.optim.Optimizer.__init__

    def backward(tensors, *args, **kwargs):
        if isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
            tensors = scaler.scale(tensors)
        return original_backward(tensors, *args, **kwargs)

    def __init__(self, *args, **kwargs):
        original_step_init(self, *args, **kwargs)
        plain_step = self.step

        def step(*a, **k):
            # GradScaler.step calls optimizer.step; hand it the unwrapped one.
            self.step = plain_step
            try:
                result = scaler.step(self, *a, **k)
                scaler.update()
                return result
            finally:
                self.step = step

        self.step = step

    torch.autograd.backward = backward
    torch.optim.Optimizer.__init__ = __init__
    applied["grad_scaler"] = True


# --- DataLoader: a substitute loader fed from the original iterator's index stream ---------------

class _Pull:
    """A batch_sampler that pulls each batch's indices from the original iterator's own stream:
    `scale` original batches per batch, or (scale below 1) each original batch cut in 1/scale parts."""

    def __init__(self, orig: Any, scale: float) -> None:
        self.orig = orig
        self.scale = int(scale) if scale >= 1 else 1
        self.parts = round(1 / scale) if scale < 1 else 1
        self.handed: deque = deque()  # per substitute batch: the original batches' index lists
        self.closed = False

    def __iter__(self):
        while not self.closed:
            group = []
            for _ in range(self.scale):
                try:
                    group.append(next(self.orig._sampler_iter))
                except StopIteration:
                    break
            if not group:
                return
            if self.parts > 1:
                indices = list(group[0])
                size = -(-len(indices) // self.parts)
                for k in range(0, len(indices), size):
                    if self.closed:
                        return
                    self.handed.append([indices[k:k + size]])
                    yield indices[k:k + size]
                continue
            self.handed.append(group)
            yield [i for indices in group for i in indices]
            if len(group) < self.scale:
                return


class _Substitute:
    def __init__(self, loader: Any, it: Any, pull: _Pull) -> None:
        self.loader, self.it, self.pull = loader, it, pull

    def close(self, orig: Any) -> None:
        """Stop its workers; give the indices it took but never served back to the original stream."""
        self.pull.closed = True
        shutdown = getattr(self.it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        unserved = [indices for group in self.pull.handed for indices in group]
        self.pull.handed.clear()
        if unserved:
            orig._sampler_iter = itertools.chain(unserved, orig._sampler_iter)


SUBSTITUTE_TIMEOUT_S = 120.0  # a substitute loader's wait for one batch from its workers


class DataLoaderSwitch:
    """``dataloader`` / ``batch_size_scale``: in a live process the script's ``next()`` is served
    from a substitute DataLoader; on from the start, every DataLoader the script builds gets the
    keywords (and the scaled batch size) instead, as the code change would."""

    def __init__(self, observed: Any) -> None:
        self.observed = observed
        self.kwargs: dict | None = None  # the window's DataLoader keywords (None: no dataloader switch)
        self.scale = 1
        self.applied: dict = {}
        self.current: Any = None  # weakref to the iterator the script consumed last
        self.subs: dict[int, tuple[Any, _Substitute]] = {}
        self.build_s = 0.0
        self.error: str | None = None
        self._next = None
        self.construct: tuple[dict, Any] | None = None  # on from the start: (keywords, batch scale)

    def install(self) -> None:
        """Before hooks.install: the hooks' timing wrapper then sits outside this one."""
        self._install_construct()
        base = dl._BaseDataLoaderIter
        orig_init, orig_next, orig_reset = base.__init__, base.__next__, base._reset
        self._next = orig_next
        switch = self

        def __init__(self, loader, *args, **kwargs):
            orig_init(self, loader, *args, **kwargs)
            self._advise_loader = weakref.ref(loader)

        def _reset(self, loader, first_iter=False):
            orig_reset(self, loader, first_iter)
            self._advise_epoch_done = False

        def __next__(self):
            if getattr(self, "_advise_sub", False) or os.getpid() != switch.pid:
                return orig_next(self)
            return switch.next(self)

        self.pid = os.getpid()
        base.__init__, base.__next__, base._reset = __init__, __next__, _reset

    def _install_construct(self) -> None:
        original = torch.utils.data.DataLoader.__init__
        signature = inspect.signature(original)
        switch = self

        @functools.wraps(original)
        def __init__(self, *args, **kw):
            if switch.construct is None:
                return original(self, *args, **kw)
            kwargs, scale = switch.construct
            bound = signature.bind(self, *args, **kw)
            arguments = bound.arguments
            forced = dict(kwargs)
            if not forced.get("num_workers", arguments.get("num_workers", 0)):  # these two are errors without workers
                forced.pop("persistent_workers", None)
                forced.pop("prefetch_factor", None)
            arguments.update(forced)
            if scale and arguments.get("batch_sampler") is None:
                arguments["batch_size"] = max(1, int(int(arguments.get("batch_size", 1) or 1) * scale))
                switch.applied["batch_size_scale"] = scale
            original(*bound.args, **bound.kwargs)
            switch.applied.setdefault("dataloaders", []).append(
                {"num_workers": self.num_workers, "pin_memory": self.pin_memory, "batch_size": self.batch_size,
                 "persistent_workers": self.persistent_workers, "prefetch_factor": self.prefetch_factor})

        torch.utils.data.DataLoader.__init__ = __init__

    def mirrorable(self, it: Any) -> str | None:
        loader = self._loader(it)
        return "the DataLoader is gone" if loader is None else unmirrorable(loader_kind(loader))

    @staticmethod
    def _loader(it: Any) -> Any:
        ref = getattr(it, "_advise_loader", None)
        return ref() if ref is not None else None

    def next(self, it: Any) -> Any:
        if self.construct is not None:  # on from the start: the loaders were built with the keywords
            return self._next(it)
        self.current = weakref.ref(it)
        entry = self.subs.get(id(it))
        if entry is None and self.kwargs is not None and not getattr(it, "_advise_epoch_done", False):
            t0 = time.monotonic()
            entry = self._build(it)
            self.build_s += time.monotonic() - t0
        if entry is None:
            return self._next(it)
        sub = entry[1]
        try:
            batch = self._next(sub.it)
        except StopIteration:
            # The original stream ran dry: the original iterator ends the epoch itself (after
            # serving what it had prefetched), exactly as without the substitute.
            self._drop(id(it))
            it._advise_epoch_done = True
            return self._next(it)
        if sub.pull.handed:
            sub.pull.handed.popleft()
        return batch

    def _build(self, it: Any):
        if self.mirrorable(it):
            return None
        loader = self._loader(it)
        kwargs = dict(self.kwargs or {})
        workers = kwargs.get("num_workers", loader.num_workers)
        options = {"num_workers": workers, "pin_memory": kwargs.get("pin_memory", loader.pin_memory),
                   # a worker that never serves (a fork that deadlocked on a lock another thread held:
                   # seen once, both DDP ranks at the same switch) ends the arm with an error, not the run
                   "timeout": loader.timeout or (SUBSTITUTE_TIMEOUT_S if workers else 0),
                   "worker_init_fn": loader.worker_init_fn,
                   "multiprocessing_context": loader.multiprocessing_context, "generator": loader.generator,
                   "pin_memory_device": getattr(loader, "pin_memory_device", "")}
        if workers:
            options["persistent_workers"] = kwargs.get("persistent_workers", bool(loader.persistent_workers) if loader.num_workers else False)
            options["prefetch_factor"] = kwargs.get("prefetch_factor", loader.prefetch_factor if loader.num_workers else 2)
        pull = _Pull(it, self.scale)
        known = set(self.observed.dataloaders) if self.observed is not None else set()
        sub_loader = torch.utils.data.DataLoader(loader.dataset, batch_sampler=pull, collate_fn=loader.collate_fn, **options)
        sub_it = iter(sub_loader)  # worker start-up happens here, at the switch
        sub_it._advise_sub = True
        if self.observed is not None:  # the substitute is ours, not the script's
            for key in set(self.observed.dataloaders) - known:
                self.observed.dataloaders.pop(key, None)
        sub = _Substitute(sub_loader, sub_it, pull)
        self.subs[id(it)] = (weakref.ref(it), sub)
        batch = max(1, int(loader.batch_size * self.scale)) if loader.batch_size else None
        self.applied.setdefault("dataloaders", []).append(
            {"num_workers": sub_loader.num_workers, "pin_memory": bool(sub_it._pin_memory), "batch_size": batch,
             "persistent_workers": sub_loader.persistent_workers, "prefetch_factor": sub_loader.prefetch_factor})
        if self.scale != 1:
            self.applied["batch_size_scale"] = self.scale
        return self.subs[id(it)]

    def _drop(self, key: int) -> None:
        ref, sub = self.subs.pop(key)
        orig = ref()
        if orig is not None:
            sub.close(orig)
        else:
            sub.pull.closed = True

    def on(self, overrides: dict, applied: dict, *, live: bool = True) -> None:
        if not live:
            self.construct = (dict(overrides.get("dataloader") or {}), overrides.get("batch_size_scale"))
            self.applied = applied
            applied.setdefault("dataloaders", [])  # none built: the override did not apply
            return
        it = self.current() if self.current is not None else None
        if it is None:
            raise NotSwitchable("no DataLoader iterator is in use")
        loader = self._loader(it)
        reason = "the DataLoader is gone" if loader is None else live_loader_refusal(overrides, loader_kind(loader))
        if reason:
            raise NotSwitchable(reason)
        self.kwargs = dict(overrides.get("dataloader") or {})
        self.scale = overrides.get("batch_size_scale") or 1
        self.applied = applied
        if not getattr(it, "_advise_epoch_done", False):
            self._build(it)

    def off(self) -> None:
        self.kwargs, self.scale, self.construct = None, 1, None
        for key in list(self.subs):
            self._drop(key)


# --- all of them --------------------------------------------------------------------------------------

class Switch(Protocol):
    """One group of knobs: installed once (before the hooks, which must wrap what it patches), its
    keys switched on (``live``: at a step boundary of the running script; else before it starts,
    a fresh run) and off. A key it cannot switch live raises :class:`NotSwitchable`."""

    def install(self) -> None: ...

    def on(self, overrides: dict, applied: dict, *, live: bool = True) -> None: ...

    def off(self) -> None: ...


# --- the CUDA allocator: its settings, before its first allocation ------------------------------------

class AllocatorSwitch:
    """PYTORCH_CUDA_ALLOC_CONF's ``expandable_segments``: the allocator reads the variable once, at
    its first allocation, so only a fresh run can turn it on (before the script starts; the probe
    itself allocates nothing on the device before that)."""

    def install(self) -> None:
        """Nothing to patch."""

    def on(self, overrides: dict, applied: dict, *, live: bool = True) -> None:
        if not overrides.get("expandable_segments"):
            return
        if live or (torch.cuda.is_available() and torch.cuda.is_initialized()):
            raise NotSwitchable("the CUDA allocator reads PYTORCH_CUDA_ALLOC_CONF once, before its first allocation")
        name = "PYTORCH_CUDA_ALLOC_CONF"
        settings = [s for s in os.environ.get(name, "").split(",") if s and not s.startswith("expandable_segments")]
        os.environ[name] = ",".join([*settings, "expandable_segments:True"])
        applied["expandable_segments"] = True

    def off(self) -> None:
        """A fresh run keeps it to its end."""


# Each switch by the name the vocabulary's knobs give (Knob.switch), built from the run's switches
# so far, and switched on in this order (off in reverse). A new kind of knob is one entry here.
SWITCH_TYPES: dict[str, Callable[["Switches"], Switch]] = {
    "backend": lambda run: BackendSwitch(),
    "optimizer": lambda run: OptimizerSwitch(),
    "zero_grad": lambda run: ZeroGradSwitch(),
    "module": lambda run: ModuleSwitch(run.observed),
    "checkpointing": lambda run: Checkpointing(run.module),
    "dataloader": lambda run: DataLoaderSwitch(run.observed),
    "allocator": lambda run: AllocatorSwitch(),
}


class Switches:
    """The run's switches, one of each; ``on`` hands each key to the switch the vocabulary names.
    The ones the arms reach into (the model's calls, the loaders, the optimizers) are typed
    properties."""

    def __init__(self, observed: Any = None) -> None:
        self.observed = observed
        self.by_name: dict[str, Switch] = {}
        for name, make in SWITCH_TYPES.items():
            self.by_name[name] = make(self)

    @property
    def module(self) -> ModuleSwitch:
        return self.by_name["module"]  # type: ignore[return-value]

    @property
    def dataloader(self) -> DataLoaderSwitch:
        return self.by_name["dataloader"]  # type: ignore[return-value]

    @property
    def optimizer(self) -> OptimizerSwitch:
        return self.by_name["optimizer"]  # type: ignore[return-value]

    @staticmethod
    def groups(overrides: dict) -> dict[str, dict]:
        """The overrides split by the switch that carries each key."""
        out: dict[str, dict] = {}
        for key, value in overrides.items():
            out.setdefault(VOCABULARY[key].switch, {})[key] = value
        return out

    def install(self, overrides: dict | None = None) -> None:
        """Install the switches `overrides` needs (all of them when None): before the hooks, whose
        DataLoader timing must wrap the substitute loaders."""
        needed = set(self.groups(overrides)) if overrides is not None else set(self.by_name)
        for name, switch in self.by_name.items():
            if name in needed:
                switch.install()

    def on(self, overrides: dict, applied: dict, *, live: bool = True) -> dict[str, str]:
        """Switch every key on; returns {key: why not} for those that could not be (live only)."""
        validate(overrides)
        groups, refused = self.groups(overrides), {}
        for name, switch in self.by_name.items():
            part = groups.get(name)
            if not part:
                continue
            try:
                switch.on(part, applied, live=live)
            except NotSwitchable as exc:
                refused.update({key: str(exc) for key in part})
        return refused

    def off(self) -> None:
        for switch in reversed(list(self.by_name.values())):
            switch.off()
