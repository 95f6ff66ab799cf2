"""Child-process entry point: run the user's script as ``__main__`` under the probe.

Invoked by the runner as ``python -c BOOTSTRAP CONFIG.json`` (see runner.BOOTSTRAP). It behaves like
``python SCRIPT ARGS`` (``sys.argv``, ``sys.path[0]``, ``__file__``, ``__name__``, cwd), in the
manner of coverage.py's PyRunner: a fresh ``__main__`` module and a compiled code object.
It installs the hooks, ends the script with :class:`ProbeDone` after the measured window, and
always leaves ``probe.json`` behind, whatever the script did.
"""

from __future__ import annotations

import atexit
import builtins
import os
import runpy
import sys
import threading
import tokenize
import traceback
import types
from pathlib import Path
from typing import Callable

import msgspec
import torch
from torch.profiler import ProfilerAction, ProfilerActivity

import advisor
from advisor import notebook
from advisor.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_SCRIPT, EXIT_USAGE

from advisor.job.rank import rank_suffix
from advisor.run_dir import layout
from advisor.run_dir.atomic import open_nofollow
from .arms import Arms
from . import profiler_start, timeline
from .clock import ProbeDone, StepClock
from .env import collect_env, memory_stats
from .heap import settle
from .hooks import Observed, install
from .memory import WindowPeak, account, persistent_bytes, rss_bytes, tensor_bytes
from .module_call import compile_cache_in
from advisor.overrides import OverrideError
from .overrides import apply as apply_overrides
from advisor.run_dir.protocol import ChildAccount, ChildConfig, Phase, read_config, write_account
from advisor.run_dir.seen import MemoryAccount
from .sources import SourceCapture
from .trace_export import TraceLost, export_trace

_OURS = (str(Path(advisor.__file__).resolve().parent), "runpy.py", "<frozen runpy>")


PROFILER_GROWTH_LIMIT = 4 << 30  # the profiler's buffers may grow the process by this much, at most ...
PROFILER_GROWTH_SHARE = 0.2      # ... or this share of the machine's memory, whichever is less


class ProfilerWindow:
    """torch.profiler over the last measured steps; exports a Kineto trace when it stops.

    The profiler keeps every event of the window in memory (shapes, stacks, memory events): a
    step of many thousand ops (LBFGS's 20 closures over a 1000-step LSTM) grew one script by
    3.5 GiB a step, to 17 GiB over five. After each profiled step the growth is checked; past the
    limit the window stops there, exports the steps it has, and says so (`cut`)."""

    def __init__(self, trace_path: Path) -> None:
        self.trace_path = trace_path
        self.prof: torch.profiler.profile | None = None
        self.error: str | None = None
        self.errno: int | None = None  # the export's OSError errno: a full or read-only run dir
        self.exported = False
        self.cut: str | None = None  # why the window stopped before its last step
        self.refused: str | None = None  # what the profiler could not record: the run goes on without it
        self._rss0: int | None = None
        self._recorded = 0

    def start(self) -> None:
        with profiler_start.starting():
            self._start()

    def _start(self) -> None:
        """Start the profiler; one that refuses (a container without CUPTI) never fails the script.

        Device tracing refused: a host-only trace, said. Refused outright: no trace, said; the step
        times stand either way."""
        host = [ProfilerActivity.CPU]
        device = torch.cuda.is_available() and torch.cuda.is_initialized()
        first = None  # the first refusal, said
        for activities in ([*host, ProfilerActivity.CUDA], host) if device else (host,):
            try:
                self._profile(activities)
            except Exception as exc:  # noqa: BLE001 - the script must not see our profiler's failure
                self.prof = None
                first = first or f"{type(exc).__name__}: {exc}".strip()[:300]
                continue
            if first:
                self.refused = (f"the profiler could not trace the GPU ({first}): the trace is the host's only, "
                                "so no kernel, GPU-busy, overlap or MFU figure")
            return
        self.refused = (f"the profiler could not start ({first}): no trace this run, so no op, kernel or "
                        "memory figure; the step times stand")

    def _profile(self, activities: list) -> None:
        self.prof = torch.profiler.profile(
            activities=activities,
            # Step 0 warms CUPTI up unrecorded; the rest is recorded until stop().
            schedule=lambda step: ProfilerAction.WARMUP if step == 0 else ProfilerAction.RECORD,
            record_shapes=True,
            with_flops=True,
            profile_memory=True,
            with_stack=True,
        )
        self.prof.start()
        self._rss0 = rss_bytes()

    def step(self) -> None:
        if self.prof is None:
            return
        rss = rss_bytes()  # a boundary: the step that just ended is whole in the buffers
        if self._recorded and rss is not None and self._rss0 is not None and rss - self._rss0 > _growth_limit():
            grown = (rss - self._rss0) / (1 << 30)
            self.cut = (f"the profiler stopped after {self._recorded} profiled step"
                        f"{'s' if self._recorded > 1 else ''}: its buffers grew the process by {grown:.1f} GiB")
            self.stop()
            return
        try:
            self.prof.step()
        except Exception as exc:  # noqa: BLE001 - recording refused as it starts (CUPTI): the script goes on
            prof, self.prof = self.prof, None
            self.error = f"{type(exc).__name__}: {exc}".strip()[:300]
            try:
                prof.stop()
            except Exception:  # noqa: BLE001 - a profiler that failed may fail to stop
                pass
            return
        self._recorded += 1  # the first call ends the profiler's warm-up step: from then on, steps are recorded

    def stop(self) -> None:
        """Stop and export once; an export failure is recorded, never raised into the script."""
        prof, self.prof = self.prof, None
        if prof is None:
            return
        try:
            prof.stop()
            export_trace(prof, self.trace_path)  # checked: a trace that does not parse is lost, not kept
            self.exported = True
        except TraceLost as exc:
            self.error, self.errno = str(exc), exc.errno
        except Exception as exc:  # noqa: BLE001 - torch's profiler may raise anything; the timing still counts
            self.error = f"{type(exc).__name__}: {exc}"
            self.errno = getattr(exc, "errno", None)


