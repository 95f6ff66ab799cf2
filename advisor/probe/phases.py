"""Evaluation passes and checkpoint saves inside the training loop, timed as phases of their own.

The step that crosses an epoch's end holds the validation pass and the checkpoint: read as a
training step, it was four times the others and was blamed on the machine, and the validation
loader's batches were counted as training samples. Here each such phase is timed on the training
thread and handed to the step it falls in (:meth:`advisor.probe.clock.StepClock.phase_done`); the
parent keeps it out of the step's training time (:func:`advisor.analysis.steptime.durations`).

An evaluation is seen two ways:

- the batches of a DataLoader read with gradients off (``torch.no_grad``, ``inference_mode``),
  from its first batch's wait to its iterator's end (or the next batch read with them on); a
  loader that fed a backward is a training one whatever mode it is read in;
- a module switched to eval mode and back (``model.eval()`` ... ``model.train()``) with no
  backward between: nanoGPT's ``estimate_loss``, the frameworks' validation loops. A backward in
  between means the script trains in eval mode (frozen batch norm): no evaluation then.

A checkpoint is a ``torch.save`` call (outside the loader's worker processes), a distributed
checkpoint's (``torch.distributed.checkpoint.save``, ``async_save``: its blocking part) or a
safetensors file's (``safetensors.torch.save_file``, ``save_model``). Those two modules are patched
when the script imports them (:class:`_AfterImport`): importing torch.distributed.checkpoint up front
would cost every run 0.46 s. An evaluation that
runs every step (an EMA's or a teacher's forward) is timed too; the parent leaves it in the step
when it ran in most steps (:data:`advisor.analysis.steptime.PHASE_MOST_STEPS`).
"""

from __future__ import annotations

import functools
import importlib.abc
import os
import sys
import time
from types import ModuleType
from typing import Any, Callable, Sequence

import torch

