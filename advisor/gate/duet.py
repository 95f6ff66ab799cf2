"""Both sides of a comparison alive at once, taking turns (duet benchmarking, Bulej et al. 2020).

Each side is a probed child (:class:`advisor.probe.runner.ProbeSession`) that, after a short
measured window, holds at a step boundary for a plan: the in-process arms' protocol
(:mod:`advisor.run_dir.protocol`). :class:`Turns` hands the machine to one side at a time, a plan of
one window of `window_s` seconds (its baseline, nothing switched), then the other side's, so a
neighbour's burst falls on both sides alike and each process pays its start-up once.

Only one side computes at any moment: while a side holds, the processes under its child (its
DataLoader workers, which would go on prefetching) are stopped with SIGSTOP and continued before
its next window; the child itself only polls for its plan file. On a GPU a side's turn ends with
its window's one wait on the device (:meth:`advisor.probe.arms.Arms.step`), before its PlanDone
line hands the machine over: the other side's first step never shares the device with its last.

A stop signal to advise (Ctrl-C, SIGTERM, SIGHUP: the `stop` request) reaches both children as
it reaches a profiled script: the held side is continued and sent no more windows, and each
child is stopped politely, then forcefully (:mod:`advisor.probe.stops`); the duet then raises
:class:`~advisor.run_dir.interrupt.Interrupted` with both run dirs kept.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import msgspec
import pandas as pd
import psutil

from ..analysis import metrics, steptime
from ..profile import read_samples
from ..probe.config import ProbeConfig
from ..probe.runner import ProbeRun, ProbeSession
from ..run_dir.interrupt import Interrupted, StopRequest
from ..run_dir.protocol import Plan, RankLines, Window, write_plan

BASELINE = "baseline"
_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


@dataclass
class Turn:
    """One side's window: when it ran and what the child measured in it."""

    side: str
    round: int  # the side's plan number
    started: float  # time.monotonic(), the parent's, when its plan was written
    ended: float | None = None
    step_s: list[float] = field(default_factory=list)  # its timed steps' durations
    cpu_s: list[float] = field(default_factory=list)  # their CPU time (the training process's threads), where read
    samples: list[float] = field(default_factory=list)  # their batch sizes, where the steps know them
    wait: float | None = None  # the side's run-queue wait over the window, in cores (metrics.window_wait)
    outside: float | None = None  # cores other processes used in it (the other side is stopped)

    @property
    def median_s(self) -> float | None:
        return _median(self.step_s)

    def median(self, what: str, per_sample: bool = False) -> float | None:
        """The window's median step of `what` ("step_s" or "cpu_s"), per sample with `per_sample`."""
        values = getattr(self, what)
        if per_sample:
            if len(self.samples) != len(values) or not all(n > 0 for n in self.samples):
                return None
            values = [v / n for v, n in zip(values, self.samples)]
        return _median(values)


