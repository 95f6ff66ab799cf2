"""Experiments as arms of the run that was profiled: no restart, fixes switched at step boundaries.

After its measured window the child waits at a step boundary for a plan (see
``advisor/probe/arms.py`` for the child's side and the file protocol). A plan is fixed before it
runs, so every rank of a job switches at the same step: windows of `warmup` untimed and `steps`
timed steps, each arm between two baseline windows (B P1 P2 B P3 B,
:func:`advisor.experiments.plan.interleave`). The plan adapts between rounds: round 0 is one pass
over the rules' fixes (every sweep value: switching is cheap) and one short window for each
untried fix; round 1 runs the reverse pass (B P3 B P2 P1 B, so a drift weighs on both sides
alike) only for the fixes the first pass left undecided (:func:`advisor.experiments.judge.settled`),
and the screened fixes that looked faster, in full; then the winners stacked, a second pass only
where the first did not settle it; an empty plan ends the script. A fix the child cannot switch
in a live process (fp16 without a consistent GradScaler, say) is left to a fresh-run experiment
(:mod:`advisor.experiments.fresh`). Every verdict comes from :mod:`advisor.experiments.judge`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from ..analysis import metrics
from .. import overrides as vocabulary
from ..run_dir.atomic import write_json_atomic
from ..model import Experiment, Finding, Recommendation, Verdict
from ..run_dir.protocol import Phase, read_lines
from ..run_dir.layout import names
from . import judge
from .judge import Measurement
from .plan import (BASELINE, MIN_WINDOW_STEPS, Candidate, Window, candidates_from, expected_speedup, interleave,
                   batch_window, burst_steps, plan_windows, script_workers, sweep_points, warmup_steps, window_steps)

SCREEN_MARGIN = 0.05  # a screened fix whose one window may be this much faster is measured in full ...
SCREEN_LEAN = 1.02    # ... and that leans that way (its point estimate at least this): a 0.99x window whose
                      # interval reaches 1.05 only by its noise cost a full round for nothing (a starved loop's bf16)
BUSY_SHARE = 0.25   # other processes on this share of the cores while the arms ran: nothing is verified
LARGE_EFFECT = 3     # every rule's fix expected at least this much faster: windows of half the steps
                    # (a 3x effect is resolved by 5 slow steps; the fast arm windows scale with it)
FIXES, CONFIRM, STACK = "fixes", "confirm", "stack"  # what a round measures


def _grows_memory(overrides: dict) -> bool:
    return vocabulary.batch_scale(overrides) > 1


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
        arms = {"steps": read_lines(out / files.steps_jsonl)[0], "windows": read_lines(out / files.arms_jsonl)[0]}
    steps: dict[int, list[dict]] = {}
    for record in arms.get("steps") or []:
        if record.get("phase") == Phase.ARM and record.get("round") == round_no and not record.get("warm"):
            steps.setdefault(int(record["window"]), []).append(record)
    windows = sorted((w for w in arms.get("windows") or [] if w.get("round") == round_no), key=lambda w: w["window"])
    frames = {k: pd.DataFrame(rows).assign(profiled=False) for k, rows in steps.items()}
    return RoundResult(windows, frames)


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
    publish: Callable[[dict], None] | None = None  # a job a launcher started: the plan to every rank (job/link.py)
    _windows: list[Window] = field(default_factory=list)  # the plan running now
    _shown: tuple[int, int] | None = None  # (round, window) the progress line names
    _started: float | None = None
    _arms: dict[str, tuple[Candidate, Candidate]] = field(default_factory=dict)  # arm id -> (candidate, point)
    _winners: list[tuple[Candidate, Experiment]] = field(default_factory=list)
    _lengths: dict[str, int] = field(default_factory=dict)  # arm id -> window length, in baseline windows
    _workers: int = 0
    _fit_budget: int | None = None  # the run was over this budget: the fastest fix that fits joined the winners
    _kinds: dict[int, str] = field(default_factory=dict)  # round -> FIXES / CONFIRM / STACK
    _results: dict[int, RoundResult] = field(default_factory=dict)  # round -> what the child measured in it
    _again: list[str] = field(default_factory=list)  # arms of fixes their first pass left undecided
    _growing: list[tuple[str, dict]] = field(default_factory=list)  # the larger batches' ladder (last)
    _base_steps: int | None = None  # the baseline windows' timed steps, where cut (see _first_round)
    _timed: int | None = None  # window_steps, lengthened to half a second of the profiled steps
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
            what = {FIXES: "the fixes", CONFIRM: "the fixes not decided yet",
                    STACK: "the winners stacked"}.get(self._kinds.get(round_no, ""), "the fixes")
            self.progress.phase(f"measuring {what} inside this run: {arms} arm{'s' if arms != 1 else ''}, "
                                f"{len(windows)} windows of {windows[0].steps} steps")
        plan = {"round": round_no, "windows": [w.to_dict() for w in windows]}
        for suffix in self.plan_suffixes or [self.rank_suffix]:  # every rank of a job: the same plan
            write_json_atomic(self.out / f"plan{suffix}.json", plan)
        if self.publish is not None:
            self.publish(plan)

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
        """Round 0: one pass over the rules' fixes, and one short window for each untried fix (a
        screen). Round 1: the reverse pass for the fixes the first left undecided (see
        :func:`judge.settled`), and the screens that looked faster, measured in full. Then the
        winners stacked: one pass, a second only where the first did not settle it. Each round is
        judged when the child asks for the next, so a decided arm stops."""
        if round_no == 0:
            windows, kind = self._first_round(), FIXES
        else:
            previous = self._kinds.get(round_no - 1, "")
            self._results[round_no - 1] = read_round(self.out, self.rank_suffix, round_no - 1)
            self._judge_round(round_no - 1, final=False)
            windows, kind = [], ""
            if previous == FIXES:
                windows, kind = self._confirm_round(), CONFIRM
            if previous in (FIXES, CONFIRM) and not windows:
                windows, kind = self._stack_round(), STACK
            elif previous == STACK and self.recommended is None:
                windows, kind = interleave([("stacked", self._arms["stacked"][1].overrides)], self._warmup,
                                           self._steps, passes=1), STACK
        if windows:
            self._kinds[round_no] = kind
        return windows

    def _rounds_of(self, kind: str) -> list[RoundResult]:
        return [self._results[r] for r, k in sorted(self._kinds.items()) if k == kind and r in self._results]

    def _judge_round(self, round_no: int, *, final: bool) -> None:
        """Judge what round `round_no` measured. `final`: the run ended in it, so a fix its first
        pass left undecided is settled on that pass alone."""
        kind = self._kinds.get(round_no, "")
        first = self._results.get(0)
        if kind == FIXES and first is not None:
            ladder = {a for a, _ in self._growing}
            fixes = [a for a in self._arms if a not in self._screens and a not in ladder and a != "stacked"]
            self._again = self._judge_fixes([first], fixes, final=final)
            self._judge_screens(first)
        elif kind == CONFIRM:
            self._judge_fixes([first, self._results[round_no]], self._again)
            self._judge_fixes([self._results[round_no]], [a for a, _ in self._promoted + self._growing])
        elif kind == STACK and self._arms.get("stacked"):
            self._judge_stack(final=final)

    def _judge_screens(self, result: RoundResult) -> None:
        """Each screened arm's one short window: an arm whose interval's high end reaches the
        screening margin (a short window is noisy: only a fix shown not to gain that much stops
        here) is promoted, to be measured in full; the rest keep this window's result."""
        for arm in self._screens:
            exp = self._judge([result], arm, self._arms[arm][0].changes_numerics)
            if not isinstance(exp, Experiment):
                continue
            self._screened[arm] = exp
            high = exp.ci_high if exp.ci_high is not None else exp.speedup or 0
            lean = (exp.speedup or 0.0) >= SCREEN_LEAN
            if high >= 1 + SCREEN_MARGIN and lean and (exp.loss_check is None or exp.loss_check.get("passed") is not False):
                self._promoted.append((arm, self._arms[arm][1].overrides))
                continue
            exp.verified = False
            exp.verdict = Verdict.SLOWER if exp.ci_high is not None and exp.ci_high < 1 else Verdict.NO_CHANGE
            self.findings[self._arms[arm][0].finding_index].experiment = exp

    def _first_round(self) -> list[Window]:
        self.findings, profile = self.diagnose()
        steps, env = profile.steps, profile.env
        self.by_samples = judge.by_samples(steps)
        self._timed = window_steps(self.window_steps, steps)
        self._workers = script_workers(profile.observed)
        ctx = vocabulary.SweepContext(vocabulary.cores_per_rank(env), self.io_like(profile))
        arms: list[tuple[str, dict]] = []
        growing: list[tuple[str, dict]] = []  # larger batches: one may run out of memory and end the run
        screens: list[tuple[str, dict]] = []  # fixes no rule proposed: one short window each
        loaders = profile.observed.get("dataloaders") or []
        for candidate in candidates_from(self.findings, self.safe_only):
            finding = self.findings[candidate.finding_index]
            refusals = [vocabulary.live_loader_refusal(candidate.overrides, dl) for dl in loaders]
            if refusals and all(refusals):  # every loader the script built refuses it (an arm would only say so)
                self._to_fresh(candidate, refusals[0])
                continue
            if vocabulary.changes_batch(candidate.overrides) and not self.by_samples:
                finding.experiment = Experiment.not_measured("the batch size is unknown, so samples/s cannot be compared")
                continue
            points = [candidate] if finding.screen else sweep_points(candidate, ctx)  # a screen is one value
            for point in points[: self.max_experiments]:
                arm = f"a{len(self._arms) + 1}"
                self._arms[arm] = (candidate, point)
                self._lengths[arm] = expected_speedup(finding)
                if finding.screen:
                    self._screens.append(arm)
                    screens.append((arm, point.overrides))
                else:
                    (growing if _grows_memory(point.overrides) else arms).append((arm, point.overrides))
        expected = [self._lengths[a] for a, _ in arms + growing]
        if expected and min(expected) >= LARGE_EFFECT:  # the slow baseline windows need half the steps
            self._base_steps = max(MIN_WINDOW_STEPS, (self._timed or self.window_steps) // 2)
        if not arms and not screens:  # the ladder alone: nothing else to measure first
            return plan_windows([], growing, self._warmup, self._steps)
        self._growing = growing  # the ladder runs last, after every other arm's passes (see _confirm_round)
        return plan_windows(arms, [], self._warmup, self._steps, screens, passes=1)

    def _steps(self, arm: str) -> int:
        """Timed steps of a window: at least half a second's (:func:`plan.window_steps`), a larger
        batch's as long; an arm expected k times faster gets k times the steps (up to 8), so its
        window lasts about as long as a baseline window and its interval is as tight; a window with
        loader workers times enough of their bursts (:func:`plan.burst_steps`)."""
        overrides = self._arms[arm][1].overrides if arm in self._arms else {}
        unit = max(MIN_WINDOW_STEPS, batch_window(self._timed or self.window_steps, self.window_steps, overrides))
        steps = (self._base_steps or unit) if arm == BASELINE else unit * self._lengths.get(arm, 1)
        return burst_steps(steps, overrides, self._workers)

    def _warmup(self, overrides: dict) -> int:
        return warmup_steps(overrides, self._workers)

    # judging -------------------------------------------------------------------------------
    def _pairs(self, result: RoundResult, arm: str) -> list[tuple[list[Measurement], Measurement]]:
        """Each window of `arm` with the nearest baseline window on either side of it."""
        out = []
        for k, line in enumerate(result.windows):
            if line["arm"] != arm:
                continue
            before = next((j for j in range(k - 1, -1, -1) if result.windows[j]["arm"] == BASELINE), None)
            after = next((j for j in range(k + 1, len(result.windows)) if result.windows[j]["arm"] == BASELINE), None)
            around = [result.measurement(j, self.out) for j in (before, after) if j is not None]
            out.append((around, result.measurement(k, self.out)))
        return out

    def _judge(self, results: list[RoundResult], arm: str, check_loss: bool) -> Experiment | str:
        """The arm's result over its windows in `results` (each pass a pair of baselines around it),
        or why there is none: "not-switchable" (a fresh run must measure it) or "unmeasured" (the
        run ended before its windows). Its one-off switch cost (a compilation) counts every round's."""
        lines = _arm_lines(results, arm)
        if any(line.get("not_switchable") for line in lines):
            return "not-switchable"
        pairs = [pair for result in results for pair in self._pairs(result, arm)]
        if not pairs:
            return "unmeasured"
        bases = judge.distinct([m for around, _ in pairs for m in around])
        compare = lambda base, cand: judge.compare(base, cand, by_samples=self.by_samples, check_loss=check_loss,  # noqa: E731
                                                   measured_by="in-process")
        pooled = judge.confirm(compare(bases, [cand for _, cand in pairs]), [compare(around, cand) for around, cand in pairs])
        every = _arm_lines(self._results.values(), arm)
        pooled.switch_s = sum(float(line.get("switch_s") or 0.0) for line in every or lines) or None
        pooled.payoff_steps = judge.payoff_steps(pooled)
        return pooled

    def _to_fresh(self, candidate: Candidate, why: str) -> None:
        """Leave `candidate` to fresh runs of the script, saying why once (the child's reason)."""
        if candidate not in self.fresh:
            self.fresh.append(candidate)
            self.notes.append(f"{candidate.label} is measured in fresh runs of the script, not inside this run: {why}")

    def _judge_fixes(self, results: list[RoundResult], arms: list[str], *, final: bool = True) -> list[str]:
        """Judge `arms` and settle each fix on its best value. `final=False`: a fix whose best value
        the first pass did not settle (:func:`judge.settled`) is left for a second; its arms are returned."""
        fitting: list[tuple[Candidate, Experiment, int]] = []  # memory fixes that bring an over-budget run within it
        by_candidate: dict[int, list[tuple[str, Candidate, Experiment]]] = {}
        for arm in arms:
            candidate, point = self._arms[arm]
            exp = self._judge(results, arm, candidate.changes_numerics)
            if exp == "not-switchable":
                self._to_fresh(candidate, next((why for line in _arm_lines(results, arm)
                                                for why in (line.get("reasons") or {}).values()),
                                               "it could not be switched in the running script"))
            if isinstance(exp, str):
                continue
            by_candidate.setdefault(candidate.finding_index, []).append((arm, point, exp))
        again: list[str] = []
        for index, tried in by_candidate.items():
            candidate = self._arms[tried[0][0]][0]
            if candidate in self.fresh:
                continue  # one of its values could not be switched: the fresh runs measure it whole
            finding = self.findings[index]
            budget = finding.evidence.get("budget_bytes")
            values = [(point, exp) for _, point, exp in tried]
            _, best = judge.sweep_winner(values, budget)
            if not final and not judge.settled(best):
                again += [arm for arm, _, _ in tried]
                continue
            best.sweep = [judge.sweep_row(p, e, budget) for p, e in values] if len(values) > 1 else None
            judge.settle(finding, candidate, best, budget, self._winners, fitting)
        if fitting or self._fit_budget is None:
            self._winners, self._fit_budget = judge.with_fastest_fit(self._winners, fitting)
        return again

    def _confirm_round(self) -> list[Window]:
        """The reverse pass of the undecided fixes, the promoted screens in two passes, then the
        larger batches, smallest first, each twice: an out-of-memory error ends the child's arms,
        so it may only cost the values larger than the one that ran out."""
        again = [(a, self._arms[a][1].overrides) for a in reversed(self._again)]
        windows: list[Window] = []
        for part in (plan_windows(again, [], self._warmup, self._steps, passes=1),
                     interleave(self._promoted, self._warmup, self._steps) if self._promoted else [],
                     plan_windows([], self._growing, self._warmup, self._steps)):
            windows += part[1:] if windows and part else part  # one baseline window between two parts
        return windows

    def _stack_round(self) -> list[Window]:
        if len(self._winners) < 2:
            self.recommended = judge.recommend(self._winners, None, budget=self._fit_budget, notes=self.notes)
            return []
        stacked = judge.stacked_candidate(self._winners)
        self._arms["stacked"] = (stacked, stacked)
        best = max((e.speedup or 1.0) for _, e in self._winners)
        self._lengths["stacked"] = max(1, min(8, round(best)))
        return interleave([("stacked", stacked.overrides)], self._warmup, self._steps, passes=1)

    def _judge_stack(self, *, final: bool) -> None:
        """The stack's passes so far: recommended once one pass settles it, or after the second."""
        stacked, _ = self._arms["stacked"]
        rounds = self._rounds_of(STACK)
        exp = self._judge(rounds, "stacked", stacked.changes_numerics)
        if isinstance(exp, Experiment) and not final and len(rounds) < 2 and not judge.settled(exp):
            return  # a second pass follows
        exp = "could not be measured in-process" if isinstance(exp, str) else exp
        self.recommended = judge.recommend(self._winners, exp, budget=self._fit_budget, notes=self.notes)

    # after the run -------------------------------------------------------------------------
    def withhold_if_busy(self, samples: pd.DataFrame, cpu_count: int | None) -> None:
        """No in-process claim stays verified where other processes took a quarter of the cores
        (half a core at least), or ran on the script's GPU, while the arms ran: a contended 2-core
        machine verified bf16 on nanoGPT at 2.05x, 0.90x by hand. The figures stay, marked not
        confirmed, with the load."""
        frames = [f for result in self._results.values() for f in result.steps.values() if "t_start" in f]
        if not frames or samples.empty or "t" not in samples:
            return
        window = metrics.window_samples(samples, pd.concat(frames))
        other, shared = metrics.outside_cores(window, cpu_count), metrics.gpu_neighbours(window)
        busy = other is not None and other >= max(metrics.OUTSIDE_LOAD_WARN_CORES, BUSY_SHARE * (cpu_count or 0))
        if not busy and not shared:
            return
        said = ([f"processes outside the script used {other:.1f} of {cpu_count} cores"] if busy else []) + \
               ([metrics.shared_gpu_text(shared)] if shared else [])
        why = (f"the machine was busy: {' and '.join(said)} while the fixes were measured; run again on a quiet "
               "machine to verify")
        claims = [f.experiment for f in self.findings if f.experiment is not None]
        for exp in claims + ([self.recommended] if self.recommended is not None else []):
            if exp.verified and exp.measured_by == "in-process":
                exp.verified = False
                if isinstance(exp, Experiment):
                    exp.verdict, exp.reason = Verdict.NOT_CONFIRMED, why
        self.notes.append(why)

    def add_energy(self, samples: pd.DataFrame) -> None:
        """Joules per sample of each measured fix and of the baseline windows (NVML power over the
        windows' wall time, :func:`metrics.energy`), beside their speed; nothing where no power was
        sampled (a CPU run)."""
        if samples.empty or "gpu_power_w" not in samples:
            return
        windows = [(line, result.steps.get(int(line.get("window", k))))
                   for result in self._results.values() for k, line in enumerate(result.windows)]
        windows = [(line, frame) for line, frame in windows if frame is not None and len(frame)]
        base = [frame for line, frame in windows if line["arm"] == BASELINE]
        base_energy = metrics.energy(samples, pd.concat(base)) if base else None
        if not base_energy or base_energy.get("joules_per_sample") is None:
            return
        claims = [f.experiment for f in self.findings if f.experiment is not None] + [self.recommended]
        for exp in (c for c in claims if c is not None and c.baseline and c.candidate):
            mine = [frame for line, frame in windows
                    if line["arm"] != BASELINE and (line.get("overrides") or {}) == (exp.overrides or {})]
            energy = metrics.energy(samples, pd.concat(mine)) if mine else None
            if energy and energy.get("joules_per_sample") is not None:
                exp.baseline["joules_per_sample"] = base_energy["joules_per_sample"]
                exp.candidate["joules_per_sample"] = energy["joules_per_sample"]

    def finish(self, arms: dict) -> None:
        """The child ended (`arms`: its lines, ProbeRun.arms): judge a round it ended inside, on
        what it measured."""
        kind = self._kinds.get(self.rounds)
        if self._arms and kind is not None and self.rounds not in self._results:
            self._results[self.rounds] = read_round(self.out, self.rank_suffix, self.rounds, arms)
            self._judge_round(self.rounds, final=True)
            for arm, _ in self._promoted:  # promoted, but the run ended before they were measured in full
                finding = self.findings[self._arms[arm][0].finding_index]
                if finding.experiment is None:
                    exp = self._screened[arm]
                    exp.verified, exp.verdict = False, Verdict.NOT_CONFIRMED
                    exp.reason = "screened in one short window; the run ended before it was measured in full"
                    finding.experiment = exp
        if self.recommended is None and self._winners and kind in (FIXES, CONFIRM):
            self.recommended = judge.recommend(self._winners, None if len(self._winners) == 1 else
                                               "was not measured (the run ended first)",
                                               budget=self._fit_budget, notes=self.notes)
        for candidate in {c.finding_index: c for c, _ in self._arms.values() if c.finding_index is not None}.values():
            finding = self.findings[candidate.finding_index]
            if finding.experiment is None and candidate not in self.fresh:
                finding.experiment = Experiment.not_measured("the run ended before this fix was measured")


def _arm_lines(results, arm: str) -> list[dict]:
    """The child's lines of `arm`'s windows in these rounds."""
    return [line for result in results for line in result.windows if line["arm"] == arm]
