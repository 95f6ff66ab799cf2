"""Experiments as arms of the run that was profiled: no restart, fixes switched at step boundaries.

After its measured window the child waits at a step boundary for a plan (see
``advisor/probe/arms.py`` for the child's side and :mod:`advisor.run_dir.protocol` for the lines and
the plan). A plan is fixed before it runs, so every rank of a job switches at the same step: windows
of `warmup` untimed and `steps` timed steps, each arm between two baseline windows (B P1 P2 B P3 B,
:func:`advisor.experiments.plan.interleave`). What each round measures, and the verdicts, are the
state machine's (:class:`advisor.experiments.rounds.Rounds`); this module runs it against the live
child: it writes each plan when the child asks, reads the round the child measured, shows progress,
and after the run withholds verification on a busy machine and adds the energy per sample. A fix
the child cannot switch in a live process (fp16 without a consistent GradScaler, say) is left to a
fresh-run experiment (:mod:`advisor.experiments.fresh`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

import numpy as np
import pandas as pd

from ..analysis import metrics, steptime
from ..model import Experiment, Finding, Recommendation, Verdict
from ..profile import Profile, read_samples
from ..run_dir.protocol import ArmStepLine, Plan, RankLines, Window, write_plan
from . import look
from .plan import BASELINE
from .arms import RoundResult
from .rounds import REPLACE_CAP, RoundKind, Rounds
from .sizing import WindowSizing
from .spend import PLAN_MARGIN_S

# The budget grows by the seconds of the windows a neighbour disturbed and set aside, up to this share
# of the budget the arms started with: a neighbour's time is not the fixes'. Beside a burner on one of
# two cores (on 1-4 s, off 0-3 s), tiny-gpt's 5 s budget held 4-5 windows, 3 of them set aside, and
# its fused AdamW (1.20x by hand beside the same burner) went unjudged in 3 runs of 3.
DISTURBED_GRANT = 1.0
BUSY_SHARE = 0.25   # without the kernel's wait clock: other processes on this share of the cores in a window set it aside
PAIR_MAX_SLOWDOWN = 2.0  # a disturbed window slower than this many times its side's quiet ones is in no pair


def disturbed(results: list[RoundResult], cpu_count: int, looked: tuple[float, float] | None = None) -> None:
    """Mark, in each of `results` (every round read so far), the windows a neighbour disturbed
    (`looked`: the time per sample (or step) and wait of the window the findings read, where quiet: a quiet
    baseline window too, :func:`.look.quiet_window`).

    With the kernel's wait clock (:mod:`advisor.waits`): other processes used half a core or more
    (:data:`metrics.OUTSIDE_LOAD_WARN_CORES`) and the script's run-queue wait rose :data:`metrics.DISTURBED_WAIT` above
    the lowest of the same arm's windows that had no such neighbour (none: above 0). An arm that
    oversubscribes the cores waits on its own workers in its quiet windows too: that is its cost,
    not a neighbour's, and a neighbour that took no core the script wanted costs nothing. A window
    some steps of which the per-step clock says a neighbour held (`held`, against the window's own
    quietest steps) is disturbed too: such a tree's wait over a whole window need not rise beside a
    neighbour while its steps stall (loader-cpu-workers, 2 workers and 2 threads on 2 cores, beside a
    burner: 1.25-1.34 cores of wait in baseline windows of 89-129 ms steps, 1.68 in one of 28 ms). Without the
    clock, the sampler's load alone: other processes on BUSY_SHARE of the cores."""
    lines = [(r, line) for r in results for line in r.windows if line.window in r.outside]
    quiet: dict[str, float] = {BASELINE: looked[1]} if looked else {}
    for r, line in lines:
        if line.window in r.waits and r.outside[line.window] < metrics.OUTSIDE_LOAD_WARN_CORES \
                and line.window not in r.held:
            quiet[line.arm] = min(quiet.get(line.arm, math.inf), r.waits[line.window])
    for r, line in lines:
        k, other = line.window, r.outside[line.window]
        if k in r.held:  # steps the neighbour held, told from the window's own quiet ones
            hit = True
        elif k in r.waits:
            hit = metrics.took_a_core(other, r.waits[k] - quiet.get(line.arm, 0.0))
        else:
            hit = other >= max(metrics.OUTSIDE_LOAD_WARN_CORES, BUSY_SHARE * cpu_count)
        if hit:
            r.busy[k] = other
        else:
            r.busy.pop(k, None)
    paces: dict[str, list[float]] = {}
    for r, line in lines:
        if line.window not in r.busy and (pace := _pace(r, line.window)) is not None:
            paces.setdefault(line.arm, []).append(pace)
    if looked:
        paces.setdefault(BASELINE, []).append(looked[0])
    quiet_pace = {arm: float(np.median(xs)) for arm, xs in paces.items()}
    for r in results:
        _pair_the_disturbed(r, quiet_pace)


