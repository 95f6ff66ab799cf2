"""The one judge: what a fix's measurements say, whichever scheduler measured them.

Both schedulers (fresh runs, in-process arms) hand the judge :class:`Measurement`\\ s: a fix's
windows or runs and the baseline's around them. Everything decided from them is decided here:
the speedup and its interval (:func:`compare`), whether repeated passes agree (:func:`confirm`),
the best value of a sweep, whether a memory fix fits the budget, and the recommended
configuration (:func:`recommendation`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from ..analysis import memory, steptime
from ..analysis.memory import DEVICE_MARGIN
from .. import overrides as vocabulary
from ..framework import words as framework_words
from ..model import VERIFY_MIN_GAIN, Applicability, Experiment, Finding, Recommendation, Verdict
from ..analysis.stats import baseline_drift, speedup_ci
from .plan import Candidate

MIN_GAIN = 0.05        # a sweep step must add 5% over the best so far to go on
TIE_GAP = 0.10         # a sweep value the leader cannot be told apart from ties with it when this near
AFTER_REASON = "alone, the loop waiting on loading, it would measure the loader's hand-overs"
MIN_EFFECT = VERIFY_MIN_GAIN  # verified needs the interval's low end above 1 + max(3%, baseline drift)
LOSS_REL_TOL = 0.10    # numerics: mean loss within 10% of the baseline's ...
LOSS_SEM_K = 3.0       # ... or within 3 standard errors, whichever is wider
APART = 1.5            # two passes of one fix whose intervals do not overlap and whose speedups differ this much
SETTLED_LOW = 2.0      # one pass settles a win whose interval's low end reaches this
AMDAHL_SLACK = 1.05    # a fix faster than its Amdahl bound by this much (and surely faster at all) was mismeasured
# What moves a speedup from one process to the next that one process's windows cannot show (the
# loader's workers placed differently, the allocator's and the thread pools' state), log scale:
# in-process arms add it to their interval; fresh runs, each its own process, show it already.
# Measured by benchmarks/reproducibility.py (the same script profiled five times).
PROCESS_SD = 0.03


@dataclass
class Measurement:
    """One fresh run or one arm window: its timed steps and what the child says took effect."""

    label: str
    overrides: dict
    status: str
    run_dir: Path
    steps: pd.DataFrame
    wall_s: float
    error: str | None = None
    applied: dict = field(default_factory=dict)  # what the child says took effect
    peak_memory_bytes: int | None = None  # the measurement's own peak (see advisor.analysis.memory)
    memory_basis: str | None = None
    oom: bool = False  # it ran out of memory

    @property
    def ok(self) -> bool:
        return self.status == "ok" and not self.steps.empty


@dataclass
class ExperimentResults:
    """Findings with `experiment` filled, the stacked recommendation, and every child run."""

    findings: list[Finding]
    recommended: Recommendation | None
    notes: list[str]
    runs: list[dict]
    interrupted: int | None = None  # the signal that cut the experiments short (what ran is kept)
    screened: list[Finding] = field(default_factory=list)  # screened fixes left out: not verified faster
    budget_s: float | None = None  # the arms' time budget, as given or as set automatically
    budget_given: bool = False  # --time-budget (else the automatic one)
    window_again_s: float | None = None  # of the budget: the disturbed measured window measured again (.look)
    disturbed_s: float | None = None  # of the budget: added for the windows a neighbour disturbed (ArmsSession._grant)
    held_s: float | None = None  # of the budget: added while windows waited for a neighbour to leave (probe/holds.py)
    arms: list[dict] = field(default_factory=list)  # where the arms' time went (Rounds.costs)
    between_steps_s: float | None = None  # the arms' seconds between their windows' steps (Spend.between_steps_s)
    cut_window_s: float | None = None  # a window the run ended inside (Spend.cut_window_s)
    left_out: list[dict] = field(default_factory=list)  # fixes not started: their predicted cost and command

    def summary(self) -> dict:
        """report.json's `experiments` block: what was run and what it cost, and the screened fixes
        left out of the findings (`screened`: each fix, its verdict and speedup)."""
        screened = [{"fix": f.fix.title, "overrides": f.fix.overrides,
                     "verdict": f.experiment.verdict.value if f.experiment else Verdict.NOT_MEASURED.value,
                     "speedup": f.experiment.speedup if f.experiment else None,
                     "ci_low": f.experiment.ci_low if f.experiment else None,
                     "ci_high": f.experiment.ci_high if f.experiment else None,
                     "baseline_drift_frac": f.experiment.baseline_drift_frac if f.experiment else None,
                     "reason": f.experiment.reason if f.experiment else None,
                     "recompiles": f.experiment.recompiles if f.experiment else None} for f in self.screened]
        return {"runs": self.runs, "n_runs": len(self.runs), "child_wall_s": sum(r["wall_s"] for r in self.runs),
                "screened": screened, "budget_s": self.budget_s, "budget_given": self.budget_given,
                "window_again_s": self.window_again_s, "disturbed_s": self.disturbed_s, "held_s": self.held_s,
                "arms": self.arms,
                "between_steps_s": self.between_steps_s, "cut_window_s": self.cut_window_s, "left_out": self.left_out}


def by_samples(steps: pd.DataFrame) -> bool:
    """Whether every step's batch size is known: then speed is samples/s (a bigger batch is judged
    fairly), else steps/s."""
    return steptime.knows_batch(steps)


def loss_check(baseline: list[pd.DataFrame], candidate: pd.DataFrame) -> dict:
    """Finite and close: the candidate's mean loss within tolerance of the baseline's."""
    b = pd.concat([steptime.losses(f) for f in baseline]).dropna().to_numpy(float) if baseline else np.array([])
    c = steptime.losses(candidate).dropna().to_numpy(float)
    flags = steptime.loss_finite(candidate)
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


def compare(base_runs: list[Measurement], cand_runs: list[Measurement] | Measurement, *, by_samples: bool,
            check_loss: bool, measured_by: str = "fresh-run", loads_in_process: bool = False,
            bound_with: Sequence[pd.DataFrame] = ()) -> Experiment:
    """Judge candidate run(s) against the baseline runs measured around them (`loads_in_process`: the
    script's DataLoader has no workers; `bound_with`: more of the baseline's steps its bound is read
    on; see :func:`amdahl_bound`)."""
    cand_runs = [cand_runs] if isinstance(cand_runs, Measurement) else cand_runs
    ok_base = [m.steps for m in base_runs if m.ok]
    ok_cand = [m for m in cand_runs if m.ok]
    result = Experiment(Verdict.FAILED, baseline=pool_summary(base_runs), candidate=pool_summary(cand_runs),
                        overrides=cand_runs[0].overrides, measured_by=measured_by)
    if len(ok_cand) < len(cand_runs) or not ok_base:
        failed = next((m for m in cand_runs if not m.ok), None)
        result.error = (failed.error if failed else None) or "the baseline could not be re-measured"
        result.oom = True if failed is not None and failed.oom else None
        return result
    result.not_applied = sorted({key for m in ok_cand for key in vocabulary.not_applied(m.overrides, m.applied)}) or None
    ratio, lo, hi = speedup_ci(ok_base, [m.steps for m in ok_cand], by_samples=by_samples,
                               process_sd=PROCESS_SD if measured_by == "in-process" else 0.0)
    drift = baseline_drift(ok_base, by_samples)
    result.speedup, result.ci_low, result.ci_high, result.baseline_drift_frac = ratio, lo, hi, drift
    result.memory_change_frac = memory.change_frac((result.baseline or {}).get("peak_memory_bytes"),
                                                   (result.candidate or {}).get("peak_memory_bytes"))
    loss_ok = True
    if check_loss:
        result.loss_check = loss_check(ok_base, pd.concat([m.steps for m in ok_cand], ignore_index=True))
        loss_ok = result.loss_check["passed"] is not False
    bound = amdahl_bound(cand_runs[0].overrides, [*ok_base, *bound_with], loads_in_process)
    if result.not_applied:  # the child says the fix never took effect: whatever was measured is noise
        result.verdict = Verdict.NOT_APPLIED
    elif bound is not None and ratio > bound[0] * AMDAHL_SLACK and lo > 1.0:
        result.verdict = Verdict.NOT_CONFIRMED
        result.reason = (f"measured {ratio:.2f}x (low end {lo:.2f}x), more than removing {bound[1]} entirely could give "
                         f"({bound[0]:.2f}x): a measurement error, not a speedup")
    elif lo > 1.0 + max(MIN_EFFECT, drift) and loss_ok:
        result.verified, result.verdict = True, Verdict.FASTER
    elif hi < 1.0 - max(MIN_EFFECT, drift):
        result.verdict = Verdict.SLOWER
    elif not loss_ok:
        result.verdict = Verdict.LOSS_CHANGED
    else:
        result.verdict = Verdict.NO_CHANGE
    return result


def amdahl_bound(overrides: dict, baseline: list[pd.DataFrame], loads_in_process: bool = False) -> tuple[float, str] | None:
    """The most a fix that can only shorten part of a step could give (Amdahl): 1 / (1 - that
    part's share of the baseline's time), and the part in words; None for a fix that may speed up
    anything. A fused optimizer cannot beat removing the optimizer; more workers, removing the wait
    on workers that are already there. Where the loading runs in the training process itself
    (`loads_in_process`: no workers), workers also take its drag off the compute (its intra-op
    threads, caches and allocator): train_mnist_like on a busy 2-core box, 42% of the step in the
    loader, was 6-9x faster by hand with 4 workers. No bound holds there, nor where the baseline's
    loader forks its workers anew each epoch (:func:`steptime.loader_started`): the forks and the copy-on-write faults the
    training process pays after each land outside the wait
    (pytorch/vision's train.py, 16 workers on 2 cores: `-j 2` 1.82x by hand, its wait 33% of the step).

    The share is the largest of the baseline windows' own: a neighbour that takes a core stretches
    the compute and shrinks the wait's share in the windows it overlaps (a 4-worker I/O loader
    beside a burner: 34% pooled, 90% quiet), and a bound from those called its verified 1.83x (by
    hand beside the same burner, 1.67x) "more than removing the wait could give". Where the baseline
    windows beside a fix were all disturbed, the run's quiet ones and its measured window are read
    too (`baseline` holds them): the same script, the same loader."""
    columns = vocabulary.parts(overrides or {})
    if not columns or not baseline or (loads_in_process and steptime.DATA_WAIT in columns):
        return None
    if steptime.DATA_WAIT in columns and any(steptime.loader_started(frame).any() for frame in baseline):
        return None
    shares = [x for frame in baseline if (x := steptime.share(frame, *columns)) is not None]
    if not shares:
        return None
    share = max(shares)
    share = min(share, 0.999)
    words = " and ".join({steptime.OPTIMIZER: "the optimizer's step", steptime.DATA_WAIT: "the wait on the DataLoader"}.get(c, c)
                         for c in columns)
    return 1.0 / (1.0 - share), f"{words} ({share:.0%} of the baseline's time)"


def pool(passes: list[tuple[list[Measurement], list[Measurement]]], *, by_samples: bool, check_loss: bool,
         measured_by: str = "fresh-run", loads_in_process: bool = False,
         bound_with: Sequence[pd.DataFrame] = ()) -> Experiment:
    """A fix over its passes, for both schedulers (each pass: its candidate's windows or runs and the
    baselines around them): every baseline against every candidate, pooled, kept verified only where
    the passes agree (:func:`confirm`)."""
    def versus(base: list[Measurement], cand: list[Measurement]) -> Experiment:
        return compare(base, cand, by_samples=by_samples, check_loss=check_loss, measured_by=measured_by,
                       loads_in_process=loads_in_process, bound_with=bound_with)
    bases = distinct([m for around, _ in passes for m in around])
    pooled = versus(bases, [m for _, cands in passes for m in cands])
    return confirm(pooled, [versus(around, cands) for around, cands in passes])


def confirm(pooled: Experiment, passes: list[Experiment]) -> Experiment:
    """A pooled result stays verified only where its passes (each window or run of the fix between
    its own baselines) agree: every pass at least the minimum effect faster, and no two passes
    far apart. Requiring each short pass to clear the bar on its own would throw away the power
    the pooling gives; a pass pointing the other way, or a machine whose load changed between
    passes, is what a verified claim must not rest on."""
    pooled.runs = [{"speedup": r.speedup, "ci_low": r.ci_low, "ci_high": r.ci_high} for r in passes]
    if not pooled.verified or len(passes) < 2:
        return pooled
    if apart(passes):  # one pass says 0.96x, the other 9.37x: no interval over both means anything
        pooled.verified, pooled.verdict = False, Verdict.NOT_CONFIRMED
        pooled.reason = (f"its {len(passes)} passes disagree ({', '.join(f'{r.speedup:.2f}x' for r in passes)}, "
                         "intervals apart): the machine's load changed during the run")
    elif not all(r.verified or (r.speedup or 0.0) > 1.0 + MIN_EFFECT for r in passes):
        pooled.verified, pooled.verdict = False, Verdict.NOT_CONFIRMED
    return pooled


def settled(exp: Experiment) -> bool:
    """Whether a fix's first pass already decides it, so a second pass would only cost time: a
    win whose interval's low end is 2x or more (a second pass may move the figure, not the
    verdict), an interval wholly below the bar a win must clear, or nothing a second pass could
    fix (the arm failed, was not applied, changed the loss). A narrow interval on one window is
    not enough: what moves a window on a shared host is between windows, and chargpt's bf16 read
    1.56x (1.37-1.78x) on one, verified, where by hand in the same hour it was 1.16x (1.09-1.34x);
    a contended machine's 2.05x (1.29-3.68x) for a 1.19x fix likewise."""
    if exp.verdict in (Verdict.FAILED, Verdict.NOT_APPLIED, Verdict.LOSS_CHANGED):
        return True
    if exp.ci_low is None or exp.ci_high is None:
        return False
    if exp.verified:
        return exp.ci_low >= SETTLED_LOW
    return exp.ci_high < 1.0 + max(MIN_EFFECT, exp.baseline_drift_frac or 0.0)


