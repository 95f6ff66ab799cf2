"""GPU faults on a real GPU: a poisoned CUDA context, a device shared with another process, device
tracing refused. Skipped without CUDA (CI has none); the mechanisms each have a CPU test
(test_step_clock: a device whose settle raises; test_probe_e2e: a CUDA error that poisons the
device's calls, device tracing refused; test_inprocess and test_metrics: NVML's other processes).
One run of this file takes under 5 minutes on an H100."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from advisor.run_dir import layout
from conftest import WORKLOADS, advise_cmd

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU TESTS SKIPPED: no CUDA device here")]


def _profile(tmp_path, script: str, *args: str, options=("--steps", "20", "--warmup", "3")):
    started = time.monotonic()
    proc = subprocess.run(advise_cmd("profile", "--timeout", "120", *options, "--out", "run", script, *args),
                          cwd=tmp_path, capture_output=True, text=True, timeout=200)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    return proc, report, time.monotonic() - started


def test_a_device_side_assert_is_the_scripts_error_not_a_hang(tmp_path):
    proc, report, took = _profile(tmp_path, str(WORKLOADS / "gpu" / "device_assert.py"), options=("--no-experiments",))
    assert proc.returncode == 1 and report["status"] == "failed", proc.stderr[-2000:]
    assert "device-side assert" in report["error"] or "CUDA error" in report["error"], report["error"]
    assert "advisor" not in report["error"] and took < 100, took  # never a sync or a flush that hangs


NEIGHBOUR = """
import time, torch
x = torch.randn(8192, 8192, device="cuda")
end = time.monotonic() + float(__import__("sys").argv[1])
while time.monotonic() < end:
    y = x @ x
torch.cuda.synchronize()
"""


def test_a_gpu_shared_with_another_process_is_said_and_verifies_nothing(tmp_path):
    neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, "150"])
    try:
        time.sleep(5)  # its context is up and its kernels are running
        proc, report, _ = _profile(tmp_path, str(WORKLOADS / "gpu" / "fp32_matmul_nosync.py"))
    finally:
        neighbour.kill()
        neighbour.wait()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert any("ran on the script's GPU" in w for w in report["warnings"]), report["warnings"]
    claims = [f["experiment"] for f in report["findings"] if f.get("experiment")]
    assert claims and not any(c["verified"] and c["measured_by"] == "in-process" for c in claims), claims


def test_device_tracing_refused_gives_a_host_only_trace_said(tmp_path):
    proc, report, _ = _profile(tmp_path, str(WORKLOADS / "profiler_refused.py"), "--device-only", "--cuda",
                               options=("--steps", "8", "--warmup", "2", "--profile-steps", "2", "--no-experiments"))
    assert proc.returncode == 0 and report["status"] == "ok", proc.stderr[-2000:]
    said = [w for w in report["warnings"] if "could not trace the GPU" in w]
    assert len(said) == 1 and "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES" in said[0]
    trace = report["artifacts"].get("trace")
    assert trace == layout.names().trace and (tmp_path / "run" / trace).is_file(), "the host-only trace is missing"
