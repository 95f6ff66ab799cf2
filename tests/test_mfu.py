"""Model FLOPs utilization: FLOP counts checked against their analytic values, MFU on real GPU traces."""

from __future__ import annotations

from functools import lru_cache

import pandas as pd
import pytest
import torch

from advisor.analysis import mfu as mfu_module
from advisor.analysis.mfu import (kernel_efficiency, model_flops_utilization, op_traffic, peak_bandwidth, peak_tflops,
                                  precision)
from advisor.profile import Profile
from advisor.run_dir.seen import Env
from advisor.trace import load_trace
from conftest import WORKLOADS, trace_path

RESNET_V100 = "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"
BERT_H100 = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"

M, K, N = 64, 128, 32
B, CIN, COUT, H, W, KH, KW = 2, 3, 8, 16, 16, 3, 3


def _record(tmp_path, with_flops: bool):
    """A real torch.profiler trace of one GEMM and one strided conv on the CPU."""
    a, b = torch.randn(M, K), torch.randn(K, N)
    conv = torch.nn.Conv2d(CIN, COUT, (KH, KW), stride=2, padding=1)
    x = torch.randn(B, CIN, H, W)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                with_flops=with_flops) as prof:
        torch.mm(a, b)
        conv(x)
    path = tmp_path / f"trace-{with_flops}.json"
    prof.export_chrome_trace(str(path))
    return load_trace(path).ops


@pytest.mark.parametrize("with_flops", [True, False], ids=["profiler-counts", "shape-estimates"])
def test_gemm_and_conv_flops_match_their_analytic_values(tmp_path, with_flops):
    ops = _record(tmp_path, with_flops)
    mm = ops[ops["name"] == "aten::mm"]
    assert mm["flops"].sum() == 2 * M * N * K
    out_h, out_w = (H + 2 - KH) // 2 + 1, (W + 2 - KW) // 2 + 1
    conv_flops = 2 * B * COUT * out_h * out_w * CIN * KH * KW
    counted = ops[ops["name"].str.contains("conv")]["flops"].sum()  # each conv counted once, whatever its depth
    assert counted == pytest.approx(conv_flops, rel=0.01)
    # the roofline's bytes: each operand read once, the output (M x N; B x Cout x out_h x out_w) written once
    (gemm,) = mm.itertuples()
    assert op_traffic(gemm.name, gemm.input_dims, gemm.input_types, gemm.flops) == (4 * (M * K + K * N + M * N), M * N)
    (carrier,) = ops[ops["name"].str.contains("conv") & ops["flops"].notna()].itertuples()
    moved, out_items = op_traffic(carrier.name, carrier.input_dims, carrier.input_types, carrier.flops)
    assert out_items == pytest.approx(B * COUT * out_h * out_w, rel=0.01)
    assert moved == pytest.approx(4 * (B * CIN * H * W + COUT * CIN * KH * KW + COUT + B * COUT * out_h * out_w), rel=0.01)


def test_the_peak_table_knows_the_common_accelerators():
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == (989.4, "NVIDIA H100/H200 datasheet (SXM), dense")
    assert peak_tflops("NVIDIA H100 PCIe", "bf16")[0] == 756.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "tf32")[0] == 156.0
    assert peak_tflops("Tesla V100-SXM2-16GB", "fp32")[0] == 15.7
    assert peak_tflops("Tesla V100-SXM2-16GB", "bf16")[0] is None  # Volta has no bf16
    assert peak_tflops("AMD Instinct MI300X", "bf16")[0] == 1307.4
    assert peak_tflops("NVIDIA L4", "fp16")[0] == 121.0 and peak_tflops("NVIDIA L40S", "bf16")[0] == 362.05
    assert peak_tflops("Some Future GPU", "bf16") == (None, None)
    assert peak_bandwidth("NVIDIA H100 80GB HBM3") == (3.35, "NVIDIA H100 datasheet (SXM, HBM3)")
    assert peak_bandwidth("NVIDIA H100 PCIe")[0] == 2.0 and peak_bandwidth("NVIDIA H200")[0] == 4.8
    assert peak_bandwidth("NVIDIA A100-SXM4-80GB")[0] == 2.039 and peak_bandwidth("NVIDIA A100-SXM4-40GB")[0] == 1.555
    assert peak_bandwidth("Tesla V100-DGXS-32GB")[0] == 0.9 and peak_bandwidth("AMD Instinct MI300X")[0] == 5.3
    assert peak_bandwidth("Some Future GPU") == (None, None)


