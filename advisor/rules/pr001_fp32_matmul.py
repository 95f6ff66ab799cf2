"""## What it does
Flags FP32 matmuls and convolutions on a device with faster lower-precision units.

Those units are tensor cores for TF32 (NVIDIA compute capability >= 8.0), bf16
(>= 8.0, AMD CDNA) or fp16 (>= 7.0), or a CPU with native bf16 (AVX512-BF16 / AMX). The
share is measured per op from the trace: the GPU kernel time launched by FP32 GEMM/conv
ops (their input dtype is recorded with `record_shapes=True`), or on a CPU the time of
large FP32 GEMM/conv ops in the step.

The advice follows the device: TF32 on Ampere and later, measured as one ladder with bf16
autocast and the two together, the best verified step leading the finding (bf16 autocast alone
when TF32 is already on), fp16 autocast with a GradScaler on Volta/Turing (no TF32 or bf16 there), bf16 autocast
on AMD and on CPUs with native bf16. A CPU without native bf16, a GPU without tensor cores,
and a run already in mixed precision get no finding: there is no gain to claim.

## Why is this bad?
FP32 matmuls use the slow path of the hardware: an A100 does 19.5 TFLOP/s in FP32 but 156
in TF32 and 312 in bf16; a V100 does 15.7 in FP32 and 125 in fp16. When GEMMs and
convolutions dominate the step, lower precision typically cuts their time by 2x or more.

## Example
```python
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
```

Use instead:
```fix
{"float32_matmul_precision": "high"}
```

On a CPU with native bf16, an AMD GPU, or where TF32 is already on:
```fix
{"autocast": "bfloat16"}
```

## Fix safety
Unsafe: lower precision changes numerics. TF32 keeps FP32's range with a 10-bit mantissa and
is accurate enough for nearly all training; bf16 autocast keeps master weights in FP32;
fp16 autocast needs a `GradScaler` against gradient underflow. The loss curve must be
checked; the experiment compares losses.

## Options
- `min-kernel-frac` (default 0.2): on a GPU, smallest share of GPU kernel time in FP32
  GEMM/conv kernels to report.
- `min-step-frac` (default 0.05): on a GPU, smallest share of step time in those kernels to
  report (a fast GPU idling on something else gains little).
- `min-cpu-step-frac` (default 0.3): on a CPU, smallest share of step time in large FP32
  GEMM/conv ops to report: their time per profiled step against the median step outside the
  profiler (the profiler slows the many small ops around a GEMM far more than the GEMM itself,
  so a share of the profiled step reads low: 30-43% read as under 0.5 on nanoGPT and chargpt).
- `min-cpu-op-mflops` (default 100.0): on a CPU, smallest op (in MFLOP per call) counted as
  large; small GEMMs are bound by overhead, not by arithmetic, and gain nothing.

## Known problems
Traces recorded without `record_shapes=True` carry no input dtypes: the rule then stays
silent rather than guess from kernel names.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterator

import numpy as np

from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule

if TYPE_CHECKING:
    import pandas as pd

LADDER_COSTS = ("The precision ladder is measured as one fix, its best verified step leading: TF32 keeps FP32's "
                "range and memory with a 10-bit mantissa; bf16 autocast runs the matmuls with an 8-bit mantissa "
                "(weights stay FP32; activations take about half the memory); both together add TF32 for what "
                "autocast keeps in FP32.")
_TF32_KERNEL = re.compile(r"tf32|tensorop_s1688|xmma_.*tf32", re.I)


@rule(code="PR001", name="fp32-matmul")
def check(profile: Profile, *, min_kernel_frac: float = 0.2, min_step_frac: float = 0.05, min_cpu_step_frac: float = 0.3,
          min_cpu_op_mflops: float = h.CPU_BF16_MIN_OP_MFLOPS) -> Iterator[Finding]:
    dev = h.device(profile)
    ops = h.gemm_ops(profile)
    steps = h.trace_steps(profile)
    if ops.empty or steps.empty:
        return
    ops = ops[ops["step"].isin(steps["index"])]
    known = ops[ops["dtype"].notna()]
    if known.empty:
        return
    fp32 = known[known["dtype"].isin(h.FP32)]
    low_flops = known.loc[known["dtype"].isin(h.LOW_PRECISION), "flops"].sum()
    if fp32.empty or low_flops >= 0.5 * known["flops"].sum():
        return  # already mixed precision: the FP32 remainder is what autocast keeps in FP32 on purpose
    if dev.kind == "cpu":
        yield from _on_cpu(profile, dev, steps, min_cpu_step_frac, min_cpu_op_mflops)
    elif dev.fp16_tensor_cores:  # (none, e.g. Pascal: nothing faster to move to)
        yield from _on_gpu(profile, dev, fp32, steps, min_kernel_frac, min_step_frac)


def _on_cpu(profile: Profile, dev: h.Device, steps: pd.DataFrame, min_cpu_step_frac: float,
            min_cpu_op_mflops: float) -> Iterator[Finding]:
    """Large FP32 GEMMs' share of the step on a CPU with native bf16."""
    n_steps = len(steps)
    if not dev.bf16:
        return  # no native bf16: autocast would be emulated and slower, no gain to claim
    share, big = h.cpu_fp32_gemm_share(profile, min_cpu_op_mflops)
    if share is None or share < min_cpu_step_frac:
        return
    evidence = {
        "fp32_gemm_step_frac": h.r3(share),
        "fp32_gemm_s_per_step": h.r3(big["dur_us"].sum() / n_steps / 1e6),
        "fp32_gemm_ops_per_step": h.r3(len(big) / n_steps),
        "fp32_gflop_per_step": h.r3(big["flops"].sum() / n_steps / 1e9),
        "achieved_fp32_gflops": h.r3(big["flops"].sum() / (big["dur_us"].sum() * 1e-6) / 1e9),
        "device": "cpu", "cpu_bf16": True,
    }
    yield _finding(evidence, share, "of step time", dev, tf32_on=False, gain=h.BF16_GEMM_SAVES * share,
                   locations=profile.locations("matmul", dtype="float32", device="cpu"))


