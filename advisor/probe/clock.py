"""Step boundaries and per-step timing inside the probed child, with no change to the user's code.

A training step is found, in order of preference, from:

1. ``advisor.step()`` called by the script (explicit);
2. the global ``torch.optim`` step post-hook: one step per ``step()`` of the *anchor* optimizer
   (the first one that steps), so a GAN's two optimizers make one step per iteration, and
   ``GradScaler.step`` / LBFGS closures count once;
3. DataLoader batches, for manual loops without ``torch.optim``;
4. ``torch.autograd.backward`` calls, for loops with neither.

A higher source replaces a lower one the first time it is seen; counting restarts then, which
only ever lands inside warm-up. Everything here runs on the training thread, so each hook does
a few dict updates and one line of buffered JSON per step: nothing that syncs the GPU.

A step's time is read from the run's :mod:`~advisor.probe.timeline`: on a GPU the timed steps
of a window are known only when the window closes (one wait on its last event), so their lines
are held until then (:meth:`StepClock.flush`); untimed steps (start-up, warm-up) are written at
once with the host's time, and never wait on the device.
"""

from __future__ import annotations

import builtins
import os
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Protocol, TextIO, TypeVar, runtime_checkable

from advisor.run_dir.protocol import Line, Phase, StepLine, write_line
from .timeline import HostTimeline, Mark, Timeline, settled

SOURCES = ("backward", "dataloader", "optimizer", "explicit")
_RANK = {name: i for i, name in enumerate(SOURCES)}


class ProbeDone(BaseException):
    """Raised at the last measured boundary to end the user's script early.

    A BaseException, so a user's ``except Exception`` does not swallow it.
    """


@dataclass
class StepAccumulator:
    """What happened between two boundaries."""

    data_wait_s: float = 0.0
    optimizer_s: float = 0.0
    backward_s: float = 0.0
    samples: int | None = None
    forward_samples: int | None = None  # from the model's input, for loops without a DataLoader
    eval_s: float = 0.0  # evaluation passes inside the step (advisor.probe.phases)
    evals: int = 0
    checkpoint_s: float = 0.0  # checkpoint saves inside the step
    checkpoints: int = 0
    loader_starts: int = 0  # training loaders started in the step (an epoch's start)
    loader_end_s: float = 0.0  # training loaders' workers shut down at their iterator's end (an epoch's end)
    loader_ends: int = 0
    loss: object = None  # a detached tensor (what backward() was given); read only after the window, never during it

    def add_samples(self, n: int | None) -> None:
        if n is not None:
            self.samples = (self.samples or 0) + n

    def batch(self) -> int | None:
        """The step's batch size: the DataLoader's (or advisor.step's), else the model's input's."""
        return self.samples if self.samples is not None else self.forward_samples


@dataclass
class ClosedStep:
    """A step that ended: its two boundaries and what happened between them. Its time is read
    (:meth:`timing`) once its timeline has settled, when `timed`; an untimed step's is the host's."""

    start: Mark
    end: Mark
    acc: StepAccumulator
    timed: bool

    def timing(self, timeline: Timeline) -> dict:
        """The step's :class:`~advisor.run_dir.protocol.StepTimes` fields (window and arm lines alike)."""
        host_s = self.end.host - self.start.host
        duration_s, clock = timeline.span(self.start, self.end) if self.timed else (host_s, "host")
        acc = self.acc
        return {"t_start": self.start.host, "t_end": self.end.host, "duration_s": duration_s, "host_s": host_s,
                "cpu_s": self.end.cpu - self.start.cpu, "clock": clock, "data_wait_s": acc.data_wait_s, "optimizer_s": acc.optimizer_s,
                "backward_s": acc.backward_s, "samples": acc.batch(), "eval_s": acc.eval_s, "evals": acc.evals,
                "checkpoint_s": acc.checkpoint_s, "checkpoints": acc.checkpoints, "loader_starts": acc.loader_starts,
                "loader_end_s": acc.loader_end_s, "loader_ends": acc.loader_ends,
                "t_device_end": timeline.on_host(self.end) if clock == "device" else None}


L = TypeVar("L", bound=Line)


