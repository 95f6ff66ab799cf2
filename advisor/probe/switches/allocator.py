"""The CUDA allocator's settings, before its first allocation."""

from __future__ import annotations

import os

import torch

from .base import NotSwitchable


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
