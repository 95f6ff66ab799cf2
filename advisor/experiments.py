"""Re-run the script with each automatic fix injected and measure the real speedup.

Each experiment is a fresh child run of the same probe (no profiler, so every step is
clean) with one Fix's override. Noise is handled, not ignored: the baseline is re-measured
between candidates (B C1 B C2 B ...), and each candidate is compared with the baseline runs
on either side of it. The speedup is a throughput ratio (samples/s, so a bigger batch is
judged fairly) with a bootstrap confidence interval over per-step times; a fix is
``verified`` only when the whole interval lies above 1. Fixes that change numerics must
also keep the loss finite and close to the baseline's.

Where the best value is not knowable in advance (DataLoader workers, batch size) the
experiment sweeps it, stopping as soon as a step up stops paying. The winners are then
stacked into one recommended configuration and measured together against the baseline.
"""

from __future__ import annotations

import math
import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from . import memory, metrics
from . import overrides as vocabulary
from .interrupt import Interrupted, StopRequest, describe
from .model import VERIFY_MIN_GAIN, Applicability, Experiment, Finding, Recommendation, Verdict
from .probe.runner import ProbeConfig, run_probe
from .profile import Profile
from .stats import baseline_drift, speedup_ci

MIN_GAIN = 0.05        # a sweep step must add 5% over the best so far to go on
MIN_EFFECT = VERIFY_MIN_GAIN  # verified needs the interval's low end above 1 + max(3%, baseline drift)
LOSS_REL_TOL = 0.10    # numerics: mean loss within 10% of the baseline's ...
LOSS_SEM_K = 3.0       # ... or within 3 standard errors, whichever is wider


@dataclass
class Candidate:
    """One override to measure, and the finding it answers (None for the stacked run)."""

    label: str
    overrides: dict
    applicability: Applicability = Applicability.SAFE
    finding_index: int | None = None

    def __post_init__(self):
        self.applicability = Applicability(self.applicability)

    @property
    def changes_numerics(self) -> bool:
        """Not a safe fix: its loss must stay finite and close to the baseline's."""
        return self.applicability is not Applicability.SAFE


@dataclass
class Measurement:
    label: str
    overrides: dict
    status: str
    run_dir: Path
    steps: pd.DataFrame
    wall_s: float
    error: str | None = None
    applied: dict = field(default_factory=dict)  # what the child says took effect (probe.json)
    peak_memory_bytes: int | None = None  # the measurement's own peak (see advisor.memory)
    memory_basis: str | None = None
    oom: bool = False  # it ran out of memory

    @property
    def ok(self) -> bool:
        return self.status == "ok" and not self.steps.empty



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


class Progress:
    """Names the experiment running and how many remain (terminal renderer plugs in here)."""

    def experiment(self, label: str, index: int, total: int) -> None:  # pragma: no cover - UI
        pass

    def update(self, phase: str, done: int, total: int) -> None:  # pragma: no cover - UI
        pass


# statistics ---------------------------------------------------------------------------------

def loss_check(baseline: list[pd.DataFrame], candidate: pd.DataFrame) -> dict:
    """Finite and close: the candidate's mean loss within tolerance of the baseline's."""
    b = pd.concat([f["loss"] for f in baseline if "loss" in f]).dropna().to_numpy(float) if baseline else np.array([])
    c = candidate["loss"].dropna().to_numpy(float) if "loss" in candidate else np.array([])
    flags = candidate["loss_finite"].dropna() if "loss_finite" in candidate else pd.Series(dtype=bool)
    if len(flags) and not flags.astype(bool).all():
        return {"checked": True, "finite": False, "passed": False, "rule": "the loss must stay finite"}
    if len(b) < 2 or len(c) < 2:
        return {"checked": False, "reason": "loss not visible to the probe", "passed": None}
    finite = bool(np.isfinite(c).all())
    b_mean, c_mean = float(b.mean()), float(c[np.isfinite(c)].mean()) if finite else float("nan")
    sem = math.sqrt(b.var(ddof=1) / len(b) + c.var(ddof=1) / len(c)) if finite else float("nan")
    tol = max(LOSS_REL_TOL * abs(b_mean), LOSS_SEM_K * sem) if finite else float("nan")
    passed = finite and abs(c_mean - b_mean) <= tol
    return {"checked": True, "finite": finite, "baseline_mean": b_mean, "candidate_mean": c_mean,
            "tolerance": tol, "rule": f"finite, and |mean difference| <= max({LOSS_REL_TOL:.0%} of baseline, {LOSS_SEM_K:g} SE)",
            "passed": bool(passed)}