def beaten(exp: Experiment, best: Experiment) -> bool:
    """Whether a sweep value is out of the running: its interval lies wholly below its best value's,
    so another pass could not make it the winner (loader-starved's 1 worker, 1.27x (1.12-1.44x), under
    3 workers' 1.91x (1.70-2.15x)). Its pass goes to the values that could still win, and the stack."""
    return (exp is not best and exp.ci_high is not None and best.ci_low is not None
            and exp.ci_high < best.ci_low)


def worth_another(exp: Experiment) -> bool:
    """Whether another pass may change a fix's verdict and is worth its time: it is neither verified
    nor settled (:func:`settled`: shown not to gain, or nothing a pass could fix), and its figure
    leans faster by more than the bar (a pass that could only confirm "no gain" cost rl-reinforce's
    default run 2.6x its diagnosis)."""
    return not exp.verified and not settled(exp) and (exp.speedup or 0.0) > 1.0 + MIN_EFFECT


def payoff_steps(exp: Experiment) -> int | None:
    """For a compile fix: after how many steps its one-off compilation (`switch_s`) is paid back by
    the time it saves per step (the medians'), or None where it saves nothing."""
    base = (exp.baseline or {}).get("step_time_median_s")
    cand = (exp.candidate or {}).get("step_time_median_s")
    if not vocabulary.one_off(exp.overrides or {}) or not exp.switch_s or not base or not cand or cand >= base:
        return None
    return max(1, math.ceil(exp.switch_s / (base - cand)))


