"""Child side of source locations: the exact lines of the user's code behind the calls the rules
count, seen from Python during one warm-up step, written to ``sources.json``.

Why not the profiler's stacks: torch.profiler's ``with_stack`` Python tracer records function
calls, so an op's innermost user frame names the line its *function starts on* (``def step``),
not the ``loss.item()`` inside it, and its ops carry no stack of their own. A
``TorchFunctionMode`` sees each top-level torch call (``.item()``, ``F.linear``, ``x @ w``,
``.to("cuda")``) with its arguments and the live frame, so the line is exact and the dtype
autocast gives, the target device and the pin state are known. It runs for the last warm-up
step only (never a measured or profiled one) and costs that step a few microseconds per torch
call; a compiled model (torch.compile) is left alone, since a mode on the stack would make it
recompile.

It also records where ``advise apply`` writes each fix (:mod:`advisor.apply`): the line that built
each DataLoader that fed the step and each optimizer that stepped in it (``dataloader-built``,
``optimizer-built``), the top-level module calls (``model-call``, with the module's parameter
count: the model is the one that has them) and the ``backward()`` calls, and the script's own file
(``main``).
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from pathlib import Path
from types import FrameType

import msgspec
import torch
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.overrides import TorchFunctionMode
from torch.utils.hooks import RemovableHandle

from advisor.run_dir.atomic import write_json_atomic
from advisor.run_dir.seen import SourceSite, Sources
from advisor.analysis.sources import is_user_file

_SYNC = {"item": ".item()", "__float__": "float(tensor)", "__int__": "int(tensor)", "__bool__": "bool(tensor)",
         "tolist": ".tolist()", "cpu": ".cpu()", "numpy": ".numpy()", "nonzero": "nonzero", "masked_select": "masked_select",
         "unique": "unique"}
_MATMUL = {"linear", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "baddbmm", "einsum", "conv1d",
           "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"}
_COPY = {"to", "cuda", "copy_"}
_CALL_IMPL = torch.nn.Module._call_impl.__code__  # one frame of it per module call on the stack


def _user_frame(frame):
    """The innermost frame in the user's own files, from `frame` outwards (None: none)."""
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _first_tensor(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
    return None


class SourceCapture(TorchFunctionMode):
    """Counts the user's lines that call host-syncing, matmul and copy functions while active."""

    def __init__(self, path: Path | None = None) -> None:
        super().__init__()
        self.path = path  # where stop() writes sources.json
        self.sites: dict[str, Counter] = {"host-sync": Counter(), "matmul": Counter(), "h2d-copy": Counter(),
                                          "dataloader": Counter(), "dataloader-built": Counter(),
                                          "optimizer-built": Counter(), "model-call": Counter(), "backward": Counter()}
        self._params: dict[int, int] = {}  # parameters of each module called at the top level
        self._hook: RemovableHandle | None = None
        self.active = False
        self.skipped: str | None = None
        self.seconds = 0.0
        self._t0 = 0.0
        self._sync = torch.cuda.synchronize  # torch's own, while the capture wraps it (start, stop)
        self.done = False

    # the mode --------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        try:
            if not self.active:
                pass
            elif name in _SYNC or name in _MATMUL or name in _COPY:
                self._record(name, args, kwargs)
            elif name == "backward":
                self._add("backward", "backward()")
        except Exception:  # noqa: BLE001 - never break the user's step over a location
            pass
        return func(*args, **kwargs)

    def _record(self, name: str, args, kwargs) -> None:
        t = _first_tensor(args)
        if t is None:
            return
        if name in _SYNC:
            if name in ("cpu", "numpy", "tolist") and t.device.type == "cpu":
                return
            self._add("host-sync", _SYNC[name], device=t.device.type)
        elif name in _MATMUL:
            dtype = t.dtype
            if torch.is_autocast_enabled(t.device.type):
                dtype = torch.get_autocast_dtype(t.device.type)
            self._add("matmul", name, device=t.device.type, dtype=str(dtype).removeprefix("torch."))
        else:
            src, target, non_blocking = self._copy(name, t, args, kwargs)
            if src is not None and src.device.type == "cpu" and target not in (None, "cpu"):
                self._add("h2d-copy", f".{name}()", device=target, pinned=bool(src.is_pinned()),
                          non_blocking=bool(non_blocking))

    @staticmethod
    def _copy(name: str, t, args, kwargs):
        """(source tensor, target device type, non_blocking) of a copy call."""
        if name == "cuda":
            return t, "cuda", kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
        if name == "copy_":
            src = args[1] if len(args) > 1 else kwargs.get("src")
            return (src, t.device.type, kwargs.get("non_blocking", False)) if isinstance(src, torch.Tensor) else (None, None, False)
        device, _, non_blocking, _ = torch._C._nn._parse_to(*args[1:], **kwargs)
        return t, device.type if device is not None else None, non_blocking

    def _add(self, category: str, op: str, **extra) -> None:
        frame = _user_frame(sys._getframe(3))  # _record <- __torch_function__ <- the torch call
        if frame is not None:
            key = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, op, tuple(sorted(extra.items())))
            self.sites[category][key] += 1

    def _built(self, category: str, site: dict | None) -> None:
        """The line that built an object (advisor.probe.hooks.built_at), counted under the object's class."""
        if site:
            key = (site["file"], site["line"], site["function"], site.get("class") or "", (("via", site.get("via")),))
            self.sites[category][key] += 1

    def stepped(self, optimizer, site: dict | None) -> None:
        """An optimizer steps while active: the line that built it (advisor.probe.hooks.built_at)."""
        if self.active:
            self._built("optimizer-built", site)

    def _module_called(self, module, args) -> None:
        """A forward pre-hook while active: a module called at the top level (not from another's
        forward) is counted at the user's line that called it, with its parameter count."""
        try:
            frame, depth = sys._getframe(1), 0
            f: FrameType | None = frame
            while f is not None:
                depth += f.f_code is _CALL_IMPL
                f = f.f_back
            user = _user_frame(frame) if depth == 1 else None
            if user is None:
                return
            params = self._params.get(id(module))
            if params is None:
                params = self._params[id(module)] = sum(p.numel() for p in module.parameters())
            key = (user.f_code.co_filename, user.f_lineno, user.f_code.co_name, type(module).__name__,
                   (("params", params),))
            self.sites["model-call"][key] += 1
        except Exception:  # noqa: BLE001 - never break the user's step over a location
            pass

    def fetched(self, iterator, samples: int | None) -> None:
        """A DataLoader batch of `samples` was fetched while active: the Dataset's ``__getitem__``
        (called once per sample) and a user collate_fn (once per batch) are where its time goes."""
        if not self.active:
            return
        self._built("dataloader-built", getattr(iterator, "_advise_built_at", None))
        loader_fns = [(getattr(type(getattr(iterator, "_dataset", None)), "__getitem__", None), samples or 1),
                      (getattr(iterator, "_collate_fn", None), 1)]
        for fn, calls in loader_fns:
            code = getattr(fn, "__code__", None)
            if code is not None and is_user_file(code.co_filename):
                key = (code.co_filename, code.co_firstlineno, code.co_name, "DataLoader fetch", ())
                self.sites["dataloader"][key] += calls

    # one step ---------------------------------------------------------------------------
    def boundary(self, seen: int, warmup: int, source: str | None) -> None:
        """At each step boundary (`seen` counted so far): run through the last warm-up step, once."""
        if self.active:
            self.stop()
        elif not self.done and warmup >= 1 and seen == warmup:
            if source == "backward":
                # The boundary is inside Tensor.backward, a torch function: the mode could not
                # leave the stack there, and would then slow every measured step.
                self.skipped = "steps are counted from backward() calls, inside a torch function"
                self.done = True
                self._write()
                return
            self.start()

    def start(self) -> None:
        if self.active or self.done:
            return
        self.done = True
        _CURRENT[0] = self
        if _compiled():
            self.skipped = "the script compiles its model (torch.compile): a TorchFunctionMode would make it recompile"
            self._write()
            return
        self._t0 = time.perf_counter()
        self.__enter__()
        self._sync = torch.cuda.synchronize
        torch.cuda.synchronize = self._synchronize  # not a torch function: seen through a wrapper
        self._hook = register_module_forward_pre_hook(lambda module, args: self._module_called(module, args))
        self.active = True

    def _synchronize(self, *args, **kwargs):
        frame = _user_frame(sys._getframe(1))
        if frame is not None:
            self.sites["host-sync"][(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name,
                                     "torch.cuda.synchronize()", (("device", "cuda"),))] += 1
        return self._sync(*args, **kwargs)

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        _CURRENT[0] = None
        torch.cuda.synchronize = self._sync
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        stack = torch.overrides._get_current_function_mode_stack()
        if stack and stack[-1] is self:
            self.__exit__(None, None, None)
        else:  # the script pushed a mode of its own and kept it: ours goes when it is popped
            self.skipped = "another TorchFunctionMode was active at the end of the step"
        self.seconds = time.perf_counter() - self._t0
        self._write()

    def sources(self) -> Sources:
        sites = {}
        for category, counter in self.sites.items():
            rows = [SourceSite(file=f, line=line, function=fn, op=op, count=n, **dict(extra))
                    for (f, line, fn, op, extra), n in counter.most_common()]
            if rows:
                sites[category] = rows
        main = getattr(sys.modules.get("__main__"), "__file__", None)
        return Sources(captured_by="TorchFunctionMode over one warm-up step", precision="line",
                       step_s=round(self.seconds, 6), skipped=self.skipped, sites=sites,
                       main=os.path.abspath(main) if isinstance(main, str) else None)

    def _write(self) -> None:
        if self.path is not None:
            try:
                write_json_atomic(self.path, msgspec.to_builtins(self.sources()))
            except OSError:  # a full run dir: the run's timing matters more; probe.json says the rest
                pass


_CURRENT: list[SourceCapture | None] = [None]  # the capture running now, for a fork in its step


def _forked() -> None:
    """A DataLoader worker forked during the capture step: the mode (and its wrapper of
    torch.cuda.synchronize) must not stay on for the worker's whole life."""
    capture = _CURRENT[0]
    if capture is not None and capture.active:
        capture.path = None  # the parent writes sources.json, not its workers
        capture.stop()


os.register_at_fork(after_in_child=_forked)


def _compiled() -> bool:
    utils = sys.modules.get("torch._dynamo.utils")
    try:
        return bool(utils and utils.counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - an unknown dynamo layout: assume not compiled
        return False