def read_neighbours(result: RoundResult, earlier: list[RoundResult], samples: pd.DataFrame, cpu_count: int,
                    looked: tuple[float, float] | None = None) -> None:
    """Each window of `result` with the cores other processes used and the script's run-queue wait
    over it, from the sampler's ticks (`samples`); then the windows a neighbour disturbed marked over
    every round so far (`earlier` and `result`, :func:`disturbed`: the judge leaves them out, the
    rounds replace them). A window disturbed in part is read on its quiet steps where they are
    enough (:func:`metrics.quiet_part`), and judged again on them: beside a burner on one of two
    cores a window is rarely quiet from end to end, and setting each aside whole cut mingpt-adder's
    batch x2 in 3 runs of 3."""
    for line in result.windows:
        frame = result.steps.get(line.window)
        if frame is None or samples.empty or not steptime.has_spans(frame):
            continue
        other, wait = metrics.neighbour(samples, frame, cpu_count)
        if other is not None:
            result.outside[line.window] = other
        if wait is not None:
            result.waits[line.window] = wait
        if metrics.disturbed_steps(frame, samples, cpu_count).any():
            result.held.add(line.window)
    every = [*earlier, result]
    disturbed(every, cpu_count, looked)
    parts = {k: part for k in [*result.busy, *result.shared]
             if (part := metrics.quiet_part(result.steps[k], samples, cpu_count)) is not None}
    for k, (keep, other, wait) in parts.items():
        result.quiet[k] = result.steps[k][keep]
        result.outside[k], result.waits[k] = other, wait
        result.held.discard(k)  # its quiet steps: none held
    if parts:
        disturbed(every, cpu_count, looked)


def _pace(result: RoundResult, window: int) -> float | None:
    """A window's :func:`steptime.time_per_work` (None: no timed step)."""
    frame = result.judged(window)
    return steptime.time_per_work(frame) if frame is not None else None


