"""Where a step's time is read: the host's clock, or, on CUDA, the device's.

A step is the span between two step boundaries, and its time is defined once, per device
(``docs/explanation/steps.md``):

- **On a CPU** the work is done when Python reaches the boundary: the host's monotonic clock
  times it.
- **On a GPU** the host only queues kernels; at a boundary the device may be a whole step behind,
  so a host timestamp says how fast Python launched kernels (a 62 ms step read 13 ms). Each
  boundary records a CUDA event on the current stream instead, and a timed step's time is the
  device time between its two events, read after **one** wait on the last event when its window
  closes. Nothing here waits inside a window: the queue stays as the script keeps it.

Both clocks are kept on every step (``host_s`` beside ``duration_s``): a window whose host time
falls well below its device time was launch-bound on the host, and the report says so. The wait
also places the device's steps on the host's clock (:meth:`DeviceTimeline.on_host`): when it
returns, the device has just passed the window's last event, and each earlier event lies that
event's elapsed time before it. That span is what the sampler's readings (the GPU's energy counter)
are matched to; the host's says only when Python queued the work.

The clock and the event source are injected, so the definition is tested on a CPU with a fake
device whose timeline lags the host (``tests/test_step_clock.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from typing_extensions import Self  # typing's from 3.11; typing_extensions comes with torch


class Event(Protocol):
    """A device event, as ``torch.cuda.Event(enable_timing=True)``: recorded on the stream, waited on, and
    the milliseconds from it to a later one."""

    def record(self) -> None: ...
    def synchronize(self) -> None: ...
    def elapsed_time(self, end_event: Self, /) -> float: ...  # to another of its kind


@dataclass(frozen=True)
class Mark:
    """A boundary: the host's time, and the device event recorded there (None: host only)."""

    host: float
    event: Event | None = None
    cpu: float = 0.0  # this process's CPU time, all its threads: a neighbour delays it, it does not inflate it


def process_cpu() -> float:
    return time.process_time()


class Timeline(Protocol):
    @property
    def deferred(self) -> bool:  # timed spans are known only after settle()
        ...

    clock: Callable[[], float]  # the host's clock
    cpu_clock: Callable[[], float]  # this process's CPU time

    def mark(self) -> Mark: ...

    def settle(self) -> None: ...

    def span(self, start: Mark, end: Mark) -> tuple[float, str]: ...

    def on_host(self, mark: Mark) -> float | None: ...


class HostTimeline:
    """A CPU's steps: the host clock is the work's clock."""

    deferred = False

    def __init__(self, clock: Callable[[], float] = time.monotonic, cpu_clock: Callable[[], float] = process_cpu) -> None:
        self.clock, self.cpu_clock = clock, cpu_clock

    def mark(self) -> Mark:
        return Mark(self.clock(), cpu=self.cpu_clock())

    def settle(self) -> None:
        pass

    def span(self, start: Mark, end: Mark) -> tuple[float, str]:
        return end.host - start.host, "host"

    def on_host(self, mark: Mark) -> float | None:
        return None  # the host timed it: its own times say when it ran


class DeviceTimeline:
    """A GPU's steps: an event per boundary once the device is in use, read after one wait.

    `active()` says whether the script has started the device (no event is recorded before: a
    CPU-only script on a GPU machine never creates a CUDA context because of advise);
    `new_event()` returns an object with ``record()``, ``synchronize()`` and
    ``elapsed_time(other)`` in milliseconds, as ``torch.cuda.Event(enable_timing=True)``.
    """

    def __init__(self, active: Callable[[], bool], new_event: Callable[[], Event],
                 clock: Callable[[], float] = time.monotonic, cpu_clock: Callable[[], float] = process_cpu) -> None:
        self.active, self.new_event, self.clock, self.cpu_clock = active, new_event, clock, cpu_clock
        self.last: Event | None = None  # the newest event: settle() waits on it
        self.settles = 0  # waits made, for the tests' count of advise's own syncs
        self.settled_on: Event | None = None  # the event the last wait returned at, and the host's time then
        self.settled_at: float | None = None

    @property
    def deferred(self) -> bool:
        """From the first event on: a step timed on the host (a CPU-only script on a CUDA build of
        torch, or before the script touched the device) is written as it ends, as on a CPU."""
        return self.last is not None

    def mark(self) -> Mark:
        if not self.active():
            return Mark(self.clock(), cpu=self.cpu_clock())
        event = self.new_event()
        event.record()
        self.last = event
        return Mark(self.clock(), event, self.cpu_clock())

    def settle(self) -> None:
        if self.last is not None:
            self.last.synchronize()
            self.settled_on, self.settled_at = self.last, self.clock()
            self.settles += 1

    def span(self, start: Mark, end: Mark) -> tuple[float, str]:
        """The device time between two settled marks; the host's where either has no event
        (the step the script first touched the device in)."""
        if start.event is None or end.event is None:
            return end.host - start.host, "host"
        return start.event.elapsed_time(end.event) / 1000.0, "device"

    def on_host(self, mark: Mark) -> float | None:
        """When the device passed `mark`'s event, on the host's clock: the last wait returned as the
        device passed the event it waited on, and `mark`'s lies its elapsed time before that (None
        before any wait, or for a mark without an event)."""
        if mark.event is None or self.settled_on is None or self.settled_at is None:
            return None
        return self.settled_at - mark.event.elapsed_time(self.settled_on) / 1000.0


def settled(timeline: Timeline) -> Timeline:
    """`timeline` once its marks are readable; the host's where the device cannot say (a script
    whose error poisoned the CUDA context: its steps keep their host times, its error is its own)."""
    try:
        timeline.settle()
    except Exception:  # noqa: BLE001 - the script's own error is reported, not ours
        return HostTimeline(timeline.clock, timeline.cpu_clock)
    return timeline


def for_this_process() -> Timeline:
    """A device timeline where torch is built with CUDA (events only once the script has initialised
    it: asking whether a GPU is there would start the runtime in a CPU-only script), else the host's."""
    import torch  # torch: 1 s; the parent reads this module without it

    if not torch.backends.cuda.is_built():
        return HostTimeline()
    return DeviceTimeline(torch.cuda.is_initialized, lambda: torch.cuda.Event(enable_timing=True))
