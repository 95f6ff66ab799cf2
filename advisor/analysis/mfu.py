"""Model FLOPs utilization: the FLOP/s a run achieved against the device's dense peak for its dtype.

FLOPs come from the trace (the profiler's ``with_flops`` counts, else the GEMM/conv shape
estimates of :mod:`advisor.trace`, each GEMM/conv counted once); time from the measured steps
(a probe run divides by the step time measured *outside* the profiler, whose overhead would
otherwise deflate the figure; on a GPU, the device's step time). The peak is the one of the
precision the FLOPs ran in (:func:`precision`): the dtype carrying most of them (autocast's
bf16 shows in the ops' inputs), and float32 matmuls or convolutions count against the TF32
peak where the run let them use TF32 (``float32_matmul_precision`` below ``highest`` or
``allow_tf32`` for matmuls, cuDNN's ``allow_tf32``, on by default, for convolutions), as
Lightning's ``get_available_flops`` does, or where their kernels are TF32 ones. A figure above
the peak means the precision is not what we think: no MFU is given then, never one over 100%.

Peaks are dense (no 2:4 sparsity), tensor-core rates where the dtype has them, from the vendors'
datasheets named in ``PEAKS``. References to sanity-check against: torchtitan reports 33-39%
MFU for Llama-3 8B bf16 on H100, MosaicML 46% for MPT-7B on A100.
"""

from __future__ import annotations


import math
import re

import numpy as np
import pandas as pd

from . import steptime
from ..run_dir.seen import Env
from .view import ProfileView

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


def precision(ops: pd.DataFrame, kernels: pd.DataFrame, env: Env) -> tuple[str | None, str | None]:
    """(the precision carrying most FLOPs, why it is that one): fp32 matmuls (convolutions) count as
    tf32 where the run's flags let them use TF32 on a CUDA device, or where their kernels are TF32."""
    counted = ops.dropna(subset=["flops"]) if "flops" in ops else ops.iloc[0:0]
    if counted.empty:
        return None, None
    first = counted["input_types"].map(lambda t: t[0] if isinstance(t, (list, tuple)) and t else None)
    dtypes = first.map(lambda t: _DTYPES.get(t, t))
    by_dtype = counted.groupby(dtypes)["flops"].sum()
    if by_dtype.empty:
        return None, None
    dtype = str(by_dtype.idxmax())
    if dtype != "fp32":
        return dtype, f"the {dtype} inputs of most FLOPs"
    if len(kernels):
        gemm = kernels[kernels["name"].str.contains(r"gemm|conv|xmma|cutlass", case=False, regex=True)]
        tf32 = gemm["name"].str.contains("tf32", case=False)
        if len(gemm) and gemm.loc[tf32, "dur_us"].sum() > 0.5 * gemm["dur_us"].sum():
            return "tf32", "fp32 GEMMs on TF32 kernels"
    if str(env.device or "") != "cuda":
        return "fp32", "fp32 inputs"
    fp32 = counted[dtypes == "fp32"]
    conv = float(fp32.loc[fp32["name"].str.contains("conv", case=False), "flops"].sum())
    if conv > 0.5 * float(fp32["flops"].sum()):
        if env.cudnn_allow_tf32 is not False:  # unknown: its default
            return "tf32", "fp32 convolutions with torch.backends.cudnn.allow_tf32 on (its default)"
        return "fp32", "fp32 convolutions, cuDNN's TF32 off"
    if env.cuda_matmul_allow_tf32 is None and env.float32_matmul_precision is None:
        return "fp32", "fp32 matmuls (whether TF32 was allowed is not recorded)"
    if env.cuda_matmul_allow_tf32 or env.float32_matmul_precision in ("high", "medium"):
        return "tf32", (f"fp32 matmuls with float32_matmul_precision={env.float32_matmul_precision!r}"
                        if env.float32_matmul_precision in ("high", "medium") else
                        "fp32 matmuls with torch.backends.cuda.matmul.allow_tf32 on")
    return "fp32", "fp32 matmuls, TF32 off"


