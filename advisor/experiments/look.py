"""The measured window again, where a neighbour disturbed it: the findings read a quiet one.

A neighbour that takes a core for the whole measured window (a few hundred milliseconds) changes
what the rules read, not only how long the steps took: beside a CPU burner a 4-worker I/O loader's
2-thread MLP step spun 10-15 ms instead of 0.4 ms, its data wait fell from 95% of the step to 25%,
and DL001 was never found, though by hand beside the same burner 8 workers ran 1.96x its 4. The
experiments' windows are set aside and replaced (:func:`advisor.experiments.inprocess.disturbed`);
this is the same answer for the window the findings come from.

Where the kernel's wait clock says the measured window was disturbed (:func:`metrics.took_a_core`),
the first plans are baseline windows of the measured window's length, one at a time, at most
:data:`LOOK_STEPS` times its steps in all; the first a neighbour did not disturb is written as ``steps-quiet.csv``, which the
Profile reads in place of the measured steps (the trace stays the measured window's), and the
rules run again on it. None quiet: the findings stay the measured window's, and that is said.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..analysis import metrics, steptime
from ..profile import Profile
from ..run_dir import layout
from ..run_dir.atomic import write_text_atomic
from ..run_dir.protocol import Window
from .arms import RoundResult
from .plan import BASELINE

# steps measured again at most, warm-up included, in the measured window's: a script's steps may be few
# (a 400-step script of 1 ms steps beside the other test worker spent every one of them looking)
LOOK_STEPS = 10
LOOK_MAX_S = 4.0  # seconds of them at most: a neighbour that comes and goes in seconds leaves within it
# each lasts at least this long, and as many steps as the measured window: the sampler ticks every 0.1 s,
# and a window of 3 ticks read the tree's CPU on one the child's last profiler work was in; but no more
# than LOOK_MAX_STEPS times its steps, so a script of a few hundred fast steps is not spent looking
LOOK_MIN_WINDOW_S = 0.5
LOOK_MAX_STEPS = 4


def disturbed(profile: Profile) -> tuple[float, float] | None:
    """(cores other processes used, the script's run-queue wait in cores) over the measured window,
    where a neighbour took a core the script wanted; None where it did not, or where the kernel's
    wait clock or the sampler cannot tell (a job's ranks are outside this process tree)."""
    if profile.steps.empty:
        return None
    other, wait = metrics.neighbour(profile.samples, profile.steps, profile.env.cpu_count)
    return (other, wait) if other is not None and wait is not None and metrics.took_a_core(other, wait) else None


def quiet_window(profile: Profile) -> tuple[float, float] | None:
    """(time per sample or step, :func:`steptime.time_per_work`; run-queue wait in cores) of the
    window the findings read, where no neighbour disturbed it: a quiet window of the baseline, beside
    which the experiments' disturbed ones are judged (:func:`advisor.experiments.inprocess.disturbed`);
    None where it was disturbed or the clock cannot tell."""
    steps, _ = steptime.timed_steps(profile.steps)
    if steps.empty or not steptime.has_durations(steps):
        return None
    other, wait = metrics.neighbour(profile.samples, profile.steps, profile.env.cpu_count)
    pace = steptime.time_per_work(steps)
    if wait is None or (other is not None and metrics.took_a_core(other, wait)) or pace is None:
        return None
    return pace, wait


@dataclass
class Look:
    """The windows measured again after a disturbed measured window, one per round."""

    run_dir: Path
    rank_suffix: str
    measured: pd.DataFrame  # the measured window's steps (their columns are steps-quiet.csv's)
    seen: tuple[float, float]  # the measured window's (outside cores, wait cores): :func:`disturbed`
    warmup: int  # untimed steps before each: the arms' baseline's, so the prefetch a neighbour let pile up drains first
    windows: int = 0  # measured again so far
    steps: int = 0  # their steps so far, warm-up included
    started: float = field(default_factory=time.monotonic)
    held_s: float = 0.0  # of the time since, the windows' starts held for a neighbour (the budget gets them apart)

    @property
    def spent_s(self) -> float:
        """Seconds since the first window measured again was planned, less those held: the arms'
        budget gets them back, as these windows stand in for the measured one."""
        return time.monotonic() - self.started - self.held_s

    def window(self, time_left_s: float) -> list[Window]:
        """The next window to measure again ([]: the cap, LOOK_MAX_S spent, or no time left for one)."""
        span = metrics.measured_window(self.measured)
        length_s = max((span[1] - span[0]) if span else 0.0, LOOK_MIN_WINDOW_S)
        steps = len(self.measured)
        most = min(steps * LOOK_MAX_STEPS, steps * LOOK_STEPS - self.steps - self.warmup)
        if most < steps or self.spent_s >= LOOK_MAX_S or length_s >= time_left_s:
            return []
        return [Window(arm=BASELINE, warmup=self.warmup, steps=most, seconds=length_s, min_steps=steps)]

    def read(self, result: RoundResult, samples: pd.DataFrame, cpu_count: int | None) -> bool:
        """The window just measured again: True where no neighbour disturbed it (then written as
        steps-quiet.csv)."""
        self.windows += 1
        frame = next(iter(result.steps.values()), pd.DataFrame())
        self.steps += len(frame) + self.warmup
        if frame.empty or not steptime.has_spans(frame):
            return False
        other, wait = metrics.neighbour(samples, frame, cpu_count)
        # (the wait is unknown where the sampler's last tick came before the window's end: a window
        # no other process took a core in is quiet whatever it waited)
        if other is None or metrics.took_a_core(other, float("inf") if wait is None else wait):
            return False
        columns = list(self.measured.columns)
        quiet = frame.reindex(columns=columns)
        for column in ("source", "clock"):  # the measured window's, which an arm's step line does not repeat
            if column in columns and column in self.measured:
                quiet[column] = self.measured[column].iloc[0]
        quiet["index"] = range(len(quiet))
        write_text_atomic(self.run_dir / layout.names(self.rank_suffix).quiet_steps_csv, quiet.to_csv(index=False))
        return True

    def note(self) -> str:
        """None of the windows measured again was quiet, in one line (a quiet one is said by the
        Profile that reads it: :data:`advisor.profile.QUIET_STEPS_NOTE`)."""
        other, wait = self.seen
        n = self.windows
        return (f"the measured window was disturbed (processes outside the script used {other:.1f} cores and its threads "
                f"waited for a core {wait:.2f} of the time), and so {'were' if n != 1 else 'was'} the {n} "
                f"window{'s' if n != 1 else ''} of the same script measured after it: the findings read the measured window")
