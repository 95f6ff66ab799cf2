"""## What it does
Flags a CPU optimizer that updates one tensor at a time. It reports when the update takes
a material share of the step.

On a CPU torch defaults neither to `foreach` nor to `fused`: an Adam, AdamW, SGD, ... built
without those flags runs its single-tensor loop. From the probe, the optimizer's class, flags,
parameter count and `optimizer.step()`'s share of the step; from a trace, the operators inside
`Optimizer.step` (no `_foreach_` or `_fused_` operator: single-tensor).

## Why is this bad?
The single-tensor loop runs each operation of the update (Adam: about a dozen) as its own pass
over each parameter's memory, with a dispatch per parameter per operation. With millions of
parameters the update is memory-bound and pays for every one of those passes. `fused=True`
(Adam, AdamW, SGD and Adagrad have fused CPU kernels since torch 2.4) reads and writes each
parameter, gradient and state tensor once, vectorised and split over the intra-op threads;
`foreach=True` at least batches the dispatch over all parameters.

## Example
```python
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)   # on a CPU: single-tensor
```

Use instead:
```fix
{"optimizer": {"fused": true}}
```

## Fix safety
Safe: the same update, computed in a different order (differences at floating-point rounding).
`fused=True` needs floating-point parameters and no `differentiable=True`; `foreach` needs a
temporary copy of the gradients' size.

## Options
- `min-optimizer-frac` (default 0.1): smallest share of the step in `optimizer.step()` to report.
- `min-elements` (default 1000000): fewest parameter elements; below that the update fits in
  cache and takes microseconds whichever implementation runs it.
- `min-sgd-tensors` (default 50): fewest parameter tensors for SGD. Its update is one or two
  passes over each tensor already, so only the per-tensor dispatch is saved, and that matters over
  many tensors (a 6-tensor MLP's SGD step is memory-bound whatever runs it).
"""

from __future__ import annotations

from typing import Iterator

from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule

FUSED_ON_CPU = {"Adam", "AdamW", "SGD", "Adagrad"}
FOREACH = FUSED_ON_CPU | {"Adamax", "RMSprop", "NAdam", "RAdam", "Adadelta", "ASGD", "Rprop"}


@rule(code="CPU002", name="single-tensor-optimizer-cpu")
def check(profile: Profile, *, min_optimizer_frac: float = 0.1, min_elements: int = 1_000_000,
          min_sgd_tensors: int = 50) -> Iterator[Finding]:
    if profile.has_gpu:
        return
    frac = h.optimizer_frac(profile)
    if frac is None or frac < min_optimizer_frac:
        return
    multi = _trace_multi_tensor(profile)
    for opt in profile.observed.optimizers:
        cls = opt.cls
        if cls not in FOREACH or opt.fused or opt.foreach or multi:
            continue
        if not (opt.device or "cpu").startswith("cpu") or opt.n_elements < min_elements:
            continue
        if cls == "SGD" and opt.n_params < min_sgd_tensors:
            continue
        use_fused = cls in FUSED_ON_CPU and _torch_at_least(profile, (2, 4))
        flag = "fused" if use_fused else "foreach"
        yield Finding(
            title=f"{cls} updates {opt.n_params} CPU tensors one at a time: {frac:.0%} of the step",
            summary=(f"optimizer.step() of {cls} takes {frac:.0%} of the step over {opt.n_elements:,} parameter "
                     f"elements, in torch's single-tensor loop (the CPU default); {flag}=True updates them in "
                     f"{'one vectorised pass' if use_fused else 'a few batched operations'}."),
            severity="high" if frac >= 0.3 else "medium",
            evidence={"optimizer": cls, "foreach": opt.foreach, "fused": opt.fused,
                      "n_params": opt.n_params, "n_elements": opt.n_elements,
                      "optimizer_frac": h.r3(frac), "device": "cpu"},
            # fused on CPU: about 3x less update time on memory-bound sizes (foreach: about 1.5x)
            estimated_gain_frac=h.r3((h.FUSED_SAVES_OVER_SINGLE if use_fused else 0.3) * frac),
            fix=Fix.safe(f"Build {cls} with {flag}=True", {"optimizer": {flag: True}}),
        )
        return  # the override applies to every optimizer: one finding


def _trace_multi_tensor(profile: Profile) -> bool:
    """True when the trace's Optimizer.step ranges run foreach or fused operators."""
    ann, ops = profile.annotations, profile.ops
    ranges = ann[ann["name"].str.startswith("Optimizer.step#")]
    if ranges.empty or ops.empty:
        return False
    multi = ops[ops["name"].str.contains("_foreach_|_fused_", regex=True)]
    for r in ranges.itertuples():
        if ((multi["tid"] == r.tid) & (multi["ts_us"] >= r.ts_us) & (multi["end_us"] <= r.end_us)).any():
            return True
    return False


def _torch_at_least(profile: Profile, version: tuple[int, int]) -> bool:
    raw = profile.env.torch or ""
    try:
        major, minor = (int(x) for x in raw.split("+")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= version
