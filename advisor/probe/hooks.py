"""Global hooks installed in the child before the user's script runs; no user code is edited.

Each hook feeds the :class:`~advisor.probe.clock.StepClock` and records what the script
configured (optimizers, DataLoaders, the device it trains on) for the rules to read.

The hooks wrap torch functions, so a warning torch raises "at its caller" (``stacklevel=2``)
would name this file. :func:`user_facing_warn` stands in for ``warnings.warn`` in the child
and moves such a warning past the probe's frames (and the torch frames under them) to the
user's line, as the user would want to read it.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import sys
import time
import warnings
import weakref
from pathlib import Path
from types import FrameType
from typing import Any, Iterable

import torch
import torch.utils.data.dataloader as dl
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from advisor.analysis.sources import is_user_file
from advisor.run_dir import seen

from . import framework
from .clock import StepClock
from .module_call import Depth, compiling
from .phases import PhaseWatch


class Observed:
    """What the script set up, as seen by the hooks; probe.json's ``observed`` (:meth:`account`)."""

    def __init__(self) -> None:
        self.optimizers: dict[int, seen.OptimizerSeen] = {}
        self.dataloaders: dict[int, seen.LoaderSeen] = {}
        self.device: str | None = None
        self.loss_dtype: str | None = None
        # zero_grad() calls by who made them ("Optimizer"/"Module"): how many, how many kept the grads
        self.zero_grad: dict[str, seen.ZeroGradSeen] = {}
        self.live_optimizers: weakref.WeakSet = weakref.WeakSet()  # for the memory breakdown (optimizer state)
        self.framework: dict | None = None  # the framework that steps (advisor.probe.framework.detect)
        # told the Trainer whose precision an autocast arm switches, once it is found (trainer_precision)
        self.on_trainer: list = []

    def account(self) -> seen.Observed:
        return seen.Observed.given(device=self.device or "cpu", loss_dtype=self.loss_dtype, zero_grad=dict(self.zero_grad),
                                   optimizers=list(self.optimizers.values()),
                                   dataloaders=list(self.dataloaders.values()), framework=self.framework)


_PROBE_DIR = str(Path(__file__).resolve().parent) + os.sep
_TORCH_DIR = str(Path(torch.__file__).resolve().parent) + os.sep
_original_warn = warnings.warn


def _probe_frame(filename: str) -> bool:
    return filename.startswith(_PROBE_DIR)


def user_frame(frame: FrameType | None) -> FrameType | None:
    """The first frame above `frame` that is neither the probe's nor torch's (None at the top)."""
    while frame is not None and (_probe_frame(frame.f_code.co_filename) or frame.f_code.co_filename.startswith(_TORCH_DIR)):
        frame = frame.f_back
    return frame


def user_facing_warn(message, category=None, stacklevel=1, source=None, **kwargs):
    """``warnings.warn``, except that a warning which would point at one of the probe's wrappers
    points at the user's code instead (filters, ``-W`` and once-per-location still apply there)."""
    try:
        frame: FrameType | None = sys._getframe(1)  # the warn() call
        for _ in range(max(1, int(stacklevel)) - 1):
            frame = frame.f_back if frame is not None else None
        target = user_frame(frame) if frame is not None and _probe_frame(frame.f_code.co_filename) else None
    except (TypeError, ValueError):
        target = None
    if target is None:
        return _original_warn(message, category, int(stacklevel) + 1 if isinstance(stacklevel, int) else stacklevel,
                              source, **kwargs)
    if isinstance(message, Warning):
        category = message.__class__
    globals_ = target.f_globals
    registry = globals_.setdefault("__warningregistry__", {})
    warnings.warn_explicit(message, category or UserWarning, target.f_code.co_filename, target.f_lineno,
                           globals_.get("__name__", "<string>"), registry, globals_, source)


