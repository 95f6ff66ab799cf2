"""One run, many arms: the profiled child keeps running and measures the experiments' arms itself.

After the measured window the child writes ``probe.json`` (``"phase": "window-done"``), says
so in ``steps{r}.jsonl`` and waits at that step boundary for the parent's ``plan{r}.json``:
``{"round": N, "windows": [{"arm", "overrides", "warmup", "steps"}, ...]}``. Each window
switches its overrides on at a step boundary (the previous window's off first), runs `warmup`
untimed and `steps` timed steps (one ``"phase": "arm"`` line each) and ends with one line in
``arms{r}.jsonl`` saying what really took effect. ``{"phase": "plan-done"}`` ends a plan; an
empty plan, no plan within ``plan_timeout_s`` or a ``stop{r}`` file ends the run as today.

The switchers change a live process at a step boundary, so the script is never edited:

- backend settings (matmul precision, cudnn.benchmark, threads): set, and restored after;
- ``autocast`` bfloat16, ``compile``, ``channels_last``: one ``Module.__call__`` wrapper,
  installed once, reads the window's flags at top-level module calls (float16 needs a
  GradScaler around the script's own backward/step: not switchable);
- ``optimizer`` foreach / fused: every live torch.optim optimizer's param_groups (and, for
  fused, its ``step`` state tensors moved where the fused kernels want them);
- ``zero_grad_set_to_none``: one ``zero_grad`` wrapper, installed once, on while the window says so;
- ``dataloader`` / ``batch_size_scale``: the iterator the script consumes is served by a
  substitute DataLoader (same dataset and collate_fn, the window's keywords) whose batches draw
  their indices from the original iterator's own index stream, so the script's epochs stay
  whole; indices the substitute prefetched but never served go back to the original stream.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import traceback
import weakref
from collections import deque
from pathlib import Path
from typing import Any, Callable

import torch
import torch.utils.data.dataloader as dl
from torch.optim.optimizer import _device_dtype_check_for_fused

from advisor.overrides import problem
from .clock import ProbeDone
from .overrides import force_set_to_none, tf32_blocked
from .module_call import ModuleCallSwitch
from .memory import CheckpointSwitch, WindowPeak, persistent_bytes, rss_high_water, tensor_bytes

POLL_S = 0.02
NOT_SWITCHABLE = {"autocast": ("float16",)}  # fp16 needs a GradScaler around the script's own backward/step


# --- backend settings -------------------------------------------------------------------------

class BackendSwitch:
    def __init__(self) -> None:
        self.saved: dict[str, Any] = {}

    def on(self, overrides: dict, applied: dict) -> None:
        if "float32_matmul_precision" in overrides:
            self.saved["float32_matmul_precision"] = torch.get_float32_matmul_precision()
            torch.set_float32_matmul_precision(overrides["float32_matmul_precision"])
            if not tf32_blocked():
                applied["float32_matmul_precision"] = torch.get_float32_matmul_precision()
        if overrides.get("cudnn_benchmark"):
            self.saved["cudnn_benchmark"] = torch.backends.cudnn.benchmark
            torch.backends.cudnn.benchmark = True
            applied["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
        if "torch_threads" in overrides:
            self.saved["torch_threads"] = torch.get_num_threads()
            torch.set_num_threads(int(overrides["torch_threads"]))
            applied["torch_threads"] = torch.get_num_threads()

    def off(self) -> None:
        saved, self.saved = self.saved, {}
        if "float32_matmul_precision" in saved:
            torch.set_float32_matmul_precision(saved["float32_matmul_precision"])
        if "cudnn_benchmark" in saved:
            torch.backends.cudnn.benchmark = saved["cudnn_benchmark"]
        if "torch_threads" in saved:
            torch.set_num_threads(saved["torch_threads"])


# --- optimizers: foreach / fused --------------------------------------------------------------------

class NotSwitchable(Exception):
    """This key cannot be switched in this process (the reason is the message)."""


class OptimizerSwitch:
    def __init__(self) -> None:
        self.optimizers: weakref.WeakSet = weakref.WeakSet()
        self.saved: list[tuple[dict, str, Any]] = []  # (group, key, old value)
        self.moved: list[tuple[dict, torch.Tensor]] = []  # (state, old step tensor)

    def install(self) -> None:
        original = torch.optim.Optimizer.__init__
        track = self.optimizers

        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            track.add(self)

        torch.optim.Optimizer.__init__ = __init__

    def on(self, options: dict, applied: dict) -> None:
        key = "fused" if options.get("fused") else "foreach"
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
        except Exception as exc:  # noqa: BLE001 - torch refused: this process cannot have it
            self.off()
            applied.pop("optimizers", None)
            raise NotSwitchable(f"{type(exc).__name__}: {exc}") from exc

    def off(self) -> None:
        for group, key, old in reversed(self.saved):
            group[key] = old
        for state, old in reversed(self.moved):
            if isinstance(state.get("step"), torch.Tensor):
                state["step"] = state["step"].to(device=old.device, dtype=old.dtype)
        self.saved, self.moved = [], []


# --- zero_grad(set_to_none=False) -> set_to_none=True ------------------------------------------------

class ZeroGradSwitch:
    def __init__(self) -> None:
        self.applied: dict | None = None  # the window's applied while switched on

    def install(self) -> None:
        force_set_to_none(lambda: self.applied)

    def on(self, overrides: dict, applied: dict) -> None:
        self.applied = applied

    def off(self) -> None:
        self.applied = None


# --- DataLoader: a substitute loader fed from the original iterator's index stream ---------------

class _Pull:
    """A batch_sampler that pulls each batch's indices from the original iterator's own stream:
    `scale` original batches per batch, or (scale below 1) each original batch cut in 1/scale parts."""

    def __init__(self, orig: Any, scale: float) -> None:
        self.orig = orig
        self.scale = int(scale) if scale >= 1 else 1
        self.parts = round(1 / scale) if scale < 1 else 1
        self.handed: deque = deque()  # per substitute batch: the original batches' index lists
        self.closed = False

    def __iter__(self):
        while not self.closed:
            group = []
            for _ in range(self.scale):
                try:
                    group.append(next(self.orig._sampler_iter))
                except StopIteration:
                    break
            if not group:
                return
            if self.parts > 1:
                indices = list(group[0])
                size = -(-len(indices) // self.parts)
                for k in range(0, len(indices), size):
                    if self.closed:
                        return
                    self.handed.append([indices[k:k + size]])
                    yield indices[k:k + size]
                continue
            self.handed.append(group)
            yield [i for indices in group for i in indices]
            if len(group) < self.scale:
                return


class _Substitute:
    def __init__(self, loader: Any, it: Any, pull: _Pull) -> None:
        self.loader, self.it, self.pull = loader, it, pull

    def close(self, orig: Any) -> None:
        """Stop its workers; give the indices it took but never served back to the original stream."""
        self.pull.closed = True
        shutdown = getattr(self.it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        unserved = [indices for group in self.pull.handed for indices in group]
        self.pull.handed.clear()
        if unserved:
            orig._sampler_iter = itertools.chain(unserved, orig._sampler_iter)


SUBSTITUTE_TIMEOUT_S = 120.0  # a substitute loader's wait for one batch from its workers


class DataLoaderSwitch:
    """Serve the script's ``next()`` from a substitute DataLoader during a window."""

    def __init__(self, observed: Any) -> None:
        self.observed = observed
        self.kwargs: dict | None = None  # the window's DataLoader keywords (None: no dataloader switch)
        self.scale = 1
        self.applied: dict = {}
        self.current: Any = None  # weakref to the iterator the script consumed last
        self.subs: dict[int, tuple[Any, _Substitute]] = {}
        self.build_s = 0.0
        self.error: str | None = None
        self._next = None

    def install(self) -> None:
        """Before hooks.install: the hooks' timing wrapper then sits outside this one."""
        base = dl._BaseDataLoaderIter
        orig_init, orig_next, orig_reset = base.__init__, base.__next__, base._reset
        self._next = orig_next
        switch = self

        def __init__(self, loader, *args, **kwargs):
            orig_init(self, loader, *args, **kwargs)
            self._advise_loader = weakref.ref(loader)

        def _reset(self, loader, first_iter=False):
            orig_reset(self, loader, first_iter)
            self._advise_epoch_done = False

        def __next__(self):
            if getattr(self, "_advise_sub", False) or os.getpid() != switch.pid:
                return orig_next(self)
            return switch.next(self)

        self.pid = os.getpid()
        base.__init__, base.__next__, base._reset = __init__, __next__, _reset

    def mirrorable(self, it: Any) -> str | None:
        if it._dataset_kind != dl._DatasetKind.Map:
            return "an IterableDataset cannot be re-fed from the original sampler"
        if not it._auto_collation:
            return "a DataLoader without batching (batch_size=None) is not mirrored"
        if self._loader(it) is None:
            return "the DataLoader is gone"
        return None

    @staticmethod
    def _loader(it: Any) -> Any:
        ref = getattr(it, "_advise_loader", None)
        return ref() if ref is not None else None

    def next(self, it: Any) -> Any:
        self.current = weakref.ref(it)
        entry = self.subs.get(id(it))
        if entry is None and self.kwargs is not None and not getattr(it, "_advise_epoch_done", False):
            t0 = time.monotonic()
            entry = self._build(it)
            self.build_s += time.monotonic() - t0
        if entry is None:
            return self._next(it)
        sub = entry[1]
        try:
            batch = self._next(sub.it)
        except StopIteration:
            # The original stream ran dry: the original iterator ends the epoch itself (after
            # serving what it had prefetched), exactly as without the substitute.
            self._drop(id(it))
            it._advise_epoch_done = True
            return self._next(it)
        if sub.pull.handed:
            sub.pull.handed.popleft()
        return batch

    def _build(self, it: Any):
        if self.mirrorable(it):
            return None
        loader = self._loader(it)
        kwargs = dict(self.kwargs or {})
        workers = kwargs.get("num_workers", loader.num_workers)
        options = {"num_workers": workers, "pin_memory": kwargs.get("pin_memory", loader.pin_memory),
                   # a worker that never serves (a fork that deadlocked on a lock another thread held:
                   # seen once, both DDP ranks at the same switch) ends the arm with an error, not the run
                   "timeout": loader.timeout or (SUBSTITUTE_TIMEOUT_S if workers else 0),
                   "worker_init_fn": loader.worker_init_fn,
                   "multiprocessing_context": loader.multiprocessing_context, "generator": loader.generator,
                   "pin_memory_device": getattr(loader, "pin_memory_device", "")}
        if workers:
            options["persistent_workers"] = kwargs.get("persistent_workers", bool(loader.persistent_workers) if loader.num_workers else False)
            options["prefetch_factor"] = kwargs.get("prefetch_factor", loader.prefetch_factor if loader.num_workers else 2)
        pull = _Pull(it, self.scale)
        known = set(self.observed.dataloaders) if self.observed is not None else set()
        sub_loader = torch.utils.data.DataLoader(loader.dataset, batch_sampler=pull, collate_fn=loader.collate_fn, **options)
        sub_it = iter(sub_loader)  # worker start-up happens here, at the switch
        sub_it._advise_sub = True
        if self.observed is not None:  # the substitute is ours, not the script's
            for key in set(self.observed.dataloaders) - known:
                self.observed.dataloaders.pop(key, None)
        sub = _Substitute(sub_loader, sub_it, pull)
        self.subs[id(it)] = (weakref.ref(it), sub)
        batch = max(1, int(loader.batch_size * self.scale)) if loader.batch_size else None
        self.applied.setdefault("dataloaders", []).append(
            {"num_workers": sub_loader.num_workers, "pin_memory": bool(sub_it._pin_memory), "batch_size": batch,
             "persistent_workers": sub_loader.persistent_workers, "prefetch_factor": sub_loader.prefetch_factor})
        if self.scale != 1:
            self.applied["batch_size_scale"] = self.scale
        return self.subs[id(it)]

    def _drop(self, key: int) -> None:
        ref, sub = self.subs.pop(key)
        orig = ref()
        if orig is not None:
            sub.close(orig)
        else:
            sub.pull.closed = True

    def on(self, overrides: dict, applied: dict) -> None:
        it = self.current() if self.current is not None else None
        if it is None:
            raise NotSwitchable("no DataLoader iterator is in use")
        reason = self.mirrorable(it)
        if reason:
            raise NotSwitchable(reason)
        method = _worker_start_method(self._loader(it))
        if (overrides.get("dataloader") or {}).get("num_workers") and method != "fork":
            # Each worker is a new interpreter importing torch (seconds on a small machine): a
            # window's warm-up ends before they all serve, and the arm reads ~1x (mp.spawn ranks
            # read 1.19x for a fix fresh runs measure 4.95x). Fresh runs start the loader whole.
            raise NotSwitchable(f"its workers start by {method} (a new interpreter each): measured in fresh runs")
        self.kwargs = dict(overrides.get("dataloader") or {})
        self.scale = overrides.get("batch_size_scale") or 1
        self.applied = applied
        if not getattr(it, "_advise_epoch_done", False):
            self._build(it)

    def off(self) -> None:
        self.kwargs, self.scale = None, 1
        for key in list(self.subs):
            self._drop(key)


