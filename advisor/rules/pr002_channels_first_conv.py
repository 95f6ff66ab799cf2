"""## What it does
Flags mixed-precision conv nets in channels-first (NCHW) format that pay for layout transposes.

It fires on fp16/bf16 convolutions in the default NCHW memory format when the GPU spends a
material share of the step in the layout-conversion kernels that cuDNN/MIOpen launch
around each convolution (`nchwToNhwcKernel`, `nhwcToNchwKernel`, `batched_transpose_*`).

## Why is this bad?
Tensor-core convolution kernels work on channels-last (NHWC) data. Given NCHW tensors, the
library transposes inputs and outputs around every convolution: pure memory traffic that adds
kernels and time to each layer, forward and backward. With the model and inputs in
`torch.channels_last`, the transposes disappear.

## Example
```python
model = torchvision.models.resnet50().cuda()
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = loss_fn(model(images), labels)
```

Use instead:
```fix
{"channels_last": true}
```

## Fix safety
Safe: the memory format changes strides, not values; convolution algorithms may differ,
within floating-point rounding. Code that relies on `.view()` of NCHW-contiguous activations
may need `.reshape()` instead.

## Options
- `min-transpose-frac` (default 0.03): smallest share of step time in layout-conversion
  kernels launched by convolutions to report.
"""

from __future__ import annotations

from typing import Iterator

from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule

_LAYOUT_KERNEL = r"nchwToNhwc|nhwcToNchw|batched_transpose|transpose_NCHW|NCHW.*NHWC|NHWC.*NCHW"


@rule(code="PR002", name="channels-first-conv")
def check(profile: Profile, *, min_transpose_frac: float = 0.03) -> Iterator[Finding]:
    if not profile.has_gpu:
        return
    steps = h.trace_steps(profile)
    ops = h.gemm_ops(profile)
    if steps.empty or ops.empty:
        return
    convs = ops[ops["is_conv"] & ops["step"].isin(steps["index"])]
    low = convs[convs["dtype"].isin(h.LOW_PRECISION)]
    if low.empty or h.frac(low["flops"].sum(), convs["flops"].sum()) < 0.5:
        return  # not a mixed-precision conv net
    launches = h.kernel_launches(profile)
    launches = launches[launches["step"].isin(steps["index"])]
    layout = launches[launches["name"].str.contains(_LAYOUT_KERNEL, regex=True)]
    if layout.empty:
        return
    inside = h.in_disjoint(convs, layout["launch_ts_us"].to_numpy(), layout["tid"].to_numpy()) >= 0
    layout = layout[inside]
    step_us = float(steps["dur_us"].sum())
    share = h.frac(layout["dur_us"].sum(), step_us)
    if share < min_transpose_frac:
        return
    n = len(steps)
    top = layout["name"].str.slice(0, 60).value_counts().head(3)
    yield Finding(
        title=f"Layout transposes around mixed-precision convolutions take {share:.0%} of the step",
        summary=(f"{len(layout) / n:.0f} layout-conversion kernels per step ({layout['dur_us'].sum() / n / 1e3:.2f} ms) "
                 f"run inside {len(low) / n:.0f} fp16/bf16 convolutions per step in NCHW format."),
        severity="medium" if share >= 0.08 else "low",
        evidence={
            "transpose_step_frac": h.r3(share),
            "transpose_s_per_step": h.r3(layout["dur_us"].sum() / n / 1e6),
            "transpose_kernels_per_step": h.r3(len(layout) / n),
            "low_precision_convs_per_step": h.r3(len(low) / n),
            "top_kernels": {str(k): int(v) for k, v in top.items()},
        },
        estimated_gain_frac=h.r3(0.8 * share),
        fix=Fix.safe(
            "Use the channels_last memory format for the model and its inputs",
            {"channels_last": True},
        ),
    )
