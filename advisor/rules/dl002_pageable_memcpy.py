"""## What it does
Flags host-to-device copies from pageable (unpinned) memory inside the training step.

It reports them when they move a material amount of data (`Memcpy HtoD (Pageable ->
Device)` in the GPU timeline), with the host time the copies block and the stream
synchronizations they force.

## Why is this bad?
The GPU's DMA engines can only read page-locked memory. A copy from an ordinary (pageable)
tensor is staged by the driver through a pinned bounce buffer at reduced bandwidth, and
`tensor.to("cuda")` from pageable memory blocks the Python thread until the copy is done, so
the next batch cannot be prepared and kernels cannot be queued meanwhile. From pinned memory
with `non_blocking=True` the copy is asynchronous and overlaps compute.

## Example
```python
loader = DataLoader(dataset, batch_size=64, num_workers=4)
for x, y in loader:
    x, y = x.to("cuda"), y.to("cuda")
```

Use instead:
```fix
{"dataloader": {"pin_memory": true}}
```

## Fix safety
Safe: the copied values are identical. `non_blocking=True` is only safe for host-to-device
copies (a non-blocking device-to-host copy must be synchronized before the host reads it).
Pinned memory is a limited resource: pinning very large datasets up front can exhaust it.

## Options
- `min-bytes-per-step` (default 1048576): smallest pageable host-to-device volume per step,
  in bytes, to report.
- `min-time-frac` (default 0.005): smallest share of the step spent in those copies (copy time
  plus the host time blocked in them) to report.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from advisor import units
from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule

_COPY_CALLS = ("cudaMemcpy", "hipMemcpy")
_SYNC_CALLS = ("cudaStreamSynchronize", "hipStreamSynchronize")


@rule(code="DL002", name="pageable-memcpy")
def check(profile: Profile, *, min_bytes_per_step: int = 1048576, min_time_frac: float = 0.005) -> Iterator[Finding]:
    mc = profile.memcpy
    steps = h.trace_steps(profile)
    if mc.empty or steps.empty:
        return
    in_steps = mc["step"].isin(steps["index"])
    pageable = mc[in_steps & (mc["kind"] == "HtoD") & (mc["src"] == "Pageable")]
    if pageable.empty:
        return
    n_steps = len(steps)
    step_us = float(steps["dur_us"].sum())
    bytes_per_step = float(pageable["bytes"].fillna(0).sum()) / n_steps
    copy_us = float(pageable["dur_us"].sum())

    # Host time blocked: the runtime calls that issued these copies, and the syncs inside them.
    rt = profile.runtime
    issued = rt[rt["correlation"].isin(pageable["correlation"].dropna())]
    blocked_us = float(issued["dur_us"].sum())
    syncs = rt[rt["name"].str.startswith(_SYNC_CALLS) & rt["step"].isin(steps["index"])]
    n_forced = 0
    forced_us = 0.0
    if len(issued) and len(syncs):
        # A sync that follows a pageable copy call on the same thread within the same op.
        copy_end = issued.groupby("tid")["end_us"].apply(np.sort)
        for s in syncs.itertuples():
            ends = copy_end.get(s.tid)
            if ends is None:
                continue
            i = np.searchsorted(ends, s.ts_us) - 1
            if i >= 0 and s.ts_us - ends[i] < 200.0:  # the copy op's own synchronize
                n_forced += 1
                forced_us += s.dur_us
    cost_frac = h.frac(copy_us + blocked_us + forced_us, step_us)
    if bytes_per_step < min_bytes_per_step or cost_frac < min_time_frac:
        return

    loaders = profile.observed.dataloaders
    already_pinned = bool(loaders) and all(dl.pin_memory for dl in loaders)
    if already_pinned:
        fix = Fix.manual(
            "Pin the tensors that are copied to the GPU",
            ("# The DataLoader already pins its batches: these copies come from tensors made elsewhere.\n"
             "x = x.pin_memory()  # once, for data that is reused; or keep it on the GPU\n"
             "x = x.to(device, non_blocking=True)"),
        )
    else:
        fix = Fix.safe(
            "Pin the DataLoader's batches and copy them with non_blocking=True",
            {"dataloader": {"pin_memory": True}},
        )
    gbps = (pageable["bytes"].fillna(0).sum() / (copy_us * 1e-6) / 1e9) if copy_us > 0 else None
    severity = "medium" if cost_frac >= 0.05 else "low"
    yield Finding(
        title=f"{units.bytes_(bytes_per_step)} per step is copied to the GPU from pageable memory",
        summary=(f"{len(pageable) / n_steps:.0f} host-to-device copies per step read pageable memory "
                 f"({units.bytes_(bytes_per_step)}/step at {gbps or 0:.1f} GB/s); copies and the host time "
                 f"blocked in them take {cost_frac:.1%} of the step."),
        severity=severity,
        evidence={
            "pageable_htod_bytes_per_step": int(bytes_per_step),
            "pageable_htod_copies_per_step": h.r3(len(pageable) / n_steps),
            "copy_s_per_step": h.r3(copy_us / n_steps / 1e6),
            "host_blocked_s_per_step": h.r3((blocked_us + forced_us) / n_steps / 1e6),
            "syncs_forced_per_step": h.r3(n_forced / n_steps),
            "copy_bandwidth_gbps": h.r3(gbps) if gbps else None,
            "cost_frac": h.r3(cost_frac),
            "n_steps": n_steps,
        },
        estimated_gain_frac=h.r3(0.8 * cost_frac),
        fix=fix,
        locations=profile.locations("h2d-copy", device="cuda", pinned=False),
    )