def test_resnet50_fp32_on_a_v100_is_at_a_plausible_mfu():
    """tb_plugin's ResNet-50 (batch 32, FP32, 4 workers) on a V100: ~5.6 TFLOP/s of its 15.7."""
    mfu = model_flops_utilization(Profile.from_trace(trace_path(RESNET_V100)))
    assert mfu["dtype"] == "fp32" and mfu["peak_tflops"] == 15.7
    assert 0.25 < mfu["mfu"] < 0.45, mfu
    assert "ProfilerStep" in mfu["basis"] and "V100" in mfu["peak_source"]
    # ResNet-50 is 4.1 GMACs = 8.2 GFLOPs per 224x224 image forward, x3 with backward, x32 images
    assert mfu["flops_per_step"] == pytest.approx(3 * 8.2e9 * 32, rel=0.05)


@lru_cache(maxsize=1)
def _resnet_v100() -> Profile:
    return Profile.from_trace(trace_path(RESNET_V100))


def test_resnet50_on_a_v100_convolutions_are_compute_bound_and_norms_memory_bound():
    """The roofline of the V100's top kernels: ridge 15.7 TFLOP/s / 0.9 TB/s = 17.4 FLOP/byte.
    cuDNN's implicit-GEMM convolutions sit far right of it at most of the FP32 peak; batch norm
    and elementwise kernels far left, moving bytes at a large share of HBM2's 900 GB/s."""
    eff = kernel_efficiency(_resnet_v100())
    assert len(eff) == 10 and set(eff["ridge"].round(2)) == {round(15.7 / 0.9, 2)}
    conv = eff[eff["name"].str.startswith("void implicit_convolve_sgemm")]
    assert len(conv) == 2 and (conv["bound"] == "compute").all() and (conv["intensity"] > 3 * 17.4).all()
    assert ((conv["tflops"] > 0.3 * 15.7) & (conv["tflops"] < 15.7)).all()  # direct convs stay under the peak
    norms = eff[eff["name"].str.contains("bn_|elementwise", regex=True)]
    assert len(norms) >= 4 and (norms["bound"] == "memory").all() and (norms["intensity"] < 1).all()
    assert ((norms["tbps"] > 0.2 * 0.9) & (norms["tbps"] < 0.9)).all()
    assert eff["dur_us"].is_monotonic_decreasing


def test_bf16_inference_on_an_h100_uses_the_bf16_peak():
    mfu = model_flops_utilization(Profile.from_trace(trace_path(BERT_H100)))
    assert mfu["dtype"] == "bf16" and mfu["peak_tflops"] == 989.4 and 0 < mfu["mfu"] < 0.05  # a tiny model


def test_a_probed_cpu_run_reports_its_flops_and_no_peak(advise):
    """tests/workloads/train_basic.py: Linear(64,128) -> ReLU -> Linear(128,1), batch 32, input without grad.
    Forward 2*32*64*128 + 2*32*128; backward: weight grads of both layers and the input grad of the second."""
    r = advise("profile", "--steps", "6", "--warmup", "2", "--profile-steps", "2", "--no-experiments", "--out", "run",
               str(WORKLOADS / "train_basic.py"))
    assert r.returncode == 0, r.stderr
    mfu = r.report["mfu"]
    forward = 2 * 32 * 64 * 128 + 2 * 32 * 128 * 1
    backward = 2 * 32 * 64 * 128 + 2 * (2 * 32 * 128 * 1)
    assert mfu["flops_per_step"] == forward + backward
    assert mfu["achieved_tflops"] > 0 and mfu["peak_tflops"] is None and mfu["mfu"] is None
    assert "outside the profiler" in mfu["basis"] and "CPU" in mfu["peak_source"]
    assert "MFU" in r.stdout and "FLOP/s achieved" in r.stdout  # the terminal says it too (M or GFLOP/s: speed varies)


