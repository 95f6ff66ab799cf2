"""## What it does
Finds host-device synchronizations inside the training step, with their call sites.

These are the points where the CPU waits for the GPU to drain:
`cudaStreamSynchronize`, `cudaDeviceSynchronize`, `cudaEventSynchronize` (and their HIP
twins), with the operator that caused each one (`aten::item` from `.item()`,
`aten::_local_scalar_dense`, a device-to-host `aten::copy_` from `.cpu()`/`.tolist()`,
`aten::nonzero` and other data-dependent shapes, or an explicit `torch.cuda.synchronize()`)
and, when the trace has Python stacks, the line of the training script that made the call.
The cost is measured as the GPU idle time right after each sync, until new work arrives;
a sync issued while the GPU was already idle returns at once and is not counted.

Synchronizations forced by host-to-device copies from pageable memory are left to
`pageable-memcpy`.

## Why is this bad?
PyTorch queues GPU work asynchronously: the CPU runs ahead and the GPU always has the next
kernels waiting. A sync empties that queue: the CPU waits for the GPU, then the GPU waits
for the CPU to produce the next kernels. Logging `loss.item()` every step, `.cpu()` for a
metric, or a boolean mask index each insert such a bubble.

## Example
```python
for step, (x, y) in enumerate(loader):
    loss = train_step(x, y)
    print(f"loss {loss.item():.3f}")
```

Use instead:
```python
for step, (x, y) in enumerate(loader):
    loss = train_step(x, y)
    running += loss.detach()          # stays on the GPU, no sync
    if step % 100 == 0:
        print(f"loss {(running / 100).item():.3f}")
        running.zero_()
```

## Fix safety
Display-only: removing a sync changes when values are read, which is a code change only the
author can judge (a sync before timing code or before reading results is intentional).

## Options
- `min-idle-frac` (default 0.02): smallest share of the step the GPU idles after syncs to report.
- `min-syncs-per-step` (default 1.0): smallest number of synchronizations per step to report.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from advisor.trace import intervals
from advisor.analysis import sources
from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule

_CAUSE = [
    (("aten::item", "aten::_local_scalar_dense"), ".item() / float(tensor) / bool(tensor)"),
    (("aten::nonzero", "aten::masked_select", "aten::unique", "aten::_unique2", "aten::repeat_interleave",
      "aten::index", "aten::bincount"), "data-dependent shape (boolean mask, nonzero, unique)"),
    (("aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu", "aten::numpy", "aten::tolist"), "device-to-host copy (.cpu(), .tolist(), .numpy())"),
]


@rule(code="GPU003", name="host-sync")
def check(profile: Profile, *, min_idle_frac: float = 0.02, min_syncs_per_step: float = 1.0) -> Iterator[Finding]:
    if not profile.has_gpu:
        return
    steps = h.trace_steps(profile)
    if steps.empty:
        return
    syncs = h.draining_syncs(profile, steps)
    if syncs.empty:
        return
    pageable = _pageable_copy_calls(profile)
    bs, be = h.gpu_busy(profile)
    step_end = dict(zip(steps["index"], steps["end_us"]))
    rows = []
    for s in syncs.itertuples():
        if _forced_by_pageable_copy(pageable, s):
            continue
        ops = h.enclosing_ops(profile, s.ts_us, s.end_us, s.tid)
        cause = _cause(ops, s.name)
        nxt = np.searchsorted(bs, s.end_us, side="left")
        resume = min(bs[nxt] if nxt < len(bs) else np.inf, step_end[s.step])
        busy_after = intervals.coverage(bs, be, [s.end_us - 1.0], [s.end_us])[0] > 0
        bubble = 0.0 if busy_after else max(0.0, resume - s.end_us)
        site = h.python_call_site(profile, s.ts_us, s.end_us, s.tid)
        rows.append((site or (ops[-1] if ops else s.name), cause, s.dur_us, bubble))
    n = len(steps)
    if not rows or len(rows) / n < min_syncs_per_step:
        return
    blocked = sum(r[2] for r in rows)
    bubble = sum(r[3] for r in rows)
    step_us = float(steps["dur_us"].sum())
    idle_frac = h.frac(bubble, step_us)
    if idle_frac < min_idle_frac:
        return
    sites: dict = {}
    for site, cause, dur, gap in rows:
        entry = sites.setdefault(site, {"call_site": site, "cause": cause, "count": 0, "blocked_s": 0.0, "gpu_idle_after_s": 0.0})
        entry["count"] += 1
        entry["blocked_s"] += dur / 1e6
        entry["gpu_idle_after_s"] += gap / 1e6
    top = sorted(sites.values(), key=lambda e: -(e["gpu_idle_after_s"] + e["blocked_s"]))[:5]
    for e in top:
        e["blocked_s"], e["gpu_idle_after_s"] = h.r3(e["blocked_s"]), h.r3(e["gpu_idle_after_s"])
    first = top[0]
    yield Finding(
        title=f"{len(rows) / n:.0f} host-device synchronizations per step leave the GPU idle {idle_frac:.0%} of the step",
        summary=(f"The CPU blocks on the GPU {len(rows) / n:.1f} times per step ({blocked / n / 1e3:.1f} ms blocked), then the "
                 f"GPU idles {bubble / n / 1e3:.1f} ms per step until new work arrives; the main one: "
                 f"{first['call_site']} ({first['cause']}, {first['count']}x)."),
        severity="high" if idle_frac >= 0.15 else "medium" if idle_frac >= 0.05 else "low",
        evidence={
            "syncs_per_step": h.r3(len(rows) / n),
            "host_blocked_s_per_step": h.r3(blocked / n / 1e6),
            "gpu_idle_after_sync_s_per_step": h.r3(bubble / n / 1e6),
            "gpu_idle_after_sync_frac": h.r3(idle_frac),
            "call_sites": top,
            "n_steps": n,
        },
        estimated_gain_frac=h.r3(0.8 * idle_frac),
        # the probe's exact lines; from a trace alone, the frames around the syncs that drained the GPU
        locations=sources.locations(profile.sources, "host-sync", device="cuda")
        or sources.frame_locations([(e["call_site"], e["count"], e["cause"]) for e in top]),
        fix=Fix.manual(
            "Keep values on the GPU and read them every N steps",
            ("running += loss.detach()           # instead of loss.item() every step\n"
             "if step % 100 == 0:\n    log((running / 100).item()); running.zero_()\n"
             "# masks: torch.where(mask, x, 0) instead of x[mask] where the shape may stay fixed"),
        ),
    )


def _cause(ops: list[str], call: str) -> str:
    for names, text in _CAUSE:
        if any(op in names for op in ops):
            return text
    if "Device" in call:
        return "explicit torch.cuda.synchronize()"
    if "Event" in call:
        return "event.synchronize()"
    return "stream synchronize outside any operator"


def _pageable_copy_calls(profile: Profile) -> dict[int, np.ndarray]:
    """End times per thread of runtime calls that issued host-to-device copies from pageable memory."""
    mc = profile.memcpy
    pg = mc[(mc["kind"] == "HtoD") & (mc["src"] == "Pageable")]
    if pg.empty:
        return {}
    rt = profile.runtime
    calls = rt[rt["correlation"].isin(pg["correlation"].dropna())]
    return {tid: np.sort(g["end_us"].to_numpy()) for tid, g in calls.groupby("tid")}


def _forced_by_pageable_copy(pageable: dict, s: Any) -> bool:
    ends = pageable.get(s.tid)
    if ends is None:
        return False
    i = np.searchsorted(ends, s.ts_us) - 1
    return bool(i >= 0 and s.ts_us - ends[i] < 200.0)