def model_flops_utilization(profile: ProfileView) -> dict | None:
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
    timed = profile.steps[steptime.unprofiled(profile.steps)]
    if n_steps and len(timed) and profile.meta.source == "probe":
        seconds = float(steptime.durations(timed).median()) * n_steps
        basis = (f"FLOPs of {n_steps} profiled steps (profiler counts, GEMM/conv shapes), over the median step "
                 f"time of {len(timed)} steps outside the profiler")
    elif n_steps:
        seconds = float(trace_steps["device_dur_us"].sum()) / 1e6
        basis = (f"FLOPs over the {n_steps} ProfilerSteps of the trace, each ending where its last kernel ends"
                 if len(profile.kernels) else f"FLOPs over the {n_steps} ProfilerStep spans of the trace")
    else:
        return None
    if seconds <= 0:
        return None
    achieved = total / seconds / 1e12
    dtype, why = precision(ops, profile.kernels, profile.env)
    device = profile.env.device_name if profile.has_gpu else None
    peak, source = peak_tflops(device, dtype) if dtype else (None, None)
    if peak is None and dtype == "tf32":  # a device without TF32 (V100, T4) runs fp32 matmuls in fp32
        dtype, why = "fp32", "fp32 inputs (no TF32 on this device)"
        peak, source = peak_tflops(device, dtype)
    out = {"achieved_tflops": achieved, "peak_tflops": peak, "mfu": achieved / peak if peak else None,
           "dtype": dtype, "precision_basis": why, "device_name": device, "flops_per_step": total / n_steps,
           "basis": basis,
           "peak_source": source if peak else ("no peak table entry for this device and dtype" if profile.has_gpu
                                                else "CPU run: no peak table for CPUs")}
    if peak and achieved > peak:  # the FLOPs ran in another precision than the one read, or the time is short
        out.update(mfu=None, peak_tflops=None,
                   peak_source=f"unknown: {achieved:.1f} TFLOP/s is above the {peak:g} TFLOP/s dense {dtype} peak "
                               f"({why}), so the precision the FLOPs ran in is not the one read")
    return out


# --------------------------------------------------------------------------- the roofline, per kernel

# (name pattern, peak memory bandwidth TB/s, source). First match wins: specific before generic.
BANDWIDTH: list[tuple[str, float, str]] = [
    (r"H100.*PCIe", 2.0, "NVIDIA H100 datasheet (PCIe, HBM2e)"),
    (r"H200", 4.8, "NVIDIA H200 datasheet (HBM3e)"),
    (r"GH200", 4.0, "NVIDIA GH200 datasheet (96 GB HBM3)"),
    (r"H100|H800", 3.35, "NVIDIA H100 datasheet (SXM, HBM3)"),
    (r"A100.*(?:40GB|PCIE)|A800.*40GB", 1.555, "NVIDIA A100 datasheet (40 GB HBM2)"),
    (r"A100|A800", 2.039, "NVIDIA A100 datasheet (80 GB SXM, HBM2e)"),
    (r"L40S", 0.864, "NVIDIA L40S datasheet (GDDR6)"),
    (r"\bL4\b", 0.3, "NVIDIA L4 datasheet (GDDR6)"),
    (r"A10G?\b", 0.6, "NVIDIA A10 datasheet (GDDR6)"),
    (r"V100", 0.9, "NVIDIA V100 datasheet (HBM2)"),
    (r"\bT4\b", 0.32, "NVIDIA T4 datasheet (GDDR6)"),
    (r"MI300X", 5.3, "AMD Instinct MI300X datasheet (HBM3)"),
    (r"MI250X?", 3.2, "AMD Instinct MI250X datasheet (HBM2e)"),
]

_ITEM_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "Half": 2, "BFloat16": 2, "long int": 8,
               "int": 4, "short int": 2, "bool": 1, "unsigned char": 1, "signed char": 1, "c10::Float8_e4m3fn": 1,
               "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1}
_GEMM = re.compile(r"mm|conv|linear|matmul", re.I)
_GEMM_LIKE = re.compile(r"attention|flash|sdpa|einsum", re.I)  # matmuls inside: no per-element estimate


def peak_bandwidth(device_name: str | None) -> tuple[float | None, str | None]:
    """The peak memory bandwidth of `device_name` in TB/s and its source, or (None, None)."""
    for pattern, tbps, source in BANDWIDTH:
        if device_name and re.search(pattern, device_name, flags=re.I):
            return tbps, source
    return None, None