# running ------------------------------------------------------------------------------------

def _slug(label: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in label.lower())
    return "-".join(filter(None, keep.split("-")))[:60]


class Runner:
    """Runs probe children for the experiments and keeps their run dirs under `root`."""

    def __init__(self, base: ProbeConfig, root: Path, progress: Progress | None, budget: Budget,
                 stop: StopRequest | None = None):
        self.base = base
        self.root = root
        self.progress = progress or Progress()
        self.budget = budget
        self.stop = stop
        self.counter = 0
        self.per_run_s = 0.0
        self.escaped = 0  # processes outside the script's group that experiment runs left: killed
        self.log: list[dict] = []  # every child run: label, status, wall_s, run_dir

    def measure(self, label: str, overrides: dict) -> Measurement:
        if self.stop:  # asked to stop between two runs: start no other
            raise Interrupted(self.stop.signum)
        self.counter += 1
        run_dir = self.root / f"{self.counter:02d}-{_slug(label) or 'baseline'}"
        # A fresh child is a plain run: it must not wait for an arms plan after its window.
        config = replace(self.base, out=run_dir, overrides=overrides, profile_steps=0, arms=False)
        run = run_probe(config, self.progress, self.stop)
        self.escaped += run.escaped
        if run.status == "interrupted":  # a stop signal ends the experiments, not just this run
            self.log.append({"label": label, "overrides": overrides, "status": run.status, "wall_s": run.wall_s,
                             "run_dir": str(run_dir), "applied": {}})
            raise Interrupted(run.signal)
        profile = Profile.from_run_dir(run_dir, run.suffix)
        self.per_run_s = max(self.per_run_s, run.wall_s)
        applied = run.probe.get("applied") or {}
        mem = run.probe.get("memory") or {}
        self.log.append({"label": label, "overrides": overrides, "status": run.status, "wall_s": run.wall_s,
                         "run_dir": str(run_dir), "applied": applied})
        error = run.probe.get("error")
        return Measurement(label, overrides, run.status, run_dir, profile.steps, run.wall_s, error, applied,
                           mem.get("peak_memory_bytes"), mem.get("memory_basis"),
                           "out of memory" in str(error or "").lower())


def _compare(base_runs: list[Measurement], cand_runs: list[Measurement] | Measurement, *, by_samples: bool,
             check_loss: bool) -> Experiment:
    """Judge candidate run(s) against the baseline runs measured around them."""
    cand_runs = [cand_runs] if isinstance(cand_runs, Measurement) else cand_runs
    ok_base = [m.steps for m in base_runs if m.ok]
    ok_cand = [m for m in cand_runs if m.ok]
    result = Experiment(Verdict.FAILED, baseline=_pool_summary(base_runs), candidate=_pool_summary(cand_runs),
                        overrides=cand_runs[0].overrides, measured_by="fresh-run")
    if len(ok_cand) < len(cand_runs) or not ok_base:
        failed = next((m for m in cand_runs if not m.ok), None)
        result.error = (failed.error if failed else None) or "the baseline could not be re-measured"
        result.oom = True if failed is not None and failed.oom else None
        return result
    result.not_applied = sorted({key for m in ok_cand for key in vocabulary.not_applied(m.overrides, m.applied)}) or None
    ratio, lo, hi = speedup_ci(ok_base, [m.steps for m in ok_cand], by_samples=by_samples)
    drift = baseline_drift(ok_base, by_samples)
    result.speedup, result.ci_low, result.ci_high, result.baseline_drift_frac = ratio, lo, hi, drift
    result.memory_change_frac = memory.change_frac((result.baseline or {}).get("peak_memory_bytes"),
                                                   (result.candidate or {}).get("peak_memory_bytes"))
    if check_loss:
        result.loss_check = loss_check(ok_base, pd.concat([m.steps for m in ok_cand], ignore_index=True))
    loss_ok = not check_loss or result.loss_check["passed"] is not False
    if result.not_applied:  # the child says the fix never took effect: whatever was measured is noise
        result.verdict = Verdict.NOT_APPLIED
    elif lo > 1.0 + max(MIN_EFFECT, drift) and loss_ok:
        result.verified, result.verdict = True, Verdict.FASTER
    elif hi < 1.0 - max(MIN_EFFECT, drift):
        result.verdict = Verdict.SLOWER
    elif not loss_ok:
        result.verdict = Verdict.LOSS_CHANGED
    else:
        result.verdict = Verdict.NO_CHANGE
    return result