def apart(results: list[Experiment]) -> bool:
    """Whether two passes of one fix disagree: intervals that do not overlap and speedups 1.5x apart."""
    known = [(r.speedup, r.ci_low, r.ci_high) for r in results if r.ci_low is not None and r.ci_high is not None and r.speedup]
    if len(known) < 2:
        return False
    lo = min(known, key=lambda k: k[0])  # (speedup, ci_low, ci_high)
    hi = max(known, key=lambda k: k[0])
    return lo[2] < hi[1] and hi[0] / lo[0] >= APART


def distinct(items: list[Measurement]) -> list[Measurement]:
    """The measurements, each once (a baseline window borders two arms' windows)."""
    out: list[Measurement] = []
    for m in items:
        if not any(m is o for o in out):
            out.append(m)
    return out


def pool_summary(runs: list[Measurement]) -> dict:
    ok = [m for m in runs if m.ok]
    if not ok:
        return {"runs": len(runs), "samples_per_s": None}
    steps = pd.concat([m.steps for m in ok], ignore_index=True)
    tp = steptime.throughput(steps)
    peaks = [m.peak_memory_bytes for m in ok if m.peak_memory_bytes]
    return {"runs": len(ok), "samples_per_s": tp["samples_per_s"], "steps_per_s": tp["steps_per_s"],
            "step_time_median_s": tp["step_time_median_s"], "run_dirs": [str(m.run_dir) for m in ok],
            "peak_memory_bytes": max(peaks) if peaks else None,
            "memory_basis": next((m.memory_basis for m in ok if m.memory_basis), None)}


