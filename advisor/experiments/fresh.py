"""The fresh-run scheduler: each measurement a new child run of the script with the fix applied
from its first step (no profiler, so every step is clean).

Used where a fix cannot be switched in the live process, under ``--fresh-runs``, and for
``--confirm``. The baseline is re-measured between candidates (B C1 B C2 B ...) and each candidate
is judged against the runs on either side of it; an apparent winner is run once more (C B) and
the two passes must agree (:func:`advisor.experiments.judge.confirm`). Knobs whose best value is
not knowable in advance are swept, stopping as soon as a step up stops paying.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import pandas as pd

from .. import overrides as vocabulary
from ..overrides.cores import cores_per_rank
from ..run_dir.interrupt import Interrupted, StopRequest, describe
from ..model import Applicability, Experiment, Finding, Recommendation, Verdict
from ..probe.runner import ProbeConfig, run_probe
from ..profile import Profile
from ..run_dir.layout import make_subdir
from ..run_dir.seen import Env
from . import judge
from .judge import ExperimentResults, Measurement, by_samples
from .plan import Candidate, candidates_from, say_why_untried, sweep_points
from .sizing import batch_window, burst_steps, warmup_steps, window_steps


@dataclass
class Budget:
    """Stops experiments when the count or the time runs out; says why."""

    max_experiments: int
    time_budget_s: float
    started: float = field(default_factory=time.monotonic)
    used: int = 0

    def allows(self, runs_needed: int, per_run_s: float) -> bool:
        return self.used < self.max_experiments and self.has_time(runs_needed, per_run_s)

    def has_time(self, runs_needed: int, per_run_s: float) -> bool:
        return time.monotonic() - self.started + runs_needed * per_run_s <= self.time_budget_s


class ExperimentProgress(Protocol):
    """What the experiments tell the terminal (its ProbeProgress); :class:`Progress` says nothing."""

    def experiment(self, label: str, index: int, total: int) -> None: ...

    def update(self, phase: str, done: int, total: int) -> None: ...


class Progress:
    """Names the experiment running and how many remain (terminal renderer plugs in here)."""

    def experiment(self, label: str, index: int, total: int) -> None:  # pragma: no cover - UI
        pass

    def update(self, phase: str, done: int, total: int) -> None:  # pragma: no cover - UI
        pass


def _slug(label: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in label.lower())
    return "-".join(filter(None, keep.split("-")))[:60]


class Runner:
    """Runs probe children for the experiments and keeps their run dirs under `root`."""

    def __init__(self, base: ProbeConfig, root: Path, progress: ExperimentProgress | None, budget: Budget,
                 stop: StopRequest | None = None, workers: int = 0, profiled: pd.DataFrame | None = None,
                 pacing: int | None = None) -> None:
        self.asked = base.steps  # the steps the user asked for
        # Each run times at least half a second at the profiled run's pace (sizing.window_steps).
        self.base = base if profiled is None else replace(base, steps=window_steps(base.steps, profiled))
        self.workers = workers  # the script's own loader workers
        self.pacing = workers if pacing is None else pacing  # those whose bursts pace its steps (sizing.pacing_workers)
        self.root = root  # the pipeline's make_subdir(run dir, "experiments"): checked there
        root.mkdir(parents=True, exist_ok=True)
        self.progress = progress or Progress()
        self.budget = budget
        self.stop = stop
        self.counter = 0
        self.per_run_s = 0.0
        self.escaped = 0  # processes outside the script's group that experiment runs left: killed
        self.log: list[dict] = []  # every child run: label, status, wall_s, run_dir
        self.baselines: list[Measurement] = []  # every baseline run, in order

    def measure(self, label: str, overrides: dict) -> Measurement:
        if self.stop:  # asked to stop between two runs: start no other
            raise Interrupted(self.stop.signum)
        self.counter += 1
        # made here, not by the child: a symlink planted under the run dir while it runs is refused
        run_dir = make_subdir(self.root, f"{self.counter:02d}-{_slug(label) or 'baseline'}")
        # A fresh child is a plain run: it must not wait for an arms plan after its window. Its
        # loader's first burst is drained untimed, and its window holds enough bursts (sizing.py).
        config = replace(self.base, out=run_dir, overrides=overrides, profile_steps=0, arms=False,
                         warmup=self.base.warmup + warmup_steps(overrides, self.workers, base=0),
                         steps=burst_steps(batch_window(self.base.steps, self.asked, overrides), overrides, self.pacing))
        run = run_probe(config, self.progress, self.stop)
        self.escaped += run.escaped
        if run.status == "interrupted":  # a stop signal ends the experiments, not just this run
            self.log.append({"label": label, "overrides": overrides, "status": run.status, "wall_s": run.wall_s,
                             "run_dir": str(run_dir), "applied": {}})
            raise Interrupted(run.signal)
        profile = Profile.from_run_dir(run_dir, run.suffix)
        self.per_run_s = max(self.per_run_s, run.wall_s)
        applied, mem = run.probe.applied, run.probe.memory
        self.log.append({"label": label, "overrides": overrides, "status": run.status, "wall_s": run.wall_s,
                         "run_dir": str(run_dir), "applied": applied})
        error = run.probe.error
        return Measurement(label, overrides, run.status, run_dir, profile.steps, run.wall_s, error, applied,
                           mem.peak_memory_bytes, mem.memory_basis,
                           "out of memory" in str(error or "").lower())

    def pair(self, label: str, overrides: dict) -> Measurement:
        """The candidate, then the baseline again after it (C B); returns the candidate's run."""
        cand = self.measure(label, overrides)
        self.progress.experiment("re-measuring the baseline", 1, 1)
        self.baselines.append(self.measure("baseline", {}))
        return cand


