"""The interleaved gate's decision: paired rounds, a sequential test, one error rate for all metrics.

`advise ab` measures base and candidate in pairs of rounds (B C B C ...). Each gated metric gives
one figure per round and side (the step time: each run's fast steps, :data:`advisor.gate.ab.FAST_QUANTILE`);
its per-round slowdown is the log ratio ``d_i = log(C_i / B_i)`` (``log(B_i / C_i)`` for
throughput, where higher is better), so a runner that slows down for a while slows both sides
of a round and cancels out. The decision reads those paired slowdowns:

- **test**: Yuen's one-sided trimmed-mean t-test of the paired slowdowns (20% trimmed at each
  end, winsorized variance): a neighbour that turns on during one run of a pair makes that pair's
  slowdown wild; trimming keeps a few such pairs from deciding either way.
- **sequential looks**: the first look after ``rounds`` pairs; a metric that is *suspected* (slower,
  and its 95% upper bound above the threshold) gets more rounds, looking again half way to
  ``max_rounds`` and at ``max_rounds``. (Suspected also needs half the threshold or more: an
  unchanged revision's wobble about 0 stops at the first look.) The false-alarm rate is spent
  over the planned looks, ``alpha / K`` at each of K looks (Bonferroni spending): by the union
  bound the rate over all looks stays at most ``alpha`` whatever the rule that decides to
  continue, so "rerun until red" cannot happen.
- **several metrics**: at each look, Holm's step-down correction over the gated metrics
  (step time, peak memory; throughput is the step time inverted, a ``mirrors`` row shown and not
  tested twice), so ``alpha`` is the gate's family-wise error rate.
- **noise floor**: each revision's own runs against each other (an A/A split: the rounds alternate
  B C, C B, so the base runs of rounds 2 and 3, 4 and 5, ... run back to back, as a round's pair
  does; the candidate's of rounds 1 and 2, 3 and 4 too) measure this runner's noise now. The
  floor is the slowdown an unchanged revision measured over the same number of rounds exceeds 5%
  of the time, ``1.645 * 1.4826 * median(|a|) / sqrt(n)`` (a robust scale about 0, so a drift
  counts and a few wild pairs do not).

A metric regresses when its slowdown is beyond the threshold **and** beyond the floor **and**
Holm-significant at the look's level. Memory also needs its byte floor (compare.MEMORY_FLOOR_BYTES).

A metric a neighbour cannot inflate (``settles``: the CPU time per step of a CPU-bound job) that
rules its regression out settles a wall clock too noisy to decide, unless that wall clock's own
estimate is beyond the threshold and the steps' own waiting may have grown (``wait_grew``: the
wall time less the CPU time at a run's quiet steps, which a neighbour does not lengthen): a step
that waits longer (a sleep, I/O, a lock) shows only on the wall clock.

Every tested metric says the smallest change its rounds could see (the minimum detectable change,
MDC = (t(0.975) + t(0.8)) x SE of the trimmed mean log ratio: two-sided alpha 0.05, power 0.8).
A metric passes on an equivalence decision: the rounds rule the threshold out, its one-sided 95%
upper bound below it, and its MDC no larger than the threshold (an unchanged revision passes with an honest interval, not for want of a
significant slowdown). One that is neither a regression nor ruled out is *undecided*: it gets the
planned looks up to ``max_rounds`` (or the gate's time budget, whose look is final) like a
suspected one, and at the last look it is **inconclusive**, never a pass (a gate that exits 0
because a noisy neighbour hid a 46% slowdown is worse than no gate). The A/A floor is reported
beside it and holds a regression back; it does not block a pass the paired interval already makes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..analysis.stats import scipy_stats, t_quantile
from .compare import IMPROVEMENT, INCONCLUSIVE, NOT_SIGNIFICANT, OK, REGRESSION, REPORTED

Z95 = 1.6448536269514722  # one-sided 95%
TEST = "Yuen's one-sided 20%-trimmed paired t-test of the per-round log ratios"
CORRECTION = "Holm"
SPENDING = "Bonferroni spending over the planned looks"


def looks(rounds: int, max_rounds: int) -> list[int]:
    """The planned looks (pairs of rounds seen at each): ``rounds``, half way to the budget, and ``max_rounds``.

    Three looks at most: every look costs its share of alpha, and most decisions are made at the first."""
    max_rounds = max(rounds, max_rounds)
    return sorted({rounds, (rounds + max_rounds + 1) // 2, max_rounds})


def holm(p_values: list[float], alpha: float) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected with family-wise error rate `alpha`."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    m = len(p_values)
    for rank, i in enumerate(order):
        if not p_values[i] < alpha / (m - rank):
            break
        rejected[i] = True
    return rejected


TRIM = 0.2  # Yuen's trimmed mean: a fifth of the rounds at each end
MOST_ROUNDS = 100  # a longer budget is suggested only up to this many rounds
POWER = 0.8  # the minimum detectable change's power (Paired.mdc)


def _yuen_scale(n: int) -> tuple[float, int]:
    """Yuen's standard error per unit of winsorized sd over `n` rounds, and its degrees of freedom."""
    g = int(TRIM * n)
    return 1 / ((1 - 2 * g / n) * math.sqrt(n)), n - 2 * g - 1


