"""`advise compare`: a noise-aware regression gate between two report.json files.

The rule (asv's, plus a guard against outlier steps): a gated timing metric regresses only when

1. it is worse than the threshold (``--max-regression``, default 10%: more than 10% more time
   per sample, or per step), **and the median step is too** (a few outlier steps move a mean,
   not the typical step), **and**
2. the slowdown is statistically significant over the per-step times: a one-sided
   Mann-Whitney U test of the current run's per-step times against the baseline's gives
   p < alpha (default 0.01).

Per-step times are the un-profiled measured steps when there are at least 3 of them (the
same steps the report's throughput comes from, :func:`advisor.analysis.steptime.timed_steps`).

A fixed percentage alone cries wolf on a noisy runner (one slow step, a neighbour's burst);
a test alone fails on a 0.5% difference that is real but irrelevant. Requiring both keeps
identical reruns green and a real 10% slowdown red. When the runs have too few steps for the
test ever to reach alpha (3 against 3 cannot go below p = 0.05), the gate falls back to the
ratios alone and says so. What no statistic over one pair of runs can tell apart: a runner
that was slower for the whole run. The threshold is the margin for that.

Which metrics gate:
- throughput (samples/s, or steps/s when the batch size is unknown) and the median step time:
  the threshold and the test above.
- peak memory (GPU peak allocated; on CPU the peak of the script's processes, PSS where both runs
  read it, else RSS): only when clearly beyond its own threshold (``--max-memory-regression``,
  default 20%) and by at least 64 MiB. One figure per run, no per-step sample to test, hence the wider margin.
- p90 step time and data-wait share: reported, never gating (a p90 of 20 steps rests on two).
- findings: a finding (by code) in CURRENT that BASELINE lacks is reported as a warning; it
  fails the gate only with ``--fail-on-new-findings``.

A timing metric more than the threshold worse whose test does not reach alpha is **inconclusive**:
these runs cannot tell noise from a regression (exit 4, or 0 with ``--inconclusive pass``).

Exit codes: 0 pass, 3 regression, 4 inconclusive, 2 unusable or incompatible input (missing file, not JSON,
a run whose status is not ok, another script or device; ``--force`` compares the last two
anyway, with a warning).
"""

from __future__ import annotations

import math
import posixpath
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, TypedDict

import msgspec
import numpy as np
import pandas as pd

from . import fingerprint
from ..analysis import stats, steptime
from ..model import Finding
from ..exit_codes import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION
from ..report import SCHEMA_VERSION, Report, ReportContentError, ReportError, load_report
from ..run_dir.atomic import clean
from ..run_dir.layout import NoRunDir, report_json
from ..schema import COMPARE_SCHEMA_VERSION

DEFAULT_MAX_REGRESSION = 0.10
DEFAULT_MAX_MEMORY_REGRESSION = 0.20
DEFAULT_ALPHA = 0.01
MEMORY_FLOOR_BYTES = 64 * 2**20
CI_LEVEL = 0.95

# Verdicts of one metric row.
REGRESSION, IMPROVEMENT, OK, NOT_SIGNIFICANT, REPORTED, NA, INCONCLUSIVE = (
    "regression", "improvement", "ok", "not-significant", "reported", "n/a", "inconclusive")


def gate_exit(verdict: str, policy: str) -> int:
    """A gate's exit code from its verdict: 3 a regression, 4 inconclusive (0 where the team chose
    ``--inconclusive pass``), else 0. `advise compare` and `advise ab` alike."""
    if verdict == REGRESSION:
        return EXIT_REGRESSION
    return EXIT_INCONCLUSIVE if verdict == INCONCLUSIVE and policy == "fail" else EXIT_OK


def inconclusive_block(unsettled: list, policy: str) -> dict:
    """compare.json's and ab.json's `inconclusive`: the policy, and the metrics not settled with why."""
    return {"policy": policy, "metrics": [m.name for m in unsettled], "why": [m.note for m in unsettled]}


class CompareError(ValueError):
    """Input that cannot be compared: one line for the CLI, exit 2."""


@dataclass
class Metric:
    name: str
    label: str
    unit: str  # "samples/s", "steps/s", "s", "bytes", "fraction"
    higher_is_better: bool
    gated: bool
    baseline: float | None
    current: float | None
    change: float | None = None  # current / baseline - 1; for fractions, current - baseline (points)
    ci: list[float] | None = None  # CI of `change`, same scale
    p_value: float | None = None  # one-sided: the current run is worse
    verdict: str = NA
    note: str = ""