def run_experiments(findings: list[Finding], base: ProbeConfig, baseline_steps: pd.DataFrame, *, root: Path,
                    env: Env, io_like: bool = False, safe_only: bool = False, max_experiments: int = 12,
                    time_budget_s: float = 900.0, progress: ExperimentProgress | None = None,
                    stop: StopRequest | None = None, only: list[int] | None = None, workers: int = 0,
                    pacing: int | None = None) -> ExperimentResults:
    """Measure every automatic fix, sweep the knobs that need it, then stack the winners.

    With `only` (finding indices), just those findings' fixes are measured. `workers`: the script's
    own DataLoader workers (:func:`sizing.script_workers`), `pacing` those whose bursts pace its steps
    (:func:`sizing.pacing_workers`, all by default): they size a fresh run's window. The findings are filled
    in place (`experiment`, and a swept winner becomes the fix). A stop signal (`stop`, or Ctrl-C's
    KeyboardInterrupt) ends the running child cleanly and returns what was measured so far, with
    `interrupted` set.
    """
    notes: list[str] = []
    candidates = candidates_from(findings, safe_only)
    if only is not None:  # the fixes the in-process arms could not switch (the rest are measured already)
        candidates = [c for c in candidates if c.finding_index in only]
    else:
        say_why_untried(findings, candidates, safe_only)
    if not candidates:
        return ExperimentResults(findings, None, notes, [])
    runner = Runner(base, root, progress, Budget(max_experiments, time_budget_s), stop, workers, baseline_steps, pacing)
    try:
        ctx = vocabulary.SweepContext(cores_per_rank(env), io_like, script_workers=workers, threads=env.torch_threads)
        recommended = _measure_all(findings, candidates, runner, by_samples(baseline_steps), ctx, notes)
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", None) or (stop.signum if stop else None)
        left = [c for c in candidates if c.finding(findings).experiment is None]
        for candidate in left:
            candidate.finding(findings).experiment = Experiment.not_measured(
                f"the experiments were interrupted ({describe(signum)}) before this fix was measured")
        runs = len(runner.log)
        notes.append(f"experiments interrupted ({describe(signum)}) after {runs} run{'' if runs == 1 else 's'}: "
                     f"{len(candidates) - len(left)} of {len(candidates)} fixes measured")
        return ExperimentResults(findings, None, _escaped_note(runner, notes), runner.log,
                                 interrupted=signum or signal.SIGINT)
    return ExperimentResults(findings, recommended, _escaped_note(runner, notes), runner.log)


def confirm_recommendation(rec: Recommendation, base: ProbeConfig, baseline_steps: pd.DataFrame, *, root: Path,
                           progress: ExperimentProgress | None = None, stop: StopRequest | None = None,
                           pairs: int = 2, workers: int = 0, pacing: int | None = None) -> tuple[Experiment, list[dict]]:
    """`--confirm`: the recommendation as the user will apply it, in fresh runs of the script
    interleaved with the baseline (B R B R B), judged as every fresh-run experiment is.

    The in-process arms measured it inside the profiled run; this measures it the way the user
    will see it, start-up and all. Returns the result and the child runs.
    """
    runner = Runner(base, root, progress, Budget(2 * pairs + 1, float("inf")), stop, workers, baseline_steps, pacing)
    check_loss = rec.applicability is not Applicability.SAFE
    try:
        baselines, cands = [runner.measure("confirm-baseline", {})], []
        for k in range(pairs):
            runner.progress.experiment(f"confirming the recommendation in fresh runs ({k + 1} of {pairs})", k + 1, pairs)
            cands.append(runner.measure("confirm-recommended", rec.overrides))
            baselines.append(runner.measure("confirm-baseline", {}))
    except KeyboardInterrupt:
        return Experiment.not_measured("the confirmation was interrupted"), runner.log
    return judge.compare(baselines, cands, by_samples=by_samples(baseline_steps), check_loss=check_loss,
                         loads_in_process=runner.workers == 0), runner.log