def batch_size(batch: Any, depth: int = 0, axis: int = 0) -> int | None:
    """The batch dimension (`axis`, else the leading one) of the first tensor in a (nested) batch,
    or None: an ``(inputs, targets)`` pair of tensors has the inputs' batch dimension."""
    if isinstance(batch, torch.Tensor):
        if batch.dim() > axis:
            return int(batch.shape[axis])
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if depth > 3:
        return None
    items: Iterable[Any]
    if isinstance(batch, dict):
        items = batch.values()
    elif isinstance(batch, (list, tuple)):
        items = batch
    else:
        items = [getattr(batch, name) for name in ("input_ids", "x", "data") if hasattr(batch, name)]
    for item in items:
        n = batch_size(item, depth + 1, axis)
        if n is not None:
            return n
    return None


_SEQUENCE_FIRST = (torch.nn.RNNBase, torch.nn.Transformer, torch.nn.TransformerEncoderLayer,
                   torch.nn.TransformerDecoderLayer)


def _sequence_first(model: torch.nn.Module) -> bool:
    """True when the model's recurrent or transformer layers take (sequence, batch, ...) inputs
    (``batch_first=False``, PyTorch's default for them): its input's batch is its second dimension."""
    try:
        layers = [m for m in model.modules() if isinstance(m, _SEQUENCE_FIRST)]
    except Exception:  # noqa: BLE001 - the user's model (its own modules()) may raise anything; the probe must not end the run
        return False
    return bool(layers) and not any(_batch_first(m) for m in layers)


def _batch_first(layer: torch.nn.Module) -> bool:
    """RNNs and nn.Transformer keep `batch_first`; the encoder and decoder layers keep it on their attention."""
    if hasattr(layer, "batch_first"):
        return bool(layer.batch_first)
    return bool(getattr(getattr(layer, "self_attn", None), "batch_first", False))


# Each DataLoader and optimizer the script built, and the user's line that built it (built_at): where
# `advise apply` writes a loader or optimizer fix. Weak: the probe keeps nothing of the script alive.
_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def built_at(frame) -> dict | None:
    """The user's line a constructor running under `frame` was called from: the innermost frame
    in the user's own files, with the function of a library it went through (``via``: a factory
    that builds the object where the user cannot add an argument); None when the probe built it
    (an arm's substitute loader) or no user frame is on the stack."""
    via = None
    while frame is not None:
        name = frame.f_code.co_filename
        if _probe_frame(name):
            return None
        if is_user_file(name):
            return {"file": name, "line": frame.f_lineno, "function": frame.f_code.co_name, "via": via}
        if not name.startswith(_TORCH_DIR):
            via = frame.f_code.co_name
        frame = frame.f_back
    return None


def _remember_where_built(obj: object, frame) -> None:
    site = built_at(frame)
    try:
        _BUILT[obj] = {**site, "class": type(obj).__name__} if site is not None else None
    except TypeError:  # not weakly referenceable
        pass


def where_built(obj: object) -> dict | None:
    """:func:`built_at` of a DataLoader or optimizer, as recorded when it was constructed."""
    try:
        return _BUILT.get(obj)
    except TypeError:
        return None


def _describe_optimizer(opt: torch.optim.Optimizer) -> seen.OptimizerSeen:
    params = [p for g in opt.param_groups for p in g["params"]]
    first = params[0] if params else None
    defaults = opt.defaults
    return seen.OptimizerSeen(
        cls=type(opt).__name__,
        fused=defaults.get("fused"),
        foreach=defaults.get("foreach"),
        n_params=len(params),
        n_elements=int(sum(p.numel() for p in params)),
        device=str(first.device) if first is not None else None,
        param_dtype=str(first.dtype).replace("torch.", "") if first is not None else None,
        built_at=where_built(opt),
    )


