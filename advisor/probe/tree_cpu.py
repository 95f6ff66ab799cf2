"""The CPU a process tree used between two ticks, from each process's cumulative CPU times.

psutil's ``cpu_percent`` needs two readings of a process: a process seen for the first time reads
0 %, and one that ends between ticks takes its last stretch with it. The experiments read the
machine's other load as the system's CPU less the tree's, so both turned the script's own work
into a neighbour's: a loader's 4 new DataLoader workers (a batch-size arm rebuilds the loader)
read as 0.6-0.9 cores of "other processes", and the arm's only window was set aside as disturbed
(minGPT's adder: the fix went unmeasured in 3 of 5 runs). Here a new process counts all the CPU it
used since it started, and one that ended counts its last stretch through the process of the tree
that reaped it (its parent's children times rise by the whole of the child's, less what the ticks
before already counted).
"""

from __future__ import annotations

from typing import NamedTuple

# A process that ended is credited against its parent's children times within this many ticks (a
# DataLoader joins its workers at once); one reaped outside the tree (re-parented) is forgotten then.
GONE_TICKS = 20


class Times(NamedTuple):
    """One process's cumulative CPU seconds: its own threads', and its reaped children's."""

    own: float
    children: float


class TreeCpu:
    """Cores the tree used between ticks (:meth:`read`), each process keyed by its pid and start
    time (a recycled pid is a new process)."""

    def __init__(self) -> None:
        self.last: dict[tuple[int, float], Times] = {}
        self.t: float | None = None
        self.gone: list[tuple[int, float]] = []  # (tick, CPU seconds already counted) of processes that ended
        self.ticks = 0

    def read(self, t: float, times: dict[tuple[int, float], Times], root: tuple[int, float]) -> tuple[float, float]:
        """(the tree's CPU %, the root process's own) since the last reading, 100 % a core; (0, 0)
        on the first reading, as psutil's first call."""
        self.ticks += 1
        for key in self.last.keys() - times.keys():
            self.gone.append((self.ticks, sum(self.last[key])))
        self.gone = [(k, s) for k, s in self.gone if self.ticks - k <= GONE_TICKS]
        own = sum(max(0.0, now.own - self.last.get(key, Times(0.0, 0.0)).own) for key, now in times.items())
        reaped = sum(max(0.0, now.children - self.last.get(key, Times(0.0, 0.0)).children) for key, now in times.items())
        counted = 0.0  # of the reaped children's times, what earlier ticks counted while they ran
        while self.gone and counted < reaped:
            k, seconds = self.gone.pop(0)
            take = min(seconds, reaped - counted)
            counted += take
            if take < seconds:
                self.gone.insert(0, (k, seconds - take))
        root_own = max(0.0, times[root].own - self.last[root].own) if root in times and root in self.last else 0.0
        first, dt = self.t is None, t - (self.t if self.t is not None else t)
        self.last, self.t = dict(times), t
        if first or dt <= 0:
            return 0.0, 0.0
        return 100.0 * (own + reaped - counted) / dt, 100.0 * root_own / dt