# sweeps and memory budgets --------------------------------------------------------------------

def better(a: Experiment | None, b: Experiment) -> bool:
    """Does sweep point `b` beat the best so far `a` by a real margin?"""
    if b.speedup is None or not b.verified:
        return False
    return a is None or a.speedup is None or b.speedup >= a.speedup * (1 + MIN_GAIN)


def head_to_head(leader: list[Measurement], rival: list[Measurement], baseline: list[Measurement], *,
                 by_samples: bool) -> bool:
    """Whether a sweep's leader is shown faster than another value: their windows compared directly
    (the rival's as the baseline, the baseline windows' window-to-window spread lent to a value
    measured in one window), the interval's low end above 1 + MIN_GAIN. Two values each verified
    against the baseline may still be one speed (a tie: the cheaper is the answer)."""
    lead = [m.steps for m in leader if m.ok]
    other = [m.steps for m in rival if m.ok]
    if not lead or not other:
        return True
    _, low, _ = speedup_ci(other, lead, by_samples=by_samples, spread=[m.steps for m in baseline if m.ok])
    return bool(math.isfinite(low) and low > 1.0 + MIN_GAIN)


def near(rival: Experiment, leader: Experiment) -> bool:
    """Whether a value a sweep's leader could not be shown faster than is as good a pick: its figure
    within TIE_GAP of the leader's. A wider gap that the windows could not resolve is a question of
    power, and the leader is the better guess (a loader's 1 worker tied with 2 at 1.30x against
    1.57x, and the cheaper pick gave up 20% by hand)."""
    return (rival.speedup or 0.0) * (1 + TIE_GAP) >= (leader.speedup or 0.0)


