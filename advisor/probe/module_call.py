"""One ``Module.__call__`` wrapper: autocast, ``torch.compile`` and channels_last at top-level module calls.

Both ways a fix is measured use it: an in-process arm switches it on and off at step boundaries
(:mod:`advisor.probe.arms`); a fresh run switches it on before the script starts
(:mod:`advisor.probe.overrides`), both through :mod:`advisor.probe.switches`. Only the outermost module call of a thread (depth 0) is
touched: submodules, and the calls a compiled module makes back into ``Module.__call__``, pass
through plain.

Compilation wraps the module's ``_call_impl`` (its hooks, then ``forward``), not the module:
``torch.compile(module)`` calls ``type(module).__call__`` again from inside the compiled frame,
which would re-enter whatever wraps the model's class (the probe's model-input sample counter
counted every sample twice that way, and dynamo recompiled on the counter's state). Dynamo skips
frames in torch's own files, so a model whose ``forward`` is torch's (``nn.Sequential``) is called
through a frame of ours, as ``torch.compile(module)`` does, or nothing would be compiled. One
compiled callable per (module, mode): each mode of the compile ladder compiles once.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any, Callable

import torch

compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or torch._dynamo.is_compiling
AUTOCAST_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
_compile_cache: list[str] = []  # the run dir's folder for the compile arms' Inductor cache (compile_cache_in)


def compile_cache_in(path: str | os.PathLike) -> None:
    """Where a compile arm's Inductor cache goes: the run dir (layout.RunFiles.compile_cache),
    removed at the run's end. Inductor's default is $TMPDIR/torchinductor_$USER, outside the run dir."""
    _compile_cache[:] = [os.fspath(path)]


def _cache_inside_the_run_dir() -> None:
    """Before an arm's first compile. A TORCHINDUCTOR_CACHE_DIR of the user's own is kept; Inductor's
    default (which importing torch._dynamo writes into the environment) is replaced. Inductor's
    precompiled header (150 MB on a CPU) goes to the default folder whatever the variable says,
    from its compile workers too: the arm builds none (a small MLP's cold compile took 12.2 s
    without it and 14.7 s with it on 2 cores; the kernels are the same)."""
    if not _compile_cache:
        return
    try:
        from torch._inductor import config as inductor  # torch._inductor: 1 s, only where compile is used
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir  # torch._inductor: 1 s, only where compile is used
        config: Any = inductor  # its settings differ between torch versions (hasattr below)
        default: str | None = default_cache_dir()
    except Exception:  # noqa: BLE001 - another torch: only an unset variable is replaced
        config, default = None, None
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR") not in (None, default):
        return
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _compile_cache[0]
    if "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS" not in os.environ:
        os.environ["TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"] = "0"  # workers started from here on
        if hasattr(config, "cpp_cache_precompile_headers"):
            config.cpp_cache_precompile_headers = False


class Depth(threading.local):
    """How deep this thread is in calls a wrapper counts (0: outside them)."""

    depth = 0


def has_conv(module: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in module.modules())


def device_type(module: torch.nn.Module, args: tuple) -> str:
    for value in list(args) + [p for p in module.parameters(recurse=True)][:1]:
        if isinstance(value, torch.Tensor):
            return value.device.type
    return "cpu"


def _has_parameters(module: torch.nn.Module) -> bool:
    return any(True for _ in module.parameters())


def compile_call(module: torch.nn.Module, mode: bool | str) -> Callable:
    """`module`'s ``_call_impl`` through torch.compile in `mode` (True: the default)."""
    call = module._call_impl
    try:
        from torch._dynamo import trace_rules  # torch._dynamo: imported by torch.compile anyway
        skipped = bool(trace_rules.check(module.forward))
    except Exception:  # noqa: BLE001 - another torch: compile the call as it is
        skipped = False
    if skipped:  # a forward in torch's files: dynamo would run it eagerly, as it does every frame of torch's
        plain = call

        def call(*args, **kwargs):
            return plain(*args, **kwargs)
    return torch.compile(call, mode=mode if isinstance(mode, str) else None)  # True: the default mode


def _room_for_another_mode(modes: int) -> None:
    """Every mode's compiled entries for the model's frames count toward dynamo's one recompile
    limit (8), so the third mode of a ladder could find it spent and run uncompiled: each mode gets
    the limit a script compiling that mode alone has."""
    from torch._dynamo import config  # torch._dynamo: imported by the first mode's compile

    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    base = _limit_base.setdefault(name, getattr(config, name))
    setattr(config, name, max(getattr(config, name), base * modes))


_limit_base: dict[str, int] = {}  # dynamo's recompile limit before the ladder raised it