def op_traffic(name: str, dims: object, types: object, flops: float | None) -> tuple[float, float] | None:
    """``(bytes, output elements)``: the fewest bytes an op must move, each tensor input read once
    and its output written once; None without shapes.

    The output of a GEMM/conv forward has ``flops / (2 K)`` elements (K: the reduced length, the
    first matrix's last dimension or the weight's ``Cin/groups * kh * kw``); any other op is taken
    to write as much as its largest input. A lower bound (caches and re-reads only add), so the
    arithmetic intensity from it is an upper bound.
    """
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    sized = [(math.prod(d), _ITEM_BYTES[t]) for d, t in zip(dims, types)
             if isinstance(d, list) and d and t in _ITEM_BYTES]
    if not sized:
        return None
    read = float(sum(n * b for n, b in sized))
    out_items, out_size = float(max(sized)[0]), sized[0][1]
    k = None
    if flops and flops == flops and _GEMM.search(name) and "backward" not in name:
        matrices = [d for d in dims if isinstance(d, list) and len(d) >= 2]
        if "conv" in name and len(matrices) >= 2:
            k = math.prod(matrices[1][1:])
        elif matrices:
            k = matrices[-2][-1] if "addm" in name or "baddbmm" in name else matrices[0][-1]
    if k and flops:  # k is only found for an op with FLOPs
        out_items = flops / (2.0 * k)
    return read + out_items * out_size, out_items


def kernel_efficiency(profile: ProfileView, top: int = 10) -> pd.DataFrame:
    """The `top` kernels by device time with the roofline (see :func:`_kernel_efficiency`); once per Profile."""
    return profile.derived(("kernel_efficiency", top), lambda: _kernel_efficiency(profile, top))


def _kernel_efficiency(profile: ProfileView, top: int) -> pd.DataFrame:
    """The `top` kernels by device time with the roofline: one row per kernel name.

    Each launch is joined (correlation id) to its runtime call and the op around that call: the
    GEMM/conv op carrying FLOPs (profiler counts or shape estimates, see :mod:`advisor.trace`),
    else the innermost op, whose FLOPs are then estimated at one per output element (elementwise,
    norms, reductions: far left of any ridge). Bytes are :func:`op_traffic`'s lower bound. An op's
    FLOPs and bytes are shared among the kernels it launched by their time. Columns: ``name``,
    ``calls``, ``dur_us``, ``flops``, ``bytes`` (NaN where no launch was tied to an op with shapes),
    ``tflops`` and ``tbps`` (achieved, over the kernels' own time), ``intensity`` (FLOP/byte),
    ``dtype`` (of the peak it is held to), ``peak_tflops``, ``peak_tbps``, ``ridge`` (peak FLOP/s
    over peak bytes/s, FLOP/byte) and ``bound`` ("memory" left of the ridge, "compute" right of
    it, None when unknown).
    """
    kernels, rt, ops = profile.kernels, profile.runtime, profile.ops
    cols = ["name", "calls", "dur_us", "flops", "bytes", "tflops", "tbps", "intensity", "dtype", "peak_tflops",
            "peak_tbps", "ridge", "bound"]
    if kernels.empty or ops.empty:
        return pd.DataFrame(columns=cols)
    names = kernels.groupby("name")["dur_us"].sum().sort_values(ascending=False).head(top).index
    launches = rt[rt["correlation"].notna()].drop_duplicates("correlation")[["correlation", "ts_us", "tid"]]
    k = kernels[["name", "dur_us", "correlation"]].merge(launches.rename(columns={"ts_us": "launch_us"}),
                                                         on="correlation", how="left")
    ts, tid = k["launch_us"].to_numpy(dtype=float), k["tid"].fillna(-1).to_numpy(dtype=np.int64)
    carriers = np.flatnonzero(ops["flops"].notna().to_numpy() & ops["name"].str.contains(_GEMM).to_numpy())
    pos = _enclosing_op(ops.iloc[carriers], ts, tid)
    carrier = carriers[np.maximum(pos, 0)] if len(carriers) else pos
    k["op"] = np.where(pos >= 0, carrier, _enclosing_op(ops, ts, tid))
    # an op's FLOPs and bytes go to the kernels it launched (all of them, top or not) by their time
    op_time = k.groupby("op")["dur_us"].transform("sum").where(k["op"] >= 0)
    k["share"] = k["dur_us"] / op_time.where(op_time > 0)
    k = k[k["name"].isin(names)]
    # ops repeat a few hundred (name, FLOPs, shapes) many times (shapes are interned): work out each once
    op_ids = k["op"].unique()
    op_ids = op_ids[op_ids >= 0]
    per_op, seen = {}, {}
    for i, name, flops, dims, types in zip(op_ids.tolist(), *(ops[c].to_numpy()[op_ids] for c in
                                                              ("name", "flops", "input_dims", "input_types"))):
        key = (name, flops if flops == flops else None, id(dims), id(types))
        if key not in seen:
            seen[key] = _op_work({"name": name, "flops": flops, "input_dims": dims, "input_types": types})
        per_op[i] = seen[key]
    missing = (np.nan, np.nan, None)
    work = [per_op.get(i, missing) for i in k["op"].tolist()]
    dtypes: dict = {}
    for w, kernel in zip(work, k["name"].tolist()):
        if (w[2], kernel) not in dtypes:
            dtypes[w[2], kernel] = _op_dtype(w[2], kernel)
    k = k.assign(flops=np.array([w[0] for w in work]) * k["share"].to_numpy(),
                 bytes=np.array([w[1] for w in work]) * k["share"].to_numpy(),
                 dtype=[dtypes[w[2], kernel] for w, kernel in zip(work, k["name"].tolist())])
    by = k.groupby("name", sort=False, observed=True)
    g = by.agg(calls=("name", "size"), dur_us=("dur_us", "sum"))
    g["flops"] = by["flops"].sum(min_count=1)
    g["bytes"] = by["bytes"].sum(min_count=1)
    g["dtype"] = {name: (d.mode().iloc[0] if len(d := rows.dropna()) else None)
                  for name, rows in by["dtype"]} if len(g) else []
    g = g.loc[names].reset_index()
    seconds = g["dur_us"] / 1e6
    g["tflops"] = g["flops"] / seconds / 1e12
    g["tbps"] = g["bytes"] / seconds / 1e12
    g["intensity"] = g["flops"] / g["bytes"]
    device = profile.env.device_name if profile.has_gpu else None
    g["peak_tflops"] = pd.to_numeric(pd.Series([peak_tflops(device, d)[0] if d else None for d in g["dtype"]],
                                               dtype=object), errors="coerce")
    g["peak_tbps"] = peak_bandwidth(device)[0]
    g["ridge"] = g["peak_tflops"] / g["peak_tbps"]
    g["bound"] = [None if not (ai == ai and r == r) else "memory" if ai < r else "compute"
                  for ai, r in zip(g["intensity"], g["ridge"])]
    return g[cols]