def _median(values: list[float]) -> float | None:
    return float(sorted(values)[len(values) // 2]) if values else None


@dataclass
class Turns:
    """Who runs now. Each side's thread calls :meth:`ready` when its child holds for a plan; the
    first window starts once both hold, and the sides alternate until each ran `windows` windows."""

    sides: tuple[str, str]
    window_s: float
    windows: int
    first: str | None = None  # the side whose window opens the duet (None: the first of `sides`)
    warmup: int = 1  # untimed steps at each window's start (caches, a loader's queue refilled)
    min_steps: int = 3
    turns: list[Turn] = field(default_factory=list)
    _held: dict[str, tuple[int, Path, int]] = field(default_factory=dict)  # side -> (round, plan path, child pid)
    _gone: set[str] = field(default_factory=set)  # sides whose child ended (its script ran out of steps, or failed)
    _running: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def ready(self, side: str, round_no: int, plan: Path, pid: int) -> None:
        with self._lock:
            if self._end_turn_of(side) or round_no == 0:
                _pause(pid, True)
            self._held[side] = (round_no, plan, pid)
            self._hand_over()

    def gone(self, side: str) -> None:
        """`side`'s child ended: the other side gets no more windows (it would have no partner), its child finishes."""
        with self._lock:
            self._gone.add(side)
            self._end_turn_of(side)
            self._hand_over()

    def _end_turn_of(self, side: str) -> bool:
        """End the turn `side` is running, if it is running one."""
        if self._running != side:
            return False
        self.turns[-1].ended = time.monotonic()
        self._running = None
        return True

    def _done(self, side: str) -> bool:
        return bool(self._gone) or sum(t.side == side for t in self.turns) >= self.windows

    def _hand_over(self) -> None:
        if self._running is not None or len(self._held) < 2 and not self.turns and not self._gone:
            return
        opener = self.first or self.sides[0]
        last = self.turns[-1].side if self.turns else next(s for s in self.sides if s != opener)
        order = [s for s in self.sides if s != last] + [last]
        nxt = next((s for s in order if s in self._held and not self._done(s)), None)
        if nxt is None:
            if all(self._done(s) for s in self.sides) and self._running is None:
                for side, (round_no, plan, pid) in list(self._held.items()):
                    _pause(pid, False)
                    write_plan(plan, Plan(round=round_no, windows=[]))  # the side's arms end: its child finishes
                    del self._held[side]
            return
        round_no, plan, pid = self._held.pop(nxt)
        _pause(pid, False)
        self.turns.append(Turn(nxt, round_no, time.monotonic()))
        self._running = nxt
        write_plan(plan, Plan(round=round_no, windows=[Window(arm=BASELINE, warmup=self.warmup, steps=10_000,
                                                              seconds=self.window_s, min_steps=self.min_steps)]))


def _pause(pid: int, stop: bool) -> None:
    """SIGSTOP (or SIGCONT) every process under `pid`, never `pid` itself: it waits for its plan."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except _GONE:
        return
    for child in children:
        try:
            child.suspend() if stop else child.resume()
        except _GONE:
            pass


@dataclass
class Duet:
    """Run `configs` (two sides, each a probed child with its own run dir) taking turns."""

    configs: dict[str, ProbeConfig]
    window_s: float = 0.5
    windows: int = 20  # per side
    first: str | None = None  # the side whose window opens (a gate alternates it over its restarts)
    stop: StopRequest | None = None  # advise's stop signals: both children are stopped, and the duet raises

    def run(self) -> tuple[list[Turn], dict[str, ProbeRun]]:
        names = tuple(self.configs)
        assert len(names) == 2
        turns = Turns((names[0], names[1]), self.window_s, self.windows, first=self.first)
        budget = 4 * self.window_s * self.windows + 60.0
        sessions: dict[str, ProbeSession] = {}
        for side, config in self.configs.items():
            config.arms, config.arms_budget_s, config.hold_for_neighbours = True, budget, False
            config.plan_timeout_s = max(config.plan_timeout_s, 10 * self.window_s + 30.0)
            sessions[side] = ProbeSession(config, None, self.stop, self._ready(turns, side, sessions), None, None)
        runs: dict[str, ProbeRun] = {}

        def run(side: str) -> None:
            try:
                runs[side] = sessions[side].run()
            finally:
                turns.gone(side)
        threads = [threading.Thread(target=run, args=(side,), daemon=True) for side in names]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            if self.stop:  # the held side is continued, so that it sees the signal its session sends it
                for side in names:
                    turns.gone(side)
            time.sleep(0.05)
        if self.stop:
            raise Interrupted(self.stop.signum)
        for side, session in sessions.items():
            _read(turns.turns, side, session.lines, Path(self.configs[side].out), session.shape.suffix,
                  psutil.cpu_count() or 1)
        return turns.turns, runs

    @staticmethod
    def _ready(turns: Turns, side: str, sessions: dict[str, ProbeSession]) -> Callable[[int, list[str], RankLines], None]:
        def ready(round_no: int, suffixes: list[str], lines: RankLines) -> None:
            session = sessions[side]
            turns.ready(side, round_no, session.out / session.shape.names.plan, session.child.pid)
        return ready


def _read(turns: list[Turn], side: str, lines: RankLines, out: Path, suffix: str, cpu_count: int) -> None:
    """Fill each of `side`'s turns with its timed steps and its wait, from the child's lines."""
    samples = read_samples(out, suffix)
    for turn in (t for t in turns if t.side == side):
        rows = [msgspec.structs.asdict(x) for x in lines.arm_steps if x.round == turn.round and not x.warm]
        if not rows:
            continue
        frame = steptime.mark_unprofiled(pd.DataFrame(rows))
        turn.step_s = [float(x) for x in steptime.durations(frame)]
        if steptime.CPU in frame and frame[steptime.CPU].notna().all():
            turn.cpu_s = [float(x) for x in frame[steptime.CPU]]
        if steptime.knows_batch(frame):
            turn.samples = [float(x) for x in steptime.batch_sizes(frame)]
        if not samples.empty and steptime.has_spans(frame):
            turn.wait = metrics.window_wait(samples, frame)
            turn.outside = metrics.outside_cores(metrics.window_samples(samples, frame), cpu_count)


def log_ratios(turns: list[Turn], base: str, cand: str, what: str = "step_s", per_sample: bool = False) -> list[float]:
    """Per candidate window, log(its median step / the mean of the base windows either side of it):
    a drift of the machine's speed over a few windows cancels. `what`, `per_sample`: :meth:`Turn.median`."""
    out = []
    for k, turn in enumerate(turns):
        mine = turn.median(what, per_sample) if turn.side == cand else None
        if mine is None:
            continue
        near = [m for t in (turns[k - 1] if k else None, turns[k + 1] if k + 1 < len(turns) else None)
                if t is not None and t.side == base for m in (t.median(what, per_sample),) if m is not None]
        if near and mine > 0:
            out.append(math.log(mine / (sum(near) / len(near))))
    return out