def _pair_the_disturbed(result: RoundResult, quiet_pace: dict[str, float]) -> None:
    """Keep, in pairs, the disturbed arm windows whose nearest baseline window (either side) a
    neighbour disturbed too: interference that hits both sides of a comparison largely cancels in
    their ratio (duet benchmarking, Bulej et al. 2020), where one side disturbed alone biases it.
    Beside a neighbour that comes and goes every few seconds most windows are disturbed, and setting
    every one aside left a 2x loader fix unverified in 3 of 3 runs. Only where the neighbour came and
    went (a baseline window was quiet): one that never leaves makes every pair a comparison on
    another machine than the quiet one the script will train on (a contended 2-core machine read
    bf16 on nanoGPT 2.05x, 0.90x by hand on the quiet one). `quiet_pace`: each arm's quiet windows'
    median :func:`_pace` (no baseline's: the neighbour never left).

    Only where the neighbour slowed each side at most PAIR_MAX_SLOWDOWN times its quiet windows: a
    neighbour that takes a share of the cores slows both sides alike, but one that holds a thread of
    a parallel step until its next time slice slows each step by what the slices happened to be
    (tiny-gpt's 3 ms step ran 8-470 ms a window beside the burner, conv-mnist's 28 ms 231), and such
    pairs read fused AdamW at 0.28x and 137x where by hand beside the same burner it is 1.13x. A fix
    with no quiet window is held to the baseline's pace: bounding the baseline alone let mingpt-adder's
    batch x2 read 0.21x "slower" beside the burner (1.43x by hand beside it), its window hit harder
    than its pair's; a fix truly more than PAIR_MAX_SLOWDOWN times slower is then set aside, not failed."""
    result.shared = set()
    base = quiet_pace.get(BASELINE)
    if base is None:
        return
    windows = result.windows

    def calm(j: int) -> bool:  # the neighbour slowed this window at most PAIR_MAX_SLOWDOWN times its side's quiet pace
        pace = _pace(result, windows[j].window)
        return pace is not None and pace <= PAIR_MAX_SLOWDOWN * quiet_pace.get(windows[j].arm, base)

    for k, line in enumerate(windows):
        if line.arm == BASELINE or line.window not in result.busy or not calm(k):
            continue
        sides = (range(k - 1, -1, -1), range(k + 1, len(windows)))
        near = [next((j for j in side if windows[j].arm == BASELINE), None) for side in sides]
        hit = [windows[j].window for j in near if j is not None and windows[j].window in result.busy and calm(j)]
        if hit:
            result.shared.update([line.window, *hit])
    for k in result.shared:
        result.busy.pop(k, None)


class PhaseProgress(Protocol):
    """The line that says what runs now (the terminal's progress)."""

    def phase(self, text: str) -> None: ...