def _growth_limit() -> int:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return PROFILER_GROWTH_LIMIT
    return min(PROFILER_GROWTH_LIMIT, int(PROFILER_GROWTH_SHARE * total))


def _is_ours(filename: str) -> bool:
    return any(part in filename for part in _OURS)


def user_traceback(exc: BaseException) -> str:
    """The traceback as plain python would print it, minus the probe's own frames."""
    te = traceback.TracebackException.from_exception(exc)
    seen = set()
    node: traceback.TracebackException | None = te
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        node.stack = traceback.StackSummary.from_list([f for f in node.stack if not _is_ours(f.filename)])
        node = node.__cause__ or node.__context__
    return "".join(te.format())


def run_script(script: str, args: list[str]) -> None:
    """Execute `script` as __main__, as ``python script args`` would."""
    path = os.path.abspath(script)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.realpath(path)))
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = builtins  # type: ignore[attr-defined]  # runpy sets it; typeshed's ModuleType lacks it
    main.__loader__ = None
    main.__spec__ = None
    main.__cached__ = None  # type: ignore[attr-defined]  # as runpy sets it; typeshed's ModuleType lacks it
    sys.modules["__main__"] = main
    if notebook.is_notebook(path):  # its code cells, in order, each under its own name
        notebook.run(path, main.__dict__)
        return
    with tokenize.open(path) as f:
        source = f.read()
    code = compile(source, path, "exec")
    exec(code, main.__dict__)


def run_module(name: str, args: list[str]) -> None:
    """Execute module `name` as __main__, as ``python -m name args`` would.

    The working directory goes first on sys.path and runpy's own ``python -m`` entry runs the
    module in the real ``__main__`` (``__spec__``, ``__package__`` and ``sys.argv[0]`` set as python
    sets them), so relative imports and pickling of ``__main__`` objects behave the same.
    """
    sys.argv = [name, *args]
    sys.path.insert(0, os.getcwd())
    runpy._run_module_as_main(name, alter_argv=True)  # type: ignore[attr-defined]  # python -m's own entry, untyped


def main(config_path: str) -> int:
    config = read_config(config_path)
    return probe(config, lambda: (run_module if config.module else run_script)(config.script, config.args))


def probe(config: ChildConfig, target: Callable[[], object]) -> int:
    """Run `target` (the user's code) under the probe that `config` describes; the exit code."""
    return ChildProbe(config, target).run()