@dataclass
class Comparison:
    baseline_path: str
    current_path: str
    script: str
    max_regression: float
    max_memory_regression: float
    alpha: float
    n_baseline: int
    n_current: int
    testable: bool
    metrics: list[Metric]
    new_findings: list[dict] = field(default_factory=list)
    resolved_findings: list[dict] = field(default_factory=list)
    fail_on_new_findings: bool = False
    warnings: list[str] = field(default_factory=list)
    resolvable: float | None = None  # half the 95% CI of the median step's change: the smallest change these runs resolve
    slower_ops: list[dict] | None = None  # where the time went (advisor.gate.opdiff), when both runs have a trace
    inconclusive_policy: str = "fail"  # what an inconclusive verdict exits: "fail" (EXIT_INCONCLUSIVE) or "pass" (0)

    @property
    def floor_note(self) -> str:
        """Saved-baseline mode, said plainly: one run per side cannot measure the runner's noise."""
        resolves = (f"these runs resolve changes of about ±{self.resolvable:.1%} (half the 95% CI of the median step)"
                    if self.resolvable is not None else "these runs are too short to say how small a change they resolve")
        return ("noise floor unknown: two runs made at different times cannot tell a slower commit from a slower "
                f"runner; {resolves}. `advise ab` measures both revisions in one job, interleaved, and calibrates the floor")

    @property
    def regressions(self) -> list[Metric]:
        return [m for m in self.metrics if m.verdict == REGRESSION]

    @property
    def findings_fail(self) -> bool:
        return self.fail_on_new_findings and bool(self.new_findings)

    @property
    def failed(self) -> bool:
        return bool(self.regressions) or self.findings_fail

    @property
    def inconclusive(self) -> list[Metric]:
        return [m for m in self.metrics if m.verdict == INCONCLUSIVE and m.gated]

    @property
    def verdict(self) -> str:
        return REGRESSION if self.failed else INCONCLUSIVE if self.inconclusive else "pass"

    @property
    def exit_code(self) -> int:
        return gate_exit(self.verdict, self.inconclusive_policy)

    @property
    def rule(self) -> str:
        test = (f"one-sided Mann-Whitney U p < {self.alpha:g} over per-step times "
                f"({self.n_baseline} vs {self.n_current} steps)")
        if not self.testable:
            test = f"ratio alone: {self.n_baseline} vs {self.n_current} steps are too few for p < {self.alpha:g}"
        return (f"regression = throughput or median step time more than {_pct(self.max_regression)} worse, the median "
                f"step too, and {test}; "
                f"peak memory: more than {_pct(self.max_memory_regression)} and {MEMORY_FLOOR_BYTES >> 20} MiB higher")

    def to_dict(self) -> dict:
        return clean({
            "schema_version": COMPARE_SCHEMA_VERSION,  # compare.json's own (advisor/schema.py `Compare`)
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "inconclusive": inconclusive_block(self.inconclusive, self.inconclusive_policy),
            "rule": self.rule,
            "baseline": self.baseline_path,
            "current": self.current_path,
            "script": self.script,
            "max_regression": self.max_regression,
            "max_memory_regression": self.max_memory_regression,
            "memory_floor_bytes": MEMORY_FLOOR_BYTES,
            "alpha": self.alpha,
            "n_steps": {"baseline": self.n_baseline, "current": self.n_current},
            "significance_testable": self.testable,
            "metrics": [asdict(m) for m in self.metrics],
            "regressions": [m.name for m in self.regressions],
            "findings": {"new": self.new_findings, "resolved": self.resolved_findings,
                         "fail_on_new": self.fail_on_new_findings},
            "warnings": self.warnings,
            "noise_floor": {"known": False, "resolvable_change": self.resolvable, "note": self.floor_note},
            "slower_ops": self.slower_ops,
        })


def _pct(frac: float) -> str:
    return f"{frac * 100:g}%"


# --- input -------------------------------------------------------------------------------------

def load(path: str | Path, role: str, *, force: bool = False) -> tuple[Report, list[str]]:
    """A report.json (or a run dir holding one), typed, fit to compare: status ok, per-step times.

    Raises CompareError (one line) otherwise. With `force`, a report of another schema version
    is read anyway, with a warning.
    """
    try:
        path = report_json(path)
    except NoRunDir as exc:
        raise CompareError(f"{role}: {exc}") from None
    warnings: list[str] = []
    try:  # read once: another schema version only with --force
        report = load_report(path, any_version=force)
    except ReportContentError as exc:
        raise CompareError(f"{role}: {path}: not a report.json ({exc.cause})") from None
    except ReportError as exc:
        raise CompareError(f"{role}: {exc}") from None
    if report.schema_version != SCHEMA_VERSION:
        warnings.append(f"{role} has schema_version {report.schema_version} (this advise reads {SCHEMA_VERSION}); "
                        "compared anyway (--force)")
    if report.status != "ok":
        raise CompareError(f"{role}: {path}: the run's status is {report.status!r}, not 'ok'"
                           + (f" ({report.error})" if report.error else "") + ": nothing to compare")
    timed, _ = _timed(report)
    if timed.empty:
        raise CompareError(f"{role}: {path}: the report has no measured steps to compare")
    return report, warnings