def timed_lines(timeline: Timeline, held: list[tuple[ClosedStep, Callable[..., L]]]) -> list[L]:
    """The held steps' lines (each made by its `line`, given the step's times): after one wait on the
    device, when any of them is timed (the profiled window's and an arm window's steps alike)."""
    if any(step.timed for step, _ in held):
        timeline = settled(timeline)
    return [line(**step.timing(timeline)) for step, line in held]


@runtime_checkable
class Loss(Protocol):
    """A loss as read after its window: a tensor (or the tests' stand-in for one on a device)."""

    def float(self) -> Loss: ...
    def mean(self) -> Loss: ...
    def item(self) -> builtins.float: ...  # (float, in here, names the method above)


class Capture(Protocol):
    """The source capture the clock and the hooks drive (advisor.probe.sources.SourceCapture): named here, not
    imported, so the clock stays below the probe's modules."""

    def boundary(self, seen: int, warmup: int, source: str | None) -> None: ...
    def stepped(self, optimizer: object, site: dict | None) -> None: ...
    def fetched(self, iterator: object, samples: int | None) -> None: ...
    def stop(self) -> None: ...


class ArmsDriver(Protocol):
    """What the clock asks of advisor.probe.arms.Arms once the profiled window is over."""

    def window_done(self) -> bool: ...
    def step(self, step: ClosedStep, loss: object) -> bool: ...


