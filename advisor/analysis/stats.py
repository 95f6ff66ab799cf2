"""Small, general statistics for comparing two sets of timings (two runs, two configurations).

Used by `advise compare` (the regression gate) and free for any other comparison of a
baseline sample `a` with a candidate sample `b`, e.g. an experiment's speedup:

- :func:`mann_whitney` : one- or two-sided Mann-Whitney U p-value (scipy), no normality assumed.
- :func:`min_p_value`  : the smallest p-value the exact test can reach with these sample sizes,
  so a caller can tell "not significant" from "too few samples to ever be significant".
- :func:`ratio_ci`     : bootstrap confidence interval of ``stat(b) / stat(a)`` for any
  statistic (median by default; mean, a quantile ...); deterministic (fixed seed).
- :func:`ratio_of_means_ci_t` : t-based (delta method, Welch degrees of freedom) interval for
  ``mean(b) / mean(a)``; cheap, fine for a handful of repeated runs.
- :func:`speedup_ci` / :func:`baseline_drift` : an experiment's throughput ratio over several
  windows or runs per side (Student's t over windows), and the run-to-run spread of the baseline.

Every function takes plain sequences of floats (the experiment ones, per-run step tables) and
returns plain floats.
"""

from __future__ import annotations

import importlib
import math
import threading
import warnings
from types import ModuleType
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from .steptime import loader_started, per_step

Values = Sequence[float] | np.ndarray  # a sample: a list of floats or an array (NaN and inf are dropped)


def scipy_stats() -> ModuleType:
    """scipy.stats, imported on first use (here and by the gate's sequential test)."""
    from scipy import stats  # scipy.stats: 0.7 s to import, only where a test or an interval is computed

    return stats


def preload() -> None:
    """Import what :func:`t_quantile` needs in a thread, while the script starts up: the arms' first
    judgement waited 0.1-0.15 s for it inside their time budget, a tenth of a window on minGPT's adder."""
    threading.Thread(target=importlib.import_module, args=("scipy.special",), name="advise-preload").start()


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile: scipy.special's, 0.07-0.15 s to import where scipy.stats takes 0.3-0.8 s, which
    the arms' first judgement paid inside their time budget while the child waited for its plan."""
    from scipy.special import stdtrit

    return float(stdtrit(df, p))


def _array(values: Values) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    return arr[np.isfinite(arr)]


def mann_whitney(a: Values, b: Values, alternative: str = "two-sided") -> float:
    """p-value of the Mann-Whitney U test of `a` against `b`.

    `alternative`: "two-sided", "greater" (b tends to be larger than a) or "less" (b tends to be
    smaller). Note the order: the question is always about `b`, the candidate, relative to `a`.
    Returns 1.0 when either sample is empty.
    """
    a, b = _array(a), _array(b)
    if len(a) == 0 or len(b) == 0:
        return 1.0
    flipped = {"greater": "less", "less": "greater", "two-sided": "two-sided"}[alternative]
    # scipy's alternative is about its first argument: "less" means x tends to be smaller than y.
    _st = scipy_stats()

    return float(_st.mannwhitneyu(a, b, alternative=flipped).pvalue)


def min_p_value(n_a: int, n_b: int, alternative: str = "greater") -> float:
    """Smallest p-value the exact Mann-Whitney test can give with samples of these sizes.

    With 3 steps against 3 a one-sided test can never go below 1/C(6, 3) = 0.05: asking it for
    p < 0.01 is asking the impossible, and the caller should say so instead of "no change".
    """
    if n_a < 1 or n_b < 1:
        return 1.0
    p = 1.0 / math.comb(n_a + n_b, n_a)
    return min(1.0, 2 * p) if alternative == "two-sided" else p


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    confidence: float

    def above(self, value: float) -> bool:
        """The whole interval is above `value` (e.g. 1.0: b is larger than a)."""
        return self.low > value

    def below(self, value: float) -> bool:
        return self.high < value

    def as_list(self) -> list[float]:
        return [self.low, self.high]