@dataclass
class Paired:
    """One metric's paired slowdowns over the rounds so far (log ratios; > 0: the candidate is worse)."""

    d: np.ndarray
    aa: np.ndarray  # A/A: each revision's back-to-back runs against each other (log ratios)

    @property
    def n(self) -> int:
        return len(self.d)

    def _trimmed(self) -> tuple[float, float]:
        """(trimmed mean, winsorized standard deviation) of the paired slowdowns."""
        d = np.sort(self.d)
        n = len(d)
        g = int(TRIM * n)
        w = np.clip(d, d[g], d[n - g - 1])
        return float(d[g:n - g].mean()), float(w.std(ddof=1)) if n > 1 else math.nan

    def _yuen(self) -> tuple[float, float, int]:
        """(trimmed mean, its standard error, degrees of freedom): Yuen's, from the winsorized variance."""
        mean, spread = self._trimmed()
        per_sd, df = _yuen_scale(self.n)
        return mean, spread * per_sd, df

    def estimate(self) -> float:
        return self._yuen()[0] if self.n else math.nan

    def p_value(self) -> float:
        """One-sided p of a trimmed mean above 0; an exact zero spread decides by the sign alone."""
        if self.n < 2:
            return 1.0
        mean, se, df = self._yuen()
        if not se > 0:
            return 0.0 if mean > 0 else 1.0
        _st = scipy_stats()

        return float(_st.t.sf(mean / se, df))

    def _bound(self, q: float) -> float:
        mean, se, df = self._yuen()
        if self.n < 2 or not se > 0:
            return mean
        return mean + t_quantile(q, df) * se

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """Two-sided interval of the trimmed mean log slowdown."""
        return self._bound(0.5 - confidence / 2), self._bound(0.5 + confidence / 2)

    def upper(self) -> float:
        """One-sided 95% upper bound of the trimmed mean log slowdown."""
        return self._bound(0.95)

    def mdc(self) -> float | None:
        """The minimum detectable change (a log ratio): the smallest true change these rounds would
        find with power 0.8 at a two-sided 0.05, ``(t(0.975) + t(0.8)) * SE`` (Yuen's SE and degrees
        of freedom). None before two rounds."""
        if self.n < 2:
            return None
        _, se, df = self._yuen()
        return (t_quantile(0.975, df) + t_quantile(POWER, df)) * se

    def rounds_needed(self, threshold: float, most: int = MOST_ROUNDS) -> int | None:
        """How many paired rounds would bring the upper bound below `threshold` (a fraction) if the
        estimate and the rounds' winsorized spread held: what a longer budget would buy. None where
        no number up to `most` would (the estimate itself near the threshold, or no spread yet)."""
        if self.n < 3:
            return None
        mean, spread = self._trimmed()
        if not spread > 0 or mean >= math.log1p(threshold):
            return None
        for n in range(self.n + 1, most + 1):
            per_sd, df = _yuen_scale(n)
            se = spread * per_sd
            seen = (t_quantile(0.975, df) + t_quantile(POWER, df)) * se < math.log1p(threshold)
            if mean + t_quantile(0.95, df) * se < math.log1p(threshold) and seen:
                return n
        return None

    def floor(self) -> float | None:
        """The log slowdown an unchanged revision exceeds 5% of the time over `n` rounds (A/A), None without A/A pairs.

        The A/A scale is robust (1.4826 x the median |log ratio|, about 0 so a drift counts): a
        neighbour that hits a few pairs does not raise it; one that hits most of them does."""
        if not len(self.aa) or not self.n:
            return None
        return Z95 * 1.4826 * float(np.median(np.abs(self.aa))) / math.sqrt(self.n)


