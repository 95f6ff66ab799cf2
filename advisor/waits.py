"""The kernel's wait clock: how long a process tree's threads were runnable but waiting for a CPU.

A busy neighbour costs a training process time it spends in the run queue, and the kernel counts
it per thread, with no hardware counter: field 2 of ``/proc/PID/task/TID/schedstat`` (ns). Beside
it, the machine's CPU pressure (``/proc/pressure/cpu``, ``some total=``, µs: time at least one task
waited) and steal (``/proc/stat``'s ``cpu`` line, its 8th value, in clock ticks: time a hypervisor
gave this machine's CPUs to another). All three are cumulative: the parent's sampler reads them
each tick (the script pays nothing) and a window's wait is their rise between its ends
(:func:`advisor.analysis.metrics.window_wait`).

Threads come and go (a DataLoader's workers, a compile pool): the tree's count is kept as a sum of
each thread's rises since it was first seen, so a thread that exits takes nothing back. Where the
kernel has none of these files (no schedstat, no PSI), :meth:`WaitClock.missing` says which, once.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Iterable

# the sampler's columns, cumulative seconds: the tree's wait, its main process's part of it, the machine's
WAIT_COLUMNS = ["runq_wait_s", "main_runq_wait_s", "cpu_pressure_s", "steal_s"]
NAN = math.nan


class WaitClock:
    """Cumulative waits of one process tree and of the machine, read from `proc` (``/proc``; a test's
    folder of the same shape)."""

    def __init__(self, proc: Path | str = "/proc") -> None:
        self.proc = Path(proc)
        self._seen: dict[tuple[int, int], int] = {}  # (pid, tid) -> its run-queue wait at the last read, ns
        self._total_ns = 0
        self._main_ns = 0  # the part of _total_ns that the main process's threads waited
        self._read_any = False
        try:
            self._tick_s = 1.0 / os.sysconf("SC_CLK_TCK")
        except (ValueError, OSError, AttributeError):
            self._tick_s = 0.01

    def read(self, pids: Iterable[int], main: int | None = None) -> dict[str, float]:
        """The counters now, in seconds (NaN where the kernel gives none); `main`: the script's own
        process, whose threads' part of the tree's wait is kept apart (the rest is its workers')."""
        tree = self.tree_wait_s(pids, main)
        return {"runq_wait_s": NAN if tree is None else tree,
                "main_runq_wait_s": NAN if tree is None or main is None else self._main_ns / 1e9,
                "cpu_pressure_s": _or_nan(self.pressure_s()),
                "steal_s": _or_nan(self.steal_s())}

    def tree_wait_s(self, pids: Iterable[int], main: int | None = None) -> float | None:
        """The run-queue wait of every thread of `pids` since each was first seen (the first read
        starts the clock: what came before it is not counted); None where no schedstat is readable.
        The part of it that process `main`'s threads waited is counted apart as well."""
        now: dict[tuple[int, int], int] = {}
        for pid in pids:
            tasks = self.proc / str(pid) / "task"
            try:
                tids = [int(t) for t in os.listdir(tasks) if t.isdigit()]
            except OSError:
                continue
            for tid in tids:
                try:
                    fields = (tasks / str(tid) / "schedstat").read_text().split()
                    now[(pid, tid)] = int(fields[1])
                except (OSError, IndexError, ValueError):
                    continue
        if not now:
            return None if not self._read_any else self._total_ns / 1e9
        first = not self._read_any
        for key, waited in now.items():
            before = self._seen.get(key)
            if before is not None:
                rise = max(0, waited - before)
            else:  # a thread born since the last read: all its wait is since then
                rise = 0 if first else waited
            self._total_ns += rise
            if key[0] == main:
                self._main_ns += rise
        self._seen = now
        self._read_any = True
        return self._total_ns / 1e9

    def pressure_s(self) -> float | None:
        """The machine's CPU pressure so far (``some total=``), seconds; None without PSI."""
        try:
            text = (self.proc / "pressure" / "cpu").read_text()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("some "):
                for part in line.split():
                    if part.startswith("total="):
                        return int(part[6:]) / 1e6
        return None

    def steal_s(self) -> float | None:
        """CPU time stolen from this machine so far (``/proc/stat``), seconds; None where unread."""
        try:
            with open(self.proc / "stat") as f:
                first = f.readline().split()
        except OSError:
            return None
        if len(first) < 9 or first[0] != "cpu":
            return None
        try:
            return int(first[8]) * self._tick_s
        except ValueError:
            return None

    def missing(self, pid: int) -> list[str]:
        """What this kernel does not give (said once, where a fallback is used)."""
        out = []
        if not (self.proc / str(pid) / "schedstat").exists():
            out.append("per-thread run-queue wait (/proc/PID/task/*/schedstat)")
        if self.pressure_s() is None:
            out.append("CPU pressure (/proc/pressure/cpu)")
        return out


def _or_nan(value: float | None) -> float:
    return NAN if value is None else value
