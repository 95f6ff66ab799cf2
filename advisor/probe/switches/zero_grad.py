"""zero_grad(set_to_none=False) calls given set_to_none=True."""

from __future__ import annotations

import functools

import torch


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

        cls.zero_grad = zero_grad  # type: ignore[method-assign]  # the switch's, patched in


class ZeroGradSwitch:
    def __init__(self) -> None:
        self.applied: dict | None = None  # the window's applied while switched on

    def install(self) -> None:
        force_set_to_none(lambda: self.applied)

    def on(self, overrides: dict, applied: dict, *, live: bool = True) -> None:
        self.applied = applied

    def off(self) -> None:
        self.applied = None
