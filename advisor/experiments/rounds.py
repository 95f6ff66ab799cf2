"""The in-process arms' rounds as a state machine: each round's windows planned, what the child
measured in them judged, and the next round planned from the verdicts. No files, no clock, no
process: windows out, recorded rounds in (:class:`RoundResult`, from the child's lines), so every
decision is testable on recorded lines. :class:`advisor.experiments.inprocess.ArmsSession` runs it
against a live child.

The transitions (:meth:`Rounds.advance`)::

    FIXES ──(a fix its first pass left undecided or tied, a screen that looked faster)──> CONFIRM
    FIXES, CONFIRM ──(two winners or more)──> STACK ──(one pass did not settle it)──> STACK
    any ──(nothing left to measure)──> END
    any ──(the next round's windows do not fit the time left)──> END

A time budget is a normal end: a round is planned only as far as its windows fit the time left
(each window's steps at its arm's measured step time, ending on a baseline window), and what
was planned but not run is counted and said (:meth:`Rounds.budget_note`).

FIXES is one pass over the rules' fixes (every sweep value: switching is cheap), the larger batches
smallest first, and one short window for each untried fix (a screen), the arms with the most
expected gain per predicted second first and those predicted not to fit the budget not started
(:mod:`.worth`); CONFIRM the reverse pass (B P3 B P2 P1 B, so a drift weighs on both sides alike)
for the fixes the first left undecided (:func:`judge.settled`, or a sweep whose leader a rival
ties head to head), the screens that looked faster in full, then the undecided larger batches;
STACK the winners together. Every verdict comes from :mod:`advisor.experiments.judge`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Union

import msgspec
import pandas as pd

from .. import overrides as vocabulary
from ..overrides.cores import cores_per_rank
from ..analysis import steptime
from ..model import Experiment, Finding, Recommendation, Verdict
from ..run_dir.protocol import ArmLine, RankLines, Window
from . import judge, recompiles
from .judge import Measurement
from .plan import ARMS_PER_BASELINE, BASELINE, Candidate, candidates_from, expected_speedup, interleave, plan_windows, sweep_points
from .sizing import MIN_WINDOW_STEPS, WindowSizing
from .worth import Worth, compile_seconds, worth

if TYPE_CHECKING:
    from advisor.profile import Profile

SCREEN_MARGIN = 0.05  # a screened fix whose one window may be this much faster is measured in full ...
SCREEN_LEAN = 1.02    # ... and that leans that way (its point estimate at least this): a 0.99x window whose
                      # interval reaches 1.05 only by its noise cost a full round for nothing (a starved loop's bf16)
LARGE_EFFECT = 3     # every rule's fix expected at least this much faster: windows of half the steps
                    # (a 3x effect is resolved by 5 slow steps; the fast arm windows scale with it)
STACKED = "stacked"


class RoundKind(str, Enum):
    FIXES = "fixes"
    CONFIRM = "confirm"
    STACK = "stack"
    END = "end"


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

    def measurement(self, k: int, run_dir: Path) -> Measurement:
        line = self.windows[k]
        frame = self.steps.get(line.window, pd.DataFrame())
        status = "failed" if line.error or frame.empty else "ok"
        wall = float(steptime.durations(frame).sum()) if len(frame) else 0.0
        return Measurement(line.arm, line.overrides, status, run_dir, frame, wall, line.error, line.applied,
                           line.peak_memory_bytes, line.memory_basis, line.oom)

    def pairs(self, arm: str, run_dir: Path, busy_too: bool = False) -> list[tuple[list[Measurement], list[Measurement]]]:
        """Each window of `arm` with the nearest baseline window on either side of it, the windows
        another process's burst took left out (`busy_too`: kept)."""
        out = []
        busy = set() if busy_too else set(self.busy)
        quiet = lambda j: self.windows[j].arm == BASELINE and self.windows[j].window not in busy  # noqa: E731
        for k, line in enumerate(self.windows):
            if line.arm != arm or line.window in busy:
                continue
            before = next((j for j in range(k - 1, -1, -1) if quiet(j)), None)
            after = next((j for j in range(k + 1, len(self.windows)) if quiet(j)), None)
            around = [self.measurement(j, run_dir) for j in (before, after) if j is not None]
            out.append((around, [self.measurement(k, run_dir)]))
        return out


