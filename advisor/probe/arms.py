"""One run, many arms: the profiled child keeps running and measures the experiments' arms itself.

After the measured window the child writes ``probe.json`` (``"phase": "window-done"``), says
so in ``steps{r}.jsonl`` (:class:`~advisor.run_dir.protocol.WindowDone`) and waits at that step
boundary for the parent's ``plan{r}.json`` (:class:`~advisor.run_dir.protocol.Plan`). Each window
switches its overrides on at a step boundary (the previous window's off first), runs `warmup`
untimed and `steps` timed steps (an :class:`~advisor.run_dir.protocol.ArmStepLine` each) and ends
with an :class:`~advisor.run_dir.protocol.ArmLine` in ``arms{r}.jsonl`` saying what really took
effect. A :class:`~advisor.run_dir.protocol.PlanDone` ends a plan; an empty plan, no plan within
``plan_timeout_s`` or a ``stop{r}`` file ends the run as today. The stop file is also looked for at
every step boundary of a window (the parent's time budget ended): the window it cuts is left out
(its steps are written, its ArmLine is not, so no verdict rests on a part of a window).

Each window's overrides are switched on and off by the run's switches
(:mod:`advisor.probe.switches`, the same ones a fresh run turns on before the script starts), so
the script is never edited; a key a switch cannot change in a live process is listed in
``not_switchable`` with its reason, and measured in a fresh run.
"""

from __future__ import annotations

import math
import time
import traceback
from functools import partial
from pathlib import Path
from typing import Callable, TextIO

import torch

from .clock import ClosedStep, ProbeDone, loss_value, timed_lines
from .compile_watch import CompileWatch
from .hooks import Observed
from advisor.run_dir.layout import RunFiles
from advisor.run_dir.protocol import OVERRUN, ArmLine, ArmStepLine, Held, Plan, PlanDone, Window, WindowDone, read_plan, write_line
from .memory import WindowPeak, persistent_bytes, rss_high_water, tensor_bytes
from .switches import Switches
from .timeline import HostTimeline, Timeline

POLL_S = 0.02
# a hold file the parent left (it died, say) holds a window no longer than this: the parent's own
# caps end each hold sooner (advisor.probe.holds)
HOLD_SAFETY_S = 30.0


# --- the driver --------------------------------------------------------------------------------------