def sweep_row(point: Candidate, exp: Experiment, budget: float | None) -> dict:
    """One value a sweep tried, as report.json's `sweep` lists it."""
    return {"label": point.label, "overrides": point.overrides, **({"why": point.why} if point.why else {}),
            "speedup": exp.speedup, "ci_low": exp.ci_low, "ci_high": exp.ci_high, "verdict": exp.verdict.value,
            "peak_memory_bytes": (exp.candidate or {}).get("peak_memory_bytes"),
            **({"oom": True} if exp.oom else {}),
            **({"switch_s": exp.switch_s, "payoff_steps": exp.payoff_steps} if exp.switch_s else {}),
            **({"recompiles": exp.recompiles["count"]} if exp.recompiles else {}),
            **({"recompiled": exp.recompiles["said"]} if exp.recompiles and exp.recompiles.get("said") else {}),
            **({"fits": fits(exp, budget)} if budget else {})}


def sweep_rows(tried: list[tuple[Candidate, Experiment]], untried: list[tuple[Candidate, str]],
               budget: float | None) -> list[dict]:
    """report.json's `sweep`: each value measured, then each the run or its time budget ended
    before, not measured and why (never left out as if it had not been part of the ladder), but
    for a batch larger than one that ran out of memory: the ladder ends there by design."""
    out_of_memory = [vocabulary.batch_scale(p.overrides) for p, e in tried if e.oom]
    rows = [sweep_row(p, e, budget) for p, e in tried]
    for point, why in untried:
        if out_of_memory and vocabulary.batch_scale(point.overrides) > min(out_of_memory):
            continue
        rows.append({"label": point.label, "overrides": point.overrides, **({"why": point.why} if point.why else {}),
                     "speedup": None, "ci_low": None,
                     "ci_high": None, "verdict": Verdict.NOT_MEASURED.value, "reason": why})
    return rows