def fits_over_budget(finding: Finding, exp: Experiment) -> bool:
    """A run over its memory budget, and a fix measured to bring its peak within it (numerics kept,
    the fix applied): the user needs one such fix whatever it costs in speed."""
    budget, peak = finding.evidence.get("budget_bytes"), finding.evidence.get("peak_memory_bytes")
    cand = (exp.candidate or {}).get("peak_memory_bytes")
    return (bool(budget and peak and peak > budget) and cand is not None and cand <= budget and exp.measured
            and exp.verdict not in (Verdict.FAILED, Verdict.LOSS_CHANGED, Verdict.NOT_APPLIED))


def with_fastest_fit(winners: list, fitting: list) -> tuple[list, int | None]:
    """The winners to stack, plus the fastest fix that fits the memory budget when the run was over
    it (and no winner is a fix that fits already); the budget it was chosen for, else None."""
    if not fitting:
        return winners, None
    if any(c is f for f, _, _ in fitting for c, _ in winners):
        return winners, next(b for f, _, b in fitting if any(c is f for c, _ in winners))
    candidate, exp, budget = max(fitting, key=lambda f: f[1].speedup or 0.0)
    return [*winners, (candidate, exp)], budget


def _confirm(runner: "Runner", label: str, first: Experiment, first_runs: tuple[list, list], baselines: list[Measurement],
             *, by_samples: bool, check_loss: bool, notes: list[str]) -> Experiment:
    """Measure an apparent winner once more (C B) before calling it verified.

    One lucky run pair on a shared machine can look faster; a fix is verified only when a
    second pair agrees and the pooled interval (all four baselines) still clears the bar.
    """
    if not runner.budget.has_time(2, runner.per_run_s):
        notes.append(f"no time to confirm '{label}': it rests on one candidate run")
        return first
    before = baselines[-1]
    runner.progress.experiment(f"{label}: confirming with a second run", 1, 1)
    cand = runner.measure(label + " (confirmation)", first.overrides)
    runner.progress.experiment("re-measuring the baseline", 1, 1)
    after = runner.measure("baseline", {})
    baselines.append(after)
    second = _compare([before, after], cand, by_samples=by_samples, check_loss=check_loss)
    base_runs = [m for i, m in enumerate(first_runs[0] + [before, after])
                 if not any(m is other for other in (first_runs[0] + [before])[:i])]
    pooled = _compare(base_runs, first_runs[1] + [cand], by_samples=by_samples, check_loss=check_loss)
    pooled.runs = [{"speedup": r.speedup, "ci_low": r.ci_low, "ci_high": r.ci_high} for r in (first, second)]
    if pooled.verified and not second.verified:
        pooled.verified, pooled.verdict = False, Verdict.NOT_CONFIRMED
    return pooled


def _pool_summary(runs: list[Measurement]) -> dict:
    ok = [m for m in runs if m.ok]
    if not ok:
        return {"runs": len(runs), "samples_per_s": None}
    steps = pd.concat([m.steps for m in ok], ignore_index=True)
    tp = metrics.throughput(steps)
    peaks = [m.peak_memory_bytes for m in ok if m.peak_memory_bytes]
    return {"runs": len(ok), "samples_per_s": tp["samples_per_s"], "steps_per_s": tp["steps_per_s"],
            "step_time_median_s": tp["step_time_median_s"], "run_dirs": [str(m.run_dir) for m in ok],
            "peak_memory_bytes": max(peaks) if peaks else None,
            "memory_basis": next((m.memory_basis for m in ok if m.memory_basis), None)}


def _better(a: Experiment | None, b: Experiment) -> bool:
    """Does sweep point `b` beat the best so far `a` by a real margin?"""
    if b.speedup is None or not b.verified:
        return False
    return a is None or b.speedup >= a.speedup * (1 + MIN_GAIN)


def candidates_from(findings: list[Finding], safe_only: bool) -> list[Candidate]:
    """One candidate per distinct automatic fix; unsafe ones only when allowed."""
    out, seen = [], set()
    for i, finding in enumerate(findings):
        fix = finding.fix
        if not fix.automatic or not fix.overrides:
            continue
        if safe_only and fix.applicability is not Applicability.SAFE:
            continue
        key = repr(sorted(fix.overrides.items()))
        if key in seen:
            continue
        seen.add(key)
        label = f"{finding.rule} ({vocabulary.describe(fix.overrides)})" if finding.screen else finding.rule or f"fix {i}"
        out.append(Candidate(label, fix.overrides, fix.applicability, i))
    return out