def paired(base: list[float], cand: list[float], higher_is_better: bool,
           lengths: list[int] | None = None) -> Paired | None:
    """Per-round log slowdowns of `cand` against `base` (rounds where either figure is missing are left out).

    `lengths` are the rounds' measured steps: an A/A pair is only made of two runs of the same length."""
    b, c = np.asarray(base, float), np.asarray(cand, float)
    ok = np.isfinite(b) & np.isfinite(c) & (b > 0) & (c > 0)
    if not ok.any():
        return None
    d = np.log(b[ok] / c[ok]) if higher_is_better else np.log(c[ok] / b[ok])
    # Each revision against itself, back to back: rounds run B C, C B, B C, ... so the base runs of
    # rounds 2k and 2k+1 (and the candidate's of 2k-1 and 2k) are adjacent in time, as a round's pair
    # is: the same noise, and no change of code. (Round numbers are 1-based: index i is round i + 1.)
    size = np.asarray(lengths if lengths is not None else [0] * len(b))[:len(b)]
    aa = [math.log(x[j] / x[i]) for x, first in ((b, 1), (c, 0)) for i in range(first, len(x) - 1, 2)
          for j in (i + 1,) if ok[i] and ok[j] and size[i] == size[j]]
    return Paired(d, np.asarray(aa, float))


@dataclass
class MetricSpec:
    name: str
    label: str
    unit: str
    higher_is_better: bool
    threshold: float  # a fraction: 0.05 is 5% worse
    min_abs: float = 0.0  # and at least this much worse in the metric's unit (memory: bytes)
    mirrors: str | None = None  # not tested on its own: the same figure as this metric, inverted (its verdict)
    settles: str | None = None  # once this metric rules a regression out, that metric's noise leaves the gate decided
    wait_grew: bool | None = None  # the settled metric's steps wait longer (False: they do not; None: unknown)
    gated: bool = True  # False: shown with its interval and floor, not tested (`note` says why)
    note: str = ""


@dataclass
class MetricDecision:
    name: str
    label: str
    unit: str
    higher_is_better: bool
    base: float | None  # the median over rounds of each side's figure
    current: float | None
    change: float | None = None  # the metric's own change, current / base - 1 (geometric mean over rounds)
    slowdown: float | None = None  # exp(mean d) - 1: > 0 is worse
    ci: list[float] | None = None  # 95% CI of `change`
    p_value: float | None = None
    alpha: float | None = None  # the look's level (before Holm)
    significant: bool = False
    floor: float | None = None  # the A/A noise floor as a slowdown fraction
    aa_change: float | None = None  # the base against itself (geometric mean, as a slowdown)
    threshold: float = 0.0
    suspected: bool = False
    upper: float | None = None  # one-sided 95% upper bound of `slowdown`
    undecided: bool = False  # neither a regression nor ruled out: the threshold inside its bound, or below the floor
    verdict: str = OK
    note: str = ""
    gated: bool = True
    settled_by: str | None = None  # a metric a neighbour cannot inflate ruled the regression out for this one
    rounds_needed: int | None = None  # undecided: the rounds that would rule the threshold out, were the spread to hold
    mdc: float | None = None  # the smallest change these rounds could see (Paired.mdc), as a fraction


