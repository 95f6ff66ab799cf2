"""Experiments as arms of the run that was profiled: no restart, fixes switched at step boundaries.

After its measured window the child waits at a step boundary for a plan (see
``advisor/probe/arms.py`` for the child's side and the file protocol). The plan is fixed before it
runs, so every rank of a job switches at the same step: windows of `warmup` untimed and `steps`
timed steps, each arm between two baseline windows, the whole sequence run twice, the second
time in reverse (B P1 B P2 B ... B P2 B P1 B), so a drift over the run weighs on both sides
alike. Every sweep value is tried (switching is cheap) and the best is chosen by its interval.

Round 0 measures every switchable fix and sweep value; round 1 the winners stacked; then an
empty plan ends the script. A fix the child cannot switch in a live process (fp16 without a
consistent GradScaler, say) is left to a fresh-run experiment (:mod:`advisor.experiments`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from . import overrides as vocabulary
from .atomic import write_json_atomic
from .experiments import (Candidate, Measurement, _compare, _sweep_points, candidates_from, fits_over_budget,
                          recommendation, with_fastest_fit)
from .model import Applicability, Experiment, Finding, Recommendation, Verdict, estimated_speedup
from .rundir import names

REPEATS = 2          # each arm is measured twice, the second pass in reverse order
SCREEN_MARGIN = 0.05  # a screened fix whose one window may be this much faster is measured in full
FIXES, SCREENS, STACK = "fixes", "screens", "stack"  # what a round measures
MIN_WINDOW_STEPS = 5
BASELINE = "baseline"


@dataclass
class Window:
    arm: str
    overrides: dict
    warmup: int
    steps: int

    def to_dict(self) -> dict:
        return {"arm": self.arm, "overrides": self.overrides, "warmup": self.warmup, "steps": self.steps}


def interleave(arms: list[tuple[str, dict]], warmup: Callable[[dict], int], steps: Callable[[str], int] | int) -> list[Window]:
    """B A1 B A2 ... B, then the arms again in reverse, each between baselines; `steps(arm)` timed steps."""
    length = steps if callable(steps) else (lambda arm: steps)
    order = arms + list(reversed(arms)) if REPEATS > 1 else arms
    windows = [Window(BASELINE, {}, warmup({}), length(BASELINE))]
    for arm, overrides in order:
        windows += [Window(arm, overrides, warmup(overrides), length(arm)), Window(BASELINE, {}, warmup({}), length(BASELINE))]
    return windows


def plan_windows(arms: list[tuple[str, dict]], growing: list[tuple[str, dict]], warmup: Callable[[dict], int],
                 steps: Callable[[str], int] | int, screens: list[tuple[str, dict]] = ()) -> list[Window]:
    """The round's windows: `arms` interleaved (see :func:`interleave`), then each of the `screens`
    once, in a short window between baselines (what looks faster is measured in full in a later
    round), then the `growing` ones (larger batches) smallest first, each twice in a row between
    baselines. An out-of-memory error ends the child's arms, so it may only cost the values larger
    than the one that ran out: every other arm and every smaller value has been measured by then."""
    length = steps if callable(steps) else (lambda arm: steps)
    windows = interleave(arms, warmup, length) if arms else []
    if (growing or screens) and not windows:
        windows = [Window(BASELINE, {}, warmup({}), length(BASELINE))]
    for arm, overrides in screens:
        short = max(MIN_WINDOW_STEPS, length(BASELINE) // 2)
        windows += [Window(arm, overrides, warmup(overrides), short), Window(BASELINE, {}, warmup({}), short)]
    for arm, overrides in sorted(growing, key=lambda a: a[1].get("batch_size_scale") or 0):
        for _ in range(REPEATS):
            windows += [Window(arm, overrides, warmup(overrides), length(arm)),
                        Window(BASELINE, {}, warmup({}), length(BASELINE))]
    return windows


def _grows_memory(overrides: dict) -> bool:
    return (overrides.get("batch_size_scale") or 0) > 1


@dataclass
class RoundResult:
    """What the child measured in one round: per window its steps and its `arms` line."""

    windows: list[dict]  # the arms lines, in window order
    steps: dict[int, pd.DataFrame]  # window index -> timed steps

    def measurement(self, k: int, run_dir: Path) -> Measurement:
        line = self.windows[k]
        frame = self.steps.get(int(line.get("window", k)), pd.DataFrame())
        status = "failed" if line.get("error") or frame.empty else "ok"
        wall = float(frame["duration_s"].sum()) if len(frame) else 0.0
        return Measurement(line["arm"], line.get("overrides") or {}, status, run_dir, frame, wall, line.get("error"),
                           line.get("applied") or {}, line.get("peak_memory_bytes"), line.get("memory_basis"),
                           bool(line.get("oom")))


def read_round(out: Path, rank_suffix: str, round_no: int, arms: dict | None = None) -> RoundResult:
    """The child's step lines and window lines of `round_no`: from the run dir while the child runs,
    from `arms` (the runner's copy, ProbeRun.arms) once it has ended."""
    if arms is None:
        files = names(rank_suffix)
        arms = {"steps": _lines(out / files.steps_jsonl), "windows": _lines(out / files.arms_jsonl)}
    steps: dict[int, list[dict]] = {}
    for record in arms.get("steps") or []:
        if record.get("phase") == "arm" and record.get("round") == round_no and not record.get("warm"):
            steps.setdefault(int(record["window"]), []).append(record)
    windows = sorted((w for w in arms.get("windows") or [] if w.get("round") == round_no), key=lambda w: w["window"])
    frames = {k: pd.DataFrame(rows).assign(profiled=False) for k, rows in steps.items()}
    return RoundResult(windows, frames)


def _lines(path: Path) -> list[dict]:
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line being written
    return out


@dataclass
class ArmsSession:
    """The parent's side: writes each round's plan when the child asks, then judges what it measured.

    `diagnose()` returns the findings of the profiled window (the rules, run on the live Profile);
    they are filled in place, as :func:`advisor.experiments.run_experiments` does.
    """

    out: Path
    rank_suffix: str  # whose steps are judged: this process's rank, or rank 0 of a job advise launched
    diagnose: Callable[[], tuple[list[Finding], object]]  # -> (findings, the window's Profile)
    safe_only: bool = False
    max_experiments: int = 12
    window_steps: int = 10
    io_like: Callable[[object], bool] = lambda profile: False  # the window's Profile -> loading waits, not computes
    progress: object | None = None
    findings: list[Finding] = field(default_factory=list)
    by_samples: bool = False
    fresh: list[Candidate] = field(default_factory=list)    # fixes left to fresh-run experiments
    recommended: Recommendation | None = None
    notes: list[str] = field(default_factory=list)
    rule_warnings: list[str] = field(default_factory=list)
    rounds: int = 0
    time_budget_s: float = 900.0  # the arms' deadline, counted from the window's end (the runner's)
    plan_suffixes: list[str] = field(default_factory=list)  # the ranks that run each plan (default: rank_suffix's)
    _windows: list[Window] = field(default_factory=list)  # the plan running now
    _shown: tuple[int, int] | None = None  # (round, window) the progress line names
    _started: float | None = None
    _arms: dict[str, tuple[Candidate, Candidate]] = field(default_factory=dict)  # arm id -> (candidate, point)
    _winners: list[tuple[Candidate, Experiment]] = field(default_factory=list)
    _lengths: dict[str, int] = field(default_factory=dict)  # arm id -> window length, in baseline windows
    _workers: int = 0
    _fit_budget: int | None = None  # the run was over this budget: the fastest fix that fits joined the winners
    _kinds: dict[int, str] = field(default_factory=dict)  # round -> FIXES / SCREENS / STACK
    _screens: list[str] = field(default_factory=list)  # arms of fixes no rule proposed (screened in round 0)
    _screened: dict[str, Experiment] = field(default_factory=dict)  # screened arm -> its one window's result
    _promoted: list[tuple[str, dict]] = field(default_factory=list)  # screened arms to measure in full

    # the child asks ------------------------------------------------------------------------
    def on_window_done(self, round_no: int, suffixes: list[str] | None = None) -> None:
        """Write the plan for round `round_no` (0: the fixes; 1: the stack; then nothing).

        `suffixes`: the ranks that run it, the one whose steps are judged first (a job: rank 0)."""
        if suffixes:
            self.rank_suffix, self.plan_suffixes = suffixes[0], list(suffixes)
        try:
            windows = self._plan(round_no)
        except Exception as exc:  # noqa: BLE001  a planning bug must end the child, not hang it
            self.notes.append(f"in-process experiments stopped: {type(exc).__name__}: {exc}")
            windows = []
        self.rounds, self._windows = round_no, windows
        if self._started is None:
            self._started = time.monotonic()
        if windows and self.progress is not None:
            arms = len({w.arm for w in windows} - {BASELINE})
            what = {FIXES: "the fixes", SCREENS: "the screened fixes that looked faster",
                    STACK: "the winners stacked"}.get(self._kinds.get(round_no, ""), "the fixes")
            self.progress.phase(f"measuring {what} inside this run: {arms} arm{'s' if arms != 1 else ''}, "
                                f"{len(windows)} windows of {windows[0].steps} steps")
        plan = {"round": round_no, "windows": [w.to_dict() for w in windows]}
        for suffix in self.plan_suffixes or [self.rank_suffix]:  # every rank of a job: the same plan
            write_json_atomic(self.out / f"plan{suffix}.json", plan)

    def on_arm_step(self, record: dict) -> None:
        """The child ran a step of window k: say which window and arm run, and the time left."""
        k, key = int(record.get("window") or 0), (int(record.get("round") or 0), int(record.get("window") or 0))
        if self.progress is None or key == self._shown or k >= len(self._windows):
            return
        self._shown = key
        window = self._windows[k]
        arms = len({w.arm for w in self._windows} - {BASELINE})
        what = "the baseline" if window.arm == BASELINE else f"arm {self._label(window.arm)}"
        remaining = self.time_budget_s - (time.monotonic() - (self._started or time.monotonic()))
        self.progress.phase(f"window {k + 1} of {len(self._windows)} ({arms} arm{'s' if arms != 1 else ''} interleaved with "
                            f"the baseline): {what}; {max(0.0, remaining):.0f} s of the time budget left")

    def _label(self, arm: str) -> str:
        point = self._arms.get(arm)
        return point[1].label if point else arm

    def _plan(self, round_no: int) -> list[Window]:
        """Round 0 measures the rules' fixes and screens the untried ones (one short window each);
        the screened fixes that looked faster are measured in full in a round of their own; then
        the winners stacked. Each round is judged when the child asks for the next."""
        if round_no == 0:
            windows = self._first_round()
            kind = FIXES
        else:
            kind = self._judge_round(round_no - 1, read_round(self.out, self.rank_suffix, round_no - 1))
            windows = []
        if kind == FIXES and round_no > 0:
            windows, kind = interleave(self._promoted, self._warmup, self._steps) if self._promoted else [], SCREENS
        if kind == SCREENS and not windows:
            windows, kind = self._stack_round(), STACK
        if windows:
            self._kinds[round_no] = kind
        return windows

    def _judge_round(self, round_no: int, result: RoundResult) -> str:
        """Judge what round `round_no` measured; returns its kind."""
        kind = self._kinds.get(round_no, "")
        if kind == FIXES:
            self._judge_fixes(result, [a for a in self._arms if a not in self._screens])
            self._judge_screens(result)
        elif kind == SCREENS:
            self._judge_fixes(result, [a for a, _ in self._promoted])
        elif kind == STACK and self._arms.get("stacked"):
            self._judge_stack(result)
        return kind

    def _judge_screens(self, result: RoundResult) -> None:
        """Each screened arm's one short window: an arm whose interval's high end reaches the
        screening margin (a short window is noisy: only a fix shown not to gain that much stops
        here) is promoted, to be measured in full; the rest keep this window's result."""
        for arm in self._screens:
            exp = self._judge(result, arm, self._arms[arm][0].changes_numerics)
            if not isinstance(exp, Experiment):
                continue
            self._screened[arm] = exp
            high = exp.ci_high if exp.ci_high is not None else exp.speedup or 0
            if high >= 1 + SCREEN_MARGIN and (exp.loss_check is None or exp.loss_check.get("passed") is not False):
                self._promoted.append((arm, self._arms[arm][1].overrides))
                continue
            exp.verified = False
            exp.verdict = Verdict.SLOWER if exp.ci_high is not None and exp.ci_high < 1 else Verdict.NO_CHANGE
            self.findings[self._arms[arm][0].finding_index].experiment = exp

    def _first_round(self) -> list[Window]:
        self.findings, profile = self.diagnose()
        steps, env = profile.steps, profile.env
        self.by_samples = bool(steps["samples"].notna().all()) if "samples" in steps and len(steps) else False
        self._workers = max([int(dl.get("num_workers") or 0) for dl in profile.observed.get("dataloaders") or []] or [0])
        ctx = vocabulary.SweepContext(vocabulary.cores_per_rank(env), self.io_like(profile))
        arms: list[tuple[str, dict]] = []
        growing: list[tuple[str, dict]] = []  # larger batches: one may run out of memory and end the run
        screens: list[tuple[str, dict]] = []  # fixes no rule proposed: one short window each
        for candidate in candidates_from(self.findings, self.safe_only):
            finding = self.findings[candidate.finding_index]
            if "batch_size_scale" in candidate.overrides and not self.by_samples:
                finding.experiment = Experiment.not_measured("the batch size is unknown, so samples/s cannot be compared")
                continue
            points = [candidate] if finding.screen else _sweep_points(candidate, ctx)  # a screen is one value
            for point in points[: self.max_experiments]:
                arm = f"a{len(self._arms) + 1}"
                self._arms[arm] = (candidate, point)
                self._lengths[arm] = _expected_speedup(finding)
                if finding.screen:
                    self._screens.append(arm)
                    screens.append((arm, point.overrides))
                else:
                    (growing if _grows_memory(point.overrides) else arms).append((arm, point.overrides))
        return plan_windows(arms, growing, self._warmup, self._steps, screens)

    def _steps(self, arm: str) -> int:
        """Timed steps of a window: an arm expected k times faster gets k times the steps (up to 8),
        so its window lasts about as long as a baseline window and its interval is as tight."""
        return max(MIN_WINDOW_STEPS, self.window_steps) * self._lengths.get(arm, 1)

    def _warmup(self, overrides: dict) -> int:
        """Untimed steps opening a window: a new loader's workers fill their prefetch first."""
        dl = overrides.get("dataloader") or {}
        workers = dl.get("num_workers", self._workers)
        return 2 + (workers * dl.get("prefetch_factor", 2) if "dataloader" in overrides or workers else 0)

    # judging -------------------------------------------------------------------------------
    def _pairs(self, result: RoundResult, arm: str) -> list[tuple[list[Measurement], Measurement]]:
        """Each window of `arm` with the baseline windows on either side of it."""
        out = []
        for k, line in enumerate(result.windows):
            if line["arm"] != arm:
                continue
            around = [result.measurement(j, self.out) for j in (k - 1, k + 1)
                      if 0 <= j < len(result.windows) and result.windows[j]["arm"] == BASELINE]
            out.append((around, result.measurement(k, self.out)))
        return out

    def _judge(self, result: RoundResult, arm: str, check_loss: bool) -> Experiment | str:
        """The arm's result, or why there is none: "not-switchable" (a fresh run must measure it) or
        "unmeasured" (the run ended before its windows)."""
        lines = [line for line in result.windows if line["arm"] == arm]
        if any(line.get("not_switchable") for line in lines):
            return "not-switchable"
        pairs = self._pairs(result, arm)
        if not pairs:
            return "unmeasured"
        bases = _unique([m for around, _ in pairs for m in around])
        pooled = _compare(bases, [cand for _, cand in pairs], by_samples=self.by_samples, check_loss=check_loss)
        each = [_compare(around, cand, by_samples=self.by_samples, check_loss=check_loss) for around, cand in pairs]
        pooled.runs = [{"speedup": r.speedup, "ci_low": r.ci_low, "ci_high": r.ci_high} for r in each]
        if pooled.verified and not all(r.verified for r in each):
            pooled.verified, pooled.verdict = False, Verdict.NOT_CONFIRMED
        if _apart(each):  # one pass says 0.96x, the other 9.37x: no interval over both means anything
            pooled.verified, pooled.verdict = False, Verdict.NOT_CONFIRMED
            pooled.reason = (f"its {len(each)} passes disagree ({', '.join(f'{r.speedup:.2f}x' for r in each)}, "
                             "intervals apart): the machine's load changed during the run")
        pooled.measured_by = "in-process"
        pooled.switch_s = sum(float(line.get("switch_s") or 0.0) for line in lines) or None
        return pooled

    def _judge_fixes(self, result: RoundResult, arms: list[str] | None = None) -> None:
        arms = list(self._arms) if arms is None else arms
        fitting: list[tuple[Candidate, Experiment, int]] = []  # memory fixes that bring an over-budget run within it
        by_candidate: dict[int, list[tuple[Candidate, Experiment]]] = {}
        for arm in arms:
            candidate, point = self._arms[arm]
            check_loss = candidate.changes_numerics
            exp = self._judge(result, arm, check_loss)
            if exp == "not-switchable" and candidate not in self.fresh:
                self.fresh.append(candidate)
            if isinstance(exp, str):
                continue
            by_candidate.setdefault(candidate.finding_index, []).append((point, exp))
        for index, tried in by_candidate.items():
            candidate = next(self._arms[a][0] for a in arms if self._arms[a][0].finding_index == index)
            if candidate in self.fresh:
                continue  # one of its values could not be switched: the fresh runs measure it whole
            finding = self.findings[index]
            budget = finding.evidence.get("budget_bytes")
            verified = [(p, e) for p, e in tried if e.verified]
            point, best = max(verified or tried, key=lambda pe: (pe[1].ci_low if pe[1].ci_low is not None else -1.0))
            if budget and (candidate.overrides.get("batch_size_scale") or 0) >= 2:
                point, best = largest_that_fits(tried, budget)
            best.sweep = [{"label": p.label, "overrides": p.overrides, "speedup": e.speedup, "ci_low": e.ci_low,
                           "ci_high": e.ci_high, "verdict": e.verdict.value,
                           "peak_memory_bytes": (e.candidate or {}).get("peak_memory_bytes"),
                           **({"oom": True} if e.oom else {}),
                           **({"fits": fits(e, budget)} if budget else {})} for p, e in tried] if len(tried) > 1 else None
            best.applicability = candidate.applicability.value
            best.memory_budget_bytes = budget
            finding.experiment = best
            if best.verified:
                self._winners.append((candidate, best))
                finding.fix.adopt(best.overrides)
            if fits_over_budget(finding, best):
                fitting.append((candidate, best, budget))
        if fitting or self._fit_budget is None:
            self._winners, self._fit_budget = with_fastest_fit(self._winners, fitting)

    def _stack_round(self) -> list[Window]:
        if len(self._winners) < 2:
            self.recommended = recommendation(self._winners[0][1], [self._winners[0][0]], budget=self._fit_budget) if self._winners else None
            return []
        overrides = vocabulary.merge(*(e.overrides for _, e in self._winners))
        stacked = Candidate(" + ".join(c.label for c, _ in self._winners), overrides,
                            Applicability.UNSAFE if any(c.changes_numerics for c, _ in self._winners) else Applicability.SAFE)
        self._arms["stacked"] = (stacked, stacked)
        best = max((e.speedup or 1.0) for _, e in self._winners)
        self._lengths["stacked"] = max(1, min(8, round(best)))
        return interleave([("stacked", overrides)], self._warmup, self._steps)

    def _judge_stack(self, result: RoundResult) -> None:
        stacked, _ = self._arms["stacked"]
        exp = self._judge(result, "stacked", stacked.changes_numerics)
        if isinstance(exp, str) or not exp.verified:  # each winner was verified alone: recommend the best of them
            best = max(self._winners, key=lambda w: w[1].speedup or 0)
            why = ("could not be measured in-process" if isinstance(exp, str) else
                   f"measured {exp.speedup:.2f}x, not verified" if exp.speedup else "failed")
            self.notes.append(f"the stacked configuration {why}; the best single fix is recommended")
            self.recommended = recommendation(best[1], [best[0]], budget=self._fit_budget)
            return
        self.recommended = recommendation(exp, [c for c, _ in self._winners], budget=self._fit_budget)

    # after the run -------------------------------------------------------------------------
    def finish(self, arms: dict) -> None:
        """The child ended (`arms`: its lines, ProbeRun.arms): judge a round it ended inside."""
        if self._arms and self._kinds.get(self.rounds) in (FIXES, SCREENS):  # the run ended inside this round
            self._judge_round(self.rounds, read_round(self.out, self.rank_suffix, self.rounds, arms))
            for arm, _ in self._promoted:  # promoted, but the run ended before they were measured in full
                finding = self.findings[self._arms[arm][0].finding_index]
                if finding.experiment is None:
                    exp = self._screened[arm]
                    exp.verified, exp.verdict = False, Verdict.NOT_CONFIRMED
                    exp.reason = "screened in one short window; the run ended before it was measured in full"
                    finding.experiment = exp
            self.recommended = self.recommended or (
                recommendation(self._winners[0][1], [self._winners[0][0]], budget=self._fit_budget) if len(self._winners) == 1 else None)
        for candidate in {c.finding_index: c for c, _ in self._arms.values() if c.finding_index is not None}.values():
            finding = self.findings[candidate.finding_index]
            if finding.experiment is None and candidate not in self.fresh:
                finding.experiment = Experiment.not_measured("the run ended before this fix was measured")


def fits(exp: Experiment, budget: float) -> bool:
    """The candidate ran (no OOM) and its measured peak stayed within the budget."""
    peak = (exp.candidate or {}).get("peak_memory_bytes")
    return exp.verdict is not Verdict.FAILED and peak is not None and peak <= budget


def largest_that_fits(tried: list, budget: float) -> tuple:
    """The batch-size search's answer: the largest scale whose window fit the budget (an OOM or an
    over-budget peak does not fit), else the smallest tried, reported as it fared."""
    fitting = [(p, e) for p, e in tried if fits(e, budget)]
    scale = lambda pe: pe[0].overrides.get("batch_size_scale") or 0  # noqa: E731
    return max(fitting, key=scale) if fitting else min(tried, key=scale)


def _apart(results: list[Experiment]) -> bool:
    """Whether two passes of one arm disagree: intervals that do not overlap and speedups 1.5x apart."""
    known = [r for r in results if r.ci_low is not None and r.ci_high is not None and r.speedup]
    if len(known) < 2:
        return False
    lo = min(known, key=lambda r: r.speedup)
    hi = max(known, key=lambda r: r.speedup)
    return lo.ci_high < hi.ci_low and hi.speedup / lo.speedup >= 1.5


def _expected_speedup(finding: Finding) -> int:
    """The rule's estimate as a whole speedup factor, 1 to 8 (model.estimated_speedup's)."""
    return max(1, min(8, round(estimated_speedup(finding.estimated_gain_frac) or 1)))


def _unique(items: list[Measurement]) -> list[Measurement]:
    out: list[Measurement] = []
    for m in items:
        if not any(m is o for o in out):
            out.append(m)
    return out
