"""Sampler against real processes (no mocks): a child that burns CPU and forks memory-hungry workers."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from advisor.probe.sampler import COLUMNS, GPU_COLUMNS, Sampler, _resolve_gpu_index, nvml_snapshot, other_gpu_processes, script_gpu

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

        pynvml.nvmlInit()
    except Exception:
        return 0
    try:
        return pynvml.nvmlDeviceGetCount()
    except Exception:
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
    assert sampler._full_spent_s <= sampler_budget(df) + 0.05


def sampler_budget(df) -> float:
    from advisor.probe.sampler import FULL_MEMORY_PEAK_BUDGET

    return FULL_MEMORY_PEAK_BUDGET * (df["t"].iloc[-1] - df["t"].iloc[0] + 0.05)


def test_stops_by_itself_and_stop_is_idempotent(workload_run):
    sampler, _, stopped_by_itself = workload_run
    assert stopped_by_itself
    assert sampler.stopped_because == f"process {sampler.pid} exited"  # the normal end: not a note
    assert not any("exited" in n for n in sampler.notes)
    t0 = time.monotonic()
    sampler.stop()
    sampler.stop()
    assert time.monotonic() - t0 < 0.5


def test_tick_cost_is_small(workload_run):
    # A few ms is normal (psutil scans /proc for children); this catches e.g. reading smaps per tick.
    sampler, _, _ = workload_run
    assert sampler.mean_tick_cost_ms < 50, sampler.mean_tick_cost_ms


def test_stops_on_unreaped_zombie_and_stop_is_prompt():
    # The child exits but is not reaped: its pid stays a zombie, which must still end sampling.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    sampler = Sampler(child.pid, interval_s=0.05)
    with sampler:
        assert _wait_done(sampler, timeout=3.0)
    child.wait()
    assert len(sampler.samples) >= 1

    # A long-lived child: stop() must return well inside the interval, repeatedly.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sampler = Sampler(child.pid, interval_s=0.2)
        sampler.start()
        time.sleep(0.1)
        t0 = time.monotonic()
        sampler.stop()
        sampler.stop()
        assert time.monotonic() - t0 < 0.5
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
