"""The model's calls (autocast, compile, channels_last, a Lightning Trainer's precision) and activation checkpointing."""

from __future__ import annotations

import torch

from ..memory import CheckpointSwitch
from ..module_call import AUTOCAST_DTYPES, ModuleCallSwitch
from ..trainer_precision import PRECISION, TrainerPrecision
from ..hooks import Observed
from .base import NotSwitchable


class ModuleSwitch(ModuleCallSwitch):
    """:class:`ModuleCallSwitch`, with float16's GradScaler: only from the start, where it can wrap
    the script's own backward and step. In a Lightning job autocast is the Trainer's own precision
    plugin instead (:mod:`advisor.probe.trainer_precision`), once the first step has found it."""

    def __init__(self, observed: Observed | None = None) -> None:
        super().__init__()
        self.trainer: TrainerPrecision | None = None
        if observed is not None:
            observed.on_trainer.append(self._found)

    def _found(self, trainer: object) -> None:
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
        if not self.checkpoint_biggest(overrides, applied):
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

    def __init__(self, *args, **kwargs) -> None:
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
    torch.optim.Optimizer.__init__ = __init__  # type: ignore[method-assign]  # the GradScaler's wiring, patched in
    applied["grad_scaler"] = True