def _say_why_untried(findings: list[Finding], candidates: list[Candidate], safe_only: bool) -> None:
    """An automatic fix the experiments did not try gets a `not-measured` experiment saying why
    (a manual fix keeps none: there is nothing to inject)."""
    tried = {repr(sorted(c.overrides.items())): findings[c.finding_index] for c in candidates}
    for finding in findings:
        fix = finding.fix
        if finding.experiment is not None or not fix.automatic or not fix.overrides:
            continue
        other = tried.get(repr(sorted(fix.overrides.items())))
        if other is finding:
            continue  # a candidate: the experiments measure it
        if safe_only and fix.applicability is not Applicability.SAFE:
            reason = "--safe-only: this fix may change numerics, so it was not tried"
        elif other is not None:
            reason = f"the same change as {other.code or other.rule}'s fix, measured there"
        else:
            reason = "not tried"
        finding.experiment = Experiment.not_measured(reason)


def _sweep_points(candidate: Candidate, ctx: vocabulary.SweepContext) -> list[Candidate]:
    """The values to try for knobs whose best value can't be known in advance (the vocabulary's ladders)."""
    points = vocabulary.sweep(candidate.overrides, ctx)
    if len(points) == 1:
        return [candidate]
    return [Candidate(f"{candidate.label} ({_changed(candidate.overrides, p)})", p, candidate.applicability,
                      candidate.finding_index) for p in points]


def _changed(original: dict, point: dict) -> str:
    """`num_workers=4`: what a sweep point sets differently from the rule's proposal (or the point itself)."""
    for key, value in point.items():
        if isinstance(value, dict):
            diff = {k: v for k, v in value.items() if k == "num_workers" or original.get(key, {}).get(k) != v}
            return vocabulary.describe({key: diff})
        if key in original and original[key] != value or key == "batch_size_scale":
            return vocabulary.describe({key: value})
    return vocabulary.describe(point)


@dataclass
class ExperimentResults:
    """Findings with `experiment` filled, the stacked recommendation, and every child run."""

    findings: list[Finding]
    recommended: Recommendation | None
    notes: list[str]
    runs: list[dict]
    interrupted: int | None = None  # the signal that cut the experiments short (what ran is kept)
    screened: list[Finding] = field(default_factory=list)  # screened fixes left out: not verified faster

    def summary(self) -> dict:
        """report.json's `experiments` block: what was run and what it cost, and the screened fixes
        left out of the findings (`screened`: each fix, its verdict and speedup)."""
        screened = [{"fix": f.fix.title, "overrides": f.fix.overrides,
                     "verdict": f.experiment.verdict.value if f.experiment else Verdict.NOT_MEASURED.value,
                     "speedup": f.experiment.speedup if f.experiment else None,
                     "ci_low": f.experiment.ci_low if f.experiment else None,
                     "ci_high": f.experiment.ci_high if f.experiment else None,
                     "baseline_drift_frac": f.experiment.baseline_drift_frac if f.experiment else None,
                     "reason": f.experiment.reason if f.experiment else None} for f in self.screened]
        return {"runs": self.runs, "n_runs": len(self.runs), "child_wall_s": sum(r["wall_s"] for r in self.runs),
                "screened": screened}


def run_experiments(findings: list[Finding], base: ProbeConfig, baseline_steps: pd.DataFrame, *, root: Path,
                    env: dict, io_like: bool = False, safe_only: bool = False, max_experiments: int = 12,
                    time_budget_s: float = 900.0, progress: Progress | None = None,
                    stop: StopRequest | None = None, only: list[int] | None = None) -> ExperimentResults:
    """Measure every automatic fix, sweep the knobs that need it, then stack the winners.

    With `only` (finding indices), just those findings' fixes are measured. The findings are filled in place (`experiment`, and a swept winner becomes the fix). A stop
    signal (`stop`, or Ctrl-C's KeyboardInterrupt) ends the running child cleanly and returns
    what was measured so far, with `interrupted` set.
    """
    notes: list[str] = []
    candidates = candidates_from(findings, safe_only)
    if only is not None:  # the fixes the in-process arms could not switch (the rest are measured already)
        candidates = [c for c in candidates if c.finding_index in only]
    else:
        _say_why_untried(findings, candidates, safe_only)
    if not candidates:
        return ExperimentResults(findings, None, notes, [])
    budget = Budget(max_experiments, time_budget_s)
    runner = Runner(base, root, progress, budget, stop)
    try:
        recommended = _measure_all(findings, candidates, runner, baseline_steps, env, io_like, notes)
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", None) or (stop.signum if stop else None)
        left = [c for c in candidates if findings[c.finding_index].experiment is None]
        for candidate in left:
            findings[candidate.finding_index].experiment = Experiment.not_measured(
                f"the experiments were interrupted ({describe(signum)}) before this fix was measured")
        runs = len(runner.log)
        notes.append(f"experiments interrupted ({describe(signum)}) after {runs} run{'' if runs == 1 else 's'}: "
                     f"{len(candidates) - len(left)} of {len(candidates)} fixes measured")
        return ExperimentResults(findings, None, _escaped_note(runner, notes), runner.log,
                                 interrupted=signum or signal.SIGINT)
    return ExperimentResults(findings, recommended, _escaped_note(runner, notes), runner.log)


