"""## What it does
Compares peak GPU memory with the device's capacity: room for a larger batch, or close to OOM.

Both directions are checked:

- far below capacity (the peak allocated is a small share of the GPU) while the GPU is not
  saturated and the input pipeline keeps up: there is room for a larger batch;
- near capacity (the peak reserved by the caching allocator close to the total): the run is
  one longer sequence or larger batch away from an out-of-memory error.

The peak comes from the probe (`torch.cuda.max_memory_allocated/reserved`) or from the
trace's memory events (`profile_memory=True`); training runs only.

## Why is this bad?
A small batch leaves a GPU underused: kernels are too small to fill its SMs and per-step
overheads (launches, optimizer, synchronization) are paid for few samples. Memory is the
budget for a bigger batch. At the other end, a run that peaks within a few percent of
capacity fails on the first larger input, and the allocator's retries and fragmentation
already slow it down.

## Example
```python
loader = DataLoader(dataset, batch_size=32)   # peaks at 4 GiB of an 80 GiB GPU
```

Use instead:
```python
loader = DataLoader(dataset, batch_size=64)   # and scale the learning rate with it
```

## Fix safety
Unsafe: a larger batch changes the optimization (learning rate, number of steps per epoch,
batch-norm statistics); the learning rate usually needs scaling with the batch. Near OOM,
the fix is manual (gradient accumulation, activation checkpointing, bf16) and shown for
display only.

## Options
- `max-used-frac` (default 0.4): report headroom when the peak allocated memory is at most
  this share of the GPU.
- `near-oom-frac` (default 0.92): report OOM risk when the peak reserved memory reaches this
  share of the GPU.
- `max-gpu-busy-frac` (default 0.9): report headroom only when the GPU was busy for less than
  this share of the step (a saturated GPU gains little from a larger batch).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from . import helpers as h
from .registry import Finding, Fix, rule


@rule(code="MEM001", name="memory-headroom")
def check(profile, *, max_used_frac: float = 0.4, near_oom_frac: float = 0.92,
          max_gpu_busy_frac: float = 0.9) -> Iterator[Finding]:
    if not profile.has_gpu or not h.is_training(profile):
        return
    peak_alloc, peak_reserved, total, source = _peaks(profile)
    if not total or peak_alloc is None:
        return
    used = peak_alloc / total
    reserved = (peak_reserved or peak_alloc) / total
    evidence = {
        "peak_allocated_bytes": int(peak_alloc),
        "peak_reserved_bytes": int(peak_reserved) if peak_reserved else None,
        "device_total_bytes": int(total),
        "peak_allocated_frac": h.r3(used),
        "peak_reserved_frac": h.r3(reserved),
        "source": source,
    }
    if reserved >= near_oom_frac:
        yield Finding(
            title=f"Peak GPU memory is {reserved:.0%} of the device: close to out-of-memory",
            summary=(f"The caching allocator reserved {h.human_bytes(peak_reserved or peak_alloc)} of "
                     f"{h.human_bytes(total)} ({reserved:.0%}); a larger input or batch will not fit."),
            severity="medium",
            evidence={k: v for k, v in evidence.items() if v is not None},
            fix=Fix.manual(
                "Cut activation memory: accumulation, checkpointing or bf16",
                ("# halve the micro-batch and accumulate gradients over 2 of them\n"
                 "loss = loss_fn(model(x), y) / 2\nloss.backward()\n"
                 "if (i + 1) % 2 == 0:\n    optimizer.step(); optimizer.zero_grad(set_to_none=True)\n"
                 "# or: torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)\n"
                 '# or: with torch.autocast("cuda", dtype=torch.bfloat16): ...'),
            ),
        )
        return
    if used > max_used_frac:
        return
    busy = _gpu_busy_frac(profile)
    wait = _data_wait_frac(profile)
    if busy is not None and busy >= max_gpu_busy_frac:
        return
    if wait is not None and wait >= 0.10:
        return  # input-bound: a larger batch only loads more data per step
    scale = 2
    while scale < 8 and peak_alloc * scale * 2 <= 0.8 * total:
        scale *= 2
    if peak_alloc * scale > 0.8 * total:
        return
    evidence.update(gpu_busy_frac=h.r3(busy), data_wait_frac=h.r3(wait), suggested_batch_scale=scale)
    yield Finding(
        title=f"The run uses {used:.0%} of GPU memory: room for a {scale}x larger batch",
        summary=(f"Peak allocated memory is {h.human_bytes(peak_alloc)} of {h.human_bytes(total)} while the GPU is busy "
                 f"{'for ' + format(busy, '.0%') + ' of the step' if busy is not None else 'part of the time'}: "
                 f"a {scale}x batch would still fit under 80%."),
        severity="low",
        evidence={k: v for k, v in evidence.items() if v is not None},
        fix=Fix.unsafe(
            f"Try a {scale}x larger batch (and scale the learning rate)",
            {"batch_size_scale": scale},
            snippet=(f"loader = DataLoader(dataset, batch_size={scale} * batch_size, ...)\n"
                     f"optimizer = torch.optim.AdamW(model.parameters(), lr={scale} * lr)  # or sqrt({scale}) * lr"),
        ),
    )


def _peaks(profile):
    mem = profile.memory or {}
    total = mem.get("device_total_bytes") or profile.env.get("device_memory_bytes")
    if mem.get("peak_allocated_bytes") is not None:
        return float(mem["peak_allocated_bytes"]), mem.get("peak_reserved_bytes"), total, "probe"
    ev = profile.memory_events
    if ev.empty:
        return None, None, total, None
    gpu = ev[ev["device_type"] == 1]
    if gpu.empty or not gpu["total_allocated"].notna().any():
        return None, None, total, None  # old traces: deltas only, the baseline is unknown
    reserved = gpu["total_reserved"].max()
    return float(gpu["total_allocated"].max()), (float(reserved) if np.isfinite(reserved) else None), total, "trace"


def _gpu_busy_frac(profile) -> float | None:
    steps = h.trace_steps(profile)
    if len(steps):
        return float(np.median(steps["gpu_busy_us"] / steps["dur_us"]))
    util = profile.samples.get("gpu_util_percent") if not profile.samples.empty else None
    if util is not None and util.notna().any():
        return float(util.mean()) / 100.0
    return None


def _data_wait_frac(profile) -> float | None:
    steps = h.timed_steps(profile)
    if steps.empty or "data_wait_s" not in steps:
        return None
    return h.frac(steps["data_wait_s"].fillna(0).sum(), steps["duration_s"].sum())