def _cast(x: Any, dtype: torch.dtype, to: torch.dtype) -> Any:
    """`x` with its tensors of `dtype`, nested in tuples (named ones too), lists and dicts, cast to `to`;
    a dict of its own class (a Hugging Face ModelOutput) is changed in place, as only its class builds it."""
    if isinstance(x, torch.Tensor):
        return x.to(to) if x.dtype == dtype else x
    if isinstance(x, tuple):
        items = [_cast(v, dtype, to) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    if isinstance(x, list):
        return type(x)(_cast(v, dtype, to) for v in x)
    if isinstance(x, dict):
        if type(x) is not dict:
            for key, value in list(x.items()):
                x[key] = _cast(value, dtype, to)
            return x
        return {key: _cast(value, dtype, to) for key, value in x.items()}
    return x


def _outputs_fp32(out: Any, dtype: torch.dtype) -> Any:
    """`out` with its tensors of `dtype` cast to fp32: what the loss reads where the user's fix
    autocasts the forward and the loss (the loss's ops are on autocast's fp32 list) or sets a
    framework's bf16 flag (Accelerate's convert_outputs_to_fp32, Lightning's convert_output). A loss
    read on the bf16 output instead ran faster than either: Fabric's language model read 2.2-2.45x
    where its flag made by hand read 1.77x and the forward and loss under autocast 1.93x (the forward
    alone, its output left in bf16: 2.54x)."""
    return _cast(out, dtype, torch.float32)


def _cast_back(module: torch.nn.Module, args: tuple, kwargs: dict, dtype: torch.dtype) -> tuple[tuple, dict]:
    """`args` and `kwargs` with the tensors of `dtype` (nested, :func:`_cast`) cast to the dtype of
    `module`'s parameters, as a run that never autocast would pass them."""
    own = next((p.dtype for p in module.parameters() if p.is_floating_point()), None)
    if own is None or own == dtype:
        return args, kwargs
    return _cast(args, dtype, own), _cast(kwargs, dtype, own)


class ModuleCallSwitch:
    """One ``Module.__call__`` wrapper for the whole run; :meth:`on` / :meth:`off` set its flags.

    `first_call(module, applied)`, when given, runs once per top-level module while the switch
    is on (activation checkpointing wraps the model there in a fresh run)."""

    def __init__(self, first_call: Callable[[torch.nn.Module, dict], Any] | None = None) -> None:
        self.autocast: torch.dtype | None = None
        # autocast's dtype once it is switched off: its outputs the script carries into the next step
        # (an LSTM's hidden state) are cast back at the model's entrance (wlm-lstm's baseline window
        # after bf16 raised in oneDNN's LSTM on a bf16 hidden state, ending every arm after it)
        self.carried: torch.dtype | None = None
        self.compile: bool | str = False  # True: torch.compile's default mode; else the mode
        self.channels_last = False
        self.applied: dict = {}
        self.compiled: dict[tuple[int, bool | str], Any] = {}  # (id(module), mode) -> its compiled call
        self.compile_s = 0.0  # first calls of freshly compiled modules (compilation) in this window
        self.top: weakref.WeakSet = weakref.WeakSet()  # top-level modules seen (for channels_last)
        self.converted: weakref.WeakSet = weakref.WeakSet()
        self.first_call = first_call
        self._seen: set[int] = set()
        self._state = Depth()

    def install(self) -> None:
        original = torch.nn.Module.__call__
        state = self._state
        switch = self

        def __call__(self, *args, **kwargs):
            if compiling() or state.depth:  # traced by dynamo: plain, no guard on our thread-local
                return original(self, *args, **kwargs)
            state.depth += 1
            try:
                return switch._call(original, self, args, kwargs)
            finally:
                state.depth -= 1

        torch.nn.Module.__call__ = __call__  # type: ignore[method-assign]  # the switch's own call, patched in

    @property
    def active(self) -> bool:
        return bool(self.autocast or self.carried or self.compile or self.channels_last or self.first_call)

    def _call(self, original, module, args, kwargs):
        try:
            self.top.add(module)
        except TypeError:
            pass
        if not self.active:
            return original(module, *args, **kwargs)
        if self.first_call is not None and id(module) not in self._seen:
            self._seen.add(id(module))
            self.first_call(module, self.applied)
        target = original.__get__(module)
        if self.carried is not None and self.autocast is None:
            args, kwargs = _cast_back(module, args, kwargs, self.carried)
        if self.channels_last and has_conv(module):
            self._to_channels_last(module)
            args = tuple(a.contiguous(memory_format=torch.channels_last) if isinstance(a, torch.Tensor) and a.dim() == 4
                         else a for a in args)
        fresh = False
        if self.compile and _has_parameters(module):
            fn = self.compiled.get((id(module), self.compile))
            if fn is None:
                _cache_inside_the_run_dir()
                fn = self.compiled[(id(module), self.compile)] = compile_call(module, self.compile)
                fresh = True
                modes = sum(1 for key in self.compiled if key[0] == id(module))
                if modes > 1:
                    _room_for_another_mode(modes)
            self.applied["compile"] = self.compile
            target = fn
        t0 = time.monotonic()
        try:
            if self.autocast is not None:
                with torch.autocast(device_type(module, args), dtype=self.autocast):
                    self.applied["autocast"] = str(self.autocast).replace("torch.", "")
                    out = target(*args, **kwargs)
                return _outputs_fp32(out, self.autocast)
            return target(*args, **kwargs)
        finally:
            if fresh:
                self.compile_s += time.monotonic() - t0

    def _to_channels_last(self, module: torch.nn.Module) -> None:
        if module not in self.converted:
            module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stub lacks memory_format
            self.converted.add(module)
        self.applied["channels_last"] = True

    def on(self, overrides: dict, applied: dict) -> None:
        self.applied = applied
        self.compile_s = 0.0
        self.autocast = AUTOCAST_DTYPES.get(overrides.get("autocast") or "")
        self.compile = overrides.get("compile") or False
        if overrides.get("channels_last"):
            self.channels_last = True
            for module in list(self.top):  # the model seen so far: converted now, not in a timed step
                if has_conv(module):
                    self._to_channels_last(module)

    def off(self) -> None:
        self.carried = self.autocast or self.carried
        self.autocast, self.compile = None, False
        if self.channels_last:
            self.channels_last = False
            for module in list(self.converted):
                module.to(memory_format=torch.contiguous_format)
            self.converted = weakref.WeakSet()