def _worker_start_method(loader: Any) -> str:
    """How the loader's worker processes start: its own multiprocessing context, else the default
    (a rank started by torch.multiprocessing.spawn inherits "spawn"; macOS defaults to it)."""
    import multiprocessing

    ctx = getattr(loader, "multiprocessing_context", None)
    if ctx is not None:
        return ctx.get_start_method() if hasattr(ctx, "get_start_method") else str(ctx)
    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method()


# --- the driver --------------------------------------------------------------------------------------

SWITCH_ORDER = ("backend", "optimizer", "zero_grad", "checkpointing", "module", "dataloader")
KEY_GROUP = {"float32_matmul_precision": "backend", "cudnn_benchmark": "backend", "torch_threads": "backend",
             "optimizer": "optimizer", "autocast": "module", "compile": "module", "channels_last": "module",
             "dataloader": "dataloader", "batch_size_scale": "dataloader", "zero_grad_set_to_none": "zero_grad",
             "activation_checkpointing": "checkpointing"}


class Arms:
    """Runs the parent's plans at step boundaries; the StepClock calls :meth:`window_done` and
    :meth:`step` once the profiled window is over."""

    def __init__(self, out: Path, names: Any, sink: Any, plan_timeout_s: float, write_probe: Callable[[], None],
                 observed: Any = None) -> None:
        self.out, self.names, self.sink = out, names, sink
        self.plan_timeout_s = plan_timeout_s
        self.write_probe = write_probe
        self.backend = BackendSwitch()
        self.optimizer = OptimizerSwitch()
        self.module = ModuleCallSwitch()
        self.zero_grad = ZeroGradSwitch()
        self.dataloader = DataLoaderSwitch(observed)
        self.checkpointing = CheckpointSwitch(self.module.top)
        self.peak = WindowPeak(getattr(observed, "device", None))
        self.round: int | None = None
        self.windows: list[dict] = []
        self.k = -1
        self.i = 0  # steps run in the current window
        self.record: dict | None = None  # the current window's arms line
        self.started = False
        self.error: str | None = None

    def install(self) -> None:
        """Before hooks.install (the hooks' DataLoader timing must wrap the substitute)."""
        self.dataloader.install()
        self.optimizer.install()
        self.module.install()
        self.zero_grad.install()

    # protocol --------------------------------------------------------------------------------

    def _line(self, record: dict) -> None:
        self.sink.write(json.dumps(record) + "\n")
        self.sink.flush()

    def window_done(self) -> bool:
        """The profiled window ended: report it, then wait for a plan. True: arms run from here."""
        self.started = True
        self.write_probe()
        self._line({"phase": "window-done"})
        return self._next_plan()

    def _wait_plan(self) -> dict | None:
        plan_path, stop_path = self.out / self.names.plan, self.out / self.names.stop
        deadline = time.monotonic() + self.plan_timeout_s
        while time.monotonic() < deadline:
            if stop_path.exists():
                return None
            if plan_path.exists():
                try:
                    plan = json.loads(plan_path.read_text())
                except ValueError:  # half written (the parent should write atomically): read again
                    time.sleep(POLL_S)
                    continue
                plan_path.unlink(missing_ok=True)
                return plan
            time.sleep(POLL_S)
        return None

    def _next_plan(self) -> bool:
        plan = self._wait_plan()
        if not plan or not plan.get("windows"):
            return False
        self.round = int(plan.get("round", 0))
        self.windows = list(plan["windows"])
        self.k = -1
        return self._advance()

    def _advance(self) -> bool:
        """Start the next window that has steps; at the plan's end, wait for the next plan."""
        while True:
            self.k += 1
            if self.k >= len(self.windows):
                self._line({"phase": "plan-done", "round": self.round})
                return self._next_plan()
            if self._begin(self.windows[self.k]):
                return True

    def _begin(self, window: dict) -> bool:
        overrides = dict(window.get("overrides") or {})
        self.record = {"round": self.round, "window": self.k, "arm": window.get("arm"), "overrides": overrides,
                       "applied": {}, "not_switchable": [], "switch_s": 0.0, "error": None}
        self.i = 0
        self.total = int(window.get("warmup", 0)) + int(window.get("steps", 0))
        self.warmup = int(window.get("warmup", 0))
        t0 = time.monotonic()
        try:
            switchable = self._switch_on(overrides, self.record)
        except Exception as exc:  # noqa: BLE001 - a switch that broke: report it, end cleanly
            self.record["switch_s"] = time.monotonic() - t0
            self._fail(exc)
        self.record["switch_s"] = time.monotonic() - t0
        self.peak.device = getattr(self.dataloader.observed, "device", None)
        self.peak.start()  # this window's peak is its own (after the switch, before its first step)
        if self.warmup == 1:
            self._profile_memory()
        if (overrides and not switchable) or self.total <= 0:
            self._switch_off()
            self._write_arm()
            return False
        return True

    def _switch_on(self, overrides: dict, record: dict) -> bool:
        """Switch on what can be; list the rest in not_switchable. True when anything was switched."""
        applied, not_switchable = record["applied"], record["not_switchable"]
        reason = problem(overrides)
        if reason:
            raise ValueError(reason)
        groups: dict[str, dict] = {}
        for key, value in overrides.items():
            if value in NOT_SWITCHABLE.get(key, ()):
                not_switchable.append(key)
                record.setdefault("reasons", {})[key] = "float16 autocast needs a GradScaler: a fresh run"
            else:
                groups.setdefault(KEY_GROUP[key], {})[key] = value
        switched = False
        for name in SWITCH_ORDER:
            part = groups.get(name)
            if not part:
                continue
            try:
                if name == "optimizer":
                    self.optimizer.on(part["optimizer"], applied)
                elif name == "checkpointing":
                    if not self.checkpointing.on(part, applied):
                        raise NotSwitchable("no Hugging Face model and no ModuleList/Sequential of repeated blocks seen")
                else:
                    getattr(self, name).on(part, applied)
                switched = True
            except NotSwitchable as exc:
                not_switchable.extend(part)
                record.setdefault("reasons", {}).update({key: str(exc) for key in part})
        return switched

    def _switch_off(self) -> None:
        for name in reversed(SWITCH_ORDER):
            getattr(self, name).off()

    def _write_arm(self) -> None:
        record, self.record = self.record, None
        if record is None:
            return
        record["switch_s"] += self.module.compile_s + self.dataloader.build_s
        self.module.compile_s = self.dataloader.build_s = 0.0
        with open(self.out / self.names.arms_jsonl, "a") as f:
            f.write(json.dumps(record) + "\n")

    def step(self, record: dict, loss: Any) -> bool:
        """A step of the current window ended (`record`: its timings). True when a new window was
        switched on at this boundary (the next step starts now)."""
        try:
            value = float(loss.float().mean().item()) if isinstance(loss, torch.Tensor) else None
        except Exception:  # noqa: BLE001 - a loss we cannot read is just unknown
            value = None
        window = self.windows[self.k]
        self._line({"phase": "arm", "round": self.round, "window": self.k, "arm": window.get("arm"),
                    "warm": self.i < self.warmup, "index": self.i - self.warmup if self.i >= self.warmup else self.i,
                    **record, "loss": value})
        self.i += 1
        if self.i == self.warmup:
            self.peak.end_step()
        elif self.i == self.warmup - 1:
            self._profile_memory()  # the last untimed step: the allocator's peak (CPU)
        if self.i < self.total:
            return False
        self._read_peak()
        try:
            self._switch_off()
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)
        self._write_arm()
        if not self._advance():
            raise ProbeDone()
        return True

    def _profile_memory(self) -> None:
        try:
            parts = tensor_bytes(list(self.module.top), list(self.optimizer.optimizers))
            self.peak.profile_step(persistent_bytes(parts))
        except Exception:  # noqa: BLE001 - the RSS figure stands
            pass

    def _read_peak(self) -> None:
        if self.record is not None:
            self.record["peak_memory_bytes"], self.record["memory_basis"] = self.peak.read()
            self.record["peak_rss_hwm_bytes"] = rss_high_water()

    def _fail(self, exc: BaseException) -> None:
        """A switch (or the script, inside a window) raised: keep what was measured, end cleanly.
        An out-of-memory error marks the window `oom` and empties the caching allocator."""
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self.error = error
        self.peak.end_step()
        if self.record is not None:
            self.record["error"] = error
            if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in error.lower():
                self.record["oom"] = True
                if torch.cuda.is_available() and torch.cuda.is_initialized():
                    torch.cuda.empty_cache()
            try:
                self._switch_off()
            except Exception:  # noqa: BLE001 - the run ends anyway
                pass
            self._write_arm()
        self._line({"phase": "plan-done", "round": self.round, "error": error})
        self.windows, self.k = [], 0
        raise ProbeDone()

    def script_raised(self, exc: BaseException) -> None:
        """The script raised during a window (an OOM under an arm's settings)."""
        if self.record is not None:
            try:
                self._fail(exc)
            except ProbeDone:
                pass

    def script_ended(self) -> None:
        """The script returned (or its loader ran out) while arms ran: say so for the open window."""
        if self.record is not None:
            self.record["error"] = "the script ended by itself during this window"
            self._write_arm()
        self.close()

    def close(self) -> None:
        try:
            self.dataloader.off()
        except Exception:  # noqa: BLE001 - the process is ending
            pass