@dataclass
class ArmsSession:
    """The parent's side: writes each round's plan when the child asks, then judges what it measured.

    `diagnose()` returns the findings of the profiled window (the rules, run on the live Profile);
    the rounds fill them in place, as :func:`advisor.experiments.run_experiments` does.
    """

    out: Path
    rank_suffix: str  # whose steps are judged: this process's rank, or rank 0 of a job advise launched
    diagnose: Callable[[], tuple[list[Finding], Profile]]  # -> (findings, the window's Profile)
    safe_only: bool = False
    max_experiments: int = 12
    window_steps: int = 10
    io_like: Callable[[Profile], bool] = lambda profile: False  # the window's Profile -> loading waits, not computes
    progress: PhaseProgress | None = None
    rule_warnings: list[str] = field(default_factory=list)
    # the arms' deadline, counted from the window's end: the runner's, read at the window's end
    # (`budget_from`: an automatic budget is known only then)
    time_budget_s: float = 900.0
    budget_from: Callable[[], float | None] | None = None
    plan_suffixes: list[str] = field(default_factory=list)  # the ranks that run each plan (default: rank_suffix's)
    publish: Callable[[Plan], None] | None = None  # a job a launcher started: the plan to every rank (job/link.py)
    rounds: Rounds | None = None  # the machine, once the window's findings are known
    notes: list[str] = field(default_factory=list)  # the machine's too (one list)
    _windows: list[Window] = field(default_factory=list)  # the plan running now
    _shown: tuple[int, int] | None = None  # (round, window) the progress line names
    _started: float | None = None
    cpu_count: int | None = None  # the machine's cores: a window's neighbour load is judged against them
    _look: look.Look | None = None  # the measured window measured again, a neighbour having disturbed it
    _diagnosed: tuple[list[Finding], Profile] | None = None  # the measured window's findings, meanwhile
    window_again_s: float | None = None  # seconds the look took: the arms' budget grew by them
    disturbed_s: float | None = None  # seconds the budget grew by for the windows set aside (DISTURBED_GRANT)
    held_s: float | None = None  # seconds the budget grew by while the child held windows for a neighbour (probe/holds.py)
    _given_back: float | None = None  # seconds the budget grew by since the last plan, for the runner's (returned once)
    _budget_s: float | None = None  # the budget the arms started with
    _quiet_window: tuple[float, float] | None = None  # the findings' window, where quiet: a baseline window (look.quiet_window)

    @property
    def findings(self) -> list[Finding]:
        """The rounds' findings; while the profiled window is measured again, the measured window's."""
        if self.rounds is not None:
            return self.rounds.findings
        return self._diagnosed[0] if self._look is not None and self._diagnosed is not None else []

    @property
    def fresh(self) -> list:
        return self.rounds.fresh if self.rounds else []

    @property
    def recommended(self) -> Recommendation | None:
        return self.rounds.recommended if self.rounds else None

    # the child asks ------------------------------------------------------------------------
    def on_window_done(self, round_no: int, suffixes: list[str] | None = None, lines: RankLines | None = None) -> float | None:
        """Write the plan for round `round_no`: round 0 after the window, N + 1 once round N ended
        (`lines`: the judged rank's lines so far, the runner's; `suffixes`: the ranks that run it,
        the one whose steps are judged first: a job's rank 0). Returns the seconds the arms' budget
        grew by (the profiled window measured again, once that ends: :mod:`.look`; windows set aside,
        :meth:`_grant`): the runner's stop moves with them."""
        if suffixes:
            self.rank_suffix, self.plan_suffixes = suffixes[0], list(suffixes)
        if self._started is None:  # the runner's budget counts from the same line
            self._started = time.monotonic()
            if self.budget_from is not None:
                self.time_budget_s = self.budget_from() or self.time_budget_s
            self._budget_s = self.time_budget_s
        try:
            windows = self._plan(round_no, lines)
        except Exception as exc:  # noqa: BLE001 - a planning bug must end the child, not hang it
            self.notes.append(f"in-process experiments stopped: {type(exc).__name__}: {exc}")
            windows = []
        self._windows = windows
        if windows and self.progress is not None and self.rounds is not None:  # windows: _plan made the rounds
            arms = len({w.arm for w in windows} - {BASELINE})
            names: dict[RoundKind | None, str] = {RoundKind.CONFIRM: "the fixes not decided yet",
                                                  RoundKind.STACK: "the winners stacked"}
            what = names.get(self.rounds.kind, "the fixes")
            self.progress.phase(f"measuring {what} inside this run: {arms} arm{'s' if arms != 1 else ''}, "
                                f"{len(windows)} windows of {max(w.steps for w in windows)} steps")
        plan = Plan(round=round_no, windows=windows)
        for suffix in self.plan_suffixes or [self.rank_suffix]:  # every rank of a job: the same plan
            write_plan(self.out / f"plan{suffix}.json", plan)
        if self.publish is not None:
            self.publish(plan)
        given, self._given_back = self._given_back, None
        return given

    def _plan(self, round_no: int, lines: RankLines | None) -> list[Window]:
        if lines is not None and lines.held_s > (self.held_s or 0.0):  # the runner's clock stopped as long
            self.time_budget_s += lines.held_s - (self.held_s or 0.0)
            self.held_s = lines.held_s
        if round_no == 0:
            findings, profile = self.diagnose()
            if (seen := look.disturbed(profile) if self.cpu_count else None) is not None:
                warmup = WindowSizing.of(self.window_steps, profile).warmup({})
                started = look.Look(self.out, self.rank_suffix, profile.steps, seen, warmup)
                if windows := started.window(self.time_left()):
                    self._look, self._diagnosed = started, (findings, profile)
                    self._say("the measured window was disturbed by a neighbour: measuring it again")
                    return windows
            return self._start(findings, profile, round_no, lines.waited_from if lines is not None else None)
        if self._look is not None and self.rounds is None:
            return self._look_again(self._look, round_no, lines)
        if self.rounds is None or not self.rounds.running or lines is None:
            return []
        result = self._read(lines)
        self._grant([*self.rounds.results.values(), result])
        return self.rounds.advance(result, self.time_left())

    def on_arm_window(self, lines: RankLines) -> float | None:
        """A window of the round in progress ended (`lines`: the runner's): the seconds the budget
        grows by now for the windows a neighbour disturbed so far (:meth:`_grant`), not at the round's
        end, which a budget they took may never reach (mingpt-adder beside a burner: a 6 s baseline
        window set aside, then the budget ended inside the next window, 15 s of 15 spent)."""
        if self.rounds is None or not self.rounds.running or not self.cpu_count:
            return None
        earlier = list(self.rounds.results.values())
        partial = RoundResult.read(lines, self.rounds.round)
        read_neighbours(partial, earlier, read_samples(self.out, self.rank_suffix), self.cpu_count, self._quiet_window)
        self._grant([*earlier, partial])
        given, self._given_back = self._given_back, None
        return given

    def _grant(self, results: list[RoundResult]) -> None:
        """The budget grows by the seconds of the windows set aside in `results` (every round so far)
        not granted yet, up to DISTURBED_GRANT of the budget the arms started with."""
        cap = DISTURBED_GRANT * (self._budget_s or 0.0)
        grant = min(cap, sum(r.set_aside_s() for r in results)) - (self.disturbed_s or 0.0)
        if grant > 0:
            self.disturbed_s = (self.disturbed_s or 0.0) + grant
            self.time_budget_s += grant
            self._given_back = (self._given_back or 0.0) + grant

    def _start(self, findings: list[Finding], profile: Profile, round_no: int, arms_from: float | None) -> list[Window]:
        """The rounds, from the findings of `profile`, as plan `round_no` (after any windows measured
        again), the arms' time counted from `arms_from` on the child's clock: the child's wait for
        its first plan (the trace's export before it is not the budget's), or the look's end."""
        self.rounds = Rounds(self.out, self.safe_only, self.max_experiments, self.window_steps, self.io_like(profile),
                             notes=self.notes, round=round_no - 1)
        self._quiet_window = look.quiet_window(profile) if self.cpu_count else None
        return self.rounds.start(findings, profile, self.time_left(), arms_from)

    def _look_again(self, looking: look.Look, round_no: int, lines: RankLines | None) -> list[Window]:
        """The window measured again in plan `round_no - 1`: quiet, the rules run again on it; else
        another, while the cap and the budget allow; else the measured window's findings."""
        result = RoundResult.read(lines, round_no - 1) if lines is not None else None
        looking.held_s = self.held_s or 0.0  # (the look is the arms' first: every hold so far is its)
        quiet = result is not None and looking.read(result, read_samples(self.out, self.rank_suffix), self.cpu_count)
        if not quiet and (windows := looking.window(self.time_left())):
            return windows
        looked_until = max(result.ends(), default=None) if result is not None else None
        self.window_again_s = spent = looking.spent_s  # read once: a clock, and the report adds it up
        self._given_back = (self._given_back or 0.0) + spent
        self.time_budget_s += spent
        if quiet:
            return self._start(*self.diagnose(), round_no, looked_until)  # the Profile reads steps-quiet.csv now
        self.notes.append(looking.note())
        assert self._diagnosed is not None
        return self._start(*self._diagnosed, round_no, looked_until)

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress.phase(text)

    def _read(self, lines: RankLines) -> RoundResult:
        """The round just measured, each window's neighbour load and run-queue wait read from the
        sampler's ticks, and the windows a neighbour disturbed marked over every round so far
        (:func:`read_neighbours`)."""
        assert self.rounds is not None
        result = RoundResult.read(lines, self.rounds.round)
        if not self.cpu_count:
            return result
        read_neighbours(result, list(self.rounds.results.values()), read_samples(self.out, self.rank_suffix),
                        self.cpu_count, self._quiet_window)
        return result

    @property
    def clocked(self) -> bool:
        """The kernel's wait clock was read for the arms' windows (:mod:`advisor.waits`)."""
        return self.rounds is not None and any(r.waits for r in self.rounds.results.values())

    def set_aside_note(self) -> str | None:
        """How many windows a neighbour disturbed, how many were measured again, and by which clock."""
        rounds = self.rounds
        if rounds is None:
            return None
        aside, paired = rounds.set_aside(), sum(len(r.shared) for r in rounds.results.values())
        # A window read on its quiet steps counts once among the disturbed, and among the paired too where its
        # quiet steps were still disturbed beside a disturbed baseline; one set aside is read on none of them.
        partial = {(n, k): len(r.steps[k]) - len(q) for n, r in rounds.results.items() for k, q in r.quiet.items()
                   if k not in r.busy and k in r.steps}
        partial_only = sum(1 for n, k in partial if k not in rounds.results[n].shared)
        if not aside and not paired and not partial:
            return None
        total = sum(len(r.windows) for r in rounds.results.values())
        by = ("other processes used the CPU and the script's threads waited for a core more than in the same arm's "
              "quiet windows (the kernel's run-queue wait)" if self.clocked else
              "other processes used the CPU (this kernel gives no run-queue wait: judged on the sampler's load)")
        text = f"{aside + paired + partial_only} of {total} windows disturbed: {by}"
        if partial:
            text += (f"; {len(partial)} read on the steps the neighbour left alone ({sum(partial.values())} steps it "
                     "waited through left out)")
        if paired:
            text += f"; {paired} kept in pairs, a fix's window beside a baseline window disturbed as well, compared only with each other"
        if aside:
            text += f"; {aside} set aside (left out of every figure) and {rounds.replaced} measured again"
        if rounds.replace_cap_reached:
            text += f" (the cap of {REPLACE_CAP} such passes was reached)"
        if silenced := rounds.silenced():
            names = ", ".join(sorted({rounds.label(a) for a in silenced}))
            text += f"; measured only in disturbed windows, not verified: {names}"
        return text

    def time_left(self) -> float:
        """The arms' time budget left, less the margin a plan takes to reach the child."""
        return max(0.0, self.time_budget_s - PLAN_MARGIN_S - (time.monotonic() - (self._started or time.monotonic())))

    def on_arm_step(self, line: ArmStepLine) -> None:
        """The child ran a step of window k: say which window and arm run, and the time left."""
        k, key = line.window, (line.round, line.window)
        if self.progress is None or self.rounds is None or key == self._shown or k >= len(self._windows):
            return
        self._shown = key
        window = self._windows[k]
        arms = len({w.arm for w in self._windows} - {BASELINE})
        what = "the baseline" if window.arm == BASELINE else f"arm {self.rounds.label(window.arm)}"
        remaining = self.time_budget_s - (time.monotonic() - (self._started or time.monotonic()))
        self.progress.phase(f"window {k + 1} of {len(self._windows)} ({arms} arm{'s' if arms != 1 else ''} interleaved with "
                            f"the baseline): {what}; {max(0.0, remaining):.0f} s of the time budget left")

    # after the run -------------------------------------------------------------------------
    def withhold_if_busy(self, samples: pd.DataFrame, cpu_count: int | None, warned: str | None = None) -> None:
        """No in-process claim stays verified where other processes took a quarter of the cores
        (half a core at least), or ran on the script's GPU, while the arms' kept windows ran (a
        contended 2-core machine verified bf16 on nanoGPT at 2.05x, 0.90x by hand), nor in a run
        that warns its timings may not reproduce (`warned`: the profiled window's contention
        warning): the verdict agrees with the warning beside it. The figures stay, marked not
        confirmed, with the load."""
        if self.rounds is None:
            return
        frames = [f for result in self.rounds.results.values() for k, f in result.steps.items()
                  if steptime.has_spans(f) and k not in result.busy]
        clocked = self.clocked  # the kept windows are quiet by the kernel's own clock: no run-wide doubt
        said: list[str] = []
        if frames and not samples.empty and "t" in samples:
            window = metrics.window_samples(samples, pd.concat(frames))
            other, shared = metrics.outside_cores(window, cpu_count), metrics.gpu_neighbours(window)
            if not clocked and other is not None and \
                    other >= max(metrics.OUTSIDE_LOAD_WARN_CORES, BUSY_SHARE * (cpu_count or 0)):
                said.append(f"processes outside the script used {other:.1f} of {cpu_count} cores")
            if shared:
                said.append(metrics.shared_gpu_text(shared))
        if said:
            why = (f"the machine was busy: {' and '.join(said)} while the fixes were measured; run again on a quiet "
                   "machine to verify")
        elif warned and not clocked:
            why = f"the run warned that {warned[0].lower() + warned[1:]}: run again on a quiet machine to verify"
        else:
            return
        for exp in self.rounds.claims():
            if exp.verified and exp.measured_by == "in-process":
                exp.verified = False
                if isinstance(exp, Experiment):
                    exp.verdict, exp.reason = Verdict.NOT_CONFIRMED, why
            for row in getattr(exp, "sweep", None) or []:  # a ladder's other rungs were measured on the same busy machine
                if row.get("verdict") == Verdict.FASTER.value:
                    row["verdict"] = Verdict.NOT_CONFIRMED.value
        self.notes.append(why)

    def add_energy(self, samples: pd.DataFrame) -> None:
        """Joules per sample of each measured fix and of the baseline windows (:func:`metrics.energy`:
        NVML's energy counter over the windows' device spans, its power samples where there is no
        counter), beside their speed, with their `energy_source`; an arm is read from the source its
        baseline was, so the two compare. Nothing where the GPU was not sampled (a CPU run)."""
        if self.rounds is None or samples.empty:
            return
        windows = [(line, result.steps.get(line.window)) for result in self.rounds.results.values()
                   for line in result.windows]
        windows = [(line, frame) for line, frame in windows if frame is not None and len(frame)]
        base = [frame for line, frame in windows if line.arm == BASELINE]
        base_energy = metrics.energy(samples, pd.concat(base)) if base else None
        if not base_energy or base_energy.get("joules_per_sample") is None:
            return
        source = base_energy["source"]
        for exp in (c for c in self.rounds.claims() if c.baseline and c.candidate):
            mine = [frame for line, frame in windows
                    if line.arm != BASELINE and line.overrides == (exp.overrides or {})]
            energy = metrics.energy(samples, pd.concat(mine), source) if mine else None
            if energy and energy.get("joules_per_sample") is not None:
                exp.baseline.update(joules_per_sample=base_energy["joules_per_sample"], energy_source=source)
                exp.candidate.update(joules_per_sample=energy["joules_per_sample"], energy_source=source)

    def finish(self, lines: RankLines | None, out_of_time: bool = False, arms_error: str | None = None) -> None:
        """The child ended (`lines`: the judged rank's, all of them: ProbeRun.arms; `out_of_time`:
        the time budget stopped it; `arms_error`: the script raised under the arms, which ended
        them): judge a round it ended inside, on what it measured, and say what ended it."""
        if self.rounds is None and self._look is not None and self._diagnosed is not None:
            # it ended while the profiled window was measured again: the measured window's fixes, none measured
            self.notes.append(f"the run ended while the disturbed profiled window was measured again ({self._look.windows} "
                              "windows): the findings read the measured window, and no fix was measured")
            self._start(*self._diagnosed, 0, None)
            lines = None  # (its lines are the windows measured again: no round of the fixes ran)
        if self.rounds is not None:
            out_of_time = out_of_time and arms_error is None  # the error ended the arms, not the clock
            self.rounds.end(self._read(lines) if lines is not None and self.rounds.running else None, out_of_time)
            said = [f.experiment.error for f in self.rounds.findings if f.experiment is not None and f.experiment.error]
            if arms_error and not any(arms_error in e or e in arms_error for e in said):  # a baseline window's
                self.notes.append(f"the arms ended early: the script raised in a window ({arms_error.splitlines()[0]}); "
                                  "each fix is judged on the windows before it")
            if note := self.set_aside_note():
                self.notes.append(note)
            if note := self.rounds.budget_note(self.time_budget_s):
                self.notes.append(note)
