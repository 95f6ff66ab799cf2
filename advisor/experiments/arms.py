"""The arms of one run and what a round measured of them: an arm's role and the value it measures,
the child's lines and timed steps per window (:class:`RoundResult`), and an arm with no result."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Iterable, Union

import msgspec
import pandas as pd

from ..analysis import steptime
from ..model import Experiment
from ..run_dir.protocol import ArmLine, RankLines
from .judge import Measurement
from .plan import BASELINE, Candidate


class Role(str, Enum):
    FIX = "fix"        # a rule's fix (one arm per sweep value)
    SCREEN = "screen"  # a fix no rule proposed: one short window first
    LADDER = "ladder"  # a larger batch: measured last, smallest first (an OOM ends the arms)
    STACK = "stack"    # the winners together


@dataclass
class Arm:
    candidate: Candidate  # the finding's fix
    point: Candidate      # the value this arm measures
    role: Role


@dataclass(frozen=True)
class Unmeasured:
    """An arm with no result: the child could not switch it in a live process (`switchable` False: a
    fresh run measures it), or the run ended before its windows."""

    why: str
    switchable: bool = True


Outcome = Union[Experiment, Unmeasured]


@dataclass
class RoundResult:
    """What the child measured in one round: per window its line and its timed steps."""

    windows: list[ArmLine]  # in window order
    steps: dict[int, pd.DataFrame]  # window index -> timed steps
    warm_s: dict[int, float] = field(default_factory=dict)  # window index -> its untimed steps' seconds
    busy: dict[int, float] = field(default_factory=dict)  # window index -> cores other processes used in it: left out
    # Windows a neighbour disturbed that are kept, in pairs: an arm's window and its nearest baseline
    # window, both disturbed (a duet: the neighbour hit both sides). Each side pairs only with its kind.
    shared: set[int] = field(default_factory=set)
    outside: dict[int, float] = field(default_factory=dict)  # window index -> cores other processes used in it
    waits: dict[int, float] = field(default_factory=dict)  # window index -> the script's run-queue wait, in cores
    # windows a step of which the per-step clock says a neighbour held (metrics.disturbed_steps)
    held: set[int] = field(default_factory=set)
    # Windows a neighbour disturbed in part, read on the steps it did not (metrics.quiet_part): window
    # index -> those steps. Their figures, load and wait are these steps'; the window's time is all of its.
    quiet: dict[int, pd.DataFrame] = field(default_factory=dict)
    # The round before's closing baseline window, where this round opens on an arm (:meth:`pairs` reads
    # it as the baseline before that arm): a round need not open on a baseline the last one just measured.
    opened_by: "RoundResult | None" = None
    _measured: dict[int, Measurement] = field(default_factory=dict, repr=False)

    @classmethod
    def read(cls, lines: RankLines, round_no: int) -> "RoundResult":
        """Round `round_no`'s windows and their timed steps, from the judged rank's lines."""
        steps: dict[int, list] = {}
        warm: dict[int, float] = {}
        for line in lines.arm_steps:
            if line.round == round_no and not line.warm:
                steps.setdefault(line.window, []).append(line)
            elif line.round == round_no:
                warm[line.window] = warm.get(line.window, 0.0) + (line.duration_s or 0.0)
        windows = sorted((w for w in lines.arm_windows if w.round == round_no), key=lambda w: w.window)
        frames = {k: steptime.mark_unprofiled(pd.DataFrame([msgspec.structs.asdict(x) for x in rows]))
                  for k, rows in steps.items()}
        return cls(windows, frames, warm)

    def window_s(self, line: ArmLine) -> float:
        """A window's seconds in all: its timed and untimed steps and its switching."""
        frame = self.steps.get(line.window)
        timed = float(steptime.durations(frame).sum()) if frame is not None and len(frame) else 0.0
        return timed + self.warm_s.get(line.window, 0.0) + line.switch_s

    def judged(self, window: int) -> pd.DataFrame | None:
        """The steps a window's figures read: its quiet ones (:attr:`quiet`), else all it timed."""
        return self.quiet.get(window, self.steps.get(window))

    def set_aside_s(self) -> float:
        """The seconds of the windows a neighbour disturbed that were set aside (:attr:`busy`), and of
        the steps left out of the windows read on their quiet ones (:attr:`quiet`)."""
        whole = sum(self.window_s(line) for line in self.windows if line.window in self.busy)
        return whole + sum(float(steptime.durations(self.steps[k]).sum() - steptime.durations(q).sum())
                           for k, q in self.quiet.items() if k not in self.busy and k in self.steps)

    def ends(self, whole: bool = False) -> list[float]:
        """Each window's last step's end on the child's clock; `whole`: only the windows closed with
        their line (not one the run ended inside)."""
        lined = {line.window for line in self.windows}
        return [end for k, f in self.steps.items()
                if (not whole or k in lined) and (end := steptime.span_end(f)) is not None]

    def measurement(self, k: int, run_dir: Path) -> Measurement:
        """Window k's measurement, one object per window (a baseline window between two arm windows
        is one baseline in a pooled figure, :func:`judge.distinct`, not two)."""
        if k not in self._measured:
            self._measured[k] = self._measurement(k, run_dir)
        return self._measured[k]

    def _measurement(self, k: int, run_dir: Path) -> Measurement:
        line = self.windows[k]
        frame = self.judged(line.window)
        frame = pd.DataFrame() if frame is None else frame
        status = "failed" if line.error or frame.empty else "ok"
        wall = float(steptime.durations(frame).sum()) if len(frame) else 0.0
        return Measurement(line.arm, line.overrides, status, run_dir, frame, wall, line.error, line.applied,
                           line.peak_memory_bytes, line.memory_basis, line.oom)

    def pairs(self, arm: str, run_dir: Path, busy_too: bool = False) -> list[tuple[list[Measurement], list[Measurement]]]:
        """Each window of `arm` with the nearest baseline window on either side of it of its own kind
        (quiet with quiet, a disturbed pair's with its disturbed baseline: :attr:`shared`), the
        windows a neighbour disturbed alone left out (`busy_too`: kept, every baseline its match);
        a window with no such baseline beside it has nothing to be compared with and is left out."""
        out = []
        for k, before, after, opens in self._partners(arm, busy_too):
            around = [self.measurement(j, run_dir) for j in (before, after) if j is not None]
            if opens and (opening := self.opening(run_dir)) is not None:
                around.insert(0, opening)
            if around:
                out.append((around, [self.measurement(k, run_dir)]))
        return out

    def paired(self, arm: str) -> bool:
        """Whether a window of `arm` has a baseline window of its kind to be compared with."""
        opening = self.opened_by is not None and self.opened_by.closing() is not None
        return any(before is not None or after is not None or (opens and opening)
                   for _, before, after, opens in self._partners(arm, False))

    def _partners(self, arm: str, busy_too: bool) -> list[tuple[int, int | None, int | None, bool]]:
        """Per kept window of `arm`: its index, the nearest baseline of its kind before and after it,
        and whether the round before's closing baseline may stand for the one before (a quiet window
        that opens its round)."""
        busy = set() if busy_too else set(self.busy)
        shared = set() if busy_too else self.shared
        out = []
        for k, line in enumerate(self.windows):
            if line.arm != arm or line.window in busy:
                continue
            duet = line.window in shared
            kind = [j for j, w in enumerate(self.windows)
                    if w.arm == BASELINE and w.window not in busy and (w.window in shared) == duet]
            before = max((j for j in kind if j < k), default=None)
            after = min((j for j in kind if j > k), default=None)
            out.append((k, before, after, before is None and not duet))
        return out

    def opening(self, run_dir: Path) -> Measurement | None:
        """The baseline window this round opens on: the round before's last, where this round
        opened on an arm (None: it opened on its own)."""
        last = self.opened_by
        k = last.closing() if last is not None else None
        return last.measurement(k, run_dir) if last is not None and k is not None else None

    def closing(self) -> int | None:
        """The index of the quiet baseline window that measured steps this round ended on, which the
        next round may open on (None: it ended on an arm, a busy window, or nothing)."""
        if not self.windows:
            return None
        last = self.windows[-1]
        quiet = (last.arm == BASELINE and last.window in self.steps and last.window not in self.busy
                 and last.window not in self.shared)
        return len(self.windows) - 1 if quiet else None


def ran(results: Iterable[RoundResult], arm: str) -> bool:
    """Whether `arm` measured a window in any of these rounds."""
    return any(line.arm == arm for result in results for line in result.windows)
