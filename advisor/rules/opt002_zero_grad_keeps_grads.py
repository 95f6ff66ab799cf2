"""## What it does
Flags training loops that zero gradients in place every step instead of dropping them. That
is `optimizer.zero_grad(set_to_none=False)`, `model.zero_grad(set_to_none=False)`, or a loop
of `p.grad.zero_()`.

From the probe, the `zero_grad` calls the script made and how many kept their gradients; from
a CPU trace, the top-level `zero_` / `_foreach_zero_` operators per step on the loop's thread
and their time (inside an `Optimizer.zero_grad` range: the optimizer's own call, which the
automatic fix covers).

## Why is this bad?
Zeroing in place writes every gradient element once more each step, and backward then has to
read the zeros back and add the new gradient into them, instead of writing the fresh gradient
into memory it owns. For a model of N parameters that is two extra passes over N floats every
step, plus a dispatch per parameter; the gradients also stay allocated between steps.
`set_to_none=True` (the default of `zero_grad` since torch 2.0) sets `p.grad = None`, and
backward's first accumulation simply takes the new gradient.

## Example
```python
optimizer.zero_grad(set_to_none=False)
# or
for p in model.parameters():
    p.grad.zero_()
```

Use instead:
```fix
{"zero_grad_set_to_none": true}
```

## Fix safety
Safe: a parameter that received a gradient gets the same update either way. One that received
none this step is skipped by the optimizer when its grad is None, while a zero grad still lets
momentum or weight decay move it; the experiment's loss check shows whether that matters. Code
that reads `p.grad` between `zero_grad()` and `backward()` must handle None. The automatic fix
covers `zero_grad(set_to_none=False)` calls; a hand-written `p.grad.zero_()` loop is a manual fix.

## Options
- `min-zeroed-tensors` (default 4): from a trace, fewest in-place `zero_` operators per step that
  look like a gradient-zeroing loop.
- `min-zero-frac` (default 0.01): from a trace, smallest share of the step spent in those
  operators for a manual finding.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule

SNIPPET_LOOP = ("- for p in model.parameters():\n-     p.grad.zero_()\n"
                "+ optimizer.zero_grad()  # or: for p in model.parameters(): p.grad = None")


@rule(code="OPT002", name="zero-grad-keeps-grads")
def check(profile: Profile, *, min_zeroed_tensors: int = 4, min_zero_frac: float = 0.01) -> Iterator[Finding]:
    calls = profile.observed.zero_grad
    kept = {who: c for who, c in calls.items() if c.kept}
    zeros = _trace_zeros(profile)
    evidence = {"zero_grad_calls": sum(c.calls for c in calls.values()) or None,
                "zero_grad_kept": sum(c.kept for c in kept.values()) or None}
    if zeros:
        evidence.update({k: h.r3(v) for k, v in zeros.items() if k != "in_optimizer_zero_grad"})
    evidence = {k: v for k, v in evidence.items() if v is not None}
    frac = zeros["zero_frac"] if zeros else None
    gain = h.r3(min(0.5, 2 * frac)) if frac is not None else None  # the memset, and reading it back in backward
    if kept or (not calls and zeros and zeros["in_optimizer_zero_grad"]):
        who = "optimizer.zero_grad" if "Optimizer" in kept or not kept else "model.zero_grad"
        share = f", {frac:.0%} of the step in zero_" if frac is not None else ""
        counted = (f"{evidence['zero_grad_kept']} of {evidence['zero_grad_calls']} zero_grad calls kept the gradients"
                   if kept else "the trace's Optimizer.zero_grad zeroes the gradients in place")
        yield Finding(
            title=f"{who}(set_to_none=False) zeroes every gradient in place each step",
            summary=f"{counted}{share}; set_to_none=True drops them and backward writes fresh ones.",
            severity="medium" if (frac or 0) >= 0.05 else "low",
            evidence=evidence,
            estimated_gain_frac=gain,
            fix=Fix.safe("Call zero_grad with set_to_none=True", {"zero_grad_set_to_none": True}),
        )
        return
    if (profile.has_gpu or not zeros or zeros["zeroed_per_step"] < min_zeroed_tensors or frac is None
            or frac < min_zero_frac):
        return
    yield Finding(
        title=f"{zeros['zeroed_per_step']:.0f} tensors zeroed in place each step: {frac:.0%} of the step",
        summary=(f"Each step zeroes {zeros['zeroed_per_step']:.0f} tensors ({zeros['zeroed_elements']:,.0f} elements) "
                 f"with zero_() outside zero_grad, a hand-written gradient reset; setting p.grad = None (or "
                 f"optimizer.zero_grad()) lets backward write fresh gradients."),
        severity="medium" if frac >= 0.05 else "low",
        evidence=evidence,
        estimated_gain_frac=gain,
        fix=Fix.manual("Set the gradients to None instead of zeroing them", SNIPPET_LOOP),
    )


def _trace_zeros(profile: Profile) -> dict | None:
    """Top-level ``zero_`` / ``_foreach_zero_`` on the loop's thread, per profiled step: tensors,
    elements, share of the step."""
    ops, steps = profile.ops, h.trace_steps(profile)
    tid = h.main_thread(profile)
    if ops.empty or steps.empty or tid is None:
        return None
    z = ops[ops["name"].isin(("aten::zero_", "aten::_foreach_zero_")) & (ops["depth"] == 0) & (ops["tid"] == tid)
            & ops["step"].isin(steps["index"])]
    shapes = [shape for dims, name in zip(z["input_dims"], z["name"]) if isinstance(dims, list) and dims
              for shape in (dims[0] if name == "aten::_foreach_zero_" else [dims[0]]) if isinstance(shape, list)]
    n = len(steps)
    ann = profile.annotations
    ranges = ann[ann["name"].str.startswith("Optimizer.zero_grad#")]
    in_opt = bool(len(z) and len(ranges) and (h.in_disjoint(ranges[["ts_us", "end_us", "tid"]].reset_index(drop=True),
                                                            z["ts_us"].to_numpy(), z["tid"].to_numpy()) >= 0).any())
    return {"zeroed_per_step": len(shapes) / n, "zeroed_elements": sum(int(np.prod(s)) for s in shapes) / n,
            "zero_frac": h.frac(z["dur_us"].sum(), steps["dur_us"].sum()), "in_optimizer_zero_grad": in_opt}