def _escaped_note(runner: Runner, notes: list[str]) -> list[str]:
    if runner.escaped:
        notes.append(f"experiment runs left {runner.escaped} process{'es' if runner.escaped > 1 else ''} running "
                     "outside the script's process group (start_new_session); killed")
    return notes


def _measure_all(findings: list[Finding], candidates: list[Candidate], runner: Runner, samples: bool,
                 ctx: vocabulary.SweepContext, notes: list[str]) -> Recommendation | None:
    """The baseline, each candidate (swept, confirmed) between baselines, then the stacked winners."""
    budget = runner.budget
    runner.progress.experiment("measuring the baseline without the profiler", 0, len(candidates))
    runner.baselines = [runner.measure("baseline", {})]
    winners: list[tuple[Candidate, Experiment]] = []
    fitting: list[tuple[Candidate, Experiment, int]] = []  # memory fixes that bring an over-budget run within it
    planned = sum(len(sweep_points(c, ctx)) for c in candidates)
    done = 0

    for candidate in candidates:
        finding = candidate.finding(findings)
        changes_batch = vocabulary.changes_batch(candidate.overrides)
        if changes_batch and not samples:
            finding.experiment = Experiment.not_measured("the batch size is unknown, so samples/s cannot be compared")
            continue
        memory_budget = judge.usable_budget(finding.evidence)
        best, runs_of, tried = None, {}, []
        for point in sweep_points(candidate, ctx):
            if not budget.allows(2, runner.per_run_s):
                notes.append(f"experiment budget reached before '{point.label}'")
                break
            done += 1
            runner.progress.experiment(f"{point.label} ({done} of at most {planned})", done, planned)
            cand = runner.pair(point.label, point.overrides)
            budget.used += 1
            result = judge.compare(runner.baselines[-2:], cand, by_samples=samples, check_loss=candidate.changes_numerics,
                                   loads_in_process=runner.workers == 0)
            runs_of[id(result)] = (runner.baselines[-2:], [cand])
            tried.append((point, result))
            if changes_batch and memory_budget and not judge.fits(result, memory_budget):
                break  # out of memory or over the budget: a larger batch will not fit either
            if judge.better(best, result):
                best = result
            elif len(tried) > 1:
                break  # a step up stopped paying: stop the sweep early
            if (result.verdict == Verdict.FAILED and changes_batch) or (result.verdict == Verdict.NOT_APPLIED and len(tried) == 1):
                break  # out of memory, or the knob does not reach this script: other values will not either
            # One failed value (a port still held, a flaky start) does not end the sweep: the next may measure.
        if not tried:
            finding.experiment = Experiment.not_measured("experiment budget exhausted")
            continue
        _, chosen = judge.sweep_winner(tried, memory_budget)  # the in-process arms' choice too
        if chosen.verified:
            chosen = _confirm(runner, candidate, chosen, runs_of[id(chosen)], samples, notes)
        chosen.sweep = [judge.sweep_row(p, e, memory_budget) for p, e in tried] if len(tried) > 1 else None
        judge.settle(finding, candidate, chosen, memory_budget, winners, fitting)

    winners, fit_budget = judge.with_fastest_fit(winners, fitting)
    stacked: Experiment | None = None
    if len(winners) > 1 and budget.allows(2, runner.per_run_s):
        together = judge.stacked_candidate(winners)
        runner.progress.experiment("all winners stacked: " + together.label, 1, 1)
        cand = runner.pair("stacked", together.overrides)
        stacked = judge.compare(runner.baselines[-2:], cand, by_samples=samples, check_loss=together.changes_numerics,
                                loads_in_process=runner.workers == 0)
    return judge.recommend(winners, stacked, budget=fit_budget, notes=notes)


def _confirm(runner: Runner, candidate: Candidate, first: Experiment, first_runs: tuple[list, list], samples: bool,
             notes: list[str]) -> Experiment:
    """Measure an apparent winner once more (C B) before calling it verified: one lucky run pair on a
    shared machine can look faster; the pooled interval (all the baselines around both) must still
    clear the bar and the two passes must agree."""
    if not runner.budget.has_time(2, runner.per_run_s):
        notes.append(f"no time to confirm '{candidate.label}': it rests on one candidate run")
        return first
    before = runner.baselines[-1]
    runner.progress.experiment(f"{candidate.label}: confirming with a second run", 1, 1)
    cand = runner.pair(candidate.label + " (confirmation)", first.overrides or {})  # a verified result names them
    after = runner.baselines[-1]
    return judge.pool([first_runs, ([before, after], [cand])], by_samples=samples, check_loss=candidate.changes_numerics,
                      loads_in_process=runner.workers == 0)