def confirm_recommendation(rec: Recommendation, base: ProbeConfig, baseline_steps: pd.DataFrame, *, root: Path,
                           progress: Progress | None = None, stop: StopRequest | None = None,
                           pairs: int = 2) -> tuple[Experiment, list[dict]]:
    """`--confirm`: the recommendation as the user will apply it, in fresh runs of the script
    interleaved with the baseline (B R B R B), judged as every fresh-run experiment is.

    The in-process arms measured it inside the profiled run; this measures it the way the user
    will see it, start-up and all. Returns the result and the child runs.
    """
    by_samples = bool(baseline_steps["samples"].notna().all()) if "samples" in baseline_steps and len(baseline_steps) else False
    runner = Runner(base, root, progress, Budget(2 * pairs + 1, float("inf")), stop)
    check_loss = Applicability(rec.applicability) is not Applicability.SAFE
    try:
        baselines, cands = [runner.measure("confirm-baseline", {})], []
        for k in range(pairs):
            runner.progress.experiment(f"confirming the recommendation in fresh runs ({k + 1} of {pairs})", k + 1, pairs)
            cands.append(runner.measure("confirm-recommended", rec.overrides))
            baselines.append(runner.measure("confirm-baseline", {}))
    except KeyboardInterrupt:
        return Experiment.not_measured("the confirmation was interrupted"), runner.log
    return _compare(baselines, cands, by_samples=by_samples, check_loss=check_loss), runner.log


def _escaped_note(runner: Runner, notes: list[str]) -> list[str]:
    if runner.escaped:
        notes.append(f"experiment runs left {runner.escaped} process{'es' if runner.escaped > 1 else ''} running "
                     "outside the script's process group (start_new_session); killed")
    return notes