def _timed(report: Report) -> tuple[pd.DataFrame, str]:
    """The steps to compare: :func:`advisor.analysis.steptime.timed_steps` of those with a duration."""
    return steptime.timed_steps(steptime.from_rows([msgspec.structs.asdict(step) for step in report.steps]))


def _norm_parts(script: str) -> tuple[str, ...]:
    parts = posixpath.normpath(str(script).replace("\\", "/")).split("/")
    return tuple(p for p in parts if p not in ("", ".", ".."))


def same_script(a: str | None, b: str | None) -> bool:
    """Same script when one path is a suffix of the other: `train.py` matches `/ci/repo/train.py`
    (baselines come from other checkouts), `a/train.py` does not match `b/train.py`."""
    if not a or not b:
        return a == b
    pa, pb = _norm_parts(a), _norm_parts(b)
    n = min(len(pa), len(pb))
    return n > 0 and pa[-n:] == pb[-n:]


def compatibility(baseline: Report, current: Report) -> tuple[list[str], list[str]]:
    """(problems, warnings): problems make the comparison meaningless (exit 2 unless --force).

    Every difference of the environment fingerprint (:mod:`advisor.gate.fingerprint`) is listed: another
    device or GPU model is a problem, the rest (CPU model, versions, clocks, arguments) warnings.
    """
    problems: list[str] = []
    warnings: list[str] = []
    if not same_script(baseline.script, current.script):
        problems.append(f"different scripts: baseline {baseline.script!r}, current {current.script!r}")
    for diff in fingerprint.differences(baseline, current):
        (problems if diff.invalidating else warnings).append(diff.text())
    return problems, warnings


# --- the comparison ----------------------------------------------------------------------------

def _throughput_basis(tb: pd.DataFrame, tc: pd.DataFrame, tp_b: dict, tp_c: dict, durations: tuple, warnings: list[str]
                      ) -> tuple[str, tuple, tuple]:
    """Throughput's unit, the per-step (or per-sample) times it is tested on, and each run's figure:
    per sample where both runs know their batch sizes, else per step (said in `warnings`)."""
    per_b, per_c = steptime.seconds_per_sample(tb), steptime.seconds_per_sample(tc)
    if per_b is None or per_c is None:
        if (tp_b["samples_per_s"] is None) != (tp_c["samples_per_s"] is None):
            warnings.append("only one run knows its batch size: throughput is compared in steps/s")
        return "steps/s", durations, (tp_b["steps_per_s"], tp_c["steps_per_s"])
    sb, sc = _batch(tb), _batch(tc)
    if sb != sc:
        warnings.append(f"batch sizes differ (baseline {sb}, current {sc}): throughput is compared per sample")
    return "samples/s", (per_b, per_c), (tp_b["samples_per_s"], tp_c["samples_per_s"])