def _op_work(op: dict) -> tuple[float, float, str | None]:
    """(FLOPs, bytes, dtype of the peak) of one op: see :func:`kernel_efficiency`."""
    name = op["name"]
    flops = float(op["flops"]) if op["flops"] == op["flops"] else None
    traffic = op_traffic(name, op["input_dims"], op["input_types"], flops)
    gemm = bool(_GEMM.search(name)) or bool(_GEMM_LIKE.search(name))
    if flops is None and traffic is not None and not gemm:
        flops = traffic[1]  # elementwise, norms, reductions: one FLOP per output element
    types = op["input_types"]
    first = next((t for t in types if t in _ITEM_BYTES), None) if isinstance(types, list) else None
    dtype = _DTYPES.get(first, first) if first else None
    if not gemm:  # the plain (vector) rate
        dtype = "fp64" if dtype == "fp64" else "fp32"
    return (np.nan if flops is None else flops), (np.nan if traffic is None else traffic[0]), dtype


def _op_dtype(dtype: str | None, kernel: str) -> str | None:
    """The peak a kernel is held to: fp32 GEMMs on TF32 kernels count as tf32."""
    return "tf32" if dtype == "fp32" and "tf32" in kernel.lower() else dtype


def _enclosing_op(ops: pd.DataFrame, ts: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Position (iloc) in `ops` of the innermost op on thread `tid` around each time `ts`, or -1."""
    out = np.full(len(ts), -1, dtype=np.int64)
    if ops.empty:
        return out
    starts, ends, tids = ops["ts_us"].to_numpy(), ops["end_us"].to_numpy(), ops["tid"].to_numpy()
    for thread in np.unique(tid):
        rows = np.flatnonzero(tids == thread)
        if len(rows) == 0:
            continue
        rows = rows[np.argsort(starts[rows], kind="stable")]
        mine = np.flatnonzero(tid == thread)
        j = np.searchsorted(starts[rows], ts[mine], side="right") - 1
        hit = (j >= 0) & (ends[rows[np.maximum(j, 0)]] >= ts[mine])
        out[mine[hit]] = rows[j[hit]]
        for i, first in zip(mine[~hit], j[~hit]):
            # nested ops: the latest-starting op that still contains ts is the innermost
            for back in range(int(first) - 1, max(int(first) - 64, -1), -1):
                if ends[rows[back]] >= ts[i]:
                    out[i] = rows[back]
                    break
    return out