class Arms:
    """Runs the parent's plans at step boundaries; the StepClock calls :meth:`window_done` and
    :meth:`step` once the profiled window is over."""

    def __init__(self, out: Path, names: RunFiles, sink: TextIO, plan_timeout_s: float, write_probe: Callable[[], None],
                 observed: Observed | None = None, in_job: bool = False) -> None:
        self.out, self.names, self.sink = out, names, sink
        self.in_job = in_job  # one rank of a job: every window's steps run, switched or not (see _begin)
        self.plan_timeout_s = plan_timeout_s
        self.write_probe = write_probe
        self.switches = Switches(observed)
        self.observed = observed
        self.peak = WindowPeak(getattr(observed, "device", None))
        self.compiles = CompileWatch()  # what torch.compile did in each window (recompiles)
        self.round = 0  # the current plan's (0 before the first)
        self.windows: list[Window] = []
        self.k = -1
        self.i = 0  # steps run in the current window
        self.record: ArmLine | None = None  # the current window's line
        self.started = False
        self.error: str | None = None
        self.timeline: Timeline = HostTimeline()  # the run's (the StepClock's): where a step's time is read
        self._held: list[tuple[ClosedStep, Callable[..., ArmStepLine]]] = []  # the window's steps, written when it closes
        self._losses: list[object] = []  # their loss tensors, read after the window's one wait
        self._closes: float | None = None  # the current window's seconds (Window.seconds), None: closed by its steps
        self._timed_from = 0.0  # when its timed steps started (monotonic)

    def install(self) -> None:
        """Before hooks.install (the hooks' DataLoader timing must wrap the substitute)."""
        self.switches.install()

    @property
    def models(self) -> list:
        """The top-level modules seen so far."""
        return list(self.switches.module.top)

    # protocol --------------------------------------------------------------------------------

    def window_done(self) -> bool:
        """The profiled window ended: report it, then wait for a plan. True: arms run from here."""
        self.started = True
        self.write_probe()
        write_line(self.sink, WindowDone(t=time.monotonic()))
        return self._next_plan()

    def _wait_plan(self) -> Plan | None:
        plan_path, stop_path = self.out / self.names.plan, self.out / self.names.stop
        deadline = time.monotonic() + self.plan_timeout_s
        while time.monotonic() < deadline:
            if stop_path.exists():
                return None
            if plan_path.exists():
                try:
                    plan = read_plan(plan_path)
                except ValueError:  # half written (the parent should write atomically): read again
                    time.sleep(POLL_S)
                    continue
                plan_path.unlink(missing_ok=True)
                return plan
            time.sleep(POLL_S)
        return None

    def _next_plan(self) -> bool:
        plan = self._wait_plan()
        if plan is None or not plan.windows:
            return False
        self.round = plan.round
        self.windows = list(plan.windows)
        self.k = -1
        return self._advance()

    def _advance(self) -> bool:
        """Start the next window that has steps; at the plan's end, wait for the next plan."""
        while True:
            self.k += 1
            if self.k >= len(self.windows):
                write_line(self.sink, PlanDone(round=self.round))
                return self._next_plan()
            held = self._hold()
            if self._begin(self.windows[self.k], held):
                return True

    def _hold(self) -> float:
        """While the parent's hold file exists (a neighbour takes the cores the script's steps want:
        advisor.probe.holds), the next window does not start: the seconds it waited, each end said in
        a Held line (the parent stops the arms' clock meanwhile). A job's ranks switch together: never held."""
        hold, stop = self.out / self.names.hold, self.out / self.names.stop
        if self.in_job or not hold.exists():
            return 0.0
        start = time.monotonic()
        write_line(self.sink, Held(start=start))
        while hold.exists() and not stop.exists() and time.monotonic() - start < HOLD_SAFETY_S:
            time.sleep(POLL_S)
        end = time.monotonic()
        write_line(self.sink, Held(start=start, end=end))
        return end - start

    def _begin(self, window: Window, held_s: float = 0.0) -> bool:
        overrides = dict(window.overrides)
        self.record = ArmLine(round=self.round, window=self.k, arm=window.arm, overrides=overrides, held_s=held_s)
        self.i = 0
        self.total = window.warmup + window.steps
        self.warmup = window.warmup
        self._closes = window.seconds if window.seconds > 0 and not self.in_job else None
        t0 = time.monotonic()
        try:
            switchable = self._switch_on(overrides, self.record)
        except Exception as exc:  # noqa: BLE001 - a switch that broke: report it, end cleanly
            self.record.switch_s = time.monotonic() - t0
            self._fail(exc)
        self.record.switch_s = time.monotonic() - t0
        self._timed_from = time.monotonic()  # a window without warm-up times its steps from here
        self.peak.device = getattr(self.observed, "device", None)
        self.peak.start()  # this window's peak is its own (after the switch, before its first step)
        self.compiles.start(self.warmup)
        if self.warmup == 1:
            self._profile_memory()
        # A window this rank cannot switch is skipped, unless the rank is one of a job's: the others
        # run its steps, and a rank that moved on would wait for them in its next collective (its
        # line says what it could not switch; rank 0 reports the ranks that disagreed).
        if (overrides and not switchable and not self.in_job) or self.total <= 0:
            self._switch_off()
            self._write_arm()
            return False
        return True

    def _switch_on(self, overrides: dict, record: ArmLine) -> bool:
        """Switch on what can be; list the rest in not_switchable. True when anything was switched."""
        refused = self.switches.on(overrides, record.applied, live=True)
        if refused:
            record.not_switchable.extend(refused)
            record.reasons.update(refused)
        return len(refused) < len(overrides)

    def _switch_off(self) -> None:
        self.switches.off()

    def _write_arm(self) -> None:
        record, self.record = self.record, None
        if record is None:
            return
        module, loader = self.switches.module, self.switches.dataloader
        record.compile = self.compiles.read(always="compile" in record.overrides)
        record.switch_s += module.compile_s + loader.build_s
        module.compile_s = loader.build_s = 0.0
        with open(self.out / self.names.arms_jsonl, "a") as f:
            write_line(f, record)

    def step(self, step: ClosedStep, loss: object) -> bool:
        """A step of the current window ended. It is held, with its loss tensor, until the window
        closes: then one wait on the device times them all and reads their losses (a loss read
        per step would wait on the device every step). True when a new window was switched on at
        this boundary (the next step starts now)."""
        window = self.windows[self.k]
        warm = self.i < self.warmup
        if warm and window.align and step.acc.loader_starts and not self.timeline.deferred and not self.in_job:
            self.warmup, self.total = self.i, self.i + window.steps  # an epoch starts: the timed steps start here
            self._timed_from = time.monotonic() - (step.end.host - step.start.host)
            warm = False
        step.timed = not warm
        self._held.append((step, partial(ArmStepLine, round=self.round, window=self.k, arm=window.arm, warm=warm,
                                         index=self.i - self.warmup if not warm else self.i)))
        self._losses.append(loss)
        if not self.timeline.deferred:  # the host's clock: the step's line is out at once (nothing to wait on)
            self._flush()
        self.i += 1
        self.compiles.step()
        self._close_in_time(window)
        if self.i < self.total and (self.out / self.names.stop).exists():  # the time budget ended: stop here
            self._stop()
        if self.i == self.warmup:
            self.peak.end_step()
        elif self.i == self.warmup - 1:
            self._profile_memory()  # the last untimed step: the allocator's peak (CPU)
        if self.i < self.total:
            return False
        self._flush()
        self._read_peak()
        try:
            self._switch_off()
        except Exception as exc:  # noqa: BLE001 - torch refuses a setting back in any way: the arm's failure
            self._fail(exc)
        self._write_arm()
        if not self._advance():
            raise ProbeDone()
        return True

    def _close_in_time(self, window: Window) -> None:
        """The window's timed steps took its `seconds` and `min_steps` of them ran, or took OVERRUN
        times its `seconds` whatever ran: this step is its last."""
        if self._closes is None:
            return
        if self.i == self.warmup and not window.align:  # the timed steps start now
            self._timed_from = time.monotonic()
        elif self.i > self.warmup and (took := time.monotonic() - self._timed_from) >= self._closes and \
                (self.i - self.warmup >= window.min_steps or took >= OVERRUN * self._closes):
            self.total = self.i

    def _stop(self) -> None:
        """End the arms at this boundary: the open window's steps are written, it is not."""
        self._flush()
        self.peak.end_step()
        self.record = None
        try:
            self._switch_off()
        except Exception:  # noqa: BLE001 - the run ends anyway
            pass
        self.windows, self.k = [], 0
        raise ProbeDone()

    def _flush(self) -> None:
        """The window's step lines: one wait on the device, then each step's time and loss."""
        held, self._held, losses, self._losses = self._held, [], self._losses, []
        for line, loss in zip(timed_lines(self.timeline, held), losses):  # the losses are read after the wait
            line.loss = loss_value(loss)
            line.loss_finite = None if line.loss is None else math.isfinite(line.loss)
            write_line(self.sink, line)

    def _profile_memory(self) -> None:
        try:
            parts = tensor_bytes(self.models, list(self.switches.optimizer.optimizers))
            self.peak.profile_step(persistent_bytes(parts))
        except Exception:  # noqa: BLE001 - the RSS figure stands
            pass

    def _read_peak(self) -> None:
        if self.record is not None:
            self.record.peak_memory_bytes, self.record.memory_basis = self.peak.read()
            self.record.peak_rss_hwm_bytes = rss_high_water()

    def _fail(self, exc: BaseException) -> None:
        """A switch (or the script, inside a window) raised: keep what was measured, end cleanly.
        An out-of-memory error marks the window `oom` and empties the caching allocator."""
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self.error = error
        self._flush()
        self.peak.end_step()
        if self.record is not None:
            self.record.error = error
            if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in error.lower():
                self.record.oom = True
                if torch.cuda.is_available() and torch.cuda.is_initialized():
                    torch.cuda.empty_cache()
            try:
                self._switch_off()
            except Exception:  # noqa: BLE001 - the run ends anyway
                pass
            self._write_arm()
        write_line(self.sink, PlanDone(round=self.round, error=error))
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
            self._flush()
            self.record.error = "the script ended by itself during this window"
            self._write_arm()
        self.close()

    def close(self) -> None:
        try:
            self.switches.dataloader.off()
        except Exception:  # noqa: BLE001 - the process is ending
            pass

