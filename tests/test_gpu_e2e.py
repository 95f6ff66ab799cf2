"""The GPU paths on a real GPU: NVML, CUDA activities, MFU and in-process arms on planted scripts.

Skipped without CUDA (CI has none). Last run on an NVIDIA H100 80GB HBM3 (torch 2.11+cu130):
mlp_sync_fp32 gave OPT001 1.48x verified in-process, GPU003 and PR001 found, MFU 46.4% of the
fp32 peak; healthy_bf16 gave GPU002 (torch.compile) 1.87x verified.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import WORKLOADS, advise_cmd

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU TESTS SKIPPED: no CUDA device here")]


def _profile(tmp_path, name: str) -> dict:
    proc = subprocess.run(advise_cmd("profile", "--timeout", "240", "--out", "run", str(WORKLOADS / "gpu" / f"{name}.py")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((tmp_path / "run" / "report.json").read_text())


def test_planted_gpu_problems_are_found_and_the_optimizer_fix_measured(tmp_path):
    report = _profile(tmp_path, "mlp_sync_fp32")
    codes = {f["code"]: f for f in report["findings"]}
    assert {"PR001", "GPU003", "OPT001"} <= set(codes), list(codes)
    opt = codes["OPT001"]["experiment"]
    assert opt["measured_by"] == "in-process" and opt["verified"] and opt["speedup"] > 1.1, opt
    assert report["mfu"]["peak_tflops"] and 0.05 < report["mfu"]["mfu"] < 1.0, report["mfu"]
    assert report["utilization"], "no NVML samples"


def test_a_fresh_run_fallback_finishes_on_the_gpu(tmp_path):
    """healthy_bf16 has no DataLoader: a batch-size fix cannot be switched live and goes to fresh runs."""
    report = _profile(tmp_path, "healthy_bf16")
    assert report["status"] == "ok", report.get("error")
    assert report["total_wall_s"] < 240