EVAL, CHECKPOINT = "evaluation", "checkpoint"
# checkpoint writers besides torch.save, by module: each function's call is a checkpoint phase
SAVES = {"torch.distributed.checkpoint": ("save", "async_save", "save_state_dict"),
         "safetensors.torch": ("save_file", "save_model")}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Patches a module of :data:`SAVES` once it is imported: finds its spec through the other
    finders and runs `patch` on the module after the loader executed it."""

    def __init__(self, patch: Callable[[ModuleType, Sequence[str]], None]) -> None:
        self.patch = patch

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in SAVES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is None:
                continue
            loader = spec.loader
            if loader is not None and hasattr(loader, "exec_module"):
                run = loader.exec_module

                def exec_module(module: ModuleType, run: Callable[[ModuleType], None] = run) -> None:
                    run(module)
                    self.patch(module, SAVES[name])

                loader.exec_module = exec_module  # type: ignore[method-assign]  # this spec's own loader
            return spec
        return None


class PhaseWatch:
    """What the hooks tell it (batches, backward, mode switches, saves) turned into phase spans,
    each given to `done(name, seconds)` when it ends."""

    def __init__(self, done: Callable[[str, float], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.done, self.clock, self.pid = done, clock, os.getpid()
        self.train_loaders: set[int] = set()
        self.last_loader: int | None = None
        self.key: tuple[str, int] | None = None  # the open evaluation: ("loader" | "module", its id)
        self.started = 0.0
        self.saved_inside = 0.0  # checkpoint seconds inside the open evaluation (counted as the checkpoint's)
        self._mode_depth = 0

    def fetched(self, loader: int, wait_s: float) -> bool:
        """A batch from `loader`, after `wait_s`: whether it is an evaluation's (not the step's). A
        batch read with gradients off (under ``no_grad`` or ``inference_mode``) opens an evaluation,
        unless its loader has fed a backward; one read with them on closes an evaluation another
        loader opened (left before its end: a `break`), and is the training's even inside
        ``model.eval()``. A loader the script (or an arm) builds anew is never taken for an
        evaluation's by being new."""
        if os.getpid() != self.pid:
            return False
        now, grad = self.clock(), torch.is_grad_enabled()
        if self.key is not None and self.key[0] == "loader" and self.key[1] != loader and grad:
            self._close(now - wait_s)
        if self.key is not None and self.key[0] == "loader":
            return True
        if not grad and (self.key is not None or loader not in self.train_loaders):
            if self.key is None:
                self._open(("loader", loader), now - wait_s)
            return True  # inside model.eval(): a batch read with gradients on is the training's
        self.last_loader = loader
        return False

    def exhausted(self, loader: int) -> None:
        if self.key == ("loader", loader) and os.getpid() == self.pid:
            self._close(self.clock())

    def backward(self) -> None:
        """A backward: an open evaluation was training after all (in eval mode: frozen batch norm;
        or on batches read under no_grad), so it is dropped, and its loader is a training one."""
        if os.getpid() != self.pid:
            return
        if self.key is not None:
            if self.key[0] == "loader":
                self.train_loaders.add(self.key[1])
            self.key = None
        if self.last_loader is not None:
            self.train_loaders.add(self.last_loader)

    def mode(self, module: int, training: bool) -> None:
        """The outermost ``Module.train(mode)`` call (its children's are the same switch)."""
        if os.getpid() != self.pid:
            return
        if not training and self.key is None:
            self._open(("module", module), self.clock())
        elif training and self.key == ("module", module):
            self._close(self.clock())

    def saved(self, seconds: float) -> None:
        if os.getpid() != self.pid:
            return
        if self.key is not None:
            self.saved_inside += seconds
        self.done(CHECKPOINT, seconds)

    def _open(self, key: tuple[str, int], at: float) -> None:
        self.key, self.started, self.saved_inside = key, at, 0.0

    def _close(self, at: float) -> None:
        seconds = max(0.0, at - self.started - self.saved_inside)
        self.key = None
        self.done(EVAL, seconds)

    # the hooks ------------------------------------------------------------------------------

    def install(self) -> None:
        """Patch ``Module.train`` (its outermost call) and ``torch.save``; the DataLoader and backward
        hooks (advisor.probe.hooks) call :meth:`fetched`, :meth:`exhausted` and :meth:`backward`."""
        original_train = torch.nn.Module.train
        watch = self

        @functools.wraps(original_train)
        def train(module: torch.nn.Module, mode: bool = True) -> torch.nn.Module:
            watch._mode_depth += 1
            try:
                return original_train(module, mode)
            finally:
                watch._mode_depth -= 1
                if watch._mode_depth == 0:
                    watch.mode(id(module), bool(mode))

        torch.nn.Module.train = train  # type: ignore[method-assign, assignment]  # the probe's hook, patched in
        original_save = torch.save

        @functools.wraps(original_save)
        def save(*args: object, **kwargs: object) -> None:
            t0 = time.monotonic()
            try:
                return original_save(*args, **kwargs)  # type: ignore[arg-type]
            finally:
                watch.saved(time.monotonic() - t0)

        torch.save = save

        def patch(module: ModuleType, names: Sequence[str]) -> None:
            for name in names:
                original = getattr(module, name, None)
                if callable(original) and not getattr(original, "_advise_timed", False):
                    setattr(module, name, _timed(original, watch.saved))

        for name, names in SAVES.items():
            if name in sys.modules:
                patch(sys.modules[name], names)
        sys.meta_path.insert(0, _AfterImport(patch))


def _timed(original: Callable[..., Any], saved: Callable[[float], None]) -> Callable[..., Any]:
    """`original`, its calls' seconds handed to `saved` (a checkpoint phase)."""
    @functools.wraps(original)
    def call(*args: object, **kwargs: object) -> Any:
        t0 = time.monotonic()
        try:
            return original(*args, **kwargs)
        finally:
            saved(time.monotonic() - t0)

    call._advise_timed = True  # type: ignore[attr-defined]  # never wrapped twice
    return call
