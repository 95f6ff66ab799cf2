"""Autocast the way a Lightning job turns it on: the Trainer's own precision plugin, swapped at a
step boundary, instead of a wrapper at the model's call.

An arm must measure the change the user will make. Lightning's ``precision="bf16-mixed"`` enters
``torch.autocast(device, bfloat16, cache_enabled=False)`` around the whole ``training_step`` (the
loss and what it logs too); the module-call form (:mod:`advisor.probe.module_call`) casts each
weight once per step and leaves the loss outside. On Lightning's basics/transformer.py on a CPU the
module-call form read 1.94-1.96x where ``precision="bf16-mixed"`` by hand gave 1.50x. The plugin
also owns float16's GradScaler, so under Lightning float16 switches live too.

Only a Trainer at Lightning's plain precision (``"32-true"``) on a single-device or DDP strategy is
switched: FSDP's and DeepSpeed's precision plugins are their own, and a job already at a mixed
precision has nothing to gain from this arm. Elsewhere the module-call form stays.
"""

from __future__ import annotations

import importlib
import weakref
from typing import Any

import torch

PRECISION = {torch.bfloat16: "bf16-mixed", torch.float16: "16-mixed"}
_PLAIN = "32-true"
_STRATEGIES = ("SingleDeviceStrategy", "DDPStrategy")


class TrainerPrecision:
    """The precision of one Lightning Trainer, switched on and off between steps."""

    def __init__(self, trainer: Any) -> None:
        self._trainer = weakref.ref(trainer)
        self._saved: tuple[Any, Any] | None = None  # (strategy, its plugin before the arm)

    def on(self, dtype: torch.dtype) -> bool:
        """The Trainer's precision set to `dtype`'s mixed form; False where this Trainer cannot be."""
        strategy: Any = getattr(self._trainer(), "strategy", None)  # a Lightning Strategy (mixed is None without one)
        mixed = _mixed_precision_class(strategy)
        if mixed is None or dtype not in PRECISION:
            return False
        plugin = getattr(strategy, "_precision_plugin", None)
        self._saved = (strategy, plugin)
        strategy.precision_plugin = mixed(PRECISION[dtype], strategy.root_device.type)
        return True

    def off(self) -> None:
        if self._saved is not None:
            strategy, plugin = self._saved
            strategy.precision_plugin = plugin
            self._saved = None


def _mixed_precision_class(strategy: Any) -> type | None:
    """Lightning's ``MixedPrecision`` from the package the strategy came from (``lightning`` or
    ``pytorch_lightning``), where the strategy is one this arm may switch."""
    if strategy is None or type(strategy).__name__ not in _STRATEGIES:
        return None
    if str(getattr(strategy.precision_plugin, "precision", "")) != _PLAIN:
        return None
    root = type(strategy).__module__.split(".")[0]
    path = "lightning.pytorch.plugins.precision" if root == "lightning" else f"{root}.plugins.precision"
    try:
        return importlib.import_module(path).MixedPrecision
    except (ImportError, AttributeError):
        return None