def sweep_winner(tried: list[tuple[Candidate, Experiment]], budget: float | None) -> tuple[Candidate, Experiment]:
    """The value to report from a sweep, for both schedulers: with a memory budget and a batch
    search, the largest batch that fits; else the verified value whose interval's low end is highest;
    else, of the values that ran (any, if none did), the one whose interval's low end is highest."""
    if budget and any(vocabulary.batch_scale(p.overrides) >= 2 for p, _ in tried):
        return largest_that_fits(tried, budget)
    verified = [(p, e) for p, e in tried if e.verified]
    ran = [(p, e) for p, e in tried if e.verdict is not Verdict.FAILED]
    return max(verified or ran or tried, key=lambda pe: (pe[1].ci_low if pe[1].ci_low is not None else -1.0))


def usable_budget(evidence: dict) -> float | None:
    """The memory a batch ladder's rungs are held to: a budget the user gave, as given; the device's
    capacity less DEVICE_MARGIN (the allocator's fragmentation and an evaluation step's activations
    need room the training step's peak does not show: a finder that lands at the limit fails there)."""
    budget = evidence.get("budget_bytes")
    if budget and evidence.get("budget_source") == "device":
        return budget * (1 - DEVICE_MARGIN)
    return budget


def fits(exp: Experiment, budget: float) -> bool:
    """The candidate ran (no OOM) and its measured peak stayed within the budget."""
    peak = (exp.candidate or {}).get("peak_memory_bytes")
    return exp.verdict is not Verdict.FAILED and peak is not None and peak <= budget


def largest_that_fits(tried: list, budget: float) -> tuple:
    """The batch-size search's answer: the largest scale whose window fit the budget (an OOM or an
    over-budget peak does not fit), else the smallest tried, reported as it fared."""
    fitting = [(p, e) for p, e in tried if fits(e, budget)]
    scale = lambda pe: vocabulary.batch_scale(pe[0].overrides)  # noqa: E731
    return max(fitting, key=scale) if fitting else min(tried, key=scale)


def over_budget(finding: Finding) -> bool:
    """The finding's own evidence: the run's peak is over its memory budget."""
    budget, peak = finding.evidence.get("budget_bytes"), finding.evidence.get("peak_memory_bytes")
    return bool(budget and peak and peak > budget)