def _measure_all(findings: list[Finding], candidates: list[Candidate], runner: Runner, baseline_steps: pd.DataFrame,
                 env: dict, io_like: bool, notes: list[str]) -> Recommendation | None:
    """The baseline, each candidate (swept, confirmed) between baselines, then the stacked winners."""
    budget = runner.budget
    by_samples = bool(baseline_steps["samples"].notna().all()) if "samples" in baseline_steps and len(baseline_steps) else False
    runner.progress.experiment("measuring the baseline without the profiler", 0, len(candidates))
    baselines = [runner.measure("baseline", {})]
    ctx = vocabulary.SweepContext(vocabulary.cores_per_rank(env), io_like)
    winners: list[tuple[Candidate, Experiment]] = []
    fitting: list[tuple[Candidate, Experiment, int]] = []  # memory fixes that bring an over-budget run within it
    planned = sum(len(_sweep_points(c, ctx)) for c in candidates)
    done = 0

    for candidate in candidates:
        finding = findings[candidate.finding_index]
        changes_batch = "batch_size_scale" in candidate.overrides
        if changes_batch and not by_samples:
            finding.experiment = Experiment.not_measured("the batch size is unknown, so samples/s cannot be compared")
            continue
        check_loss = candidate.changes_numerics
        memory_budget = finding.evidence.get("budget_bytes")
        best, sweep, runs_of, tried = None, [], {}, []
        for point in _sweep_points(candidate, ctx):
            if not budget.allows(2, runner.per_run_s):
                notes.append(f"experiment budget reached before '{point.label}'")
                break
            done += 1
            runner.progress.experiment(f"{point.label} ({done} of at most {planned})", done, planned)
            cand = runner.measure(point.label, point.overrides)
            runner.progress.experiment("re-measuring the baseline", done, planned)
            baselines.append(runner.measure("baseline", {}))
            budget.used += 1
            result = _compare(baselines[-2:], cand, by_samples=by_samples, check_loss=check_loss)
            runs_of[id(result)] = (baselines[-2:], [cand])
            tried.append(result)
            sweep.append({"label": point.label, "overrides": point.overrides, "speedup": result.speedup,
                          "ci_low": result.ci_low, "ci_high": result.ci_high, "verdict": result.verdict.value,
                          "peak_memory_bytes": (result.candidate or {}).get("peak_memory_bytes"),
                          **({"oom": True} if result.oom else {})})
            result.memory_budget_bytes = memory_budget
            if changes_batch and memory_budget:
                peak = sweep[-1]["peak_memory_bytes"]
                sweep[-1]["fits"] = result.verdict is not Verdict.FAILED and peak is not None and peak <= memory_budget
                if not sweep[-1]["fits"]:
                    break  # out of memory or over the budget: a larger batch will not fit either
            if _better(best, result):
                best = result
            elif len(sweep) > 1:
                break  # a step up stopped paying: stop the sweep early
            if (result.verdict == Verdict.FAILED and changes_batch) or (result.verdict == Verdict.NOT_APPLIED and len(sweep) == 1):
                break  # out of memory, or the knob does not reach this script: other values will not either
            # One failed value (a port still held, a flaky start) does not end the sweep: the next may measure.
        if not sweep:
            finding.experiment = Experiment.not_measured("experiment budget exhausted")
            continue
        if best is not None:
            best = _confirm(runner, candidate.label, best, runs_of[id(best)], baselines, by_samples=by_samples,
                            check_loss=check_loss, notes=notes)
        # Nothing verified: report the first value that ran honestly (a failed one only if all failed).
        chosen = best or next((t for t in tried if t.verdict != Verdict.FAILED), tried[0])
        chosen.sweep = sweep if len(sweep) > 1 else None
        chosen.memory_budget_bytes = memory_budget
        chosen.applicability = candidate.applicability.value
        finding.experiment = chosen
        if best is not None and best.verified:
            winners.append((candidate, best))
            finding.fix.adopt(best.overrides)
        if fits_over_budget(finding, chosen):
            fitting.append((candidate, chosen, finding.evidence["budget_bytes"]))

    winners, fit_budget = with_fastest_fit(winners, fitting)
    if not winners:
        return None
    rec = _stack(winners, runner, baselines, by_samples, budget, notes)
    rec.memory_budget_bytes = fit_budget
    return rec


def _stack(winners: list[tuple[Candidate, Experiment]], runner: Runner, baselines, by_samples, budget: Budget,
           notes) -> Recommendation:
    overrides = vocabulary.merge(*(result.overrides for _, result in winners))
    candidates = [candidate for candidate, _ in winners]
    labels = [candidate.label for candidate in candidates]
    unsafe = any(candidate.changes_numerics for candidate in candidates)
    if len(winners) == 1:
        result = winners[0][1]
    elif budget.allows(2, runner.per_run_s):
        runner.progress.experiment("all winners stacked: " + " + ".join(labels), 1, 1)
        cand = runner.measure("stacked", overrides)
        runner.progress.experiment("re-measuring the baseline", 1, 1)
        baselines.append(runner.measure("baseline", {}))
        result = _compare(baselines[-2:], cand, by_samples=by_samples, check_loss=unsafe)
    else:
        notes.append("no time left to measure the stacked configuration; best single fix recommended")
        candidate, result = max(winners, key=lambda w: w[1].speedup)
        candidates = [candidate]
    return recommendation(result, candidates, overrides=result.overrides if len(candidates) == 1 else overrides)


def recommendation(exp: Experiment, candidates: list[Candidate], *, overrides: dict | None = None,
                   budget: int | None = None) -> Recommendation:
    """The recommended configuration: `candidates` stacked, as `exp` measured them (both modes)."""
    overrides = exp.overrides or {} if overrides is None else overrides
    unsafe = any(c.changes_numerics for c in candidates)
    return Recommendation(fixes=[c.label for c in candidates], overrides=overrides, verified=exp.verified,
                          speedup=exp.speedup, ci_low=exp.ci_low, ci_high=exp.ci_high, loss_check=exp.loss_check,
                          applicability=(Applicability.UNSAFE if unsafe else Applicability.SAFE).value,
                          baseline=exp.baseline, candidate=exp.candidate, snippets=vocabulary.snippets(overrides),
                          measured_by=exp.measured_by, memory_budget_bytes=budget)