def compare(
    baseline: Report,
    current: Report,
    *,
    max_regression: float = DEFAULT_MAX_REGRESSION,
    max_memory_regression: float = DEFAULT_MAX_MEMORY_REGRESSION,
    alpha: float = DEFAULT_ALPHA,
    fail_on_new_findings: bool = False,
    force: bool = False,
    baseline_path: str = "baseline",
    current_path: str = "current",
) -> Comparison:
    """Compare two loaded reports (:func:`advisor.report.load_report`). Raises CompareError when
    incompatible and not `force`."""
    problems, warnings = compatibility(baseline, current)
    if problems and not force:
        raise CompareError("; ".join(problems) + " (--force compares anyway)")
    warnings = [f"{p} (compared anyway: --force)" for p in problems] + warnings

    tb, basis_b = _timed(baseline)
    tc, basis_c = _timed(current)
    if basis_b != basis_c:
        warnings.append(f"per-step times are from {basis_b} steps in the baseline, {basis_c} steps in the current run")
    nb, nc = len(tb), len(tc)
    testable = stats.min_p_value(nb, nc, "greater") < alpha
    if not testable:
        warnings.append(f"{nb} vs {nc} timed steps are too few for a significance test at p < {alpha:g}: "
                        "the gate uses the ratio alone (profile with --steps 20 or more)")

    dur_b, dur_c = steptime.durations(tb).to_numpy(), steptime.durations(tc).to_numpy()
    tp_b, tp_c = steptime.throughput(steptime.mark_unprofiled(tb)), steptime.throughput(steptime.mark_unprofiled(tc))
    unit, (per_b, per_c), (tput_b, tput_c) = _throughput_basis(tb, tc, tp_b, tp_c, (dur_b, dur_c), warnings)

    gate: _Gate = dict(threshold=max_regression, alpha=alpha, testable=testable)
    step_time = _timing_metric("step_time_median", "step time median", "s", False,
                               tp_b["step_time_median_s"], tp_c["step_time_median_s"], dur_b, dur_c, np.median, **gate)
    rows = [
        _timing_metric("throughput", f"throughput ({unit})", unit, True, tput_b, tput_c, per_b, per_c, np.mean, **gate),
        step_time,
        _reported("step_time_p90", "step time p90", "s", False, tp_b["step_time_p90_s"], tp_c["step_time_p90_s"]),
        _memory_metric(baseline, current, max_memory_regression),
        _data_wait_metric(baseline, current),
    ]
    new, resolved = _findings_diff(baseline, current)
    ci = step_time.ci
    return Comparison(
        baseline_path=str(baseline_path), current_path=str(current_path), script=str(current.script or ""),
        max_regression=max_regression, max_memory_regression=max_memory_regression, alpha=alpha,
        n_baseline=nb, n_current=nc, testable=testable, metrics=[r for r in rows if r is not None],
        new_findings=new, resolved_findings=resolved, fail_on_new_findings=fail_on_new_findings, warnings=warnings,
        resolvable=(ci[1] - ci[0]) / 2 if ci else None,
    )


def _batch(timed: pd.DataFrame) -> int | list[int]:
    values = sorted({int(s) for s in steptime.batch_sizes(timed)})
    return values[0] if len(values) == 1 else values


class _Gate(TypedDict):
    """What gates each timing metric alike."""

    threshold: float
    alpha: float
    testable: bool


def _timing_metric(name: str, label: str, unit: str, higher_is_better: bool, base: float | None, cur: float | None,
                   times_b: np.ndarray, times_c: np.ndarray, statistic: Callable[[np.ndarray], float], *, threshold: float,
                   alpha: float, testable: bool) -> Metric:
    """A gated timing metric.

    `base`/`cur` are the figures shown (throughput: samples/s, higher is better); `times_*` are
    per-step times (per sample for throughput; lower is better) and `statistic` is how the
    figure summarises them (mean for throughput, median for the median step time): the CI is
    of that statistic's ratio. A regression needs the figure AND the median step to be slower
    than the threshold, AND the test: a few outlier steps move a mean, not the typical step.
    """
    row = Metric(name, label, unit, higher_is_better, True, base, cur)
    if base is None or cur is None or base <= 0 or cur <= 0:
        row.note = "missing in one of the runs"
        return row
    row.change = cur / base - 1
    slowdown = (base / cur) if higher_is_better else (cur / base)  # > 1: the current run is slower
    typical = float(np.median(times_c) / np.median(times_b))  # the median step's slowdown
    interval = stats.ratio_ci(times_b, times_c, statistic=statistic, confidence=CI_LEVEL)
    if interval is not None:
        lo, hi = interval.low, interval.high
        row.ci = [1 / hi - 1, 1 / lo - 1] if higher_is_better else [lo - 1, hi - 1]
    p_worse = stats.mann_whitney(times_b, times_c, "greater")
    p_better = stats.mann_whitney(times_b, times_c, "less")
    row.p_value = p_worse
    limit = 1 + threshold
    if slowdown > limit:
        if typical <= limit:
            row.verdict = NOT_SIGNIFICANT
            row.note = (f"{slowdown - 1:.1%} slower overall, but the median step only {typical - 1:+.1%}: "
                        "a few slow steps (noise, or a periodic stall: profile more steps to tell)")
        elif testable and p_worse >= alpha:
            row.verdict = INCONCLUSIVE
            row.note = (f"{slowdown - 1:.1%} slower but not significant (p = {p_worse:.2g}): these runs cannot tell "
                        "noise from a regression (more --steps, or `advise ab`)")
        else:
            row.verdict = REGRESSION
            row.note = f"{slowdown - 1:.1%} slower" + ("" if testable else " (ratio alone: too few steps to test)")
    elif 1 / slowdown > limit and 1 / typical > limit and (not testable or p_better < alpha):
        row.verdict = IMPROVEMENT
        row.note = f"{1 / slowdown - 1:.1%} faster"
    else:
        row.verdict = OK
    return row


