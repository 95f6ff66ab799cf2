"""Apply a Fix's declarative override inside the child, before the user's script runs.

An override is plain data (``{"dataloader": {"num_workers": 4}}``, ``{"autocast": "bfloat16"}``,
...) so rules can propose it, experiments can combine and sweep it, and the report can show
the code change that makes it permanent. Every key patches torch at the point where the
script would have made the choice, so the script itself is never edited:

- ``dataloader``: keyword defaults forced onto every ``DataLoader(...)`` construction;
- ``batch_size_scale``: every DataLoader's ``batch_size`` multiplied;
- ``autocast``: forward and loss run under ``torch.autocast`` (bf16; fp16 with a GradScaler);
- ``float32_matmul_precision``, ``cudnn_benchmark``, ``torch_threads``: backend settings;
- ``optimizer``: ``fused`` / ``foreach`` forced onto every torch.optim optimizer that has them;
- ``compile``: each top-level module call goes through ``torch.compile``;
- ``channels_last``: conv models and their 4-D inputs use channels_last memory format;
- ``zero_grad_set_to_none``: ``zero_grad(set_to_none=False)`` calls get ``set_to_none=True``;
- ``activation_checkpointing``: at a model's first call, its repeated blocks (or a Hugging Face
  model) are checkpointed (``advisor.probe.memory``).

The keys and their valid values are the vocabulary in :mod:`advisor.overrides`. ``applied``
records what really took effect, so the experiments can report an override that did nothing
as "not applied" instead of "no significant change".
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any

import torch
import torch.utils.data as tud

from advisor.overrides import OverrideError, validate  # noqa: F401  (the vocabulary; OverrideError re-exported)
from .memory import CheckpointSwitch
from .module_call import AUTOCAST_DTYPES, ModuleCallSwitch


def tf32_blocked() -> bool:
    """NVIDIA_TF32_OVERRIDE=0 makes cuBLAS/cuDNN ignore torch's TF32 setting: the switch does nothing.

    On an H100 image a TF32 arm measured 1.00x on an fp32-matmul-bound MLP; a precision the
    libraries ignore must read "not applied", not "no gain"."""
    return os.environ.get("NVIDIA_TF32_OVERRIDE") == "0"


def _hold_threads(n: int, applied: dict) -> None:
    """The experiment's thread count holds against the script's own ``torch.set_num_threads``.

    A script that sets threads after start-up (cpu_one_thread.py sets 1) would otherwise undo the
    override: the fresh run measured 1.09x where the in-process arm, switched after that call,
    measured 1.79x. DataLoader workers (other processes) still set their own.
    """
    original, pid = torch.set_num_threads, os.getpid()

    def set_num_threads(k: int) -> None:
        if os.getpid() != pid:
            return original(k)
        applied["torch_threads_script_asked"] = int(k)  # held at the experiment's value

    torch.set_num_threads = set_num_threads


def apply(overrides: dict, applied: dict) -> None:
    """Install every override; `applied` collects what actually happened, for probe.json."""
    validate(overrides)
    if "float32_matmul_precision" in overrides:
        torch.set_float32_matmul_precision(overrides["float32_matmul_precision"])
        if not tf32_blocked():
            applied["float32_matmul_precision"] = overrides["float32_matmul_precision"]
    if overrides.get("cudnn_benchmark"):
        torch.backends.cudnn.benchmark = True
        applied["cudnn_benchmark"] = True
    if "torch_threads" in overrides:
        torch.set_num_threads(int(overrides["torch_threads"]))
        _hold_threads(int(overrides["torch_threads"]), applied)
        applied["torch_threads"] = torch.get_num_threads()
    if "dataloader" in overrides or "batch_size_scale" in overrides:
        _patch_dataloader(overrides.get("dataloader", {}), overrides.get("batch_size_scale"), applied)
    if "optimizer" in overrides:
        _patch_optimizer(overrides["optimizer"], applied)
    if ("autocast" in overrides or overrides.get("compile") or overrides.get("channels_last")
            or overrides.get("activation_checkpointing")):
        _patch_module_call(overrides, applied)
    if overrides.get("zero_grad_set_to_none"):
        force_set_to_none(lambda: applied)


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


def _patch_dataloader(kwargs: dict, scale: Any, applied: dict) -> None:
    original = tud.DataLoader.__init__
    signature = inspect.signature(original)
    seen = applied.setdefault("dataloaders", [])

    @functools.wraps(original)
    def __init__(self, *args, **kw):
        bound = signature.bind(self, *args, **kw)
        arguments = bound.arguments
        forced = dict(kwargs)
        workers = forced.get("num_workers", arguments.get("num_workers", 0))
        if not workers:  # these two are errors without workers
            forced.pop("persistent_workers", None)
            forced.pop("prefetch_factor", None)
        arguments.update(forced)
        if scale and arguments.get("batch_sampler") is None:
            arguments["batch_size"] = max(1, int(int(arguments.get("batch_size", 1) or 1) * scale))
            applied["batch_size_scale"] = scale
        original(*bound.args, **bound.kwargs)
        seen.append({"num_workers": self.num_workers, "pin_memory": self.pin_memory, "batch_size": self.batch_size,
                     "persistent_workers": self.persistent_workers, "prefetch_factor": self.prefetch_factor})

    tud.DataLoader.__init__ = __init__


def _patch_optimizer(options: dict, applied: dict) -> None:
    original = torch.optim.Optimizer.__init__
    seen = applied.setdefault("optimizers", [])

    @functools.wraps(original)
    def __init__(self, params, defaults):
        defaults = dict(defaults)
        for key in ("fused", "foreach"):
            if options.get(key) and key in defaults:
                defaults[key] = True
                other = "foreach" if key == "fused" else "fused"
                if other in defaults:  # torch refuses both at once
                    defaults[other] = False if key == "fused" else defaults[other]
        original(self, params, defaults)
        seen.append({"class": type(self).__name__, "fused": self.defaults.get("fused"), "foreach": self.defaults.get("foreach")})

    torch.optim.Optimizer.__init__ = __init__


def _patch_module_call(overrides: dict, applied: dict) -> None:
    """Autocast, compile and channels_last at top-level module calls: the arms' switch, on from
    the start; activation checkpointing wraps each model at its first call."""
    checkpointing = CheckpointSwitch(()) if overrides.get("activation_checkpointing") else None
    switch = ModuleCallSwitch(first_call=checkpointing.enable if checkpointing is not None else None)
    switch.install()
    switch.on(overrides, applied)
    if AUTOCAST_DTYPES.get(overrides.get("autocast") or "") is torch.float16:
        _install_grad_scaler(applied)


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
