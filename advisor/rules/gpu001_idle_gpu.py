"""## What it does
Measures the GPU's idle share of each step and attributes it to a cause.

Idle means no kernel, copy or memset on any stream, from the trace's GPU timeline. The causes:

- **data wait**: idle while the training loop is inside `next(DataLoader)`
  (see `dataloader-starvation`);
- **host sync**: idle right after the CPU blocked on the GPU (`cudaStreamSynchronize`,
  `.item()`, ...), while the queue refills (see `host-sync`);
- **CPU overhead**: idle while the CPU is issuing work too slowly: Python, operator dispatch
  and kernel launches (see `launch-bound`).

Without a trace it falls back to NVML's utilization sampled during the run. The finding
points at the rule responsible for the largest share. Where that share is CPU overhead and
`launch-bound`'s finer test did not fire (a step of few, long launches can idle the GPU as
much as many short ones), this finding carries `launch-bound`'s fix itself: torch.compile's
default, reduce-overhead (CUDA graphs) and max-autotune-no-cudagraphs modes, measured as one
sweep, each with what compiling cost, the steps that pay it back and what recompiled.

## Why is this bad?
An idle GPU is paid-for compute that does no work; the step can only get faster by giving it
work sooner. Knowing *why* it idles decides the fix: workers for the input pipeline, fewer
synchronizations, or fewer, larger kernels.

## Example
```python
for x, y in loader:                  # GPU idle while the batch loads
    loss = loss_fn(model(x.cuda()), y.cuda())
    print(loss.item())               # GPU idle after each sync
```

Use instead:
```python
for x, y in loader:                  # workers + pinned memory: see dataloader-starvation
    loss = loss_fn(model(x.cuda(non_blocking=True)), y.cuda(non_blocking=True))
    total += loss.detach()           # read it every N steps: see host-sync
```

## Fix safety
Display-only where it points to the rule that explains most of the idle time, whose fix has its
own safety. Where it carries the compile ladder itself, unsafe as `launch-bound`'s: compiled
code rounds differently, and CUDA graphs need static shapes and memory addresses.

## Options
- `min-idle-frac` (default 0.25): smallest median share of the step with an idle GPU to report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

from advisor.trace import intervals
from advisor.analysis import metrics

from . import helpers as h
from .registry import Finding, Fix, rule

if TYPE_CHECKING:
    from advisor.profile import Profile
    import pandas as pd

_CAUSES = {
    "data_wait": ("dataloader-starvation", "DL001", "waiting for the next batch"),
    "host_sync": ("host-sync", "GPU003", "after host synchronizations"),
    "cpu_overhead": ("launch-bound", "GPU002", "while the CPU issues work (Python, dispatch, launches)"),
}


@rule(code="GPU001", name="idle-gpu")
def check(profile: Profile, *, min_idle_frac: float = 0.25) -> Iterator[Finding]:
    if not profile.has_gpu:
        return
    steps = h.trace_steps(profile)
    if steps.empty:
        yield from _from_nvml(profile, min_idle_frac)
        return
    dur = steps["dur_us"].to_numpy()
    idle = np.clip(dur - steps["gpu_busy_us"].to_numpy(), 0, None)
    median_idle = float(np.median(idle / dur))
    if median_idle < min_idle_frac:
        return
    causes = _attribute(profile, steps)
    total_us = float(dur.sum())
    shares = {k: h.frac(v, total_us) for k, v in causes.items()}
    main = max(shares, key=lambda k: shares[k])
    rule_name, code, text = _CAUSES[main]
    util = _nvml_util(profile)
    own = h.compile_fix(h.device(profile)) if main == "cpu_overhead" else None
    evidence = {
        "gpu_idle_frac": h.r3(median_idle),
        "gpu_idle_s_per_step": h.r3(float(np.median(idle)) / 1e6),
        "step_time_median_s": h.r3(float(np.median(dur)) / 1e6),
        "idle_data_wait_frac": h.r3(shares["data_wait"]),
        "idle_host_sync_frac": h.r3(shares["host_sync"]),
        "idle_cpu_overhead_frac": h.r3(shares["cpu_overhead"]),
        "attributed_to": {_CAUSES[k][0]: h.r3(v) for k, v in sorted(shares.items(), key=lambda kv: -kv[1])},
        "n_steps": int(len(steps)),
    }
    if util is not None:
        evidence["nvml_gpu_util_percent_mean"] = h.r3(util)
    parts = ", ".join(f"{shares[k]:.0%} {_CAUSES[k][2]}" for k in sorted(shares, key=lambda k: -shares[k]) if shares[k] >= 0.005)
    yield Finding(
        title=f"The GPU is idle for {median_idle:.0%} of each step, mostly {text}",
        summary=(f"Per step the GPU idles {median_idle:.0%} of the time: {parts or 'no single cause'} (shares of step time)."
                 + (f" {h.COMPILE_LADDER_SAID}" if own is not None and own.ladder else "")),
        severity="high" if median_idle >= 0.5 else "medium",
        evidence=evidence,
        fix=Fix.manual(
            f"Fix the main cause first: {rule_name} ({code})",
            f"advise rules {rule_name}",
        ),
        cause=code,  # named only while that finding is in the report (the engine checks)
        fallback=own,  # else the compile ladder is this finding's own fix
    )


def _attribute(profile: Profile, steps: pd.DataFrame) -> dict[str, float]:
    """Idle microseconds inside the steps, split by cause."""
    bs, be = h.gpu_busy(profile)
    dl = h.dataloader_ranges(profile)
    ds, de = intervals.merge(dl["ts_us"].to_numpy(), dl["end_us"].to_numpy())
    sync_end = np.sort(h.draining_syncs(profile, steps)["end_us"].to_numpy())
    out = {"data_wait": 0.0, "host_sync": 0.0, "cpu_overhead": 0.0}
    for a, b in zip(steps["ts_us"].to_numpy(), steps["end_us"].to_numpy()):
        i0, i1 = np.searchsorted(be, a, side="right"), np.searchsorted(bs, b, side="left")
        inner_s, inner_e = bs[i0:i1], be[i0:i1]
        gap_s = np.concatenate([[a], np.clip(inner_e, a, b)])
        gap_e = np.concatenate([np.clip(inner_s, a, b), [b]])
        keep = gap_e > gap_s
        gap_s, gap_e = gap_s[keep], gap_e[keep]
        if not len(gap_s):
            continue
        data = intervals.coverage(ds, de, gap_s, gap_e)
        rest = (gap_e - gap_s) - data
        j = np.searchsorted(sync_end, gap_s - 5.0, side="left")
        after_sync = (j < len(sync_end)) & (sync_end[np.minimum(j, len(sync_end) - 1)] < gap_e) if len(sync_end) else np.zeros(len(gap_s), bool)
        out["data_wait"] += float(data.sum())
        out["host_sync"] += float(rest[after_sync].sum())
        out["cpu_overhead"] += float(rest[~after_sync].sum())
    return out


def _nvml_util(profile: Profile) -> float | None:
    """Mean NVML utilization over the measured steps (start-up ticks would read as idle)."""
    s = metrics.window_samples(profile.samples, profile.steps)
    if s.empty or "gpu_util_percent" not in s or not s["gpu_util_percent"].notna().any():
        return None
    return float(s["gpu_util_percent"].mean())


def _from_nvml(profile: Profile, min_idle_frac: float) -> Iterator[Finding]:
    util = _nvml_util(profile)
    if util is None or util / 100.0 > 1.0 - min_idle_frac:
        return
    idle = 1.0 - util / 100.0
    yield Finding(
        title=f"The GPU was idle for about {idle:.0%} of the run (NVML)",
        summary=(f"NVML reports {util:.0f}% mean GPU utilization over the measured steps; no trace was recorded "
                 "to attribute the idle time (run with --profile-steps > 0)."),
        severity="high" if idle >= 0.5 else "medium",
        evidence={"nvml_gpu_util_percent_mean": h.r3(util), "gpu_idle_frac": h.r3(idle)},
        fix=Fix.manual(
            "Profile a few steps to find the cause",
            "advise profile --profile-steps 5 train.py",
        ),
    )
