"""## What it does
Flags steps whose GPU waits on the CPU to launch many short kernels.

The pattern: many short kernels, each executed as soon as it is launched (the launch queue
is empty), while the GPU is idle for most of the step outside data loading. Measured from the trace: kernels per step, their median
duration, the delay from each launch to its kernel's start, and GPU busy time over the
non-data part of the step. A step that mostly waits for data is left to
`dataloader-starvation`.

## Why is this bad?
Every PyTorch operator costs the CPU microseconds of Python, dispatcher and
`cudaLaunchKernel` overhead. When kernels are shorter than that, the GPU finishes each one
before the next arrives and idles in between: a faster GPU would not help, and neither would
a faster kernel. Fusing operators (`torch.compile`) or replaying whole steps as CUDA graphs
removes the per-kernel CPU cost.

Which does more depends on the model, so the fix is torch.compile's three modes measured as one
sweep, the best verified leading: the default (fused kernels), `reduce-overhead` (the same,
replayed as CUDA graphs: one launch a step) and `max-autotune-no-cudagraphs` (a search for
faster matmul kernels, at a longer compile). Each reports what compiling cost, once, and the
steps that pay it back, and a mode that recompiled says how often and which input's shape varied
(CUDA graphs record again for each new shape). On a CPU, `op-overhead-bound` measures the default
mode alone: no CUDA graphs there, and in a training step max-autotune has no matmul to search
(Inductor's CPU GEMM templates need frozen weights), so it compiles the same kernels.

## Example
```python
model = MyModel().cuda()
for x, y in loader:
    loss = loss_fn(model(x), y)
```

Use instead:
```fix
{"compile": true}
```

or, where the sweep measured CUDA graphs best:
```fix
{"compile": "reduce-overhead"}
```

## Fix safety
Unsafe: `torch.compile` changes how the model executes (fused kernels with different
rounding, graph breaks, recompilation on new shapes) and adds compile time at start-up;
CUDA graphs need static shapes and static memory addresses.

## Options
- `max-busy-frac` (default 0.6): report when the GPU is busy for less than this median share
  of the step outside data loading.
- `min-kernels-per-step` (default 50): smallest number of kernels per step to report.
- `max-median-kernel-us` (default 20.0): report when the median kernel is at most this long
  (microseconds).
- `max-queue-delay-us` (default 50.0): report when kernels start this soon after their launch
  (median, microseconds), i.e. the GPU had nothing queued.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

from . import helpers as h
from .registry import Finding, rule

if TYPE_CHECKING:
    from advisor.profile import Profile


@rule(code="GPU002", name="launch-bound")
def check(profile: Profile, *, max_busy_frac: float = 0.6, min_kernels_per_step: int = 50,
          max_median_kernel_us: float = 20.0, max_queue_delay_us: float = 50.0) -> Iterator[Finding]:
    if not profile.has_gpu:
        return
    steps = h.trace_steps(profile)
    if steps.empty:
        return
    launches = h.kernel_launches(profile)
    launches = launches[launches["step"].isin(steps["index"]) & launches["launch_end_us"].notna()]
    if launches.empty:
        return
    n = len(steps)
    compute_us = np.clip(steps["dur_us"].to_numpy() - steps["data_wait_us"].to_numpy(), 1e-9, None)
    if h.frac(compute_us.sum(), steps["dur_us"].sum()) < 0.5:
        return  # the step mostly waits for data: dataloader-starvation is the finding
    busy = float(np.median(np.clip(steps["gpu_busy_us"].to_numpy() / compute_us, 0, 1)))
    per_step = len(launches) / n
    median_kernel = float(launches["dur_us"].median())
    delay = float(np.median(launches["ts_us"].to_numpy() - launches["launch_end_us"].to_numpy()))
    if busy >= max_busy_frac or per_step < min_kernels_per_step or median_kernel > max_median_kernel_us \
            or delay > max_queue_delay_us:
        return
    rt = profile.runtime
    in_steps = rt[rt["step"].isin(steps["index"])]
    launch_api = in_steps[in_steps["name"].str.contains("LaunchKernel|LaunchCooperativeKernel", regex=True)]
    cpu_per_kernel = float(np.median(compute_us)) / per_step
    gain = (1.0 - busy) * 0.5 * h.frac(compute_us.sum(), steps["dur_us"].sum())
    yield Finding(
        title=f"The GPU waits on kernel launches: busy {busy:.0%} of the step outside data loading",
        summary=(f"{per_step:.0f} kernels per step with a median of {median_kernel:.1f} us each start a median "
                 f"{delay:.1f} us after their launch; the CPU spends {cpu_per_kernel:.0f} us per kernel issuing them. "
                 f"{h.COMPILE_LADDER_SAID}"),
        severity="high" if busy < 0.3 else "medium",
        evidence={
            "gpu_busy_frac_outside_data_wait": h.r3(busy),
            "kernels_per_step": h.r3(per_step),
            "median_kernel_us": h.r3(median_kernel),
            "short_kernel_frac": h.r3(float((launches["dur_us"] < 10).mean())),
            "median_launch_to_start_us": h.r3(delay),
            "cpu_us_per_kernel": h.r3(cpu_per_kernel),
            "launch_api_s_per_step": h.r3(launch_api["dur_us"].sum() / n / 1e6),
            "kernel_s_per_step": h.r3(launches["dur_us"].sum() / n / 1e6),
            "n_steps": n,
        },
        estimated_gain_frac=h.r3(gain),
        fix=h.compile_fix(h.device(profile)),
    )
