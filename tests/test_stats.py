"""advisor.analysis.stats' experiment statistics: speedup over several runs per side, on the shared bootstrap."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.analysis.stats import baseline_drift, ratio_ci, speedup_ci


def run(durations, samples=16):
    return pd.DataFrame({"duration_s": durations, "samples": samples})


def test_speedup_is_reproducible():
    rng = np.random.default_rng(2)
    base = [run(0.02 + rng.normal(0, 0.002, 20)), run(0.021 + rng.normal(0, 0.002, 20))]
    cand = [run(0.015 + rng.normal(0, 0.002, 20))]
    first = speedup_ci(base, cand, by_samples=True)
    assert first == speedup_ci(base, cand, by_samples=True)
    assert first[1] < first[0] < first[2]


def test_runs_keep_their_weight_and_their_disagreement_widens_the_interval():
    """Each side is the mean of its runs' rates: a short slow run counts as much as a long fast one.
    Two baseline windows 2x apart, each of steady steps: the steps alone show no noise, the windows
    do, and the interval says so."""
    base = [run([0.01] * 40), run([0.02] * 4)]
    ratio, lo, hi = speedup_ci(base, [run([0.01] * 10)], by_samples=False)
    assert ratio == pytest.approx(100 / ((100 + 50) / 2))
    assert lo < 1.05 and hi > 1.9  # the whole range the two windows allow
    same = [run([0.01] * 40), run([0.0101] * 4), run([0.0099] * 4), run([0.01] * 4)]
    _, lo, hi = speedup_ci(same, [run([0.008] * 10)], by_samples=False)
    assert 1.18 < lo <= hi < 1.33  # four windows that agree: a tight interval
    _, lo2, hi2 = speedup_ci(same[:2], [run([0.008] * 10)], by_samples=False)
    assert lo2 < lo and hi2 > hi  # two that agree by 1% say less of the next: fewer degrees of freedom


def test_one_window_borrows_the_other_sides_spread():
    """A fix measured in one window cannot show its own window-to-window spread: the baseline's is
    applied to it, so a claim from a single lucky window is not pinned by its steps alone."""
    rng = np.random.default_rng(0)
    steady = [run(0.010 + rng.normal(0, 1e-5, 20)), run(0.013 + rng.normal(0, 1e-5, 20))]
    _, lo, hi = speedup_ci(steady, [run(0.008 + rng.normal(0, 1e-5, 20))], by_samples=False)
    _, lo1, hi1 = speedup_ci([steady[0]], [run(0.008 + rng.normal(0, 1e-5, 20))], by_samples=False)
    assert hi / lo > 1.2  # the baseline's windows 30% apart
    assert 1.05 < hi1 / lo1 < hi / lo  # one window a side: the prior spread, not the steps' 0.1%


def test_a_one_step_run_is_a_fixed_rate():
    ratio, lo, hi = speedup_ci([run([0.02])], [run([0.01])], by_samples=True)
    assert (ratio, lo, hi) == (2.0, 2.0, 2.0)
    ratio, lo, hi = speedup_ci([run([0.02])], [run([0.01, 0.011, 0.009, 0.012])], by_samples=False)
    assert lo < ratio < hi and lo > 1.2


def test_a_zero_time_run_gives_no_interval():
    with np.errstate(divide="ignore"):
        ratio, lo, hi = speedup_ci([run([0.01, 0.01])], [run([0.0, 0.0])], by_samples=True)
    assert ratio == np.inf and np.isnan(lo) and np.isnan(hi)


def test_ratio_ci_still_brackets_its_estimate():
    ci = ratio_ci([1.0, 1.1, 0.9, 1.05, 0.95], [2.0, 2.2, 1.8, 2.1, 1.9])
    assert ci.estimate == pytest.approx(2.0) and ci.low <= ci.estimate <= ci.high and ci.low > 1.7


def test_two_single_windows_borrow_a_third_partys_spread():
    """Two arms of one window each, held head to head: neither shows its window-to-window spread,
    so the baseline windows around them lend theirs (`spread`)."""
    rng = np.random.default_rng(1)
    a, b = run(0.010 + rng.normal(0, 1e-5, 20)), run(0.0095 + rng.normal(0, 1e-5, 20))
    _, lo0, hi0 = speedup_ci([a], [b], by_samples=False)
    assert lo0 < 1.04  # the steps say b is 5% faster, surely; one window each cannot say the next will be
    bases = [run(0.020 + rng.normal(0, 1e-5, 20)), run(0.023 + rng.normal(0, 1e-5, 20))]
    _, lo, hi = speedup_ci([a], [b], by_samples=False, spread=bases)
    assert lo < 1.0 < hi and hi / lo > hi0 / lo0  # windows of this machine move 15%: 5% is not shown


def test_the_t_quantile_is_students():
    """The intervals' quantile, from scipy.special (its order: degrees of freedom, then the level), is scipy.stats' t."""
    from scipy import stats as st

    from advisor.analysis.stats import t_quantile

    for p, df in [(0.975, 1.0), (0.975, 7.3), (0.95, 40.0), (0.5 + 0.9 / 2, 3.0)]:
        assert t_quantile(p, df) == pytest.approx(float(st.t.ppf(p, df)), rel=1e-9)


LOADER_STEPS = Path(__file__).parent / "data" / "runs" / "loader_io_workers_steps"


def _recorded(workers: int) -> pd.DataFrame:
    """A real loader's unprofiled steps (tests/data/runs/README.md): its batches come in bursts."""
    steps = pd.read_csv(LOADER_STEPS / f"workers-{workers}.csv")
    return steps[~steps["profiled"].astype(bool)].reset_index(drop=True)