def _describe_loader(loader: torch.utils.data.DataLoader) -> seen.LoaderSeen:
    dataset = getattr(loader, "dataset", None)
    try:
        n = len(dataset)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - the user's dataset's __len__ may raise anything (or be absent: TypeError)
        n = None
    kind = loader_kind(loader)
    return seen.LoaderSeen(
        num_workers=loader.num_workers,
        pin_memory=bool(loader.pin_memory),
        batch_size=loader.batch_size,
        persistent_workers=bool(getattr(loader, "persistent_workers", False)),
        prefetch_factor=getattr(loader, "prefetch_factor", None),
        dataset=type(dataset).__name__,
        dataset_len=n,
        iterable=kind["iterable"],
        batched=kind["batched"],
        worker_start=kind["worker_start"],
        built_at=where_built(loader),
    )


def loader_kind(loader: torch.utils.data.DataLoader) -> dict:
    """What decides whether a loader fix can be switched in the running script (see
    advisor.overrides.live_loader_refusal): the parent reads it from the window's account."""
    return {"iterable": getattr(loader, "_dataset_kind", dl._DatasetKind.Map) != dl._DatasetKind.Map,
            "batched": bool(getattr(loader, "_auto_collation", True)),
            "worker_start": worker_start_method(loader)}


def worker_start_method(loader: torch.utils.data.DataLoader) -> str:
    """How the loader's worker processes start: its own multiprocessing context, else the default
    (a rank started by torch.multiprocessing.spawn inherits "spawn"; macOS defaults to it)."""
    ctx = getattr(loader, "multiprocessing_context", None)
    if ctx is not None:
        return ctx.get_start_method() if hasattr(ctx, "get_start_method") else str(ctx)
    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method()


def _watch_model_input(clock: StepClock, in_next: list[bool]) -> None:
    """Count samples from the model's input when no DataLoader batch (or advisor.step) gives them.

    Called once, after a step ended with no batch size (a loop over tensors it slices itself).
    A global forward pre-hook waits for the first module called in a step with autograd on and
    outside DataLoader ``__next__`` (transforms run there, evaluation under no_grad): that is
    the model, called on the batch. Calls under gradient accumulation add up.

    The global hook then removes itself (while one is registered every module call in the
    process pays for it), and the model's class gets a thin ``__call__`` that counts the leading
    dimension of the first tensor argument when that one instance is called. On the class, not
    a hook on the instance: a hook would be pickled with the model (``torch.save(model)``).
    """
    inside = Depth()
    sequence_first: dict[int, bool] = {}

    def count(args, module) -> None:
        if not torch.is_grad_enabled():  # an evaluation under no_grad inside a step is not training samples
            return
        key = id(module)
        if key not in sequence_first:
            sequence_first[key] = _sequence_first(module)
        clock.forward_batch(batch_size(args, axis=1 if sequence_first[key] else 0))

    def first_call(module, args):
        if in_next[0] or os.getpid() != clock.pid or not torch.is_grad_enabled():
            return None
        handle.remove()
        model = weakref.ref(module)
        cls = type(module)
        original = cls.__call__

        def call(self, *args, **kwargs):
            if compiling() or self is not model() or inside.depth:  # traced code: plain, no guards on our state
                return original(self, *args, **kwargs)
            count(args, self)
            inside.depth += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                inside.depth -= 1

        cls.__call__ = call
        count(args, module)  # this call too: the wrapper counts from the next one
        return None

    handle = register_module_forward_pre_hook(first_call)


def _timed_closure(opt, args, kwargs, in_closure: dict):
    """`step(closure)` (LBFGS, Lightning) runs forward and backward inside the optimizer's step:
    the closure is timed so that time counts as forward/backward, not as the optimizer's.

    Returns the (args, kwargs) the step runs with (the optimizer pre-hook contract), or None.
    """
    closure = kwargs.get("closure", args[1] if len(args) > 1 else None)  # args[0] is the optimizer
    if not callable(closure):
        return None
    key = id(opt)

    def timed(*a, **k):
        t0 = time.monotonic()
        try:
            return closure(*a, **k)
        finally:
            in_closure[key] = in_closure.get(key, 0.0) + time.monotonic() - t0

    if "closure" in kwargs:
        return args, {**kwargs, "closure": timed}
    return (args[0], timed, *args[2:]), kwargs


