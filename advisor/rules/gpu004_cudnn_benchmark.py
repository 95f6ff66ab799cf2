"""## What it does
Flags fixed-shape convolutions trained with `torch.backends.cudnn.benchmark` off.

The rule needs a CUDA run whose convolutions see the same input shapes every step. The flag is read from the probed process at the end
of the run; the shapes from the profiled steps (`record_shapes=True`): every step must run
the same convolutions on the same shapes.

A trace alone does not say how the flag was set, so on `advise analyze` the rule stays silent.

## Why is this bad?
With `benchmark=False`, cuDNN picks each convolution's algorithm from a heuristic. With
`benchmark=True` it times the candidate algorithms once per input shape and keeps the
fastest; with fixed shapes that one-time cost is paid in the first step and every later step
uses the best kernel, often 10-30% faster for convolution-heavy models.

## Example
```python
model = torchvision.models.resnet50().cuda()
```

Use instead:
```fix
{"cudnn_benchmark": true}
```

## Fix safety
Safe for numerics in practice (only the algorithm changes, within floating-point rounding),
but the chosen algorithm can vary from run to run, so results are not bitwise reproducible;
with input shapes that change every step, benchmarking repeats for each new shape and slows
training down (the rule only fires on fixed shapes).

## Options
- `min-conv-kernel-frac` (default 0.1): smallest share of GPU kernel time in convolution
  kernels to report.
"""

from __future__ import annotations

from typing import Iterator

from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule


@rule(code="GPU004", name="cudnn-benchmark")
def check(profile: Profile, *, min_conv_kernel_frac: float = 0.1) -> Iterator[Finding]:
    benchmark = profile.env.cudnn_benchmark  # None: not known (a trace alone)
    if not profile.has_gpu or benchmark is None or benchmark:
        return
    if h.device(profile).kind != "cuda":
        return  # MIOpen has its own find mode (MIOPEN_FIND_MODE)
    steps = h.trace_steps(profile)
    ops = h.gemm_ops(profile)
    if steps.empty or ops.empty:
        return
    convs = ops[ops["is_conv"] & ops["step"].isin(steps["index"])]
    if convs.empty:
        return
    shapes = convs.assign(sig=[repr(d) for d in convs["input_dims"]]).groupby("step")["sig"].apply(lambda s: tuple(sorted(s)))
    if shapes.nunique() != 1 or len(shapes) < min(2, len(steps)):
        return  # shapes change between steps: benchmarking would re-run for each new shape
    launches = h.kernel_launches(profile)
    launches = launches[launches["step"].isin(steps["index"])]
    kernel_us = float(launches["dur_us"].sum())
    pos = h.in_disjoint(convs, launches["launch_ts_us"].to_numpy(), launches["tid"].to_numpy())
    conv_us = float(launches["dur_us"].to_numpy()[pos >= 0].sum())
    share = h.frac(conv_us, kernel_us)
    if share < min_conv_kernel_frac:
        return
    n = len(steps)
    yield Finding(
        title=f"cudnn.benchmark is off for {len(convs) / n:.0f} fixed-shape convolutions per step",
        summary=(f"Convolution kernels take {share:.0%} of GPU kernel time with the same input shapes every step, "
                 "but cuDNN picks their algorithms by heuristic instead of timing them once."),
        severity="medium" if share >= 0.3 else "low",
        evidence={
            "conv_kernel_frac": h.r3(share),
            "conv_kernel_s_per_step": h.r3(conv_us / n / 1e6),
            "convs_per_step": h.r3(len(convs) / n),
            "distinct_conv_shapes": int(len(set(shapes.iloc[0]))),
            "cudnn_benchmark": False,
        },
        fix=Fix.safe(
            "Enable cudnn.benchmark",
            {"cudnn_benchmark": True},
        ),
    )
