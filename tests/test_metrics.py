"""advisor.analysis.metrics' measured window: the sampler ticks every mean over the run is taken from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.engine import Settings, run_rules
from advisor.analysis import metrics
from advisor.analysis.metrics import measured_window, utilization, window_samples
from advisor.profile import Profile
from advisor.rules.registry import load_rules

CATALOGUE = load_rules()


def steps(t_start=(10.0, 11.0, 12.0), t_end=(11.0, 12.0, 13.0)):
    return pd.DataFrame({"index": range(len(t_start)), "t_start": t_start, "t_end": t_end,
                         "duration_s": [b - a for a, b in zip(t_start, t_end)], "profiled": False})


def ticks(times, **columns):
    return pd.DataFrame({"t": list(times), **{k: list(v) for k, v in columns.items()}})


def test_measured_window_spans_first_start_to_last_end():
    assert measured_window(steps()) == (10.0, 13.0)


@pytest.mark.parametrize("table", [
    pd.DataFrame(),
    pd.DataFrame({"duration_s": [0.1]}),  # trace-only steps carry no times
    steps(t_start=(float("nan"),), t_end=(float("nan"),)),
    steps(t_start=(5.0,), t_end=(4.0,)),
])
def test_measured_window_unknown(table):
    assert measured_window(table) is None


def test_window_samples_keeps_ticks_inside_bounds_included():
    s = ticks([0.5, 9.9, 10.0, 11.5, 13.0, 13.1], v=range(6))
    assert window_samples(s, steps())["t"].tolist() == [10.0, 11.5, 13.0]


def test_a_window_shorter_than_a_few_ticks_takes_the_ticks_nearest_its_end():
    s = ticks([0.5, 8.0, 9.0, 9.5, 11.0, 20.0], v=[1, 2, 3, 4, 5, 6])
    assert list(window_samples(s, steps())["v"]) == [3, 4, 5]  # one tick inside 10-13: never one tick alone
    assert list(window_samples(ticks([20.0, 21.0], v=[1, 2]), steps())["v"]) == [1, 2]  # nothing before its end
    assert len(window_samples(s, pd.DataFrame())) == 6  # no window: every tick
    assert window_samples(pd.DataFrame(), steps()).empty


def test_utilization_ignores_start_up_ticks():
    s = ticks([1.0, 2.0, 10.5, 11.5, 12.5], gpu_util_percent=[0, 0, 90, 95, 100], rss_bytes=[9e9, 1, 2, 3, 4])
    u = utilization(s, steps())
    assert u["gpu_util_percent_mean"] == pytest.approx(95.0) and u["rss_bytes_max"] == 4


def _nvml_only(samples):
    """A GPU run without a trace: idle-gpu can only read NVML."""
    return Profile(steps=steps(t_start=tuple(10.0 + i for i in range(6)), t_end=tuple(11.0 + i for i in range(6))),
                   samples=samples, env={"device": "cuda"}, meta={"source": "probe"})


def test_idle_gpu_from_nvml_counts_only_the_measured_window():
    # 20 start-up ticks (imports, CUDA init: GPU idle), then a busy GPU over the six measured steps.
    startup = [(0.5 * i, 0.0) for i in range(20)]
    busy = [(10.0 + 0.5 * i, 92.0) for i in range(13)]
    s = ticks([t for t, _ in startup + busy], gpu_util_percent=[u for _, u in startup + busy])
    assert s["gpu_util_percent"].mean() < 50  # all ticks would read as a mostly idle GPU
    assert run_rules(_nvml_only(s), Settings(select=["GPU001"]), CATALOGUE)[0] == []


def test_idle_gpu_from_nvml_still_fires_on_an_idle_window():
    s = ticks([0.5, 1.0] + [10.0 + 0.5 * i for i in range(13)], gpu_util_percent=[100.0, 100.0] + [20.0] * 13)
    (f,), _ = run_rules(_nvml_only(s), Settings(select=["GPU001"]), CATALOGUE)
    assert f.evidence["nvml_gpu_util_percent_mean"] == 20.0 and f.evidence["gpu_idle_frac"] == 0.8


def test_the_probes_own_cost_is_a_warning_only_on_tiny_steps():
    warning = metrics.probe_cost_warning({"step_time_median_s": 200e-6})
    assert warning.startswith("steps are very short (median 200 µs): the probe's own bookkeeping, about 15 µs a step")
    assert "8% of each" in warning
    assert metrics.probe_cost_warning({"step_time_median_s": 0.05}) is None  # 0.03%: noise
    assert metrics.probe_cost_warning({"step_time_median_s": None}) is None


def test_memory_reports_the_process_trees_peaks_and_their_basis():
    samples = pd.DataFrame({"t": [0.0, 0.1, 0.2], "rss_bytes": [1e8, 3e8, 2e8], "pss_bytes": [float("nan"), 1.5e8, float("nan")],
                            "uss_bytes": [float("nan"), 1e8, float("nan")]})
    mem = metrics.memory({}, samples)
    assert mem["peak_rss_bytes"] == 3e8 and mem["peak_pss_bytes"] == 1.5e8 and mem["peak_uss_bytes"] == 1e8
    assert mem["basis"] == "pss" and "shared" in mem["basis_note"]
    rss_only = metrics.memory({"peak_allocated_bytes": 5}, samples.drop(columns=["pss_bytes", "uss_bytes"]))
    assert rss_only["basis"] == "rss" and rss_only["peak_allocated_bytes"] == 5 and "upper bound" in rss_only["basis_note"]
    assert metrics.memory({}, pd.DataFrame()) == {}


def test_energy_integrates_nvml_power_over_each_window_and_per_sample():
    """Two windows 10 s apart (a baseline and an arm): each integrates its own ticks (400 W over 1 s,
    then 200 W over 0.5 s), the idle gap between them counts nothing."""
    steps = pd.DataFrame({"t_start": [0.0, 0.5, 10.0], "t_end": [0.5, 1.0, 10.5], "samples": [32, 32, 32]})
    ticks = [(t / 10, 400.0) for t in range(0, 11)] + [(5.0, 50.0)] + [(10.0 + t / 10, 200.0) for t in range(0, 6)]
    samples = pd.DataFrame(ticks, columns=["t", "gpu_power_w"])
    got = metrics.energy(samples, steps)
    assert got["joules"] == pytest.approx(400 * 1.0 + 200 * 0.5) and got["seconds"] == pytest.approx(1.5)
    assert got["joules_per_step"] == pytest.approx(500 / 3) and got["joules_per_sample"] == pytest.approx(500 / 96)
    assert got["source"] == "power-samples"  # no counter in these ticks
    assert metrics.energy(samples.drop(columns="gpu_power_w").assign(cpu_percent=1.0), steps) is None  # a CPU run


def counter_ticks(times, watts, power_w):
    """Sampler ticks of a GPU whose energy counter (mJ, from an arbitrary offset since the driver
    loaded) climbs at `watts(t)` while its power reading says `power_w` (a stale one-second average)."""
    t = np.asarray(times, float)
    rate = np.array([watts(x) for x in t])
    mj = 5e9 + np.concatenate([[0.0], np.cumsum((rate[:-1]) * np.diff(t))]) * 1000.0  # piecewise at the ticks
    return pd.DataFrame({"t": t, "gpu_power_w": power_w, "gpu_energy_mj": mj})


def test_energy_follows_the_counter_between_the_windows_ends_not_the_power_readings():
    """The counter climbs at 300 W while NVML power reads 100 W: the window's joules are the counter's
    rise (interpolated between the ticks around its ends), and the source says so."""
    steps = pd.DataFrame({"t_start": [10.03, 10.13, 10.23], "t_end": [10.13, 10.23, 10.33], "samples": [8, 8, 8]})
    samples = counter_ticks(np.arange(9.0, 11.0, 0.1), lambda t: 300.0, 100.0)
    got = metrics.energy(samples, steps)
    assert got["source"] == "energy-counter"
    assert got["joules"] == pytest.approx(300 * 0.3) and got["seconds"] == pytest.approx(0.3)
    assert got["watts_mean"] == pytest.approx(300) and got["joules_per_sample"] == pytest.approx(90 / 24)
    power = metrics.energy(samples, steps, source="power-samples")  # an arm read as its baseline was
    assert power["source"] == "power-samples" and power["joules"] == pytest.approx(100 * 0.3)


def test_a_gpu_windows_energy_is_read_between_its_device_ends_not_when_python_queued_it():
    """Python queued the steps over 10.0-10.3; the device ran them over 10.25-10.55 (`t_device_end`,
    placed by the window's one wait), when the GPU drew 400 W instead of the 100 W before."""
    steps = pd.DataFrame({"t_start": [10.0, 10.1, 10.2], "t_end": [10.1, 10.2, 10.3], "duration_s": [0.1] * 3,
                          "clock": "device", "t_device_end": [10.35, 10.45, 10.55], "samples": [4, 4, 4]})
    samples = counter_ticks(np.arange(9.0, 11.0, 0.05), lambda t: 400.0 if t >= 10.25 - 1e-9 else 100.0, 250.0)
    got = metrics.energy(samples, steps)
    assert got["source"] == "energy-counter" and got["joules"] == pytest.approx(400 * 0.3)
    host_timed = metrics.energy(samples, steps.drop(columns="t_device_end"))
    assert host_timed["joules"] == pytest.approx(100 * 0.25 + 400 * 0.05)  # what the host's span would have said


def test_a_window_the_ticks_do_not_bracket_is_left_out_with_its_steps():
    """The sampler stopped (the child exited) before the second window ended: the first window alone
    is read, over its own steps and samples."""
    steps = pd.DataFrame({"t_start": [10.0, 10.1, 12.0], "t_end": [10.1, 10.2, 12.1], "samples": [8, 8, 32]})
    samples = counter_ticks(np.arange(9.0, 12.05, 0.1), lambda t: 200.0, 50.0)
    got = metrics.energy(samples, steps)
    assert got["source"] == "energy-counter" and got["joules"] == pytest.approx(200 * 0.2)
    assert got["joules_per_step"] == pytest.approx(40 / 2) and got["joules_per_sample"] == pytest.approx(40 / 16)


def test_without_counter_readings_energy_falls_back_on_power_and_says_so():
    """A GPU before Volta (NVML NotSupported: the sampler leaves the column NaN) reads power."""
    steps = pd.DataFrame({"t_start": [10.0, 10.5], "t_end": [10.5, 11.0], "samples": [8, 8]})
    samples = counter_ticks(np.arange(9.0, 12.0, 0.1), lambda t: 300.0, 120.0).assign(gpu_energy_mj=float("nan"))
    got = metrics.energy(samples, steps)
    assert got["source"] == "power-samples" and got["joules"] == pytest.approx(120 * 1.0)
    assert metrics.energy(samples, steps, source="energy-counter") is None  # asked for the counter: none to read


def test_an_old_samples_csv_without_the_counter_column_still_reads(tmp_path):
    """A run dir written before the counter was sampled: its samples.csv has no gpu_energy_mj."""
    from advisor.analysis import steptime

    gold = Path(__file__).parent / "gold" / "rundir"
    profile = Profile.from_run_dir(gold)
    assert "gpu_energy_mj" not in profile.samples and "gpu_power_w" in profile.samples
    got = metrics.energy(profile.samples, steptime.timed_steps(profile.steps)[0])
    assert got["source"] == "power-samples" and got["joules"] > 0 and got["joules_per_sample"] > 0


def test_the_published_energy_sources_are_the_ones_metrics_names():
    from advisor import schema

    source = schema.schema("report")["$defs"]["Energy"]["properties"]["source"]
    assert [kind.get("enum") for kind in source["anyOf"]] == [list(metrics.ENERGY_SOURCES), None]


def test_a_gpu_runs_terminal_names_its_step_clock_and_energy():
    from advisor.report import Report
    from advisor.report_blocks import Energy
    from advisor.reports import words

    steps = [{"index": i, "duration_s": 0.0618, "host_s": 0.0131, "clock": "device"} for i in range(5)]
    energy = {"joules": 100.0, "seconds": 0.309, "watts_mean": 323.6, "joules_per_step": 20.0,
              "joules_per_sample": 1.25}
    report = Report.of({"steps": steps, "energy": {**energy, "source": "energy-counter"}})
    assert words.step_clock_words(report) == " on the device (Python queued it in 13.1 ms)"
    assert words.energy_words(report.energy) == ("1.25 J/sample", "323.6 W mean over 309.0 ms, NVML energy counter")
    assert words.energy_words(Energy.of({**energy, "source": "power-samples"}))[1].endswith(", NVML power samples")
    assert words.energy_words(Energy.of(energy))[1].endswith(", NVML")  # a report from before the source was said
    cpu = Report.of({"steps": [{"index": 0, "duration_s": 0.01, "host_s": 0.01, "clock": "host"}]})
    assert words.step_clock_words(cpu) == "" and words.energy_words(cpu.energy) == ("", "")


def test_another_process_on_the_gpu_during_the_window_is_contention():
    quiet = ticks([9.5, 10.5, 11.5, 12.5], gpu_other_procs=[1, 0, 0, 0])  # a process left before step 1
    assert metrics.contention_warning(steps(), quiet, 2) is None
    shared = ticks([9.5, 10.5, 11.5, 12.5], gpu_other_procs=[0, 0, 2, 1])
    said = metrics.contention_warning(steps(), shared, 2)
    assert said.startswith("the machine looks contended") and "2 other processes ran on the script's GPU" in said
    assert metrics.contention_warning(steps(), ticks([10.5, 11.5], gpu_util_percent=[50, 60]), 2) is None  # not sampled


def test_a_parts_share_of_the_steps_is_summed_so_a_bursty_loader_is_not_hidden():
    """Four workers hand over their batches in bursts: three steps wait nothing, the fourth waits
    150 ms. A median step says 0% waiting; the share of the steps' time says 75%, as the profiler's
    plugin and torchtitan count it. A part that was not measured is None, not 0."""
    from advisor.analysis import steptime

    steps = pd.DataFrame({"duration_s": [0.015, 0.015, 0.015, 0.195] * 3,
                          "data_wait_s": [0.0, 0.0, 0.0, 0.18] * 3, "optimizer_s": float("nan")})
    assert steps["data_wait_s"].median() == 0.0
    assert steptime.share(steps, "data_wait_s") == pytest.approx(0.75)
    assert steptime.share(steps, "optimizer_s") is None and steptime.share(steps, "backward_s") is None
    assert steptime.share(steps.iloc[:0], "data_wait_s") is None
    assert metrics.breakdown(steps)["data_wait_frac"] == pytest.approx(0.75)


@pytest.mark.parametrize("tree, main, workers, waits", [
    (90.0, 60.0, 0, True),     # the tree under half of the 2 cores
    (100.0, 70.0, 4, True),    # 4 workers sleeping on I/O: 0.3 cores of the 1.3 the main process leaves them
    (100.0, 70.0, 0, False),   # the same load with no workers: the main process loads, and computes
    (190.0, 60.0, 4, False),   # 4 workers decoding on the CPU: 1.3 cores of the 1.4 left
])
def test_loading_waits_where_the_workers_leave_the_cores_the_main_process_does_not_use(tree, main, workers, waits):
    """loader-io-workers' 4 workers sleep 2 ms a sample: the tree at 0.9-1.0 of 2 cores read it
    CPU-bound 1 run in 3 on the tree alone; its workers used 0.3 of the 1.3 cores left."""
    steps = pd.DataFrame({"t_start": [0.0, 0.5], "t_end": [0.5, 1.0]})
    samples = pd.DataFrame({"t": [0.1 * i for i in range(11)], "cpu_percent": tree, "main_cpu_percent": main})
    assert metrics.io_bound(samples, steps, 2, workers) is waits