def _reported(name: str, label: str, unit: str, higher_is_better: bool, base: float | None, cur: float | None) -> Metric:
    row = Metric(name, label, unit, higher_is_better, False, base, cur, verdict=REPORTED)
    if base and cur is not None and base > 0:
        row.change = cur / base - 1
    return row


# The peak memory figures a report can carry, the preferred first: a comparison uses the first
# one both runs have, so two runs are always compared on the same basis.
MEMORY_FIGURES = (
    ("gpu", "peak GPU memory", lambda r: r.memory.peak_allocated_bytes),
    ("pss", "peak memory (PSS of the script's processes)", lambda r: r.memory.peak_pss_bytes),
    ("rss", "peak RSS of the script's processes", lambda r: r.memory.peak_rss_bytes),
    ("rss-window", "peak RSS", lambda r: r.utilization.rss_bytes_max),  # reports before `memory` had it
)


def memory_figures(report: Report) -> dict[str, tuple[float, str]]:
    """Every peak memory figure `report` has: basis -> (bytes, label)."""
    out = {}
    for basis, label, read in MEMORY_FIGURES:
        value = read(report)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[basis] = (float(value), label)
    return out


def peak_memory(report: Report) -> tuple[float | None, str]:
    """The run's peak memory figure and what it is: GPU peak allocated, else the CPU process
    tree's peak (PSS where it was read, else RSS)."""
    figures = memory_figures(report)
    return next(iter(figures.values()), (None, ""))


def _memory_metric(baseline: Report, current: Report, threshold: float) -> Metric | None:
    fig_b, fig_c = memory_figures(baseline), memory_figures(current)
    if not fig_b and not fig_c:
        return None
    common = [basis for basis, _, _ in MEMORY_FIGURES if basis in fig_b and basis in fig_c]
    if not common:
        (base, kind_b), (cur, kind_c) = peak_memory(baseline), peak_memory(current)
        row = Metric("peak_memory", kind_c or kind_b, "bytes", False, False, base, cur, verdict=NA)
        row.note = "not measured the same way in both runs"
        return row
    (base, label), (cur, _) = fig_b[common[0]], fig_c[common[0]]
    row = Metric("peak_memory", label, "bytes", False, True, base, cur)
    if base <= 0:
        row.gated, row.verdict = False, NA
        row.note = "not measured the same way in both runs"
        return row
    row.change = cur / base - 1
    if row.change > threshold and cur - base >= MEMORY_FLOOR_BYTES:
        row.verdict, row.note = REGRESSION, f"{row.change:.1%} higher (+{(cur - base) / 2**20:,.0f} MiB)"
    elif -row.change > threshold / (1 + threshold) and base - cur >= MEMORY_FLOOR_BYTES:
        row.verdict = IMPROVEMENT
    else:
        row.verdict = OK
    return row


def _data_wait_metric(baseline: Report, current: Report) -> Metric | None:
    base, cur = baseline.breakdown.data_wait_frac, current.breakdown.data_wait_frac
    if base is None and cur is None:
        return None
    row = Metric("data_wait_frac", "data-wait share", "fraction", False, False, base, cur, verdict=REPORTED)
    if base is not None and cur is not None:
        row.change = cur - base
        if row.change >= 0.10:
            row.note = "the step waits noticeably longer for data"
    return row


def _finding_key(finding: Finding) -> str:
    return str(finding.code or finding.rule or finding.title or "")


def _findings_diff(baseline: Report, current: Report) -> tuple[list[dict], list[dict]]:
    def brief(f: Finding) -> dict:
        return {"code": f.code, "rule": f.rule, "severity": f.severity.value, "title": f.title}

    fb = {_finding_key(f): f for f in baseline.findings}
    fc = {_finding_key(f): f for f in current.findings}
    new = [brief(f) for k, f in fc.items() if k not in fb]
    resolved = [brief(f) for k, f in fb.items() if k not in fc]
    return new, resolved


def parse_percent(text: str) -> float:
    """'5%', '5' or '12.5%' -> 0.05, 0.05, 0.125 (a percentage, with or without the sign)."""
    value = float(str(text).strip().rstrip("%").strip())
    if not math.isfinite(value) or value <= 0 or value >= 1000:
        raise ValueError(f"{text!r} is not a percentage between 0 and 1000")
    return value / 100