@dataclass
class StepClock:
    """Counts boundaries, times steps, and drives the profiler window.

    Steps: step 0 runs from start-up to the first boundary (imports, set-up, an initial eval)
    and is never counted; then `warmup` steps; then `steps` measured steps, the last
    `profile_steps` of which run under torch.profiler and are recorded in its trace. Just
    before those, one more step runs with the profiler warming up (CUPTI start-up, its
    buffers): that step is neither recorded nor measured (phase ``profiler-warmup``), so
    exactly `profile_steps` measured steps are marked ``profiled`` and the clean steps the
    throughput rests on never carry the profiler's start-up cost.
    """

    warmup: int
    steps: int
    profile_steps: int
    sink: TextIO  # a text file: one JSON line per boundary
    on_profile_start: Callable[[], None] = lambda: None
    on_profile_step: Callable[[], None] = lambda: None
    on_window_end: Callable[[], None] = lambda: None
    on_unknown_batch: Callable[[], None] = lambda: None  # a step ended without a batch size (called once)
    capture: Capture | None = None  # the user's lines, over the last warm-up step
    on_boundary: Callable[[int], None] = lambda seen: None  # each window boundary, with the boundaries seen
    arms: ArmsDriver | None = None  # after the window, run the parent's arms instead of stopping
    in_arms: bool = False
    timeline: Timeline = field(default_factory=HostTimeline)  # where a step's time is read (see timeline.py)
    pid: int = field(default_factory=os.getpid)
    source: str | None = None
    anchor_optimizer: int | None = None
    optimizer_created: bool = False
    boundaries: int = 0
    done: bool = False
    profiling: bool = False
    _asked_batch: bool = False
    measured: list[StepLine] = field(default_factory=list)
    losses: list = field(default_factory=list)
    _start: Mark = field(init=False)  # the boundary the current step started at
    _acc: StepAccumulator = field(default_factory=StepAccumulator)
    # timed steps closed, waiting for their timeline (flush)
    _held: list[tuple[ClosedStep, Callable[..., StepLine]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._start = self.timeline.mark()

    def now(self) -> float:
        return self.timeline.clock()

    @property
    def profile_start(self) -> int:
        """Boundaries seen when the profiler starts: the end of the last un-profiled measured
        step, after which the profiler's own warm-up step runs (-1: no profiler)."""
        return self.warmup + self.steps - self.profile_steps + 1 if self.profile_steps else -1

    @property
    def window_end(self) -> int:
        """Boundaries seen when the measured window ends (the profiler's warm-up step counts one)."""
        return self.warmup + self.steps + 1 + (1 if self.profile_steps else 0)

    def _phase(self, n: int) -> tuple[Phase, int]:
        """(phase, measured index) of step `n` (step 0 = start-up)."""
        index = n - 1 - self.warmup
        if n == 0:
            return Phase.STARTUP, index
        if index < 0:
            return Phase.WARMUP, index
        unprofiled = self.steps - self.profile_steps
        if self.profile_steps and index == unprofiled:
            return Phase.PROFILER_WARMUP, -1
        if self.profile_steps and index > unprofiled:
            index -= 1
        return Phase.MEASURE, index

    def _owns(self, source: str) -> bool:
        """Adopt `source` if it outranks the current one; say whether it drives the clock."""
        if os.getpid() != self.pid:  # a forked DataLoader worker
            return False
        if self.optimizer_created and _RANK[source] < _RANK["optimizer"] and self.source in (None, "backward", "dataloader"):
            # An optimizer exists but has not stepped yet (gradient accumulation over many
            # micro-batches): wait for its step rather than counting batches as steps.
            return False
        switchable = not (self.profiling or self.done or self.in_arms)
        if self.source is None or (switchable and _RANK[source] > _RANK[self.source]):
            self.source = source
            self.boundaries = 0
            self.measured.clear()
            self.losses.clear()
            self._held.clear()
            self._acc = StepAccumulator()
            self._start = self.timeline.mark()
        return self.source == source

    def require_warmup(self, n: int) -> None:
        """Lengthen warm-up before measuring starts (never after: the window must stay whole).

        A DataLoader with workers fills `num_workers * prefetch_factor` batches before the
        first step; measuring while that buffer drains would flatter the input pipeline.
        """
        if n > self.warmup and self.boundaries <= self.warmup:
            self.warmup = n

    # hooks ---------------------------------------------------------------------------------

    def explicit_step(self, samples: int | None = None) -> None:
        if self._owns("explicit"):
            self._acc.add_samples(samples)
            self._boundary()

    def optimizer_pre(self) -> float:
        return self.now()

    def optimizer_post(self, optimizer: object, started: float | None, in_closure_s: float = 0.0) -> None:
        """The step's time, less what its closure (forward and backward, under LBFGS or Lightning) took."""
        if os.getpid() != self.pid:
            return
        if started is not None:
            self._acc.optimizer_s += max(0.0, self.now() - started - in_closure_s)
        if self.anchor_optimizer is None:
            self.anchor_optimizer = id(optimizer)
        if id(optimizer) == self.anchor_optimizer and self._owns("optimizer"):
            self._boundary()

    def batch_fetched(self, wait_s: float, samples: int | None, started: bool = False) -> None:
        """A training batch after `wait_s`; `started`: the first of its loader's iterator (an epoch's)."""
        if os.getpid() != self.pid:
            return
        if self._owns("dataloader"):
            # A new batch *starts* a step: its wait belongs to the step it opens.
            now = self.now()
            self._close_step(now - wait_s, carry=StepAccumulator(data_wait_s=wait_s, samples=samples,
                                                                 loader_starts=int(started)))
        else:
            self._acc.data_wait_s += wait_s
            self._acc.loader_starts += int(started)
            self._acc.add_samples(samples)

    def loader_ended(self, wait_s: float, shut_down: bool) -> None:
        """A training loader ran out after `wait_s`: where its workers were shut down (no
        persistent_workers), a phase of the loop's own (the epoch's end, as the script's own timer
        has it: 16 workers joined took 0.14 s on pytorch/vision's train.py, outside every step it
        times); else the step's wait on it."""
        if os.getpid() != self.pid:
            return
        if shut_down:
            self._acc.loader_end_s += wait_s
            self._acc.loader_ends += 1
        else:
            self._acc.data_wait_s += wait_s

    def phase_done(self, name: str, seconds: float) -> None:
        """An evaluation or a checkpoint (advisor.probe.phases) ended inside the current step."""
        if name == "checkpoint":
            self._acc.checkpoint_s += seconds
            self._acc.checkpoints += 1
        else:
            self._acc.eval_s += seconds
            self._acc.evals += 1

    def forward_batch(self, samples: int | None) -> None:
        """The model's forward saw a batch of `samples` (used where no DataLoader batch says so)."""
        if samples is not None and os.getpid() == self.pid:
            self._acc.forward_samples = (self._acc.forward_samples or 0) + samples

    def backward_done(self, loss: object, elapsed_s: float) -> None:
        if os.getpid() != self.pid:
            return
        self._acc.backward_s += elapsed_s
        self._acc.loss = loss
        if self._owns("backward"):
            self._boundary()

    # boundaries ----------------------------------------------------------------------------

    def _boundary(self) -> None:
        self._close_step(self.now())

    def _end_mark(self, now: float) -> Mark:
        """The boundary at host time `now` (a DataLoader-driven step's is when its wait began)."""
        mark = self.timeline.mark()
        return Mark(now, mark.event, mark.cpu)

    def _close_step(self, now: float, carry: StepAccumulator | None = None) -> None:
        if self.done:
            raise ProbeDone()
        if self.in_arms and self.arms is not None:  # in_arms: what the arms' window_done() said
            self._arm_step(self.arms, now, carry)
            return
        n = self.boundaries  # this boundary ends step n (step 0 = start-up, never counted)
        self.boundaries += 1
        acc = self._acc
        phase, measured_index = self._phase(n)
        end = self._end_mark(now)
        step = ClosedStep(self._start, end, acc, timed=phase in (Phase.MEASURE, Phase.PROFILER_WARMUP))
        self._held.append((step, partial(StepLine, phase=phase, index=measured_index, profiled=self.profiling,
                                         source=self.source, warmup=self.warmup)))
        if not (step.timed and self.timeline.deferred):
            self.flush()
        # (A DataLoader-driven start-up step ends at the first batch, so it never has one.)
        if acc.batch() is None and not self._asked_batch and (n > 0 or self.source != "dataloader"):
            self._asked_batch = True
            self.on_unknown_batch()
        self._acc = carry or StepAccumulator()
        self._start = end

        # `self.boundaries` now counts boundaries seen: act on the one that just happened.
        seen = self.boundaries
        if seen >= self.window_end:
            self.flush()  # the window's one wait on the device, before anything reads its steps
        if self.capture is not None:
            self.capture.boundary(seen, self.warmup, self.source)
        self.on_boundary(seen)
        if self.profiling:
            if seen == self.window_end:
                self.profiling = False
            else:
                self.on_profile_step()  # the first call ends the profiler's warm-up step: recording starts
        elif seen == self.profile_start and self.profile_start >= 0:
            self.profiling = True
            self.on_profile_start()
        if seen >= self.window_end:
            self.on_window_end()
            if self.arms is not None:
                try:
                    self.in_arms = self.arms.window_done()  # blocks here until the parent's plan
                except ProbeDone:
                    self.in_arms = False
                if self.in_arms:
                    self._acc = carry or StepAccumulator()
                    self._start = self.timeline.mark()
                    return
            self.done = True
            raise ProbeDone()
        if carry is None:
            self._start = self._restart(end)

    def _restart(self, end: Mark) -> Mark:
        """The next step's start: the host's clock after our bookkeeping (kept out of the next
        step), the device's at the boundary's own event (the device's time runs on)."""
        return Mark(self.now(), end.event, self.timeline.cpu_clock())

    def flush(self) -> None:
        """Write the steps held for their timeline: one wait on the device, then their lines."""
        held, self._held = self._held, []
        for (step, _), line in zip(held, timed_lines(self.timeline, held)):
            write_line(self.sink, line)
            if line.phase == Phase.MEASURE:
                self.measured.append(line)
                self.losses.append(step.acc.loss)

    def _arm_step(self, arms: ArmsDriver, now: float, carry: StepAccumulator | None) -> None:
        """A boundary while the arms run: the arms hold the step (its line is written when their
        window closes); they may switch (or end) here."""
        acc = self._acc
        self._acc = carry or StepAccumulator()
        end = self._end_mark(now)
        step = ClosedStep(self._start, end, acc, timed=True)
        self._start = end
        try:
            switched = arms.step(step, acc.loss)
        except ProbeDone:
            self.done, self.in_arms = True, False
            raise
        if carry is None:  # (a DataLoader-driven step already started with its batch's wait)
            # the switch and our bookkeeping stay out of the next step; after a switch, so does
            # the work it queued on the device
            self._start = self.timeline.mark() if switched else self._restart(end)

    def loss_values(self) -> list[float | None]:
        """Measured losses as floats; safe only after the window (it waits on the device)."""
        return [loss_value(loss) for loss in self.losses]


def loss_value(loss: object) -> float | None:
    """A held loss tensor as a float, read after its window's wait (None: not seen, or unreadable)."""
    if not isinstance(loss, Loss):  # not seen, or not a tensor
        return None
    try:
        return float(loss.float().mean().item())
    except Exception:  # noqa: BLE001 - a loss we cannot read is just unknown
        return None