def test_a_loaders_bursts_cancel_within_a_window():
    """One window of a 4-worker I/O loader (40 steps) against one of the same loader at 8 workers
    (80 steps), as an arm's first pass measures them: read step by step, a burst's one 60 ms wait
    among instant steps put the rate 20% in doubt and the interval at 0.9-4.8x, where such windows
    move 1-2% from one to the next; in blocks of steps the bursts cancel."""
    four, eight = _recorded(4), _recorded(8)
    truth = (1 / eight["duration_s"].mean()) / (1 / four["duration_s"].mean())
    pairs = [speedup_ci([four.iloc[k * 40:(k + 1) * 40]], [eight.iloc[k * 80:(k + 1) * 80]], by_samples=True)
             for k in range(4)]
    for ratio, lo, hi in pairs:
        assert lo < truth < hi and 1.5 < lo and hi / lo < 1.5, (ratio, truth, pairs)


def test_steps_that_vary_on_their_own_keep_their_floor():
    """Independent steps (30% apart, one window a side): the blocks read about what the steps read
    one by one (the least of several block sizes' readings, each of 8 blocks at least, is a little
    lower: 0.48 in logs where step by step read 0.57, and 0.37 with 4 blocks), so a lucky window is
    not pinned by its steps either."""
    rng = np.random.default_rng(3)
    widths = []
    for _ in range(100):
        base, cand = run(rng.lognormal(np.log(0.010), 0.3, 40)), run(rng.lognormal(np.log(0.008), 0.3, 40))
        _, lo, hi = speedup_ci([base], [cand], by_samples=False)
        widths.append(math.log(hi / lo))
    assert 0.43 < float(np.median(widths)) < 0.6, widths


def test_windows_of_independent_steps_drift_no_more_than_their_steps_say():
    """The baseline's drift is its windows' spread beyond their steps' noise read one by one: read
    in blocks (a little lower for independent steps), four windows of the same 4.5 ms steps drifted
    over 3% in 34% of draws, and beside a burner tiny-gpt's 12-14% held a 1.21x fix under its bar."""
    rng = np.random.default_rng(5)
    drifts = [baseline_drift([run(rng.lognormal(math.log(0.0045), 0.3, 100)) for _ in range(4)], by_samples=False)
              for _ in range(100)]
    assert float(np.mean(np.array(drifts) > 0.03)) < 0.25