def _median(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(x, axis=axis)


def ratio_ci(
    a: Values,
    b: Values,
    statistic: Callable = _median,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> Interval | None:
    """Bootstrap CI of ``statistic(b) / statistic(a)`` (BCa; percentile when BCa is degenerate).

    `statistic(x, axis=-1)` must be vectorized like ``np.median`` / ``np.mean``. Returns None
    when a sample has fewer than 2 values or the baseline statistic is 0.
    """
    a, b = _array(a), _array(b)
    if len(a) < 2 or len(b) < 2:
        return None
    base = float(statistic(a))
    if base == 0:
        return None
    estimate = float(statistic(b)) / base

    def ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return statistic(y, axis=axis) / statistic(x, axis=axis)

    bounds = _bootstrap((a, b), ratio, confidence, n_resamples, seed, ("BCa", "percentile"))
    if bounds is None:
        return Interval(estimate, estimate, estimate, confidence)
    low, high = bounds
    return Interval(estimate, min(low, estimate), max(high, estimate), confidence)


def _bootstrap(data: tuple, statistic: Callable, confidence: float, n_resamples: int, seed: int,
               methods: Sequence[str]) -> tuple[float, float] | None:
    """The one bootstrap: scipy's, each sample resampled on its own, the first method with a finite interval.

    Every sample is drawn from the same seeded generator, in order, so an interval is reproducible
    from run to run; None when no method gives a finite interval.
    """
    _st = scipy_stats()

    for method in methods:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                res = _st.bootstrap(data, statistic, paired=False, vectorized=True, confidence_level=confidence,
                                    n_resamples=n_resamples, method=method, rng=np.random.default_rng(seed))
            except (ValueError, ZeroDivisionError, FloatingPointError):
                continue
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(low) and math.isfinite(high):
            return low, high
    return None


def _rate(dur: np.ndarray, work: np.ndarray, axis: int = -1) -> np.ndarray:
    return work.sum(axis=axis) / dur.sum(axis=axis)


# What one window's rate is believed to vary by before any window shows it (log scale), worth this
# many windows: two baseline windows that agree by chance cannot pin a fix's first window to them
# (the windows of this 2-core machine's truth cases moved 2-4% from one to the next).
WINDOW_SD_PRIOR = 0.02
WINDOW_DF_PRIOR = 2
MIN_BLOCKS = 8  # a run's steps read in blocks (:func:`_rate_var`): at least this many, so their spread shows
MAX_BLOCK = 32  # steps, at most: a burst of 16 workers' batches at the default prefetch of 2


def speedup_ci(baseline: list[pd.DataFrame], candidate: list[pd.DataFrame], *, by_samples: bool,
               confidence: float = 0.95, spread: list[pd.DataFrame] | None = None,
               process_sd: float = 0.0) -> tuple[float, float, float]:
    """Throughput ratio candidate/baseline over several windows (or runs) each, and its interval.

    A window's throughput is its work over its time; each side is the mean of its windows. The
    window, not the step, is the unit: what moves a whole window (a loader's workers scheduled
    differently, a thread pool, an allocator's state, a neighbour's burst) is more than its steps
    show, and resampling two or three windows cannot show it either (a bootstrap over them gave a
    loader value 3.46x (3.24-3.71x) verified where the same value read 2.23-2.97x in three more
    runs). So the log of each window's rate is its side's level plus window noise; the noise's
    variance is pooled over both sides' windows (and `spread`'s: two arms of one window each, held
    against each other, borrow the baseline windows' spread), never below what the windows' own
    steps show, and a prior spread (WINDOW_SD_PRIOR, worth WINDOW_DF_PRIOR windows) weighs in
    where the windows are few; the interval is Student's t on those degrees of freedom, which a
    handful of windows keeps wide. `process_sd` (log scale) is what varies between processes that one
    process's windows cannot show, added in quadrature. The interval is NaN when it cannot be
    computed (a zero-time window).

    Windows of whole epochs (each holds as many epoch starts, :func:`.steptime.loader_started`) take
    no floor from their steps: an epoch's first step, 15 times the others where the loader forks its
    workers anew, is each window's own shape, not noise about its rate (a floor from it read a 1.78x
    fix as 0.08-13.7x)."""
    frames = [*baseline, *candidate]
    runs = [per_step(frame, by_samples) for frame in frames]
    n_base, n_cand = len(baseline), len(candidate)
    point = np.array([_rate(dur, work) for dur, work in runs])
    estimate = float(np.mean(point[n_base:])) / float(np.mean(point[:n_base]))
    if not np.isfinite(point).all() or (point <= 0).any():
        return estimate, math.nan, math.nan
    logs = np.log(point)
    groups = [logs[:n_base], logs[n_base:]]
    if spread:
        lent = np.array([_rate(dur, work) for dur, work in (per_step(f, by_samples) for f in spread)])
        lent = lent[np.isfinite(lent) & (lent > 0)]
        groups.append(np.log(lent))
    if n_base < 2 and n_cand < 2 and not spread and all(len(dur) < 2 for dur, _ in runs):
        return estimate, estimate, estimate  # one step a side: nothing varies that anything shows
    within = np.array([_rate_var(dur, work) for dur, work in runs]) / point ** 2  # each window's steps, log scale
    df = sum(len(g) - 1 for g in groups if len(g))
    squares = sum(float(((g - g.mean()) ** 2).sum()) for g in groups if len(g))
    epochs = {int(loader_started(f).sum()) for f in frames}
    whole = len(epochs) == 1 and min(epochs) > 0
    floor = float(np.nanmean(within)) if np.isfinite(within).any() and not whole else 0.0
    var = max((WINDOW_DF_PRIOR * WINDOW_SD_PRIOR ** 2 + squares) / (WINDOW_DF_PRIOR + df), floor)
    var = var * (1 / n_base + 1 / n_cand) + process_sd ** 2
    quantile = t_quantile(1 - (1 - confidence) / 2, WINDOW_DF_PRIOR + df)
    half = float(quantile) * math.sqrt(var)
    return estimate, estimate * math.exp(-half), estimate * math.exp(half)


def baseline_drift(baseline: list[pd.DataFrame], by_samples: bool) -> float:
    """Relative drift of throughput between baseline runs: noise a per-step interval can't see.

    Steps within one run are resampled for the interval, but a shared machine also drifts from
    run to run; the baselines measured around a candidate show how much. Only the spread beyond
    what each run's own step-to-step noise explains is drift (the between-run variance less the
    within-run one, as a random-effects model reads it): ten 16 ms steps of a loader that hands
    over batches unevenly differ by 20% from the next ten with nothing drifting, and that noise is
    in the interval already. Returned as a spread over the mean rate: sqrt(2) standard deviations,
    the range of two runs that drift and have no step noise.
    """
    runs = [per_step(frame, by_samples) for frame in baseline]
    runs = [(dur, work) for dur, work in runs if len(dur) and dur.sum() > 0]
    if len(runs) < 2:
        return 0.0
    rates = np.array([_rate(dur, work) for dur, work in runs])
    # the steps' noise read one by one: in blocks it reads a little lower for independent steps, and
    # beside a burner tiny-gpt's drift then read 12-14%, holding a 1.21x (1.07-1.38x) fix under its bar
    within = np.array([_rate_var(dur, work, in_blocks=False) for dur, work in runs])
    noise = float(np.nanmean(within)) if np.isfinite(within).any() else 0.0  # runs of one step: no noise known
    excess = max(0.0, float(rates.var(ddof=1)) - noise)
    return float(np.sqrt(2 * excess) / rates.mean())


def _rate_var(dur: np.ndarray, work: np.ndarray, *, in_blocks: bool = True) -> float:
    """The variance of a run's rate (work over time) from its steps' own spread (delta method for a
    ratio of sums); NaN with fewer than 2 steps.

    The steps' deviations from the run's rate are summed over blocks of consecutive steps, at the
    block size whose sums vary least (:data:`MIN_BLOCKS` blocks at least): a DataLoader's workers hand
    over batches in bursts, one long wait and then as many instant steps as there are batches ready,
    and within one cycle those cancel. Read step by step, a 4-worker I/O loader's 40-step windows
    showed their rate 18% in doubt where they moved 1.6% from one to the next (in blocks: 2.5%), and
    a 2x loader fix went unverified (0.88-4.76x). Steps that vary independently read a little less
    in blocks than one by one (the least of several readings): an interval 0.48 wide in logs where
    it was 0.57 (tests/test_stats.py). `in_blocks` False: one by one."""
    n = len(dur)
    if n < 2:
        return float("nan")
    rate = work.sum() / dur.sum()
    resid = work - rate * dur  # per-step deviation from the run's rate, in work units
    least = float(resid.var(ddof=1) * n)
    for size in range(2, min(n // MIN_BLOCKS, MAX_BLOCK) + 1) if in_blocks else ():
        blocks = n // size
        sums = resid[: blocks * size].reshape(blocks, size).sum(axis=1)
        least = min(least, float(sums.var(ddof=1)) * blocks * n / (blocks * size))
    return least / dur.sum() ** 2


def ratio_of_means_ci_t(a: Values, b: Values, confidence: float = 0.95) -> Interval | None:
    """t-based CI of ``mean(b) / mean(a)``: delta method with Welch-Satterthwaite degrees of freedom.

    Good enough when both means are well away from 0 relative to their standard errors (timings,
    throughputs); returns None with fewer than 2 values per sample or a zero baseline mean.
    """
    a, b = _array(a), _array(b)
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = float(a.mean()), float(b.mean())
    if ma == 0:
        return None
    r = mb / ma
    va, vb = float(a.var(ddof=1)) / len(a), float(b.var(ddof=1)) / len(b)  # squared standard errors
    rel_a, rel_b = va / ma**2, (vb / mb**2 if mb else 0.0)
    se = abs(r) * math.sqrt(rel_a + rel_b)
    if se == 0:
        return Interval(r, r, r, confidence)
    # Welch-Satterthwaite on the relative variances (each term's own df).
    num = (rel_a + rel_b) ** 2
    den = (rel_a**2 / (len(a) - 1) if rel_a else 0.0) + (rel_b**2 / (len(b) - 1) if rel_b else 0.0)
    df = num / den if den else float(len(a) + len(b) - 2)
    t = t_quantile(0.5 + confidence / 2, df)
    return Interval(r, r - t * se, r + t * se, confidence)