def install(clock: StepClock, observed: Observed) -> None:
    """Patch torch so every step boundary, batch and backward reaches `clock`."""
    in_next = [False]  # inside a DataLoader's __next__: a model call there is no batch of the loop's
    warnings.warn = user_facing_warn
    clock.on_unknown_batch = lambda: _watch_model_input(clock, in_next)
    phases = PhaseWatch(clock.phase_done)
    phases.install()
    _install_optimizer_hooks(clock, observed)
    _install_loader_hooks(clock, observed, in_next, phases)
    _install_backward(clock, observed, phases)
    _watch_zero_grad(observed)


def _install_optimizer_hooks(clock: StepClock, observed: Observed) -> None:
    """Each optimizer step timed (its closure apart) and the optimizer described at its first step;
    where each optimizer and DataLoader was built, remembered."""
    started: dict[int, float] = {}
    in_closure: dict[int, float] = {}  # per optimizer: seconds its step spent in the closure

    def pre_hook(opt, args, kwargs):
        if clock.capture is not None:
            clock.capture.stepped(opt, where_built(opt))
        started[id(opt)] = clock.optimizer_pre()
        in_closure[id(opt)] = 0.0
        return _timed_closure(opt, args, kwargs, in_closure)

    def post_hook(opt, args, kwargs) -> None:
        if id(opt) not in observed.optimizers:
            _first_step_of(opt, observed)
        clock.optimizer_post(opt, started.pop(id(opt), None), in_closure.pop(id(opt), 0.0))

    original_opt_init = torch.optim.Optimizer.__init__

    @functools.wraps(original_opt_init)
    def opt_init(self, *args, **kwargs) -> None:
        original_opt_init(self, *args, **kwargs)
        _remember_where_built(self, sys._getframe(1))
        clock.optimizer_created = True

    torch.optim.Optimizer.__init__ = opt_init  # type: ignore[method-assign]  # the probe's hook, patched in
    original_loader_init = dl.DataLoader.__init__

    @functools.wraps(original_loader_init)  # the signature stays DataLoader's (Lightning reads it)
    def loader_init(self, *args, **kwargs) -> None:
        original_loader_init(self, *args, **kwargs)
        _remember_where_built(self, sys._getframe(1))

    dl.DataLoader.__init__ = loader_init  # type: ignore[method-assign]  # the probe's hook, patched in
    register_optimizer_step_pre_hook(pre_hook)
    register_optimizer_step_post_hook(post_hook)


def _first_step_of(opt, observed: Observed) -> None:
    """An optimizer's first step: described; at the run's first, who runs the loop (a framework's
    Trainer, told to the switches that speak its words)."""
    if not observed.optimizers:
        try:
            observed.framework, trainer = framework.detect() or (None, None)
        except Exception:  # noqa: BLE001 - plain PyTorch words then
            observed.framework, trainer = None, None
        if trainer is not None:
            for tell in observed.on_trainer:
                tell(trainer)
    observed.optimizers[id(opt)] = _describe_optimizer(opt)
    device = observed.optimizers[id(opt)].device
    observed.device = observed.device or (device and torch.device(device).type)
    observed.live_optimizers.add(opt)