class ChildProbe:
    """The child's probe session: the step clock, the profiled window and its memory, the
    overrides and the arms around the user's code, and its account (``probe.json``)."""

    def __init__(self, config: ChildConfig, target: Callable[[], object]) -> None:
        self.runtime_bytes = rss_bytes()  # the interpreter and torch, before the script: not the script's memory
        self.config, self.target = config, target
        self.out = out = Path(config.out)
        suffix = config.rank_suffix
        self.names = names = layout.names(rank_suffix() if suffix is None else suffix)  # None: a rank advise launched
        self.window = ProfilerWindow(out / names.trace)
        compile_cache_in(out / names.compile_cache)
        self.sink = open(out / names.steps_jsonl, "a", buffering=1, opener=open_nofollow)
        self.profile_steps = max(0, min(config.profile_steps, config.steps - 1))
        self.clock = StepClock(
            warmup=config.warmup,
            steps=config.steps,
            profile_steps=self.profile_steps,
            sink=self.sink,
            on_profile_start=self.window.start,
            on_profile_step=self.window.step,
            timeline=timeline.for_this_process(),
        )
        self.clock.capture = self.capture = SourceCapture(out / names.sources)
        self.clock.on_boundary = self._memory_step
        self.clock.on_window_end = self._window_end
        self.observed = Observed()
        self.memory: dict = {}
        self.peak = WindowPeak()
        self.applied: dict = {}
        self.arms: Arms | None = None

    def run(self) -> int:
        # Overrides first: the hooks then wrap the patched torch (e.g. they see the unscaled loss).
        try:
            apply_overrides(self.config.overrides, self.applied, self.observed)
        except OverrideError as exc:
            write_account(self.out / self.names.probe_json, ChildAccount(status="failed", error=str(exc)))
            print(f"advise: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if self.config.arms:
            self.arms = Arms(self.out, self.names, self.sink, self.config.plan_timeout_s,
                             self._window_done, self.observed,
                             in_job=self.names.trace != layout.names("").trace)  # a rank's files: one rank of a job
            self.arms.install()  # before the hooks: their DataLoader timing wraps the arms' substitute loaders
            self.clock.arms = self.arms
            self.arms.timeline = self.clock.timeline
        install(self.clock, self.observed)
        advisor._clock = self.clock
        result, code = self._run_target()
        self._finish(result)
        self.sink.close()
        sys.stdout.flush()
        sys.stderr.flush()
        if result.status in ("done", "interrupted", "failed"):
            # The script was cut short on purpose, or its error ended it: its non-daemon threads or
            # DataLoader workers must not keep the child alive (the runner reaps the group), nor may
            # the teardown of a CUDA context the error poisoned hang or abort past the account. Its
            # atexit handlers run, as they would under plain python, but only for so long.
            run_atexit_bounded(self.config.atexit_s, code)
            os._exit(code)
        return code

    def _run_target(self) -> tuple[ChildAccount, int]:
        """The user's code, run to its end or the window's: how it ended, and the exit code."""
        arms = self.arms
        result = ChildAccount(status="finished")
        code = EXIT_OK
        try:
            self.target()
            if arms is not None and arms.started:
                arms.script_ended()
        except ProbeDone:
            result.status = "done"
        except SystemExit as exc:
            if arms is not None and arms.started:
                arms.script_ended()
            if exc.code not in (None, 0):
                result.status, result.error = "failed", f"the script exited with status {exc.code}"
                code = EXIT_SCRIPT
        except KeyboardInterrupt:
            result.status = "interrupted"
            code = EXIT_INTERRUPTED
        except BaseException as exc:  # noqa: BLE001 - the user's script may raise anything: reported as theirs, or as the arm's
            if arms is not None and arms.started:
                # After the window, under an arm's settings (an OOM, a compile error): the window's
                # measurements stand, the arm's line says what broke, and the run ends as done.
                try:
                    arms.script_raised(exc)
                except Exception:  # noqa: BLE001 - the arm's own account failed (a poisoned device): its error stands
                    pass
                result.status, result.arms_error = "done", arms.error or f"{type(exc).__name__}: {exc}"
                result.arms_traceback = user_traceback(exc)
            else:  # the user's error: report it as theirs
                tb = user_traceback(exc)
                sys.stderr.write(tb)
                last = traceback.format_exception_only(type(exc), exc)[-1].strip()
                result.status, result.error, result.traceback = "failed", last, tb
                code = EXIT_SCRIPT
        finally:
            if result.status == "failed":
                self._account_first(result)  # the script's error is on disk before anything below touches the device
            self.capture.stop()  # a script that ended inside the capture step
            self.window.stop()  # a failure or Ctrl-C inside the window still leaves its trace
            advisor._clock = None
            if arms is not None:
                arms.close()  # substitute DataLoaders' workers
        if arms is not None and arms.error and result.arms_error is None:
            result.arms_error = arms.error
        return result, code

    def _memory_step(self, seen: int) -> None:
        """A run without a profiled window (an experiment's) measures its allocator peak (CPU) in
        its last warm-up step, as the arms do in theirs."""
        clock = self.clock
        if self.profile_steps or not clock.warmup:
            return
        if seen == clock.warmup:
            self.peak.device = self.observed.device
            self.peak.profile_step(persistent_bytes(tensor_bytes((), list(self.observed.live_optimizers))))
        elif seen == clock.warmup + 1:
            self.peak.end_step()

    def _window_end(self) -> None:
        """The measured window's memory, before the profiler lets go of its buffers and arms reset peaks.

        The accounting walks the live tensors in Python: it runs after the profiler stopped, or its
        with_stack tracer records every call (300k events in a 2-step trace of a small MLP).
        """
        memory, observed = self.memory, self.observed
        try:
            memory.update(memory_stats(observed.device))
        except Exception as exc:  # noqa: BLE001 - the timing is still worth reporting
            memory["error"] = f"{type(exc).__name__}: {exc}"
        self.window.stop()
        try:
            memory.update(account(observed.device, list(observed.live_optimizers), self.runtime_bytes,
                                  self.config.memory_budget_bytes, self.arms.models if self.arms else (),
                                  self.peak))
        except Exception as exc:  # noqa: BLE001 - the timing is still worth reporting
            memory["error"] = f"{type(exc).__name__}: {exc}"

    def _window_done(self) -> None:
        """The window ended and the arms follow: its account now, for the parent's rules."""
        self._finish(ChildAccount(status="done", phase=Phase.WINDOW_DONE))

    def _finish(self, result: ChildAccount) -> None:
        """probe.json: the child's own account of the run (also written when the window ends, for arms).

        Every device read here fails soft (the host's step times, unknown memory and device fields):
        after a script's CUDA error every call on its context raises, and the error must stay the script's."""
        settle()  # the profiler's buffers freed, the heap the arms run on is the script's (advisor.probe.heap)
        clock, observed, window = self.clock, self.observed, self.window
        clock.flush()  # a script that ended inside its window: the steps it ran
        result = msgspec.structs.replace(
            result,
            **self._host_fields(),
            measured_steps=len(clock.measured),
            losses=clock.loss_values(),
            env=collect_env(observed.device),
            observed=observed.account(),
            memory=MemoryAccount.given(**(self.memory or self._memory_now())),
            trace=self.names.trace if window.exported else None,
            profiler_error=window.error,
            profiler_cut=window.cut,
            profiler_refused=window.refused,
            profiler_errno=window.errno,
        )
        write_account(self.out / self.names.probe_json, result)

    def _host_fields(self) -> dict:
        """The account's fields the host alone knows (no device call)."""
        clock = self.clock
        return {"step_source": clock.source, "boundaries": clock.boundaries, "warmup": clock.warmup,
                "profile_steps": self.profile_steps, "overrides": self.config.overrides, "applied": self.applied}

    def _account_first(self, result: ChildAccount) -> None:
        """probe.json with the script's error, before the probe's own device calls: where a CUDA context
        the error poisoned makes one abort the process, the parent still reads the script's error."""
        try:
            write_account(self.out / self.names.probe_json, msgspec.structs.replace(result, **self._host_fields()))
        except Exception:  # noqa: BLE001 - _finish writes it again, whole
            pass

    def _memory_now(self) -> dict:
        """A run that ended before its window did: its memory as it stands (what the device still answers)."""
        observed, memory = self.observed, {}
        reads = (lambda: memory_stats(observed.device),
                 lambda: account(observed.device, list(observed.live_optimizers), self.runtime_bytes,
                                 self.config.memory_budget_bytes))
        for read in reads:
            try:
                memory.update(read())
            except Exception as exc:  # noqa: BLE001 - the timing is still worth reporting
                memory["error"] = f"{type(exc).__name__}: {exc}"
        return memory


def run_atexit_bounded(limit_s: float, code: int) -> None:
    """Run the script's atexit handlers on this (main) thread; leave with `code` after `limit_s`.

    A handler that blocks (joining a thread that never ends, a network flush) must not turn a
    stopped run into a hung one: a timer thread ends the process when the time is up.
    """
    def give_up() -> None:
        sys.stderr.write(f"advise: the script's atexit handlers were still running after {limit_s:g} s; stopped\n")
        sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(limit_s, give_up)
    timer.daemon = True
    timer.start()
    try:
        atexit._run_exitfuncs()  # as the interpreter does at exit; errors are printed, not raised
    except BaseException:  # noqa: BLE001 - a Ctrl-C inside a handler ends the handlers, as in python
        pass
    timer.cancel()
    sys.stdout.flush()
    sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
