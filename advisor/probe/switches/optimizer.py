"""torch.optim optimizers built (or switched) with fused= / foreach=."""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.optim.optimizer import _device_dtype_check_for_fused

from .base import NotSwitchable


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

        def __init__(self, params, defaults, *args, **kwargs) -> None:
            if switch.construct is not None:  # on from the start: the optimizer is built with the flag
                defaults = _with_flag(defaults, switch.construct)
            original(self, params, defaults, *args, **kwargs)
            switch.optimizers.add(self)
            if switch.construct is not None and switch.flag(switch.construct) in self.defaults:
                switch.applied.setdefault("optimizers", []).append(
                    {"class": type(self).__name__, "fused": self.defaults.get("fused"), "foreach": self.defaults.get("foreach")})

        torch.optim.Optimizer.__init__ = __init__  # type: ignore[method-assign]  # the switch's, patched in

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
        except Exception as exc:  # torch refused, however it says so: this process cannot have it (re-raised as NotSwitchable)
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