def _install_loader_hooks(clock: StepClock, observed: Observed, in_next: list[bool], phases: PhaseWatch) -> None:
    """Each DataLoader iterator described at its start and each batch's wait timed; an evaluation's
    batches (`phases`) are neither the step's wait nor its samples."""
    base_iter = dl._BaseDataLoaderIter
    orig_init, orig_next, orig_iter = base_iter.__init__, base_iter.__next__, dl.DataLoader.__iter__

    def iter_init(self, loader, *args, **kwargs) -> None:
        orig_init(self, loader, *args, **kwargs)
        self._advise_built_at = where_built(loader)  # the capture step names the loader that fed it
        self._advise_loader_id = id(loader)
        if id(loader) not in observed.dataloaders:
            observed.dataloaders[id(loader)] = _describe_loader(loader)
        if loader.num_workers:
            clock.require_warmup(loader.num_workers * (loader.prefetch_factor or 2) + 1)

    def loader_iter(self):
        t0 = time.monotonic()
        iterator = orig_iter(self)
        with contextlib.suppress(AttributeError, TypeError):  # (a subclass's own iterator may refuse attributes)
            iterator._advise_start_s = time.monotonic() - t0  # type: ignore[attr-defined]  # its first batch reads it
        return iterator

    def iter_next(self):
        # an epoch's first batch waits on its iterator's start too: workers started (16 processes forked
        # each epoch without persistent_workers) or woken; that is the loader's cost, not a stall
        started = getattr(self, "_advise_start_s", None)
        t0 = time.monotonic() - (started or 0.0)
        self._advise_start_s = None
        in_next[0] = True
        try:
            batch = orig_next(self)  # StopIteration passes through
        except StopIteration:
            loader = getattr(self, "_advise_loader_id", 0)
            if phases.key is None:  # a training loader's end (an evaluation's is the evaluation's)
                shut_down = bool(getattr(self, "_num_workers", 0)) and not getattr(self, "_persistent_workers", False)
                clock.loader_ended(time.monotonic() - t0, shut_down)
            phases.exhausted(loader)
            raise
        finally:
            in_next[0] = False
        samples, wait = batch_size(batch), time.monotonic() - t0
        if phases.fetched(getattr(self, "_advise_loader_id", 0), wait):
            return batch
        clock.batch_fetched(wait, samples, started is not None)
        if clock.capture is not None:
            clock.capture.fetched(self, samples)
        return batch

    base_iter.__init__ = iter_init  # type: ignore[method-assign]  # the probe's hook, patched in
    base_iter.__next__ = iter_next  # type: ignore[method-assign]  # the probe's hook, patched in
    dl.DataLoader.__iter__ = loader_iter  # type: ignore[method-assign]  # the probe's hook, patched in


def _install_backward(clock: StepClock, observed: Observed, phases: PhaseWatch) -> None:
    """Each backward() timed; the loss it started from kept for the step (and its device and dtype)."""
    orig_backward = torch.autograd.backward

    def backward(tensors, *args, **kwargs):
        t0 = time.monotonic()
        result = orig_backward(tensors, *args, **kwargs)
        loss = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
        if isinstance(loss, torch.Tensor):
            if observed.device is None or observed.loss_dtype is None:
                observed.device = observed.device or loss.device.type
                observed.loss_dtype = str(loss.dtype).replace("torch.", "")
            loss = loss.detach()
        phases.backward()
        clock.backward_done(loss, time.monotonic() - t0)
        return result

    torch.autograd.backward = backward


def _watch_zero_grad(observed: Observed) -> None:
    """Count ``zero_grad`` calls and those that keep gradients (``set_to_none=False``), as the
    script asked: these wrappers sit outside any override that changes the argument."""
    for cls, who in ((torch.optim.Optimizer, "Optimizer"), (torch.nn.Module, "Module")):
        original = cls.zero_grad

        def zero_grad(self, set_to_none: bool = True, _original=original, _who=who):
            calls = observed.zero_grad.setdefault(_who, seen.ZeroGradSeen(cls=type(self).__name__))
            calls.calls += 1
            calls.kept += 0 if set_to_none else 1
            return _original(self, set_to_none)

        cls.zero_grad = zero_grad  # type: ignore[method-assign]  # the probe's hook, patched in
