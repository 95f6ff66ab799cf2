"""Sampler against real processes (no mocks): a child that burns CPU and forks memory-hungry workers."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import time
import types

import numpy as np
import pandas as pd
import pytest

from advisor.probe import nvml_reader as nvml_module
from advisor.probe.nvml_reader import GPU_COLUMNS, _resolve_gpu_index, nvml_snapshot, other_gpu_processes, script_gpu
from advisor.probe.sampler import COLUMNS, Sampler
from advisor.probe.tree_cpu import Times, TreeCpu

MB = 1024 * 1024

# Main process burns CPU; after 0.3 s it forks 2 workers (like DataLoader workers) that each
# allocate and touch ALLOC_MB, then burn CPU while holding it.
ALLOC_MB = 200
CHILD = textwrap.dedent(
    f"""
    import multiprocessing as mp, time

    def burn(sec):
        end = time.monotonic() + sec
        x = 0
        while time.monotonic() < end:
            x += 1

    def worker():
        buf = bytearray({ALLOC_MB} * 1024 * 1024)
        for i in range(0, len(buf), 4096):
            buf[i] = 1  # bytearray is calloc'd: pages only count in RSS once touched
        burn(0.8)

    if __name__ == "__main__":
        burn(0.3)
        ctx = mp.get_context("fork")
        procs = [ctx.Process(target=worker) for _ in range(2)]
        for p in procs:
            p.start()
        burn(0.8)
        for p in procs:
            p.join()
    """
)


def _nvml_gpu_count() -> int:
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return 0
    try:
        return pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError:
        return 0
    finally:
        pynvml.nvmlShutdown()


HAS_GPU = _nvml_gpu_count() > 0


def _wait_done(sampler: Sampler, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while sampler.running and time.monotonic() < end:
        time.sleep(0.02)
    return not sampler.running


@pytest.fixture(scope="module")
def workload_run():
    """Sample the CPU/memory workload once at 50 ms; the sampler must end by itself."""
    child = subprocess.Popen([sys.executable, "-c", CHILD])
    sampler = Sampler(child.pid, interval_s=0.05)
    sampler.start()
    try:
        child.wait(timeout=10)
        stopped_by_itself = _wait_done(sampler, timeout=2.0)
    finally:
        sampler.stop()
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0
    return sampler, sampler.to_frame(), stopped_by_itself


def test_samples_process_tree(workload_run):
    sampler, df, _ = workload_run
    assert list(df.columns) == COLUMNS
    assert len(df) >= 10, sampler.notes
    assert df["t"].is_monotonic_increasing and df["t"].diff().dropna().gt(0).all()
    # t is time.monotonic(), the child's clock: the run must sit around "now".
    assert abs(df["t"].iloc[-1] - time.monotonic()) < 30
    assert df["cpu_percent"].max() > 50
    assert df["n_procs"].max() >= 3
    assert df["sys_cpu_percent"].between(0, 100).all()
    # Two workers each touch 200 MB: the tree's RSS must grow by well over one allocation.
    # Baseline is the minimum, not the first row: before exec the child still maps pytest's memory.
    growth = df["rss_bytes"].max() - df["rss_bytes"].min()
    assert growth > 0.75 * ALLOC_MB * MB, f"rss grew only {growth / MB:.0f} MB"


# Workers that each live less than one tick, started and reaped one after another while the main
# process sleeps: the tree's CPU is theirs, and it must count (not read as another process's load).
SHORT_LIVED = textwrap.dedent(
    """
    import multiprocessing as mp, os, time

    def burn(sec):
        end = time.process_time() + sec
        while time.process_time() < end:
            pass

    if __name__ == "__main__":
        ctx = mp.get_context("fork")
        for _ in range(12):
            p = ctx.Process(target=burn, args=(0.06,))
            p.start()
            p.join()
            time.sleep(0.02)
        times = os.times()
        print(times.children_user + times.children_system, times.user + times.system, flush=True)
    """
)


def test_the_cpu_of_workers_shorter_than_a_tick_is_the_trees():
    child = subprocess.Popen([sys.executable, "-c", SHORT_LIVED], stdout=subprocess.PIPE, text=True)
    sampler = Sampler(child.pid, interval_s=0.1)
    sampler.start()
    try:
        out, _ = child.communicate(timeout=30)
        _wait_done(sampler, timeout=2.0)
    finally:
        sampler.stop()
    workers_s, own_s = map(float, out.split())
    df = sampler.to_frame()
    seen_s = float((df["cpu_percent"] / 100 * df["t"].diff()).sum())
    assert workers_s > 0.6
    # psutil's cpu_percent read each worker's first tick as 0 % and lost the ones that ended between ticks
    assert seen_s >= 0.85 * (workers_s + own_s) - 0.15, (seen_s, workers_s, own_s)
    assert seen_s <= 1.15 * (workers_s + own_s) + 0.3, (seen_s, workers_s, own_s)


def test_tree_cpu_counts_a_new_process_whole_and_an_ended_one_once():
    cpu = TreeCpu()
    root, worker, reused = (1, 0.0), (2, 5.0), (2, 9.0)
    assert cpu.read(0.0, {root: Times(1.0, 0.0)}, root) == (0.0, 0.0)  # the first reading: nothing to compare with
    tree, main = cpu.read(1.0, {root: Times(1.5, 0.0), worker: Times(0.3, 0.0)}, root)
    assert (round(tree), round(main)) == (80, 50)  # the worker's 0.3 s since it started count
    # the worker ended (0.4 s in all) and the root reaped it: its last 0.1 s count, not the 0.3 s again
    tree, main = cpu.read(2.0, {root: Times(2.0, 0.4)}, root)
    assert (round(tree), round(main)) == (60, 50)
    # a recycled pid (another start time) is a new process: all its time counts
    tree, _ = cpu.read(3.0, {root: Times(2.0, 0.4), reused: Times(0.2, 0.0)}, root)
    assert round(tree) == 20


def test_no_gpu_columns_are_nan_with_note(workload_run):
    sampler, df, _ = workload_run
    if HAS_GPU:
        pytest.skip("NVML sees a GPU here")
    assert df[GPU_COLUMNS].isna().all().all()
    nvml_notes = [n for n in sampler.notes if "NVML" in n]
    assert len(nvml_notes) == 1, sampler.notes
    snap = nvml_snapshot()
    assert snap["available"] is False and "NVML" in snap["reason"]


# The main process fills SHARED_MB, then forks 2 workers that read every page of it (as
# DataLoader workers read a dataset loaded before the fork): each worker's RSS counts those
# copy-on-write pages again, PSS splits them between the three processes.
SHARED_MB = 150
SHARED_CHILD = textwrap.dedent(
    f"""
    import multiprocessing as mp, time

    buf = bytearray({SHARED_MB} * 1024 * 1024)
    for i in range(0, len(buf), 4096):
        buf[i] = 1

    def worker():
        total = sum(buf[i] for i in range(0, len(buf), 4096))  # read, never write: the pages stay shared
        time.sleep(1.0)

    if __name__ == "__main__":
        ctx = mp.get_context("fork")
        procs = [ctx.Process(target=worker) for _ in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    """
)


def test_unique_memory_counts_shared_pages_once():
    child = subprocess.Popen([sys.executable, "-c", SHARED_CHILD])
    sampler = Sampler(child.pid, interval_s=0.05)
    with sampler:
        assert child.wait(timeout=20) == 0
        _wait_done(sampler, timeout=2.0)
    df = sampler.to_frame()
    assert df["pss_bytes"].notna().any() and df["uss_bytes"].notna().any(), sampler.notes
    peak_rss, peak_pss, peak_uss = df["rss_bytes"].max(), df["pss_bytes"].max(), df["uss_bytes"].max()
    assert peak_rss > 2.5 * SHARED_MB * MB  # summed RSS counts the shared buffer once per process
    assert SHARED_MB * MB < peak_pss < 1.6 * SHARED_MB * MB + 100 * MB  # PSS counts it once (plus three interpreters)
    assert peak_uss <= peak_pss
    # Readings are rationed: never more than the budget of the wall time, yet the peak was caught.
    assert sampler.unique.spent_s <= sampler_budget(df) + 0.05


def sampler_budget(df) -> float:
    from advisor.probe.sampler import FULL_MEMORY_PEAK_BUDGET

    return FULL_MEMORY_PEAK_BUDGET * (df["t"].iloc[-1] - df["t"].iloc[0] + 0.05)


def test_stops_by_itself_and_stop_is_idempotent(workload_run):
    sampler, _, stopped_by_itself = workload_run
    assert stopped_by_itself
    assert sampler.stopped_because == f"process {sampler.pid} exited"  # the normal end: not a note
    assert not any("exited" in n for n in sampler.notes)
    sampler.stop()
    sampler.stop()
    assert not sampler.running


def test_stops_on_unreaped_zombie_and_stop_is_prompt():
    # The child exits but is not reaped: its pid stays a zombie, which must still end sampling.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    sampler = Sampler(child.pid, interval_s=0.05)
    with sampler:
        assert _wait_done(sampler, timeout=3.0)
    child.wait()
    assert len(sampler.samples) >= 1

    # A long-lived child: stop() wakes the sampler inside its interval instead of waiting it out (a
    # minute here; how soon it returns is benchmarks/sampler_cost.py's figure), repeatedly.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        sampler = Sampler(child.pid, interval_s=60.0)
        sampler.start()
        time.sleep(0.1)
        t0 = time.monotonic()
        sampler.stop()
        sampler.stop()
        assert time.monotonic() - t0 < 30, "stop() waited for the sampling interval to end"
        assert not sampler.running
    finally:
        child.kill()
        child.wait()


def test_missing_pid_is_a_note_not_an_error():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid no longer exists
    with Sampler(child.pid, interval_s=0.05) as sampler:
        assert _wait_done(sampler, timeout=1.0)
    assert sampler.samples == []
    assert any(str(child.pid) in n for n in sampler.notes)
    df = sampler.to_frame()
    assert list(df.columns) == COLUMNS and len(df) == 0


def test_write_csv_round_trip(workload_run, tmp_path):
    sampler, df, _ = workload_run
    path = tmp_path / "sub" / "samples.csv"
    sampler.write_csv(path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["samples.csv"]  # no tmp left behind
    back = pd.read_csv(path)
    assert list(back.columns) == COLUMNS
    pd.testing.assert_frame_equal(back, df, check_dtype=False)


def test_other_processes_on_the_gpu_are_counted_in_a_container_too():
    assert other_gpu_processes([10, 11], {10, 12}) == 1  # 11 is not the script's
    assert other_gpu_processes([10], {10}) == 0
    assert other_gpu_processes([], {10}) == 0
    # A container: NVML lists host pids, none of the script's; the script is one of them.
    assert other_gpu_processes([90001], {10}) == 0 and other_gpu_processes([90001, 90002], {10}) == 1


def test_the_gpu_sampled_is_the_one_that_runs_the_script():
    assert script_gpu({0: [500], 1: [10, 11]}, {10, 12}) == 1  # a script on cuda:1 beside another job on 0
    assert script_gpu({0: [], 1: []}, {10}) is None  # no CUDA context yet: keep looking
    assert script_gpu({0: [90001]}, {10}) is None  # a container's host pids: the index resolved at start stands


def test_gpu_index_resolution(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert _resolve_gpu_index(None) == (3, None)
    assert _resolve_gpu_index(2) == (2, None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8f2c")
    index, note = _resolve_gpu_index(None)
    assert index == 0 and note
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert _resolve_gpu_index(None) == (0, None)


class FakeNVML:
    """pynvml as the sampler calls it, over one GPU whose energy counter (mJ since the driver loaded)
    climbs at `watts` on the monotonic clock while its power reading says `power_w` (on Hopper a
    one-second average). `energy=False`: a GPU before Volta, whose counter NVML refuses (NotSupported).
    Errors and constants are pynvml's own, so the sampler's handling of them is the real one."""

    def __init__(self, watts: float, power_w: float, energy: bool = True) -> None:
        import pynvml

        self.NVMLError, self.NVML_ERROR_NOT_SUPPORTED = pynvml.NVMLError, pynvml.NVML_ERROR_NOT_SUPPORTED
        self.NVML_ERROR_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
        self.NVML_CLOCK_SM, self.NVML_PCIE_UTIL_TX_BYTES, self.NVML_PCIE_UTIL_RX_BYTES = 1, 0, 1
        self.watts, self.power_w, self.energy, self.energy_calls = watts, power_w, energy, 0
        self.t0 = time.monotonic()

    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlDeviceGetCount(self): return 1
    def nvmlDeviceGetHandleByIndex(self, index): return f"gpu{index}"
    def nvmlDeviceGetComputeRunningProcesses(self, handle): return []
    def nvmlDeviceGetUtilizationRates(self, handle): return types.SimpleNamespace(gpu=90, memory=40)
    def nvmlDeviceGetMemoryInfo(self, handle): return types.SimpleNamespace(used=2**30, total=2**34)
    def nvmlDeviceGetPowerUsage(self, handle): return int(self.power_w * 1000)  # mW
    def nvmlDeviceGetClockInfo(self, handle, clock): return 1410
    def nvmlDeviceGetPcieThroughput(self, handle, counter): return 0

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self.energy_calls += 1
        if not self.energy:
            raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return 7_000_000_000 + int(self.watts * (time.monotonic() - self.t0) * 1000)  # mJ


def _sampled(monkeypatch, tmp_path, nvml: FakeNVML) -> tuple[Sampler, pd.DataFrame]:
    """Sample a sleeping child at 20 ms through `nvml`; the ticks read back from samples.csv."""
    monkeypatch.setattr(nvml_module, "pynvml", nvml)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.8)"])
    sampler = Sampler(child.pid, interval_s=0.02)
    sampler.start()
    try:
        child.wait(timeout=10)
        _wait_done(sampler, timeout=2.0)
    finally:
        sampler.stop()
    sampler.write_csv(tmp_path / "samples.csv")
    return sampler, pd.read_csv(tmp_path / "samples.csv")


def _window(ticks: pd.DataFrame) -> pd.DataFrame:
    """Two steps in the middle of the sampled span (not on a tick)."""
    a = ticks["t"].iloc[3] + 0.007
    return pd.DataFrame({"t_start": [a, a + 0.1], "t_end": [a + 0.1, a + 0.2], "samples": [16, 16]})


def test_the_energy_counter_is_sampled_and_a_windows_joules_follow_it(monkeypatch, tmp_path):
    """The counter climbs at 300 W while power reads 100 W: each tick records the counter beside its
    time, so a window's joules (the counter's rise between its ends) are 300 W's, not 100 W's."""
    from advisor.analysis import metrics

    nvml = FakeNVML(watts=300.0, power_w=100.0)
    sampler, ticks = _sampled(monkeypatch, tmp_path, nvml)
    assert list(ticks.columns) == COLUMNS and len(ticks) >= 10, sampler.notes
    assert ticks["gpu_power_w"].eq(100.0).all() and ticks["gpu_energy_mj"].notna().all()
    rate = np.diff(ticks["gpu_energy_mj"]) / np.diff(ticks["t"]) / 1000.0  # W between ticks
    assert np.median(rate) == pytest.approx(300.0, rel=0.05)
    got = metrics.energy(ticks, _window(ticks))  # (a tick's thread preempted between its time and its read: 10%)
    assert got["source"] == "energy-counter" and got["joules"] == pytest.approx(300.0 * 0.2, rel=0.1)
    assert got["joules_per_sample"] == pytest.approx(got["joules"] / 32)


def test_a_gpu_without_the_counter_falls_back_on_power_and_says_so(monkeypatch, tmp_path):
    """NVML NotSupported (before Volta): the column stays NaN, NVML is asked once and the reason noted
    once; a window's joules come from the power samples, and the source says so."""
    from advisor.analysis import metrics

    nvml = FakeNVML(watts=300.0, power_w=100.0, energy=False)
    sampler, ticks = _sampled(monkeypatch, tmp_path, nvml)
    assert "gpu_energy_mj" in ticks and ticks["gpu_energy_mj"].isna().all() and len(ticks) >= 10
    assert nvml.energy_calls == 1
    (note,) = [n for n in sampler.notes if "nvmlDeviceGetTotalEnergyConsumption" in n]
    assert "not sampled" in note and "NotSupported" in note
    got = metrics.energy(ticks, _window(ticks))
    assert got["source"] == "power-samples" and got["joules"] == pytest.approx(100.0 * 0.2)


GPU_CHILD = textwrap.dedent(
    """
    import time, torch
    x = torch.randn(4096, 4096, device="cuda")
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        y = x @ x
        torch.cuda.synchronize()
    """
)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="no GPU visible to NVML")
def test_gpu_sampling():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    snap = nvml_snapshot()
    assert snap["available"] and snap["name"]
    assert snap["memory_total_bytes"] > 0

    child = subprocess.Popen([sys.executable, "-c", GPU_CHILD])
    with Sampler(child.pid, interval_s=0.05) as sampler:
        assert child.wait(timeout=60) == 0
        _wait_done(sampler, timeout=2.0)
    df = sampler.to_frame()
    assert df["gpu_mem_used_bytes"].max() > 0
    assert df["gpu_mem_total_bytes"].max() == snap["memory_total_bytes"]
    assert df["gpu_util_percent"].notna().any()
    assert df["gpu_util_percent"].max() > 0, sampler.notes
    assert not any("NVML unavailable" in n for n in sampler.notes)
    assert math.isfinite(sampler.mean_tick_cost_ms)
