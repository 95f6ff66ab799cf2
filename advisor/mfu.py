"""Model FLOPs utilization: the FLOP/s a run achieved against the device's dense peak for its dtype.

FLOPs come from the trace (the profiler's ``with_flops`` counts, else the GEMM/conv shape
estimates of :mod:`advisor.trace`, each GEMM/conv counted once); time from the measured steps
(a probe run divides by the step time measured *outside* the profiler, whose overhead would
otherwise deflate the figure). The dtype is the one carrying most of the FLOPs; float32 GEMMs
that ran on TF32 kernels count against the TF32 peak.

Peaks are dense (no 2:4 sparsity), tensor-core rates where the dtype has them, from the vendors'
datasheets named in ``PEAKS``. References to sanity-check against: torchtitan reports 33-39%
MFU for Llama-3 8B bf16 on H100, MosaicML 46% for MPT-7B on A100.
"""

from __future__ import annotations

import math
import re

import pandas as pd

# (name pattern, {dtype: dense peak TFLOP/s}, source). First match wins: specific before generic.
PEAKS: list[tuple[str, dict[str, float], str]] = [
    (r"H100.*PCIe", {"fp64": 25.6, "fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0},
     "NVIDIA H100 datasheet (PCIe), dense"),
    (r"H100|H800|H200|GH200", {"fp64": 33.5, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
     "NVIDIA H100/H200 datasheet (SXM), dense"),
    (r"A100|A800", {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
     "NVIDIA A100 datasheet, dense"),
    (r"L40S", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05}, "NVIDIA L40S datasheet, dense"),
    (r"\bL4\b", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0}, "NVIDIA L4 datasheet, dense"),
    (r"A10G?\b", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}, "NVIDIA A10 datasheet, dense"),
    (r"V100.*PCIE", {"fp64": 7.0, "fp32": 14.0, "fp16": 112.0}, "NVIDIA V100 datasheet (PCIe)"),
    (r"V100", {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0}, "NVIDIA V100 datasheet (SXM2)"),
    (r"\bT4\b", {"fp32": 8.1, "fp16": 65.0}, "NVIDIA T4 datasheet"),
    (r"MI300X", {"fp64": 81.7, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4},
     "AMD Instinct MI300X datasheet, dense"),
    (r"MI250X?", {"fp64": 47.9, "fp32": 47.9, "bf16": 383.0, "fp16": 383.0}, "AMD Instinct MI250X datasheet"),
]

_DTYPES = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16", "double": "fp64",
           "BFloat16": "bf16", "Half": "fp16"}


def peak_tflops(device_name: str | None, dtype: str) -> tuple[float | None, str | None]:
    """The dense peak TFLOP/s of `device_name` for `dtype` and its source, or (None, None)."""
    for pattern, peaks, source in PEAKS:
        if device_name and re.search(pattern, device_name, flags=re.I):
            return peaks.get(dtype), source
    return None, None


def flop_dtype(ops: pd.DataFrame, kernels: pd.DataFrame) -> str | None:
    """The dtype that carries most FLOPs: fp32 on TF32 kernels counts as tf32."""
    counted = ops.dropna(subset=["flops"]) if "flops" in ops else ops.iloc[0:0]
    if counted.empty:
        return None
    first = counted["input_types"].map(lambda t: t[0] if isinstance(t, (list, tuple)) and t else None)
    by_dtype = counted.groupby(first.map(lambda t: _DTYPES.get(t, t)))["flops"].sum()
    if by_dtype.empty:
        return None
    dtype = str(by_dtype.idxmax())
    if dtype == "fp32" and len(kernels):
        gemm = kernels[kernels["name"].str.contains(r"gemm|conv|xmma|cutlass", case=False, regex=True)]
        tf32 = gemm["name"].str.contains("tf32", case=False)
        if len(gemm) and gemm.loc[tf32, "dur_us"].sum() > 0.5 * gemm["dur_us"].sum():
            dtype = "tf32"
    return dtype


def model_flops_utilization(profile) -> dict | None:
    """report.json's `mfu`: {achieved_tflops, peak_tflops, mfu, dtype, basis, peak_source}, or None
    when the run has no trace or no FLOPs (a CPU run gets achieved FLOP/s and no peak)."""
    ops, trace_steps = profile.ops, profile.trace_steps
    if profile.trace is None or ops.empty or "flops" not in ops:
        return None
    flops = ops["flops"].where(ops["step"].isin(trace_steps["index"])) if len(trace_steps) and "step" in ops else ops["flops"]
    total = float(flops.sum(skipna=True))
    if not math.isfinite(total) or total <= 0:
        return None
    n_steps = len(trace_steps)
    timed = profile.steps[~profile.steps["profiled"].astype(bool)] if "profiled" in profile.steps else profile.steps.iloc[0:0]
    if n_steps and len(timed) and profile.meta.get("source") == "probe":
        seconds = float(timed["duration_s"].median()) * n_steps
        basis = (f"FLOPs of {n_steps} profiled steps (profiler counts, GEMM/conv shapes), over the median step "
                 f"time of {len(timed)} steps outside the profiler")
    elif n_steps:
        seconds = float(trace_steps["dur_us"].sum()) / 1e6
        basis = f"FLOPs over the {n_steps} ProfilerStep spans of the trace"
    else:
        return None
    if seconds <= 0:
        return None
    achieved = total / seconds / 1e12
    dtype = flop_dtype(ops, profile.kernels)
    device = profile.env.get("device_name") if profile.has_gpu else None
    peak, source = peak_tflops(device, dtype) if dtype else (None, None)
    return {"achieved_tflops": achieved, "peak_tflops": peak, "mfu": achieved / peak if peak else None,
            "dtype": dtype, "device_name": device, "flops_per_step": total / n_steps, "basis": basis,
            "peak_source": source if peak else ("no peak table entry for this device and dtype" if profile.has_gpu
                                                 else "CPU run: no peak table for CPUs")}