def _on_gpu(profile: Profile, dev: h.Device, fp32: pd.DataFrame, steps: pd.DataFrame, min_kernel_frac: float,
            min_step_frac: float) -> Iterator[Finding]:
    """The GPU kernel time FP32 GEMM/conv ops launched, and how much of it already runs on TF32."""
    step_us, n_steps = float(steps["dur_us"].sum()), len(steps)
    launches = h.kernel_launches(profile)
    launches = launches[launches["step"].isin(steps["index"])]
    kernel_us = float(launches["dur_us"].sum())
    if kernel_us <= 0:
        return
    pos = h.in_disjoint(fp32, launches["launch_ts_us"].to_numpy(), launches["tid"].to_numpy())
    mine = launches[pos >= 0]
    fp32_us = float(mine["dur_us"].sum())
    share = h.frac(fp32_us, kernel_us)
    if share < min_kernel_frac:
        return
    conv_of_kernel = fp32["is_conv"].to_numpy()[pos[pos >= 0]]
    tf32_named = mine["name"].str.contains(_TF32_KERNEL).to_numpy()
    env = profile.env
    if dev.tf32:
        # Convolutions use TF32 by default (cudnn.allow_tf32); matmuls only when asked.
        conv_tf32 = env.cudnn_allow_tf32
        mm_tf32 = env.float32_matmul_precision in ("high", "medium") or bool(env.cuda_matmul_allow_tf32)
        on_tf32 = np.where(conv_of_kernel, conv_tf32 if conv_tf32 is not None else tf32_named, mm_tf32 | tf32_named)
        on_tf32 = on_tf32 | tf32_named
        tf32_frac = h.frac(mine["dur_us"].to_numpy()[on_tf32].sum(), fp32_us)
    else:
        tf32_frac = 0.0
    step_share = h.frac(fp32_us, step_us)
    if step_share < min_step_frac:
        return
    gain = (0.3 if tf32_frac >= 0.5 else 0.5) * step_share
    evidence = {
        "fp32_gemm_kernel_frac": h.r3(share),
        "fp32_gemm_kernel_s_per_step": h.r3(fp32_us / n_steps / 1e6),
        "fp32_gemm_step_frac": h.r3(step_share),
        "fp32_gemm_ops_per_step": h.r3(len(fp32) / n_steps),
        "conv_kernel_frac": h.r3(h.frac(mine["dur_us"].to_numpy()[conv_of_kernel].sum(), fp32_us)),
        "tf32_kernel_frac": h.r3(tf32_frac),
        "device_name": dev.name,
        "device_capability": dev.capability_str,
    }
    yield _finding(evidence, share, "of GPU kernel time", dev, tf32_on=tf32_frac >= 0.5, gain=gain,
                   locations=profile.locations("matmul", dtype="float32", device="cuda"))


def _finding(evidence: dict, share: float, of_what: str, dev: h.Device, *, tf32_on: bool, gain: float,
             locations: list) -> Finding:
    cap = f" (compute capability {dev.capability_str})" if dev.capability_str else ""
    if dev.kind == "cpu":
        fix = Fix.unsafe(
            "Run the forward pass under bf16 autocast on the CPU",
            {"autocast": "bfloat16"},
        )
        why = "this CPU has native bf16 (AVX512-BF16/AMX)"
    elif dev.kind == "rocm":
        fix = Fix.unsafe(
            "Run the forward pass under bf16 autocast",
            {"autocast": "bfloat16"},
        )
        why = f"{dev.name} has bf16/fp16 matrix cores"
    elif dev.tf32 and not tf32_on:
        tf32, bf16 = {"float32_matmul_precision": "high"}, {"autocast": "bfloat16"}
        fix = Fix.unsafe(
            "Use the tensor cores for float32 matmuls: TF32, bf16 autocast, or both",
            tf32, ladder=[bf16, {**tf32, **bf16}] if dev.bf16 else None,
        )
        why = f"{dev.name}{cap} has TF32 and bf16 tensor cores"
    elif dev.tf32:
        fix = Fix.unsafe(
            "Run the forward pass under bf16 autocast",
            {"autocast": "bfloat16"},
        )
        why = f"TF32 is already on; {dev.name}{cap} runs bf16 at twice the TF32 rate"
    else:
        fix = Fix.unsafe(
            "Run the forward pass under fp16 autocast with a GradScaler",
            {"autocast": "float16"},
        )
        why = f"{dev.name}{cap} has fp16 tensor cores but no TF32 or bf16"
    severity = "high" if gain >= 0.2 else "medium" if gain >= 0.08 else "low"
    if dev.kind == "cpu":  # bf16 training on a CPU is less travelled ground: never more than medium
        severity = "medium" if gain >= 0.2 else "low"
    return Finding(
        title=f"FP32 matmuls and convolutions take {share:.0%} {of_what}",
        summary=(f"{share:.0%} {of_what} is in FP32 GEMM/convolution ops while {why}; "
                 f"estimated gain {gain:.0%} of step time if they ran about 2x faster."
                 + (f" {LADDER_COSTS}" if fix.ladder else "")),
        severity=severity,
        evidence={k: v for k, v in evidence.items() if v is not None},
        estimated_gain_frac=h.r3(gain),
        fix=fix,
        locations=locations,
    )
