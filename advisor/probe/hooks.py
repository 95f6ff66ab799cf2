"""Global hooks installed in the child before the user's script runs; no user code is edited.

Each hook feeds the :class:`~advisor.probe.clock.StepClock` and records what the script
configured (optimizers, DataLoaders, the device it trains on) for the rules to read.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.utils.data.dataloader as dl
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from .clock import StepClock


class Observed:
    """What the script set up, as seen by the hooks; plain data for probe.json."""

    def __init__(self) -> None:
        self.optimizers: dict[int, dict] = {}
        self.dataloaders: dict[int, dict] = {}
        self.device: str | None = None
        self.loss_dtype: str | None = None

    def to_dict(self) -> dict:
        return {
            "device": self.device or "cpu",
            "loss_dtype": self.loss_dtype,
            "optimizers": list(self.optimizers.values()),
            "dataloaders": list(self.dataloaders.values()),
        }


def batch_size(batch: Any, depth: int = 0) -> int | None:
    """Leading dimension of the first tensor in a (nested) batch, or None."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if depth > 3:
        return None
    if isinstance(batch, dict):
        items = batch.values()
    elif isinstance(batch, (list, tuple)):
        items = batch
    else:
        items = [getattr(batch, name) for name in ("input_ids", "x", "data") if hasattr(batch, name)]
    for item in items:
        n = batch_size(item, depth + 1)
        if n is not None:
            return n
    return None


def _describe_optimizer(opt: torch.optim.Optimizer) -> dict:
    params = [p for g in opt.param_groups for p in g["params"]]
    first = params[0] if params else None
    defaults = opt.defaults
    return {
        "class": type(opt).__name__,
        "fused": defaults.get("fused"),
        "foreach": defaults.get("foreach"),
        "n_params": len(params),
        "n_elements": int(sum(p.numel() for p in params)),
        "device": str(first.device) if first is not None else None,
        "param_dtype": str(first.dtype).replace("torch.", "") if first is not None else None,
    }


def _describe_loader(loader: Any) -> dict:
    dataset = getattr(loader, "dataset", None)
    try:
        n = len(dataset)  # type: ignore[arg-type]
    except Exception:
        n = None
    return {
        "num_workers": loader.num_workers,
        "pin_memory": bool(loader.pin_memory),
        "batch_size": loader.batch_size,
        "persistent_workers": bool(getattr(loader, "persistent_workers", False)),
        "prefetch_factor": getattr(loader, "prefetch_factor", None),
        "dataset": type(dataset).__name__,
        "dataset_len": n,
    }


def install(clock: StepClock, observed: Observed) -> None:
    """Patch torch so every step boundary, batch and backward reaches `clock`."""
    started: dict[int, float] = {}

    def pre_hook(opt, args, kwargs):
        started[id(opt)] = clock.optimizer_pre()

    def post_hook(opt, args, kwargs):
        if id(opt) not in observed.optimizers:
            observed.optimizers[id(opt)] = _describe_optimizer(opt)
            device = observed.optimizers[id(opt)]["device"]
            observed.device = observed.device or (device and torch.device(device).type)
        clock.optimizer_post(opt, started.pop(id(opt), None))

    original_opt_init = torch.optim.Optimizer.__init__

    def opt_init(self, *args, **kwargs):
        original_opt_init(self, *args, **kwargs)
        clock.optimizer_created = True

    torch.optim.Optimizer.__init__ = opt_init
    register_optimizer_step_pre_hook(pre_hook)
    register_optimizer_step_post_hook(post_hook)

    base_iter = dl._BaseDataLoaderIter
    orig_init, orig_next = base_iter.__init__, base_iter.__next__

    def iter_init(self, loader, *args, **kwargs):
        orig_init(self, loader, *args, **kwargs)
        if id(loader) not in observed.dataloaders:
            observed.dataloaders[id(loader)] = _describe_loader(loader)
        if loader.num_workers:
            clock.require_warmup(loader.num_workers * (loader.prefetch_factor or 2) + 1)

    def iter_next(self):
        t0 = time.monotonic()
        batch = orig_next(self)  # StopIteration passes through untouched
        clock.batch_fetched(time.monotonic() - t0, batch_size(batch))
        return batch

    base_iter.__init__ = iter_init
    base_iter.__next__ = iter_next

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
        clock.backward_done(loss, time.monotonic() - t0)
        return result

    torch.autograd.backward = backward
