"""Steps a neighbour disturbed, read on the kernel's wait clock, are left out of the shares the rules
judge (issue 65: rules that did not fire on a contended profile). The recorded run is real
(tests/data/runs/README.md); the others are fake clocks shaped like the cases they stand for."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from advisor.analysis import metrics
from advisor.analysis.steptime import timed_steps
from advisor.profile import Profile
from advisor.rules import helpers as h
from advisor.rules.pr001_fp32_matmul import check as pr001

RUN = Path(__file__).parent / "data" / "runs" / "conv_mnist_beside_a_burner"


def test_a_burners_steps_are_set_aside_and_the_conv_nets_gemms_are_seen():
    """conv-mnist beside a burner: 10 of its 15 timed steps waited for a core while the burner ran
    (448 ms against 30 ms). Their median made the GEMMs' share 14%, under PR001's 30% bar, and the
    rule said nothing; on the quiet steps it is 61% and the rule fires, as on a quiet machine."""
    profile = Profile.from_run_dir(RUN)
    steps, _ = timed_steps(profile.steps)
    hit = metrics.disturbed_steps(steps, profile.samples, profile.env.cpu_count)
    assert int(hit.sum()) == 10 and len(steps) == 15
    assert hit[steps["duration_s"] > 0.1].all() and (steps.loc[~hit, "duration_s"] < 0.05).all()
    assert 0.025 < h.clean_step_us(profile) / 1e6 < 0.035
    (finding,) = pr001(profile)
    assert finding.code == "PR001" and finding.evidence["fp32_gemm_step_frac"] > 0.5
    warning = metrics.contention_warning(profile.steps, profile.samples, profile.env.cpu_count)
    assert "10 of 15 measured steps waited for a core while other processes ran (the kernel's wait clock); " \
           "a step's length is read on the other 5" in warning, warning


def test_profiled_steps_a_burner_disturbed_are_not_the_gemms_share():
    """Every profiled step of this run waited beside the burner: their GEMMs took 143 ms a step
    against 17-20 ms quiet, and over a quiet step's 28 ms read as 100% of it. The shortest
    profiled step stands for them: 60%, as the quiet runs read 56-66%."""
    profile = Profile.from_run_dir(RUN.parent / "conv_mnist_profiled_beside_a_burner")
    assert len(h.trace_steps(profile)) == 5 and len(h.quiet_trace_steps(profile)) == 1
    share, _ = h.cpu_fp32_gemm_share(profile)
    assert 0.5 < share < 0.7


def _clock(rates: list[tuple[float, float, float]], tick: float = 0.1) -> pd.DataFrame:
    """Sampler ticks: for each (seconds, wait rate in cores, outside load in cores) a stretch of ticks."""
    rows, t, wait = [], 0.0, 0.0
    for seconds, rate, outside in rates:
        for _ in range(round(seconds / tick)):
            rows.append({"t": t, "runq_wait_s": wait, "cpu_percent": 200.0 - 100 * outside,
                         "sys_cpu_percent": 100.0})
            t, wait = t + tick, wait + rate * tick
    rows.append({"t": t, "runq_wait_s": wait, "cpu_percent": 100.0, "sys_cpu_percent": 100.0})
    return pd.DataFrame(rows)


def _steps(n: int, every: float) -> pd.DataFrame:
    return pd.DataFrame({"t_start": [0.05 + i * every for i in range(n)],
                         "t_end": [0.05 + (i + 1) * every - 0.001 for i in range(n)]})


def test_a_script_that_waits_on_its_own_workers_is_not_disturbed():
    """Workers and threads that oversubscribe the cores wait in every step alike, with no one else
    on the machine: that is the script's cost, not a neighbour's."""
    samples = _clock([(4.0, 0.9, 0.0)])
    assert not metrics.disturbed_steps(_steps(30, 0.1), samples, 2).any()


def test_only_the_steps_the_neighbour_overlapped_are_disturbed():
    samples = _clock([(1.0, 0.02, 0.0), (1.0, 1.0, 1.0), (1.0, 0.02, 0.0)])
    hit = metrics.disturbed_steps(_steps(29, 0.1), samples, 2)
    assert hit[12:18].all() and not hit[:8].any() and not hit[22:].any()


def test_without_the_kernels_wait_clock_no_step_is_called_disturbed():
    samples = _clock([(1.0, 1.0, 1.0)]).drop(columns=["runq_wait_s"])
    assert not metrics.disturbed_steps(_steps(9, 0.1), samples, 2).any()


def test_a_window_disturbed_in_part_is_read_on_the_steps_a_tick_away_from_the_neighbour():
    """A burst through the middle third of a window: the steps it overlapped and those within half a
    tick of them are left out, the rest kept with their own (quiet) load and wait. Past half the
    window disturbed, or with no clock, the window is not read in part."""
    samples = _clock([(1.0, 0.02, 0.0), (1.0, 1.0, 1.0), (1.0, 0.02, 0.0)])
    steps = _steps(29, 0.1)
    keep, other, wait = metrics.quiet_part(steps, samples, 2)
    hit = metrics.disturbed_steps(steps, samples, 2)
    assert not (keep & hit).any() and keep.sum() >= len(steps) / 2
    assert not keep[int(hit.idxmax()) - 1] and not keep[int(hit[::-1].idxmax()) + 1]  # half a tick's margin each side
    assert keep[:7].all() and keep[23:].all()
    assert other < metrics.OUTSIDE_LOAD_WARN_CORES and wait == pytest.approx(0.02, abs=0.01)
    assert metrics.quiet_part(steps, _clock([(0.5, 0.02, 0.0), (2.0, 1.0, 1.0), (0.5, 0.02, 0.0)]), 2) is None
    assert metrics.quiet_part(steps, _clock([(3.0, 0.02, 0.0)]), 2) is None  # nothing disturbed
    assert metrics.quiet_part(steps, samples.drop(columns=["runq_wait_s"]), 2) is None