@dataclass
class Rounds:
    """The rounds of one run's arms. :meth:`start` plans round 0 from the window's findings;
    :meth:`advance` judges the round the child just measured and plans the next ([]: the arms end);
    :meth:`end` judges a round the run ended inside. The findings are filled in place."""

    run_dir: Path
    safe_only: bool = False
    max_experiments: int = 12
    window_steps: int = 10
    io_like: bool = False  # the window's steps wait on loading, not on compute
    findings: list[Finding] = field(default_factory=list)
    fresh: list[Candidate] = field(default_factory=list)  # fixes left to fresh-run experiments
    recommended: Recommendation | None = None
    notes: list[str] = field(default_factory=list)
    round: int = -1
    results: dict[int, RoundResult] = field(default_factory=dict)  # round -> what the child measured in it
    by_samples: bool = False
    arms: dict[str, Arm] = field(default_factory=dict)  # arm id -> what it measures
    _kinds: dict[int, RoundKind] = field(default_factory=dict)  # round -> what it measures
    _sizing: WindowSizing | None = None
    _winners: list[tuple[Candidate, Experiment]] = field(default_factory=list)
    _fit_budget: int | None = None  # the run was over this budget: the fastest fix that fits joined the winners
    _again: list[str] = field(default_factory=list)  # arms of fixes their first pass left undecided
    _screened: dict[str, Experiment] = field(default_factory=dict)  # screened arm -> its one window's result
    _promoted: list[str] = field(default_factory=list)  # screened arms to measure in full
    _step_s: float | None = None  # the profiled window's median step: a window's time before its arm ran
    _planned: dict[int, int] = field(default_factory=dict)  # round -> its windows
    budget_cut: int = 0  # windows planned but not run: the time budget ended first
    out_of_time: bool = False  # the time budget ended the rounds
    left_out: dict[str, Worth] = field(default_factory=dict)  # arm -> its predicted cost: not started, it did not fit
    _device: str = "cpu"

    @property
    def sizing(self) -> WindowSizing:
        """The windows' sizes, fixed by :meth:`start`."""
        if self._sizing is None:
            raise RuntimeError("the rounds have not started")
        return self._sizing

    # the machine ------------------------------------------------------------------------------------
    def start(self, findings: list[Finding], profile: Profile, time_left_s: float | None = None) -> list[Window]:
        """Round 0 (FIXES) for the findings of the profiled window (`profile`: its Profile), as far
        as it fits `time_left_s`."""
        self.findings = findings
        self.by_samples = judge.by_samples(profile.steps)
        self._sizing = WindowSizing.of(self.window_steps, profile.steps, profile.observed)
        self._step_s = steptime.median_step(profile.steps)
        self._device = str(profile.env.device or "cpu")
        windows = self._fixes_round(profile, time_left_s)
        fitted = self._fit(windows, time_left_s)
        if windows and not fitted:
            self.out_of_time = True
        return self._enter(RoundKind.FIXES, fitted)

    def advance(self, result: RoundResult, time_left_s: float | None = None) -> list[Window]:
        """The current round measured `result`: judge it, then the next round's windows, as far as
        they fit `time_left_s` (None: no limit). A round none of whose windows fit is not run: the
        rounds end there, each fix judged on what was measured."""
        self.results[self.round] = result
        self._judge_round(final=False)
        kind, windows = self._next()
        fitted = self._fit(windows, time_left_s)
        if windows and not fitted:
            self._out_of_time(kind)
        return self._enter(kind, fitted)

    def end(self, result: RoundResult | None, out_of_time: bool = False) -> None:
        """The run ended inside the current round (`result`: what it measured of it; `out_of_time`:
        the time budget ended it): judge it on that, and say of every fix still unjudged why."""
        self.out_of_time = self.out_of_time or out_of_time
        ended = "the time budget ended" if self.out_of_time else "the run ended"
        if self.running and self.round not in self.results and result is not None:
            self.budget_cut += max(0, self._planned.get(self.round, 0) - len(result.windows))
            self.results[self.round] = result
            self._judge_round(final=True)
        if self.recommended is None and self._winners and self.kind in (RoundKind.FIXES, RoundKind.CONFIRM):
            self._recommend_unstacked(ended)
        for arm in self._promoted:  # promoted, but the run ended before they were measured in full
            finding = self.arms[arm].candidate.finding(self.findings)
            if finding.experiment is None and arm in self._screened:
                exp = self._screened[arm]
                exp.verified, exp.verdict = False, Verdict.NOT_CONFIRMED
                exp.reason = f"screened in one short window; {ended} before it was measured in full"
                finding.experiment = exp
        for candidate in self._candidates():
            finding = candidate.finding(self.findings)
            if finding.experiment is None and candidate not in self.fresh:
                arms = [a for a, arm in self.arms.items() if arm.candidate is candidate]
                why = self.left_out_why(arms[0]) if arms and all(a in self.left_out for a in arms) else None
                finding.experiment = Experiment.not_measured(why or f"{ended} before this fix was measured")

    def _recommend_unstacked(self, ended: str) -> None:
        """The recommendation from the winners, their stack unmeasured because `ended` first."""
        self.recommended = judge.recommend(self._winners, None if len(self._winners) < 2 else
                                           f"was not measured ({ended} first)", budget=self._fit_budget, notes=self.notes)

    def _candidates(self) -> list[Candidate]:
        """The fixes the arms measure, one per finding."""
        return list({a.candidate.finding_index: a.candidate for a in self.arms.values()
                     if a.candidate.finding_index is not None}.values())

    def costs(self) -> list[dict]:
        """Where the arms' time went: per arm (the baseline one of them), its windows, timed steps,
        seconds in all (timed, untimed and switching) and the switching's share (a compilation, a
        loader's rebuild), report.json's `experiments.arms`."""
        out: dict[str, dict] = {}
        for result in self.results.values():
            for line in result.windows:
                frame = result.steps.get(line.window)
                timed = float(steptime.durations(frame).sum()) if frame is not None and len(frame) else 0.0
                row = out.setdefault(line.arm, {"arm": self.label(line.arm), "windows": 0, "steps": 0,
                                                 "seconds": 0.0, "switch_s": 0.0})
                row["windows"] += 1
                row["steps"] += len(frame) if frame is not None else 0
                row["switch_s"] += line.switch_s
                row["seconds"] += timed + result.warm_s.get(line.window, 0.0) + line.switch_s
        return sorted(out.values(), key=lambda r: -r["seconds"])

    def left_out_fixes(self) -> list[tuple[Finding, Worth]]:
        """The fixes none of whose values was started, each with its cheapest value's predicted cost."""
        by_finding: dict[int, list[tuple[str, Worth]]] = {}
        for arm, cost in self.left_out.items():
            index = self.arms[arm].candidate.finding_index
            if index is not None:
                by_finding.setdefault(index, []).append((arm, cost))
        started = {a.candidate.finding_index for arm, a in self.arms.items() if arm not in self.left_out}
        return [(self.findings[i], min((c for _, c in arms), key=lambda c: c.seconds))
                for i, arms in by_finding.items() if i not in started]

    def budget_note(self, budget_s: float) -> str | None:
        """What the time budget left out, in one line (None: it left nothing out)."""
        if not self.out_of_time:
            return None
        run = sum(len(r.windows) for r in self.results.values())
        left = [f.fix.title for f in (c.finding(self.findings) for c in self._candidates())
                if f.experiment is not None and f.experiment.verdict is Verdict.NOT_MEASURED]
        return (f"the time budget ({budget_s:.0f} s) ended the experiments after {run} of {run + self.budget_cut} windows"
                + (f"; not measured: {'; '.join(left)}" if left else "") + " (a longer --time-budget measures more)")

    @property
    def kind(self) -> RoundKind | None:
        """The current round's kind (None before :meth:`start`)."""
        return self._kinds.get(self.round)

    @property
    def running(self) -> bool:
        """A round with windows is planned or being measured."""
        return self.kind not in (None, RoundKind.END)

    def label(self, arm: str) -> str:
        return self.arms[arm].point.label if arm in self.arms else arm

    def _enter(self, kind: RoundKind, windows: list[Window]) -> list[Window]:
        self.round += 1
        self._kinds[self.round] = kind if windows else RoundKind.END
        self._planned[self.round] = len(windows)
        return windows

    # the time budget ---------------------------------------------------------------------------------
    def _fit(self, windows: list[Window], time_left_s: float | None) -> list[Window]:
        """The longest run of `windows` from the first that fits `time_left_s` and ends on a baseline
        window with an arm's window in it ([]: not even that); the rest is counted as cut."""
        if time_left_s is None or not windows:
            return windows
        step_s, compile_s = self._median_steps(), self._compile_s()
        used, fitted = 0.0, 0
        for k, window in enumerate(windows):  # each at its arm's median step so far, else as predicted
            used += self._window_s(window, step_s, compile_s)
            if used > time_left_s:
                break
            if window.arm == BASELINE and any(w.arm != BASELINE for w in windows[:k]):
                fitted = k + 1
        self.budget_cut += len(windows) - fitted
        return windows[:fitted]

    def _window_s(self, window: Window, medians: dict[str, float | None], compile_s: float | None) -> float:
        """A window's predicted seconds: its steps at its arm's median step so far; an arm not yet
        run at the step its rule expects (:mod:`.worth`), its compilation included (`compile_s`: the
        run's measured one, :meth:`_compile_s`)."""
        step = medians.get(window.arm)
        base = medians.get(BASELINE) or self._step_s or 0.0
        arm = self.arms.get(window.arm)
        if step is not None or arm is None:
            return (window.warmup + window.steps) * (step or base)
        if arm.candidate.finding_index is None:  # the stack: no rule's estimate, its compilation alone
            return (window.warmup + window.steps) * base + compile_seconds(window.overrides, self._device, compile_s)
        return worth(arm.candidate.finding(self.findings), window.overrides, steps=window.steps, warmup=window.warmup,
                     base_steps=0, step_s=base, device=self._device, measured_compile_s=compile_s,
                     per_baseline=ARMS_PER_BASELINE).seconds

    def _median_steps(self) -> dict[str, float | None]:
        """Each arm's median timed step over the rounds measured so far."""
        frames: dict[str, list[pd.DataFrame]] = {}
        for r in self.results.values():
            for line in r.windows:
                if line.window in r.steps and len(r.steps[line.window]):
                    frames.setdefault(line.arm, []).append(r.steps[line.window])
        return {arm: steptime.median_step(pd.concat(parts)) for arm, parts in frames.items()}

    def _out_of_time(self, kind: RoundKind) -> None:
        """The next round does not fit: settle what the rounds so far measured, as a run that ended."""
        self.out_of_time = True
        if kind is RoundKind.CONFIRM:  # the fixes the first pass left undecided: settled on it alone
            self._judge_fixes([self.results[0]], self._again)
        elif kind is RoundKind.STACK and any(k is RoundKind.STACK for k in self._kinds.values()):
            self._judge_stack(final=True)
        if self.recommended is None:
            self._recommend_unstacked("the time budget ended")

    def _next(self) -> tuple[RoundKind, list[Window]]:
        """The transition out of the round just judged."""
        if self.kind is RoundKind.FIXES and (windows := self._confirm_round()):
            return RoundKind.CONFIRM, windows
        if self.kind in (RoundKind.FIXES, RoundKind.CONFIRM):
            return RoundKind.STACK, self._stack_round()
        if self.kind is RoundKind.STACK and self.recommended is None:  # its first pass did not settle it
            return RoundKind.STACK, self._windows([(STACKED, self.arms[STACKED].point.overrides)])
        return RoundKind.END, []

    # planning --------------------------------------------------------------------------------------
    def _fixes_round(self, profile: Profile, time_left_s: float | None) -> list[Window]:
        ctx = vocabulary.SweepContext(cores_per_rank(profile.env), self.io_like)
        loaders = profile.observed.dataloaders
        for candidate in candidates_from(self.findings, self.safe_only):
            finding = candidate.finding(self.findings)
            refusals = [vocabulary.live_loader_refusal(candidate.overrides, dl) for dl in loaders]
            refused = refusals[0] if refusals and all(refusals) else None
            if refused:  # every loader the script built refuses it (an arm would only say so)
                self._to_fresh(candidate, refused)
                continue
            if why := vocabulary.fresh_only(candidate.overrides):  # no live process can switch it
                self._to_fresh(candidate, why)
                continue
            if vocabulary.changes_batch(candidate.overrides) and not self.by_samples:
                finding.experiment = Experiment.not_measured("the batch size is unknown, so samples/s cannot be compared")
                continue
            points = [candidate] if finding.screen else sweep_points(candidate, ctx)  # a screen is one value
            for point in points[: self.max_experiments]:
                arm = f"a{len(self.arms) + 1}"
                role = (Role.SCREEN if finding.screen else
                        Role.LADDER if vocabulary.batch_scale(point.overrides) > 1 else Role.FIX)
                self.arms[arm] = Arm(candidate, point, role)
                self.sizing.lengths[arm] = expected_speedup(finding)
        expected = [self.sizing.lengths[a] for a, _ in self._of(Role.FIX) + self._of(Role.LADDER)]
        if expected and min(expected) >= LARGE_EFFECT:  # the slow baseline windows need half the steps
            self.sizing.base_steps = max(MIN_WINDOW_STEPS, self.sizing.timed // 2)
        chosen = self._choose(time_left_s)
        fixes, ladder, screens = ([(a, self.arms[a].point.overrides) for a in chosen if self.arms[a].role is role]
                                  for role in (Role.FIX, Role.LADDER, Role.SCREEN))
        return plan_windows(fixes, ladder, self.sizing.warmup, self._steps, screens, passes=1)

    def _worth(self, arm: str) -> Worth:
        """What `arm` is expected to gain, and to cost in seconds (:mod:`.worth`)."""
        point = self.arms[arm].point.overrides
        return worth(self.arms[arm].candidate.finding(self.findings), point, steps=self._steps(arm),
                     warmup=self.sizing.warmup(point), base_steps=self._steps(BASELINE) + self.sizing.warmup({}),
                     step_s=self._step_s or 0.0, device=self._device, measured_compile_s=self._compile_s(),
                     per_baseline=ARMS_PER_BASELINE)

    def _choose(self, time_left_s: float | None) -> list[str]:
        """Round 0's arms, the most expected gain per second of measuring first; with a time budget,
        those whose predicted cost fits what is left (an arm predicted to outlast it is not started:
        :attr:`left_out` names it with its cost). Without one, every arm, in that order."""
        worths = {a: self._worth(a) for a, arm in self.arms.items() if arm.role is not Role.STACK}
        order = sorted(worths, key=lambda a: -worths[a].density)
        if time_left_s is None:
            return order
        used = (self._steps(BASELINE) + self.sizing.warmup({})) * (self._step_s or 0.0)  # the first baseline window
        kept = []
        for arm in order:
            if used + worths[arm].seconds <= time_left_s:
                kept.append(arm)
                used += worths[arm].seconds
            else:
                self.left_out[arm] = worths[arm]
        if self.left_out:
            self.out_of_time = True
        return kept

    def _compile_s(self) -> float | None:
        """The longest compilation this run measured (an arm's switch cost), None before the first."""
        spent = [line.switch_s for r in self.results.values() for line in r.windows
                 if line.arm in self.arms and vocabulary.one_off(line.overrides) and line.switch_s]
        return max(spent) if spent else None

    def _confirm_round(self) -> list[Window]:
        """The reverse pass of the undecided fixes, the promoted screens in two passes, then the
        larger batches, smallest first, each twice: an out-of-memory error ends the child's arms,
        so it may only cost the values larger than the one that ran out."""
        again = [(a, self.arms[a].point.overrides) for a in reversed(self._again) if self.arms[a].role is not Role.LADDER]
        larger = [(a, self.arms[a].point.overrides) for a in self._again if self.arms[a].role is Role.LADDER]
        promoted = [(a, self.arms[a].point.overrides) for a in self._promoted]
        windows: list[Window] = []
        for part in (plan_windows(again, [], self.sizing.warmup, self._steps, passes=1),
                     interleave(promoted, self.sizing.warmup, self._steps) if promoted else [],
                     plan_windows([], larger, self.sizing.warmup, self._steps, passes=1)):
            windows += part[1:] if windows and part else part  # one baseline window between two parts
        return windows

    def _stack_round(self) -> list[Window]:
        if len(self._winners) < 2:
            self.recommended = judge.recommend(self._winners, None, budget=self._fit_budget, notes=self.notes)
            return []
        stacked = judge.stacked_candidate(self._winners)
        self.arms[STACKED] = Arm(stacked, stacked, Role.STACK)
        self.sizing.lengths[STACKED] = max(1, min(8, round(max((e.speedup or 1.0) for _, e in self._winners))))
        return self._windows([(STACKED, stacked.overrides)])

    def _windows(self, arms: list[tuple[str, dict]]) -> list[Window]:
        return interleave(arms, self.sizing.warmup, self._steps, passes=1)

    def _steps(self, arm: str) -> int:
        overrides = self.arms[arm].point.overrides if arm in self.arms else {}
        return self.sizing.steps(arm, overrides, baseline=arm == BASELINE)

    def _of(self, role: Role) -> list[tuple[str, dict]]:
        return [(a, arm.point.overrides) for a, arm in self.arms.items() if arm.role is role]

    # judging ---------------------------------------------------------------------------------------
    def _judge_round(self, *, final: bool) -> None:
        """Judge what the current round measured. `final`: the run ended in it, so a fix its first
        pass left undecided is settled on that pass alone."""
        this = self.results[self.round]
        if self.kind is RoundKind.FIXES:
            self._again = self._judge_fixes([this], [a for a, _ in self._of(Role.FIX) + self._of(Role.LADDER)], final=final)
            self._judge_screens(this)
        elif self.kind is RoundKind.CONFIRM:
            self._judge_fixes([self.results[0], this], self._again)  # round 0 measured their first pass
            self._judge_fixes([this], self._promoted)
        elif self.kind is RoundKind.STACK:
            self._judge_stack(final=final)

    def outcome(self, results: list[RoundResult], arm: str) -> Outcome:
        """`arm`'s result over its windows in `results` (each pass between its own baselines, pooled
        by :func:`judge.pool`), or why there is none. Its one-off switch cost (a compilation) counts
        every round's."""
        lines = _arm_lines(results, arm)
        if refused := [line for line in lines if line.not_switchable]:
            return Unmeasured(next(iter(refused[0].reasons.values()), "it could not be switched in the running script"),
                              switchable=False)
        passes = [p for result in results for p in result.pairs(arm, self.run_dir)]
        busy = not passes and any(line.window in r.busy for r in results for line in r.windows if line.arm == arm)
        if busy:  # no quiet window: its figures from the busy ones, never verified
            passes = [p for result in results for p in result.pairs(arm, self.run_dir, busy_too=True)]
        if not passes:
            return Unmeasured(self.left_out_why(arm) or "the run ended before its windows")
        pooled = judge.pool(passes, by_samples=self.by_samples, check_loss=self.arms[arm].candidate.changes_numerics,
                            measured_by="in-process", loads_in_process=self.sizing.workers == 0)
        if busy:
            pooled.verified = False
            pooled.verdict = Verdict.NOT_CONFIRMED if pooled.verdict is Verdict.FASTER else pooled.verdict
            pooled.reason = "every window of it ran while other processes used the CPU: run again on a quiet machine to verify"
        every = _arm_lines(self.results.values(), arm) or lines
        pooled.switch_s = sum(line.switch_s for line in every) or None
        pooled.payoff_steps = judge.payoff_steps(pooled)
        pooled.recompiles = recompiles.summary(every)
        return pooled

    def _judge_screens(self, result: RoundResult) -> None:
        """Each screened arm's one short window: an arm whose interval's high end reaches the
        screening margin (a short window is noisy: only a fix shown not to gain that much stops
        here) is promoted, to be measured in full; the rest keep this window's result."""
        for arm, _ in self._of(Role.SCREEN):
            exp = self.outcome([result], arm)
            if not isinstance(exp, Experiment):
                continue
            self._screened[arm] = exp
            high = exp.ci_high if exp.ci_high is not None else exp.speedup or 0
            lean = (exp.speedup or 0.0) >= SCREEN_LEAN
            if high >= 1 + SCREEN_MARGIN and lean and (exp.loss_check is None or exp.loss_check.get("passed") is not False):
                self._promoted.append(arm)
                continue
            exp.verified = False
            exp.verdict = Verdict.SLOWER if exp.ci_high is not None and exp.ci_high < 1 else Verdict.NO_CHANGE
            self.arms[arm].candidate.finding(self.findings).experiment = exp

    def _judge_fixes(self, results: list[RoundResult], arms: list[str], *, final: bool = True) -> list[str]:
        """Judge `arms` and settle each fix on its best value (:func:`judge.sweep_winner`).
        `final=False`: a fix whose best value the first pass did not settle (:func:`judge.settled`)
        is left for a second; its arms are returned."""
        fitting: list[tuple[Candidate, Experiment, int]] = []  # memory fixes that bring an over-budget run within it
        by_candidate: dict[int | None, list[tuple[str, Candidate, Experiment]]] = {}
        untried: dict[int | None, list[tuple[Candidate, str]]] = {}  # a sweep's values the run ended before, and why
        for arm in arms:
            candidate, point = self.arms[arm].candidate, self.arms[arm].point
            exp = self.outcome(results, arm)
            if isinstance(exp, Unmeasured):
                if not exp.switchable:
                    self._to_fresh(candidate, exp.why)
                else:
                    why = exp.why if arm in self.left_out or not self.out_of_time else "the time budget ended before it was measured"
                    untried.setdefault(candidate.finding_index, []).append((point, why))
                continue
            by_candidate.setdefault(candidate.finding_index, []).append((arm, point, exp))
        again: list[str] = []
        for tried in by_candidate.values():
            candidate = self.arms[tried[0][0]].candidate
            if candidate in self.fresh:
                continue  # one of its values could not be switched: the fresh runs measure it whole
            finding = candidate.finding(self.findings)
            budget = judge.usable_budget(finding.evidence)
            values = [(point, exp) for _, point, exp in tried]
            best, tied = self._sweep_winner(results, tried, budget)
            if not final and (not judge.settled(best) or tied):
                again += [arm for arm, _, _ in tried]
                continue
            rows = judge.sweep_rows(values, untried.get(candidate.finding_index, []), budget)
            best.sweep = rows if len(rows) > 1 else None
            if tied:
                self.notes.append(tied)
            judge.settle(finding, candidate, best, budget, self._winners, fitting)
        for index, points in untried.items():  # every value of a fix left out: not measured, and why
            left = self.findings[index] if index is not None else None
            if left is not None and index not in by_candidate and left.experiment is None and \
                    all(self._arm_of(p) in self.left_out for p, _ in points):
                left.experiment = Experiment.not_measured(points[0][1])
        if fitting or self._fit_budget is None:
            self._winners, self._fit_budget = judge.with_fastest_fit(self._winners, fitting)
        return again

    def _arm_of(self, point: Candidate) -> str | None:
        return next((a for a, arm in self.arms.items() if arm.point is point), None)

    def left_out_why(self, arm: str) -> str | None:
        """Why `arm` was never started: its predicted cost did not fit the time budget left."""
        if arm not in self.left_out:
            return None
        cost = self.left_out[arm]
        compiling = f", {cost.compile_s:.0f} s of it compiling" if cost.compile_s else ""
        return (f"not started: predicted to take {cost.seconds:.0f} s{compiling}, more than the time budget "
                "had left once the fixes expected to gain more per second were planned")

    def _sweep_winner(self, results: list[RoundResult], tried: list[tuple[str, Candidate, Experiment]],
                      budget: float | None) -> tuple[Experiment, str | None]:
        """A sweep's value to report, picked honestly: the best of several noisy estimates is biased
        up (a loader's 8 workers read 3.46x in one run, 2.32x by hand, where 4 gave 3.40x), so the
        leader is held head to head against every other verified value (their windows compared
        directly, :func:`judge.head_to_head`). The values it cannot be told apart from tie with it,
        and the cheapest of them (the first in the ladder's order: fewer workers, a smaller batch,
        TF32 before bf16) is reported, with a line saying so (the second item)."""
        values = [(point, exp) for _, point, exp in tried]
        point, best = judge.sweep_winner(values, budget)
        if budget or not best.verified:
            return best, None
        lead = next(arm for arm, p, _ in tried if p is point)
        rivals = [(arm, p, e) for arm, p, e in tried if e.verified and p is not point]
        windows = lambda arm: [m for r in results for _, cands in r.pairs(arm, self.run_dir) for m in cands]  # noqa: E731
        bases = judge.distinct([m for r in results for around, _ in r.pairs(lead, self.run_dir) for m in around])
        tied = [(arm, p, e) for arm, p, e in rivals
                if not judge.head_to_head(windows(lead), windows(arm), bases, by_samples=self.by_samples)]
        if not tied:
            return best, None
        order = [p for _, p, _ in tried]
        cheapest = min([(lead, point, best), *tied], key=lambda t: order.index(t[1]))
        said = ", ".join(f"{_short(p)} {e.speedup:.2f}x" for _, p, e in [(lead, point, best), *tied])
        return cheapest[2], (f"{self.arms[lead].candidate.label}: its best values could not be told apart head to head "
                             f"({said}); the cheapest, {_short(cheapest[1])}, is recommended")

    def _judge_stack(self, *, final: bool) -> None:
        """The stack's passes so far: recommended once one pass settles it, or after the second."""
        rounds = [self.results[r] for r, k in sorted(self._kinds.items()) if k is RoundKind.STACK and r in self.results]
        exp = self.outcome(rounds, STACKED)
        if isinstance(exp, Experiment) and not final and len(rounds) < 2 and not judge.settled(exp):
            return  # a second pass follows
        stacked = "could not be measured in-process" if isinstance(exp, Unmeasured) else exp
        self.recommended = judge.recommend(self._winners, stacked, budget=self._fit_budget, notes=self.notes)

    def _to_fresh(self, candidate: Candidate, why: str) -> None:
        """Leave `candidate` to fresh runs of the script, saying why once (the child's reason)."""
        if candidate not in self.fresh:
            self.fresh.append(candidate)
            self.notes.append(f"{candidate.label} is measured in fresh runs of the script, not inside this run: {why}")

    def claims(self) -> list:
        """Every in-process result the report will show: the findings' experiments and the recommendation."""
        return [f.experiment for f in self.findings if f.experiment is not None] + \
            ([self.recommended] if self.recommended is not None else [])


def _short(point: Candidate) -> str:
    """A sweep value in a few words: what its label's brackets say (`num_workers=4`)."""
    return point.label.rsplit(" (", 1)[-1].rstrip(")") if point.label.endswith(")") else point.label


def _arm_lines(results: Iterable[RoundResult], arm: str) -> list[ArmLine]:
    """The child's lines of `arm`'s windows in these rounds."""
    return [line for result in results for line in result.windows if line.arm == arm]