def fits_over_budget(finding: Finding, exp: Experiment) -> bool:
    """A run over its memory budget, and a fix measured to bring its peak within it (numerics kept,
    the fix applied): the user needs one such fix whatever it costs in speed."""
    budget = finding.evidence.get("budget_bytes")
    cand = (exp.candidate or {}).get("peak_memory_bytes")
    return (over_budget(finding) and cand is not None and cand <= budget and exp.measured
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


def settle(finding: Finding, candidate: Candidate, exp: Experiment, budget: float | None,
           winners: list, fitting: list) -> None:
    """Record a fix's chosen result on its finding: its value becomes the fix's (a sweep's figure for 2
    workers was said under the proposal's title for 8), a verified one joins the winners, one that
    brings an over-budget run within its budget joins `fitting`."""
    exp.applicability = candidate.applicability
    exp.memory_budget_bytes = None if budget is None else int(budget)  # report.json's is an integer
    finding.experiment = exp
    if exp.verified:
        winners.append((candidate, exp))
    if exp.overrides is not None and exp.measured:  # a figure is said under the title of the value it measured
        finding.fix.adopt(exp.overrides)
    if fits_over_budget(finding, exp):
        fitting.append((candidate, exp, finding.evidence["budget_bytes"]))


# the recommendation ---------------------------------------------------------------------------

def stack_members(winners: list[tuple[Candidate, Experiment]], leaners: list[tuple[Candidate, Experiment]],
                  after: Sequence[tuple[Candidate, str]] = ()) -> list[tuple[Candidate, Experiment]]:
    """What the stack measures: the winners, then each fix that leaned faster alone without being
    verified (:func:`worth_another` when its passes ran out), then each fix of `after` (with
    the override a winner must set first) whose winner won; each only where it sets nothing a member sets. A
    small gain one process's windows cannot verify alone (a fused optimizer's 1.1x) can be what
    separates the best configuration from the second: the stack's own windows decide it."""
    if not winners:
        return []
    won = {key for _, e in winners for key in (e.overrides or {})}
    ready = [(c, key) for c, key in after if key in won]
    waited = {key for _, key in ready}
    unmeasured = [(c, Experiment(Verdict.NOT_MEASURED, overrides=c.overrides, reason=AFTER_REASON)) for c, _ in ready]
    members = [(c, with_headroom(e) if waited & set(e.overrides or {}) else e) for c, e in winners]
    for candidate, exp in [*leaners, *unmeasured]:
        taken = {key for _, e in members for key in (e.overrides or {})}
        if exp.overrides and not taken & set(exp.overrides):
            members.append((candidate, exp))
    return members


def with_headroom(exp: Experiment) -> Experiment:
    """A loading fix as the stack of the compute's fixes behind it takes it: of the values its sweep
    verified with a figure near its own (:func:`near`), the one that loads the most, as the loader
    must then feed a shorter step. loader-starved by hand (mean step): 3 workers tie 2 alone (1.80x,
    1.71x), and with the fused step and bf16 read 2.03x against 1.90x."""
    near_rows = [r for r in exp.sweep or [] if r.get("verdict") == Verdict.FASTER.value and r.get("overrides")
                 and (r.get("speedup") or 0.0) * (1 + TIE_GAP) >= (exp.speedup or 0.0)]
    most = max(near_rows, key=lambda r: vocabulary.cost(r["overrides"]), default=None)
    if most is None or vocabulary.cost(most["overrides"]) <= vocabulary.cost(exp.overrides or {}):
        return exp
    return replace(exp, overrides=most["overrides"])


def stacked_candidate(winners: list[tuple[Candidate, Experiment]]) -> Candidate:
    """The winners as one candidate: their overrides merged, unsafe if any of them is."""
    unsafe = any(c.changes_numerics for c, _ in winners)
    return Candidate(" + ".join(c.label for c, _ in winners), vocabulary.merge(*(e.overrides or {} for _, e in winners)),
                     Applicability.UNSAFE if unsafe else Applicability.SAFE)


def best_single(winners: list[tuple[Candidate, Experiment]]) -> tuple[Candidate, Experiment]:
    return max(winners, key=lambda w: w[1].speedup or 0.0)


def recommendation(exp: Experiment, candidates: list[Candidate], *, overrides: dict | None = None,
                   budget: int | None = None) -> Recommendation:
    """The recommended configuration: `candidates` stacked, as `exp` measured them (both modes)."""
    overrides = exp.overrides or {} if overrides is None else overrides
    unsafe = any(c.changes_numerics for c in candidates)
    return Recommendation(fixes=[c.label for c in candidates], overrides=overrides, verified=exp.verified,
                          speedup=exp.speedup, ci_low=exp.ci_low, ci_high=exp.ci_high, loss_check=exp.loss_check,
                          applicability=Applicability.UNSAFE if unsafe else Applicability.SAFE,
                          baseline=exp.baseline, candidate=exp.candidate, snippets=framework_words.snippets(overrides),
                          measured_by=exp.measured_by, memory_budget_bytes=budget)


def recommend(winners: list[tuple[Candidate, Experiment]], stacked: Experiment | None | str, *,
              budget: int | None, notes: list[str],
              leaners: list[tuple[Candidate, Experiment]] | None = None,
              after: Sequence[tuple[Candidate, str]] = ()) -> Recommendation | None:
    """The recommendation from the winners (each verified alone), with the fixes that leaned faster
    unverified and the screens stacked on them (:func:`stack_members`), and the stacked run's result (`stacked`: the Experiment, or
    why there is none): the best verified configuration of the run. The stack is recommended only
    verified and faster than its best member alone, by more than the bar a win must clear where it
    carries a fix not verified alone (its gain then rests on the stack's windows); otherwise the
    best single winner is, with one line saying why (a stack below a member it contains has a
    member undoing another, or one of them did not take effect)."""
    members = stack_members(winners, leaners or [], after)
    if not members:
        return None
    if len(members) == 1:
        return recommendation(winners[0][1], [winners[0][0]], budget=budget)
    candidate, best = best_single(winners)
    unverified = [(c, e) for c, e in members if not e.verified]
    bar = (best.speedup or 0.0) * (1 + MIN_EFFECT if unverified else 1)
    if isinstance(stacked, Experiment) and stacked.verified and (stacked.speedup or 0.0) > bar:
        stacked_on = [c.label for c, e in unverified if e.speedup is None]  # fixes of Finding.after
        said = [f"{c.label} leaned faster alone ({e.speedup:.2f}x) without being verified" for c, e in unverified
                if e.speedup is not None]
        if stacked_on:  # on the winner that sets the override they waited for, not the best single one
            keys = {key for c, key in after if any(c is m for m, _ in members)}
            base, won_alone, stacked_as = next((c, w, m) for (c, w), (_, m) in zip(winners, members)
                                               if keys & set(w.overrides or {}))
            at = (f" at {vocabulary.describe(stacked_as.overrides or {})}, the most loading of its values tied alone"
                  if stacked_as is not won_alone else "")
            said.append(f"{' and '.join(stacked_on)} {'was' if len(stacked_on) == 1 else 'were'} measured only stacked "
                        f"on {base.label}{at} ({AFTER_REASON})")
        notes += [f"{line}; the stack measured {stacked.speedup:.2f}x against {best.speedup:.2f}x for {candidate.label} "
                  "alone, so it is recommended" for line in said]
        return recommendation(stacked, [c for c, _ in members], overrides=stacked_candidate(members).overrides,
                              budget=budget)
    notes.append(f"the stacked configuration ({' + '.join(c.label for c, _ in members)}) "
                 f"{_why_not_stacked(stacked, candidate, best, [c for c, _ in unverified])}; "
                 "the best single fix is recommended")
    return recommendation(best, [candidate], budget=budget)


def _why_not_stacked(stacked: Experiment | None | str, member: Candidate, best: Experiment,
                     unverified: list[Candidate]) -> str:
    if isinstance(stacked, str):
        return stacked
    if stacked is None:
        return "was not measured (no time left)"
    if stacked.verdict is Verdict.NOT_APPLIED:  # a member's switch was not on in the stacked arm
        return (f"did not take effect whole: the child saw no effect of {', '.join(stacked.not_applied or [])} in its "
                "windows, so it measured only part of the stack")
    if not stacked.speedup:
        return "failed"
    if not stacked.verified:
        return f"measured {stacked.speedup:.2f}x, not verified"
    by = f" by more than {MIN_EFFECT:.0%} (it carries {', '.join(c.label for c in unverified)}, not verified alone)" \
        if unverified else ""
    return (f"measured {stacked.speedup:.2f}x ({stacked.ci_low:.2f}-{stacked.ci_high:.2f}x), no faster than "
            f"{member.label} alone ({best.speedup:.2f}x){by}")
