"""## What it does
Flags CPU training whose intra-op threads do not match the physical cores. That is fewer
threads than the cores the DataLoader workers leave free (cores sit idle in a compute-bound
step), or more threads than physical cores (SMT siblings share one core's units).

From the probe: `torch.get_num_threads()`, the physical and logical core counts (psutil), the
DataLoader workers, the step's DataLoader wait and the process tree's CPU use. In a job with
several ranks on the node (`LOCAL_WORLD_SIZE`, or ranks the script spawned) each rank plans for
its share of the cores. Threads plus workers beyond the cores on a saturated CPU are
`cpu-oversubscription`'s, not this rule's.

## Why is this bad?
Matmuls, convolutions and large elementwise operators split their work over the intra-op
threads. A script that calls `torch.set_num_threads(1)` (copied from a worker's set-up, a
debugging session or a benchmark) leaves every other core idle while the step is pure compute.
Threads beyond the physical cores run on SMT siblings that share one core's vector units and
cache: each operator waits at its barrier for the slowest, and the step gets slower, not faster.

## Example
```python
torch.set_num_threads(1)          # 8 physical cores, no DataLoader workers
```

Use instead:
```fix
{"torch_threads": 2}
```

## Fix safety
Safe: the same results (reductions may be split differently, within floating-point rounding).
The experiment measures the thread count on this machine; on a machine shared with other jobs
fewer threads than cores can be faster, which it then shows.

## Options
- `max-data-wait-frac` (default 0.3): largest share of the step waiting on the DataLoader for the
  step to count as compute-bound.
"""

from __future__ import annotations

from typing import Iterator

from advisor.analysis import metrics
from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule


@rule(code="CPU003", name="cpu-thread-settings")
def check(profile: Profile, *, max_data_wait_frac: float = 0.3) -> Iterator[Finding]:
    if profile.has_gpu or not h.is_training(profile):
        return
    env = profile.env
    logical, threads = env.cpu_count, env.torch_threads
    physical = env.physical_cores or logical
    if not logical or not threads or not physical or h.oversubscription(profile) is not None:
        return
    ranks = env.local_world_size or 1  # the node's ranks share its cores: each plans for its part
    physical, logical = max(1, physical // ranks), max(1, logical // ranks)
    workers = profile.observed.max_workers
    wait = h.data_wait_frac(profile)
    if wait is None or wait > max_data_wait_frac:
        return
    target = max(1, physical - workers)
    idle = threads < target
    if not idle and threads <= physical:  # more than the workers leave, but not past the cores: DL003's call
        return
    if idle:
        cores = f"{physical} physical cores" + (f" (this rank's share of the node's, {ranks} ranks)" if ranks > 1 else "")
        title = f"{threads} intra-op thread{'s' if threads > 1 else ''} on {cores}, {physical - threads - workers} idle"
        why = (f"the step is compute ({1 - wait:.0%} outside the DataLoader) but torch runs it on {threads} thread"
               f"{'s' if threads > 1 else ''}; {workers} DataLoader worker{'s' if workers != 1 else ''} leave "
               f"{target} cores for it.")
        gain = (1 - wait) * (1 - threads / target) * 0.6  # compute scales sub-linearly with threads
    else:
        title = f"{threads} intra-op threads on {physical} physical cores ({logical} logical)"
        why = (f"threads beyond the {physical} physical cores run on SMT siblings that share a core's vector "
               f"units; every parallel operator waits for its slowest thread.")
        gain = (1 - wait) * 0.1
    yield Finding(
        title=title,
        summary=f"{why[0].upper()}{why[1:]} Run {target} intra-op threads.",
        severity="medium" if idle and threads * 2 <= target else "low",
        evidence={"torch_threads": threads, "physical_cores": physical, "logical_cores": logical,
                  "num_workers": workers, "suggested_threads": target, "data_wait_frac": h.r3(wait),
                  "cpu_busy_frac": h.r3(_tree_busy(profile, logical))},
        estimated_gain_frac=h.r3(gain),
        fix=Fix.safe(f"Run {target} intra-op threads (physical cores {physical} - DataLoader workers {workers})",
                     {"torch_threads": target}),
    )



def _tree_busy(profile: Profile, logical: int) -> float | None:
    """The script's process tree's mean CPU use over the window, as a share of all logical cores."""
    samples = profile.samples
    if samples.empty or "cpu_percent" not in samples:
        return None
    window = metrics.window_samples(samples, profile.steps)
    if window.empty or not window["cpu_percent"].notna().any():
        return None
    return float(window["cpu_percent"].mean()) / (100.0 * logical)
