"""## What it does
Flags CUDA optimizers that update parameters one tensor at a time. From the probe, an Adam,
AdamW, SGD, ... built with `foreach=False` (or whose default could not use `foreach`), or a
foreach optimizer that takes a material share of the step where a fused kernel exists; from
a trace, an `Optimizer.step` that launches one kernel per parameter per operation and no
`multi_tensor_apply` kernel.

## Why is this bad?
The single-tensor ("for-loop") implementation launches several small kernels per parameter:
a ResNet-50 SGD step with momentum is about 480 launches, each costing the CPU several
microseconds while the GPU does almost nothing. `foreach=True` groups them into a few
multi-tensor kernels; `fused=True` does the whole update in one kernel per parameter group.

## Example
```python
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)
```

Use instead:
```fix
{"optimizer": {"fused": true}}
```

## Fix safety
Safe: the update is the same math; fused and foreach kernels round in a different order, a
difference at floating-point precision. `fused=True` needs every parameter on the GPU in a
floating-point dtype; `foreach` needs more temporary memory (a copy of the gradients' size).

## Options
- `min-launches-per-step` (default 50): from a trace, smallest number of kernel launches in one
  `Optimizer.step` to call it single-tensor.
- `min-optimizer-frac` (default 0.1): for a foreach optimizer, smallest share of the step in
  `optimizer.step()` to suggest `fused=True`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from advisor.analysis.ranks import name_mask
from advisor.profile import Profile
from advisor.run_dir.seen import OptimizerSeen

from . import helpers as h
from .registry import Finding, Fix, rule

FUSED = {"Adam", "AdamW", "SGD", "Adagrad", "Adamax"}
FOREACH = FUSED | {"RMSprop", "NAdam", "RAdam", "Adadelta", "ASGD", "Rprop"}


@rule(code="OPT001", name="unfused-optimizer")
def check(profile: Profile, *, min_launches_per_step: int = 50, min_optimizer_frac: float = 0.1) -> Iterator[Finding]:
    if not profile.has_gpu:
        return
    observed = [o for o in profile.observed.optimizers if (o.device or "").startswith("cuda")]
    trace = _from_trace(profile, min_launches_per_step)
    opt_frac = h.optimizer_frac(profile)
    for opt in observed or ([trace.optimizer] if trace else []):
        cls = opt.cls
        if opt.fused or cls not in FOREACH:
            continue
        single = opt.foreach is False or bool(trace and trace.single_tensor)
        if not single and (cls not in FUSED or opt_frac is None or opt_frac < min_optimizer_frac):
            continue
        launches = trace.launches_per_step if trace else None
        how = "one tensor at a time" if single else "with foreach kernels"
        use_fused = cls in FUSED
        kw = {"fused": True} if use_fused else {"foreach": True}
        evidence = {
            "optimizer": cls,
            "foreach": opt.foreach,
            "fused": opt.fused,
            "implementation": "single-tensor" if single else "foreach",
            "n_params": opt.n_params or None,
            "launches_per_optimizer_step": h.r3(launches) if launches is not None else None,
            "optimizer_frac": h.r3(opt_frac),
        }
        frac_text = f"{opt_frac:.0%} of the step" if opt_frac is not None else "part of each step"
        launch_text = f", {launches:.0f} kernel launches per step" if launches is not None else ""
        yield Finding(
            title=f"{cls} updates parameters {how} on the GPU",
            summary=f"optimizer.step() of {cls} takes {frac_text}{launch_text}; {'fused' if use_fused else 'foreach'} "
                    f"kernels update all parameters in a few launches.",
            severity="medium" if single and (opt_frac or 0) >= 0.05 else "low",
            evidence={k: v for k, v in evidence.items() if v is not None},
            estimated_gain_frac=h.r3((0.7 if single else 0.3) * opt_frac) if opt_frac is not None else None,
            fix=Fix.safe(
                f"Build {cls} with {'fused' if use_fused else 'foreach'}=True",
                {"optimizer": kw},
            ),
        )
        return  # one finding per run: the overrides apply to every optimizer


_LAUNCH = re.compile("LaunchKernel")
_MULTI_TENSOR = re.compile("multi_tensor_apply|fused_adam|FusedAdam|fused_sgd", re.IGNORECASE)


@dataclass(frozen=True)
class _TraceOptimizer:
    optimizer: OptimizerSeen
    launches_per_step: float
    single_tensor: bool | None


def _from_trace(profile: Profile, min_launches: int) -> _TraceOptimizer | None:
    """The trace's Optimizer.step: class, launches per step, whether it is single-tensor."""
    ann = profile.annotations
    opt = ann[ann["name"].str.startswith("Optimizer.step#") & (ann["step"] >= 0)]
    if opt.empty:
        return None
    cls = opt["name"].iloc[0].split("#", 1)[1].split(".", 1)[0]
    rt = profile.runtime
    launches = rt[name_mask(rt["name"], _LAUNCH)]
    l_tid, l_ts, l_end = (launches[c].to_numpy() for c in ("tid", "ts_us", "end_us"))
    l_corr = launches["correlation"].to_numpy(dtype="float64", na_value=np.nan)
    k = profile.kernels
    k_corr = k["correlation"].to_numpy(dtype="float64", na_value=np.nan)
    k_multi = name_mask(k["name"], _MULTI_TENSOR)
    per_range = []
    multi = False
    for r in opt.itertuples():
        inside = (l_tid == r.tid) & (l_ts >= r.ts_us) & (l_end <= r.end_us)
        per_range.append(int(inside.sum()))
        corr = l_corr[inside]
        multi = multi or bool(k_multi[np.isin(k_corr, corr[~np.isnan(corr)])].any())
    n_steps = max(1, opt["step"].nunique())
    per_step = sum(per_range) / n_steps
    single = None if per_step == 0 else (not multi and per_step >= min_launches)
    fused = cls.startswith("Fused") or None
    return _TraceOptimizer(OptimizerSeen(cls=cls.removeprefix("Fused") if not fused else cls, fused=fused), per_step,
                           single)