@dataclass
class Decision:
    metrics: list[MetricDecision]
    rounds: int
    look: int  # 1-based index of the look that decided
    looks: list[int]
    alpha: float
    final: bool  # no more rounds wanted (a verdict, or the budget spent)
    rule: str = ""
    history: list[dict] = field(default_factory=list)

    @property
    def regressions(self) -> list[MetricDecision]:
        return [m for m in self.metrics if m.verdict == REGRESSION]

    @property
    def inconclusive(self) -> list[MetricDecision]:
        """The gated metrics the rounds could not settle (none when a regression decided)."""
        return [m for m in self.metrics if m.verdict == INCONCLUSIVE and m.gated and not m.settled_by]

    @property
    def verdict(self) -> str:
        return REGRESSION if self.regressions else INCONCLUSIVE if self.inconclusive else "pass"

    def decided_by(self) -> str:
        """Which measure decided the verdict, and why it could, in one sentence."""
        if self.regressions:
            return "; ".join(f"{m.label} decided: {m.note}" for m in self.regressions)
        if self.inconclusive:
            return "no measure decided: " + "; ".join(f"{m.label}: {m.note}" for m in self.inconclusive)
        passed = [f"{m.label} up to {m.upper:+.1%}" + (f" (it could see {m.mdc:.1%})" if m.mdc is not None else "")
                  for m in self.metrics if m.gated and m.upper is not None
                  and not m.settled_by and m.verdict in (OK, IMPROVEMENT, NOT_SIGNIFICANT)]
        said = [f"equivalence decided: {', '.join(passed)} at 95%, each below its threshold"] if passed else []
        said += [f"{m.label} (up to {m.upper:+.1%}) was settled by {next(r.label for r in self.metrics if r.name == m.settled_by)}"
                 f", which a busy neighbour delays but barely inflates" for m in self.metrics if m.settled_by and m.upper is not None]
        return "; ".join(said) or "every gated metric passed"


def decide(series: dict[str, tuple[list[float], list[float]]], specs: list[MetricSpec], *,
           alpha: float, plan: list[int], lengths: list[int] | None = None, last: bool = False) -> Decision:
    """The verdict at the current look: `series` maps a metric's name to (base rounds, candidate rounds).

    The look is the last planned look not beyond the rounds seen; `final` says whether the gate
    stops here (a regression, nothing suspected, or the last planned look). `last`: the gate's time
    budget ends here, so this look is its last (it spends the next planned look's share of alpha).
    """
    n = min((len(b) for b, _ in series.values()), default=0)
    k = max((i for i, at in enumerate(plan) if at <= n), default=0)
    level = alpha / len(plan)
    rows: list[MetricDecision] = []
    tests: list[tuple[MetricDecision, Paired, bool, float]] = []
    for spec in specs:
        row, tested = _measure(spec, series.get(spec.name, ([], [])), lengths, level)
        rows.append(row)
        if tested is not None:
            tests.append((row, *tested))
    for (row, _, _, _), rejected in zip(tests, holm([p for _, _, _, p in tests], level)):
        row.significant = rejected
    for row, pr, big_enough, _ in tests:
        _judge(row, pr, big_enough)
    _settle(specs, rows)
    regressed = any(r.verdict == REGRESSION for r in rows)
    open_ = any((r.suspected or r.undecided) and r.verdict != REGRESSION and not r.settled_by for r in rows)
    final = regressed or not open_ or last or k >= len(plan) - 1 or n >= plan[-1]
    if final and not regressed:
        _close(rows, n)
    _mirror(specs, rows)
    rule = (f"regression = worse than the threshold, beyond this runner's A/A noise floor, and significant: "
            f"{TEST}, {CORRECTION} over the gated metrics, {SPENDING} ({len(plan)} looks at {', '.join(map(str, plan))} "
            f"rounds: alpha {alpha:g} / {len(plan)} = {level:.3g} per look)")
    look = min(k + 1 + (last and n > plan[k]), len(plan))  # a budget's look before a planned one takes its place
    return Decision(rows, n, look, plan, alpha, final, rule)