def test_the_html_report_shows_the_kernels_on_the_roofline():
    from advisor.report import build_report, now_iso
    from advisor.reports.html import render_html
    from advisor.reports.page import build_page

    profile = _resnet_v100()
    report = build_report(profile, status="ok", script="trace.json.gz", argv=[], started_at=now_iso())
    page = build_page(report, profile)
    assert [r.bound for r in page.roofline.rows][:3] == ["compute", "memory", "compute"]
    assert "0.90 TB/s (NVIDIA V100 datasheet (HBM2)); ridge point fp32 17.4 FLOP/byte" in page.roofline.peaks
    html = render_html(page)
    assert "GPU kernels on the roofline" in html and '<span class="pill bound-memory">memory</span>' in html


def _ops(*rows) -> pd.DataFrame:
    return pd.DataFrame([{"name": n, "flops": f, "input_types": [t]} for n, f, t in rows])


H200 = {"device": "cuda", "device_name": "NVIDIA H200"}


@pytest.mark.parametrize("env, ops, dtype", [
    # nanoGPT's own allow_tf32 = True at --dtype=float32: the H200 run read 146% of the fp32 peak
    ({**H200, "cuda_matmul_allow_tf32": True, "float32_matmul_precision": "highest"},
     [("aten::mm", 1e12, "float")], "tf32"),
    ({**H200, "cuda_matmul_allow_tf32": False, "float32_matmul_precision": "high"}, [("aten::mm", 1e12, "float")], "tf32"),
    ({**H200, "cuda_matmul_allow_tf32": False, "float32_matmul_precision": "highest"}, [("aten::mm", 1e12, "float")], "fp32"),
    # convolutions run in TF32 at fp32 by default (cudnn.allow_tf32), whatever the matmul flags say
    ({**H200, "cuda_matmul_allow_tf32": False, "float32_matmul_precision": "highest", "cudnn_allow_tf32": True},
     [("aten::cudnn_convolution", 3e12, "float"), ("aten::mm", 1e12, "float")], "tf32"),
    ({**H200, "cuda_matmul_allow_tf32": False, "float32_matmul_precision": "highest", "cudnn_allow_tf32": False},
     [("aten::cudnn_convolution", 3e12, "float")], "fp32"),
    # under bf16 autocast the matmuls' inputs are bf16: the bf16 peak, whatever TF32 says
    ({**H200, "cuda_matmul_allow_tf32": True}, [("aten::mm", 3e12, "c10::BFloat16"), ("aten::mm", 1e11, "float")], "bf16"),
    # a CPU run: no TF32 there
    ({"device": "cpu", "float32_matmul_precision": "high"}, [("aten::mm", 1e9, "float")], "fp32"),
])
def test_the_peak_is_the_precision_the_flops_ran_in(env, ops, dtype):
    got, why = precision(_ops(*ops), pd.DataFrame(columns=["name", "dur_us"]), Env.read(env))
    assert got == dtype and why


def test_mfu_is_never_above_100_percent(monkeypatch):
    """A figure above the peak means the precision read is not the one the FLOPs ran in: no MFU then,
    and the page says the peak is unknown, with the achieved rate and the peak it would have broken."""
    profile = Profile.from_trace(trace_path(BERT_H100))
    monkeypatch.setattr(mfu_module, "PEAKS", [(r"H100", {"bf16": 0.5}, "a planted table")])
    mfu = model_flops_utilization(profile)
    assert mfu["achieved_tflops"] > 0.5 and mfu["mfu"] is None and mfu["peak_tflops"] is None
    assert mfu["peak_source"].startswith("unknown: ") and "above the 0.5 TFLOP/s dense bf16 peak" in mfu["peak_source"]


def test_a_traces_steps_end_where_their_last_kernel_ends():
    """A recorded MI300 trace (ResNet, activation checkpointing, bf16) whose host runs ahead: its three
    ProfilerStep spans add up to 48.6 ms, the device's work to 86.6 ms. The steps, the throughput and
    MFU read the device's time; each step's span stays as host_s."""
    profile = Profile.from_trace(trace_path("tracelens/mi300/resnet_act_checkpoint.json.gz"))
    steps = profile.steps
    assert steps["host_s"].sum() == pytest.approx(0.0486, abs=2e-4)
    assert steps["duration_s"].sum() == pytest.approx(0.0866, abs=2e-4) and (steps["clock"] == "device").all()
    ts = profile.trace_steps
    last_kernel_end = profile.kernels["end_us"].max()
    assert ts["ts_us"].iloc[0] + ts["device_dur_us"].sum() == pytest.approx(last_kernel_end, abs=1.0)
    assert "where its last kernel ends" in model_flops_utilization(profile)["basis"]
