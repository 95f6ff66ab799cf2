"""Taking turns with a neighbour: the arms' windows start while no other process takes the cores
the script's steps want.

A window a neighbour disturbed is set aside and measured again
(:func:`advisor.experiments.inprocess.disturbed`), but a window started while the neighbour runs
is spent before it is set aside. Beside a CPU burner on one of two cores (on 1-4 s, off 0-3 s),
tiny-gpt's 3.5 ms step ran 200-1,300 ms while it burned: its fused AdamW windows took 4.2 s of a
7.4 s budget, were set aside, and no quiet one ran before the budget ended (0 runs of 3 verified
the fix, which gains 1.20x by hand beside the same burner).

So the parent reads its sampler's last ticks: the cores other processes used
(:func:`advisor.analysis.metrics.outside_per_tick`) and the script's run-queue wait (the kernel's
clock, :mod:`advisor.waits`). Where they take cores the script wants (:func:`crowded`), the parent
writes the hold file (:attr:`RunFiles.hold`) and keeps it until they use under
OUTSIDE_LOAD_WARN_CORES; the child starts no window while it exists
(:meth:`advisor.probe.arms.Arms._hold`), and the arms' clock stops meanwhile. A neighbour that never
leaves (a long build, the other worker of a parallel test suite) must not stop the arms: the parent
holds only for a neighbour it saw gone within the last HOLD_MAX_S (:func:`came_lately`). One that
stayed through a hold's length is staying: holding for it spent 4 s of every run beside a test
suite's other worker (a 300 s budget's windows, each held 4 s before any such rule, took 66 s where
18 s alone). A hold ends after HOLD_MAX_S, and none starts once they add up to HOLD_GRANT times the
budget. Windows the neighbour disturbs are then set aside as before.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from advisor.analysis.metrics import ADVISE_CPU, OUTSIDE_LOAD_WARN_CORES, outside, took_a_core

HOLD_MAX_S = 4.0  # one hold at most: the burner's longest burst; a neighbour still there after it stays
HOLD_GRANT = 1.0  # all holds at most this many times the arms' budget (as the windows set aside: DISTURBED_GRANT)
RECENT_TICKS = 2  # the sampler's ticks (0.1 s each) a hold is decided on
LOOKBACK_TICKS = round(HOLD_MAX_S / 0.1)  # the ticks in which a neighbour to hold for was seen gone


def _others(ticks: list[dict], cpu_count: int) -> list[float | None]:
    """Each tick's cores other processes used (None where the tick does not say)."""
    def read(tick: dict, key: str) -> float | None:
        value = tick.get(key)
        return float(value) if value is not None and value == value else None

    return [max(0.0, outside(sys_, tree, read(t, ADVISE_CPU) or 0.0, cpu_count))
            if (sys_ := read(t, "sys_cpu_percent")) is not None and (tree := read(t, "cpu_percent")) is not None else None
            for t in ticks]


def load(recent: list[dict], cpu_count: int) -> tuple[float | None, float | None]:
    """Over the `recent` sampler ticks: the cores other processes used, and the script's tree's
    run-queue wait in cores (each None where the ticks do not say). Plain floats: the parent
    decides every tick while the arms run (a frame of two ticks cost 0.9 ms of a core each)."""
    used = [u for u in _others(recent, cpu_count) if u is not None]
    other = sum(used) / len(used) if used else None
    clock = [(t["t"], float(w)) for t in recent if (w := t.get("runq_wait_s")) is not None and w == w
             and t.get("t") is not None]
    span = clock[-1][0] - clock[0][0] if len(clock) >= 2 else 0.0
    wait = (clock[-1][1] - clock[0][1]) / span if span > 0 else None
    return other, wait


def came_lately(ticks: list[dict], cpu_count: int) -> bool:
    """Whether other processes were gone (under OUTSIDE_LOAD_WARN_CORES over RECENT_TICKS ticks in a
    row) at some point of `ticks`, the sampler's last LOOKBACK_TICKS: a neighbour there all along
    has outstayed a hold already."""
    used = _others(ticks, cpu_count)
    return any(a is not None and b is not None and (a + b) / 2 < OUTSIDE_LOAD_WARN_CORES for a, b in zip(used, used[1:]))


def crowded(recent: list[dict], cpu_count: int, need_cores: float) -> bool:
    """Over the `recent` sampler ticks, other processes take cores the script wants: they used
    OUTSIDE_LOAD_WARN_CORES or more, and the script's threads waited for a core
    (:func:`took_a_core`: a 4-worker I/O loader's 2-thread steps come in bursts its mean CPU, half a
    core, does not show), or they left fewer of the `cpu_count` cores than `need_cores`, what the
    script's tree used in its measured window (it may be idle, waiting on the hold itself). A
    neighbour on a core the script does not want holds nothing."""
    other, wait = load(recent, cpu_count)
    if other is None:
        return False
    return took_a_core(other, wait or 0.0) or (other >= OUTSIDE_LOAD_WARN_CORES and cpu_count - other < need_cores)


class State(str, Enum):
    OPEN = "open"  # no hold file: the child starts its windows
    HELD = "held"  # the hold file is there
    RELEASED = "released"  # the child's hold reached a cap: none until it has started its window


class Holds:
    """The hold file of one run's arms (`hold`), decided on the sampler's ticks; `budget_s` the
    arms' time budget as it started (the holds' total is capped at HOLD_GRANT times it)."""

    def __init__(self, hold: Path, cpu_count: int, need_cores: float, budget_s: float) -> None:
        self.hold, self.cpu_count, self.need_cores = hold, cpu_count, need_cores
        self.cap_s = HOLD_GRANT * budget_s
        self.state = State.OPEN
        self.waiting_since: float | None = None  # the child waits on the hold file since then (a Held line)
        self.held_s = 0.0  # the child's holds so far (its Held lines)
        self._tick: float | None = None  # the last tick decided on

    def poll(self, ticks: list[dict], now: float) -> None:
        """Write or remove the hold file on the sampler's last LOOKBACK_TICKS `ticks` (each tick decided
        on once); a hold the child has waited on for HOLD_MAX_S, or past the cap on all of them, is
        released."""
        if self.state is State.HELD and self.waiting_since is not None and \
                (now - self.waiting_since >= HOLD_MAX_S or self.held_s + now - self.waiting_since >= self.cap_s):
            self._release(State.RELEASED)
            return
        tick = ticks[-1].get("t") if ticks else None
        if tick is None or tick == self._tick or self.state is State.RELEASED:
            return
        self._tick = tick
        recent = ticks[-RECENT_TICKS:]
        if self.state is State.OPEN and self.held_s < self.cap_s and crowded(recent, self.cpu_count, self.need_cores) \
                and came_lately(ticks, self.cpu_count):
            self.hold.touch()
            self.state = State.HELD
        elif self.state is State.HELD and (load(recent, self.cpu_count)[0] or 0.0) < OUTSIDE_LOAD_WARN_CORES:
            self._release(State.OPEN)  # the neighbour left (the script, held, waits for nothing: its clock says nothing)

    def child_waits(self, now: float) -> None:
        """The child found the hold file at a window's start and waits (a Held line without an end)."""
        self.waiting_since = now

    def child_held(self, seconds: float) -> None:
        """The child's hold ended after `seconds` (a Held line with its end): its window starts now."""
        self.held_s += seconds
        self.waiting_since = None
        if self.state is State.RELEASED:
            self.state = State.OPEN

    def end(self) -> None:
        """The arms are over: no hold file left."""
        self._release(State.OPEN)

    def _release(self, state: State) -> None:
        self.hold.unlink(missing_ok=True)
        self.state = state