def _measure(spec: MetricSpec, rounds: tuple[list[float], list[float]], lengths: list[int] | None,
             level: float) -> tuple[MetricDecision, tuple[Paired, bool, float] | None]:
    """One metric's figures over the paired rounds, and (its pairs, whether the change is big
    enough in absolute terms, its p-value) where it is tested: a gated metric that is no other's mirror."""
    b, c = rounds
    pr = paired(b, c, spec.higher_is_better, lengths)
    mid_b = float(np.median(b)) if len(b) else None
    mid_c = float(np.median(c)) if len(c) else None
    row = MetricDecision(spec.name, spec.label, spec.unit, spec.higher_is_better, mid_b, mid_c,
                         threshold=spec.threshold, alpha=level)
    if pr is None or pr.n < 2:
        row.gated, row.verdict, row.note = False, "n/a", "missing in some rounds"
        return row, None
    sign = -1 if spec.higher_is_better else 1  # the metric's own change from a slowdown
    row.slowdown = math.expm1(pr.estimate())
    row.change = math.expm1(sign * pr.estimate())
    lo, hi = pr.interval()
    row.ci = sorted([math.expm1(sign * lo), math.expm1(sign * hi)])
    if spec.mirrors:  # shown, not tested: one hypothesis per figure, so Holm's alpha is not split over copies
        row.gated, row.alpha = False, None
        return row, None
    floor = pr.floor()
    row.floor = math.expm1(floor) if floor is not None else None
    row.aa_change = math.expm1(float(np.mean(pr.aa))) if len(pr.aa) else None
    if not spec.gated:
        row.gated, row.alpha, row.verdict, row.note = False, None, REPORTED, spec.note
        return row, None
    row.p_value = p_value = pr.p_value()
    big_enough = spec.min_abs <= 0 or abs((mid_c or 0) - (mid_b or 0)) >= spec.min_abs
    # More rounds can settle a close call (the floor shrinks with them); they cannot make 10 MiB into 64.
    # Suspected: at least half the threshold slower, and the threshold still inside its 95% bound. An
    # unchanged revision's wobble about 0 stops at the first look; this choice cannot raise the error
    # rate (alpha is spent per planned look, whatever decides to continue).
    row.suspected = (big_enough and pr.estimate() > math.log1p(spec.threshold / 2)
                     and math.expm1(pr.upper()) > spec.threshold)
    return row, (pr, big_enough, p_value)


def _judge(row: MetricDecision, pr: Paired, big_enough: bool) -> None:
    """A tested metric's verdict, once Holm's correction said whether it is significant."""
    assert row.slowdown is not None and row.change is not None  # a tested metric was measured (_measure)
    beyond_floor = row.floor is None or row.slowdown > row.floor
    if row.slowdown > row.threshold and beyond_floor and big_enough and row.significant:
        row.verdict = REGRESSION
        row.note = f"{row.slowdown:.1%} worse over {pr.n} paired rounds (p = {row.p_value:.2g})"
    elif row.slowdown > row.threshold:
        row.verdict = NOT_SIGNIFICANT
        why = ([] if row.significant else [f"p = {row.p_value:.2g} not below Holm's level"]) + \
              ([] if beyond_floor else [f"within this runner's noise floor ({row.floor:.1%})"]) + \
              ([] if big_enough else ["too small in absolute terms"])
        row.note = f"{row.slowdown:.1%} worse but " + "; ".join(why)
    elif math.expm1(pr.interval()[1]) < 0 and -row.slowdown > row.threshold / (1 + row.threshold):
        row.verdict = IMPROVEMENT
        row.note = f"{abs(row.change):.1%} better"
    else:
        row.verdict = OK
    row.upper = math.expm1(pr.upper())
    mdc = pr.mdc()
    row.mdc = math.expm1(mdc) if mdc is not None else None
    # Equivalence only where the rounds could have seen the threshold: an upper bound below it from
    # a lucky estimate (the candidate read faster) is not a pass when the change they see is larger.
    blind = row.mdc is not None and row.mdc > row.threshold
    row.undecided = row.verdict != REGRESSION and big_enough and (row.upper > row.threshold or blind)
    row.rounds_needed = pr.rounds_needed(row.threshold) if row.undecided else None


def _settle(specs: list[MetricSpec], rows: list[MetricDecision]) -> None:
    """A metric a neighbour cannot inflate (CPU time) settles the one it `settles` (the wall clock)."""
    for spec, settler in zip(specs, rows):
        row = next((r for r in rows if r.name == spec.settles), None)
        within = row is not None and row.slowdown is not None and (row.slowdown <= row.threshold or spec.wait_grew is False)
        if row is not None and settler.gated and settler.slowdown is not None and not settler.undecided:
            # Only a wall clock whose estimate is within the threshold: one beyond it, beside a CPU time
            # that did not grow, may be a wait the neighbour's noise hides (a sleep, I/O, a lock), and stays open.
            if row.undecided and within and settler.verdict != REGRESSION:
                row.settled_by = settler.name
            elif row.verdict == REGRESSION and settler.verdict in (OK, IMPROVEMENT):
                row.note += (f"; {settler.label} did not grow: the step waits longer (a sleep, I/O, a lock), "
                             "or this runner slowed it: the wall clock alone sees it")


def _close(rows: list[MetricDecision], rounds: int) -> None:
    """The gate stops without a regression: what the rounds could not settle is inconclusive."""
    for row in rows:
        if row.undecided:
            row.verdict, row.note = INCONCLUSIVE, _undecided_note(row, rounds)
            if row.settled_by:
                settler = next(r for r in rows if r.name == row.settled_by)
                row.note += f"; {settler.label}, which a busy neighbour cannot inflate, rules it out: the gate goes by it"


def _mirror(specs: list[MetricSpec], rows: list[MetricDecision]) -> None:
    """A mirrored metric (the same figure inverted: steps/s of a step time) takes its source's verdict."""
    for spec, row in zip(specs, rows):
        source = next((r for r in rows if r.name == spec.mirrors), None)
        if source is not None and row.slowdown is not None:
            row.verdict = source.verdict
            row.note = f"the same figure as {source.label}, inverted: its test decides" if source.verdict != OK else ""


def _undecided_note(row: MetricDecision, rounds: int) -> str:
    """Why the rounds could not rule a regression of the threshold's size out, in one clause."""
    if row.mdc is not None and row.mdc > row.threshold and row.upper is not None and row.upper <= row.threshold:
        return (f"the smallest change {rounds} paired rounds could see here is {row.mdc:.1%}, above the "
                f"{row.threshold:.0%} threshold: not called equivalent")
    if row.floor is not None and row.floor > row.threshold :
        return (f"this runner's A/A noise floor ({row.floor:.1%}) is above the {row.threshold:.0%} threshold: "
                f"a regression that size cannot be told from noise here")
    return (f"{row.slowdown:+.1%} after {rounds} paired rounds, but up to {row.upper:.1%} worse at 95%: "
            f"the {row.threshold:.0%} threshold is still inside the interval")
