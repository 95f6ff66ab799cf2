"""## What it does
Flags training loops that wait on the DataLoader for a large share of every step.

The wait is the time spent in `next(loader)` (`enumerate(DataLoader)#...__next__`),
measured on the steps that ran without the profiler (or on a trace's `ProfilerStep`s).

It reads the wait from totals: the wait summed over the measured steps over their time, as the
profiler's TensorBoard plugin and torchtitan do. A loader with w workers hands over batches in
bursts: w - 1 steps wait nothing and one waits for the whole next burst, so a median step waits
nothing while the loop waits most of the time. It fires when that total is a large share of the
window, recurs (with workers: in two steps or more, and at least half the threshold without its
one longest wait, unless that is an epoch's start, which recurs every epoch; without workers the main process loads every batch, so three steps in four
wait at least half the threshold: an epoch boundary or a noisy moment is a step or two), and is
material in absolute terms (the mean wait per step), so a fast in-memory pipeline whose batches take a
fraction of a millisecond is never called starved. The evidence gives the burst pattern: how
many steps waited, one in how many, the median, p90 and longest wait. With `num_workers > 0` the share must be twice the threshold:
each batch from a worker process pays a fixed hand-over cost (pickling, shared-memory file
descriptors, a round trip to the worker) that more workers cannot remove. When the workers
and the trainer's threads oversubscribe a saturated CPU, the wait is a symptom of that, and
it is left to `cpu-oversubscription`. On a GPU, wait during which the GPU
was still busy with queued work is not counted: only the exposed wait is (a trace alone gives it
directly: the GPU's idle time while the host waited on the loader).

The workers proposed, and the values the experiments try, are capped by the CPUs this rank may
use: its affinity mask where a scheduler bound it to a subset (`srun --cpu-bind`, `taskset`, a
cgroup), else the node's CPUs shared by the ranks on it; the finding says which.

## Why is this bad?
While the main process loads and collates a batch, nothing else happens: the GPU (or the
CPU's compute threads) sits idle and throughput is capped by the input pipeline. With
`num_workers > 0`, worker processes prepare the next batches while the model trains on the
current one, so loading overlaps compute instead of adding to it.

## Example
```python
loader = DataLoader(dataset, batch_size=64, shuffle=True)
```

Use instead:
```fix
{"dataloader": {"num_workers": 4, "persistent_workers": true}}
```

## Fix safety
The fix is safe: the model's numerics and a seeded sample order are unchanged. Random
augmentations draw from per-worker generators, so they differ from a `num_workers=0` run;
a Dataset that is not fork-safe (open file handles, CUDA tensors, global state mutated in
`__getitem__`) needs care. When the loader already has as many workers as the machine has
cores to spare, more workers cannot help: the fix is then manual (cheaper `__getitem__`,
decoded data cached, augmentation on the GPU), and shown for display only. The worker count
is what keeps up with compute, bounded by the machine: up to 4 per core (32 at most) when
loading waits on I/O (the process tree stays mostly idle), the cores minus one for GPU training,
half the cores for CPU training (with fewer intra-op threads, so the two do not compete).

## Options
- `min-wait-frac` (default 0.10): smallest share of the measured window spent waiting for data
  to report (twice that with worker processes).
- `min-wait-ms` (default 5.0): smallest mean wait per step, in milliseconds, to report.

## References
- PyTorch tuning guide, "Enable asynchronous data loading and augmentation"
- PyTorch Profiler TensorBoard plugin: "high time cost on input data loading" (> 5% of the step)
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from advisor.trace import intervals
from advisor.analysis import metrics, steptime
from advisor.overrides.cores import cores_per_rank, cores_said
from advisor.overrides import IO_WORKERS_PER_CORE, MAX_WORKERS
from advisor.profile import Profile
from advisor.run_dir.seen import LoaderSeen

from . import helpers as h
from .registry import Finding, Fix, rule


@rule(code="DL001", name="dataloader-starvation")
def check(profile: Profile, *, min_wait_frac: float = 0.10, min_wait_ms: float = 5.0) -> Iterator[Finding]:
    steps = h.timed_steps(profile)
    if steps.empty or not steptime.has_data_wait(steps):
        return
    dur = steptime.durations(steps).to_numpy()
    wait = np.clip(steptime.data_wait(steps).to_numpy(), 0, None)
    wait = np.minimum(wait, dur)
    hidden = _gpu_busy_during_wait_frac(profile)
    exposed = wait if profile.parts_on_device else wait * (1.0 - hidden)  # on the device: its idle time already
    total_frac = h.frac(exposed.sum(), dur.sum())
    # The wait less its one longest step: one noisy moment is a single step, a loader that cannot keep
    # up waits again and again (with w workers, about one step in w). An epoch's start is no noise:
    # where the loader starts anew (its workers forked, their first batches awaited) it recurs every epoch.
    starts = steptime.loader_started(steps).to_numpy()
    longest = int(exposed.argmax()) if len(exposed) else 0
    spread_frac = h.frac(exposed.sum() - (0.0 if len(exposed) and starts[longest] else exposed.max(initial=0.0)), dur.sum())
    mean_wait_s = float(exposed.mean()) if len(exposed) else 0.0
    loader = _main_loader(profile)
    workers = loader.num_workers if loader else None
    if workers:
        if h.oversubscription(profile) is not None:
            return  # workers starved of CPU by the trainer's own threads: cpu-oversubscription reports it
        # Every batch from a worker is handed over through shared memory (pickling, fd passing):
        # a fixed cost per batch that more workers cannot remove and that grows on a busy machine.
        min_wait_frac = 2 * min_wait_frac
    if total_frac < min_wait_frac or mean_wait_s * 1e3 < min_wait_ms:
        return  # not starved
    bursts = _bursts(exposed, dur, min_wait_ms / 1e3)
    if workers:  # batches come in bursts: the wait must recur, not be one step's
        recurring = (bursts["waiting"] >= 2 or bool(starts.any())) and spread_frac >= min_wait_frac / 2
    else:  # the main process loads every batch: most steps wait (three in four at least half as long)
        recurring = float(np.quantile(exposed / dur, 0.25)) >= min_wait_frac / 2
    if not recurring:
        return  # a few slow steps: an epoch boundary, a noisy neighbour

    step_s = float(dur.mean())
    compute_s = max(step_s - mean_wait_s, 1e-6)
    device = profile.device
    cores = cores_per_rank(profile.env) if profile.env.cpu_count else None  # the node's, shared by its ranks
    io_bound = metrics.io_bound(profile.samples, profile.steps, cores, workers or 0)
    fix, gain = _fix(loader, device, cores, profile.env.torch_threads, mean_wait_s, compute_s, step_s, io_bound)
    if not fix.automatic and h.workers_forked_each_epoch(profile):
        fix, gain = _kept_across_epochs(loader, cores, h.frac(float(exposed[starts].sum()), dur.sum()))

    severity = "high" if total_frac >= 0.30 else "medium" if total_frac >= 0.15 else "low"
    where = "the GPU idles" if profile.has_gpu else "compute waits"
    workers_text = f"num_workers={workers}" if workers is not None else "DataLoader settings unknown"
    evidence = {
        "data_wait_frac": h.r3(total_frac),
        "data_wait_s": h.r3(float(exposed.sum())),
        "window_s": h.r3(float(dur.sum())),
        "data_wait_mean_s": h.r3(mean_wait_s),
        "data_wait_median_s": h.r3(float(np.median(exposed))),
        "data_wait_p90_s": h.r3(float(np.quantile(exposed, 0.9))),
        "data_wait_max_s": h.r3(float(exposed.max())),
        "waiting_steps": bursts["waiting"],
        "stall_period_steps": bursts["period"],
        "step_time_mean_s": h.r3(step_s),
        "n_steps": int(len(dur)),
        "basis": "trace ProfilerSteps" if profile.trace_only else "unprofiled probe steps",
        "gpu_busy_during_wait_frac": h.r3(hidden) if profile.has_gpu else None,
        "num_workers": workers,
        "pin_memory": loader.pin_memory if loader else None,
        "batch_size": loader.batch_size if loader else None,
        "cpu_count": cores,
        "cpus_basis": cores_said(profile.env) if cores else None,
        "io_bound": io_bound,
    }
    yield Finding(
        title=f"The training loop waits on the DataLoader for {total_frac:.0%} of each step",
        summary=(f"{exposed.sum() * 1e3:.0f} ms of the {dur.sum() * 1e3:.0f} ms that {len(dur)} steps took were spent "
                 f"in next(DataLoader) ({workers_text}){_burst_text(bursts, exposed)}; {where} while batches are loaded"
                 f"{' (the loading process mostly waits: I/O, not CPU)' if io_bound else ''}."
                 f"{f' Workers are planned for {cores_said(profile.env)}.' if cores else ''}"),
        severity=severity,
        evidence={k: v for k, v in evidence.items() if v is not None},
        estimated_gain_frac=h.r3(gain) if gain is not None else None,
        fix=fix,
        # loading in the main process: the Dataset's __getitem__ (or collate_fn) is where the wait goes
        locations=profile.locations("dataloader") if not workers else [],
    )


def _bursts(exposed: np.ndarray, dur: np.ndarray, material_s: float) -> dict:
    """The wait's pattern: how many steps waited materially (at least `material_s` and a tenth of
    the step), and the median gap between them in steps (a loader with w workers: about w)."""
    waiting = np.flatnonzero((exposed >= material_s) & (exposed >= 0.1 * dur))
    period = float(np.median(np.diff(waiting))) if len(waiting) >= 2 else None
    return {"waiting": int(len(waiting)), "period": period}


def _burst_text(bursts: dict, exposed: np.ndarray) -> str:
    """', in bursts: 5 of 20 steps waited, one in 4, up to 140 ms' where the wait is not every step's."""
    n, waiting, period = len(exposed), bursts["waiting"], bursts["period"]
    if not waiting or waiting >= 0.8 * n:
        return ""
    every = f", one in {period:.0f}" if period and period >= 1.5 else ""
    return f", in bursts: {waiting} of {n} steps waited{every}, up to {exposed.max() * 1e3:.0f} ms"


def _gpu_busy_during_wait_frac(profile: Profile) -> float:
    """Share of DataLoader wait during which the GPU still ran queued work (0 without a GPU)."""
    if not profile.has_gpu:
        return 0.0
    ranges = h.dataloader_ranges(profile)
    ranges = ranges[ranges["step"] >= 0] if "step" in ranges else ranges
    if ranges.empty:
        return 0.0
    ms, me = h.gpu_busy(profile)
    busy = intervals.coverage(ms, me, ranges["ts_us"].to_numpy(), ranges["end_us"].to_numpy()).sum()
    return min(1.0, h.frac(busy, ranges["dur_us"].sum()))


def _main_loader(profile: Profile) -> LoaderSeen | None:
    """The DataLoader the steps draw from: the one whose batch size matches the steps'."""
    loaders = profile.observed.dataloaders
    if not loaders:
        return None
    sizes = steptime.batch_sizes(profile.steps)
    if sizes.notna().any():
        typical = float(sizes.median())
        for loader in loaders:
            if loader.batch_size and typical % loader.batch_size == 0:
                return loader
    return loaders[0]


def _kept_across_epochs(loader: LoaderSeen | None, cores: int | None, starts_frac: float) -> tuple[Fix, float]:
    """A loader with as many workers as the machine can run, or more, that forks them anew every
    epoch: keep them for the run (`persistent_workers`), no more of them than the cores. Its epoch
    starts' wait is what goes (pytorch/vision's train.py, 16 workers on 2 cores: `-j 2` with
    persistent workers 1.82x by hand)."""
    current = loader.num_workers if loader else 1
    workers = min(current, cores) if cores else current
    return Fix.safe(f"Keep {workers} loader worker process{'es' if workers > 1 else ''} for the whole run",
                    {"dataloader": {"num_workers": workers, "persistent_workers": True}}), starts_frac


def _fix(loader: LoaderSeen | None, device: str, cores: int | None, threads: int | None, wait_s: float, compute_s: float,
         step_s: float, io_bound: bool | None = None) -> tuple[Fix, float | None]:
    """The override to try and a rough gain estimate (None when it cannot be estimated)."""
    on_gpu = device != "cpu"
    current = loader.num_workers if loader else 0
    # Workers needed so that loading keeps up with compute. A batch costs one process `per_batch`:
    # the whole wait in the main process; with w starved workers one batch comes every step, so w steps.
    per_batch = wait_s if not current else step_s * current
    needed = math.ceil(per_batch / compute_s) + 1
    if cores:
        if io_bound:
            # waiting workers need no core of their own: as many as the ladder tries (4 workers that
            # sleep on I/O got a manual fix on a 2-core loop whose 8 workers were 2.0x faster by hand)
            spare = min(MAX_WORKERS, IO_WORKERS_PER_CORE * cores)
        else:
            spare = max(1, cores - 1) if on_gpu else max(1, cores // 2)
        workers = max(1, min(needed, spare))
    else:
        spare = None
        workers = max(1, min(needed, 8))
    if current and workers <= current:
        cores_text = f"{cores} cores" if cores else "the available cores"
        return Fix.manual(
            "Make each batch cheaper to produce (the workers cannot keep up)",
            ("# The loader already has num_workers=%d on %s: make __getitem__ cheaper.\n"
             "# - decode/resize once and cache the result (e.g. a preprocessed tensor file)\n"
             "# - move random augmentation to the GPU on the whole batch\n"
             "# - raise prefetch_factor only if batch cost varies a lot" % (current, cores_text)),
        ), None

    dl: dict = {"num_workers": workers, "persistent_workers": True}
    if on_gpu:
        dl["pin_memory"] = True
    overrides: dict = {"dataloader": dl}
    new_compute = compute_s
    if not on_gpu and not io_bound and cores and threads and threads + workers > cores:
        overrides["torch_threads"] = max(1, cores - workers)
        new_compute = compute_s * threads / overrides["torch_threads"]
    new_step = max(new_compute, per_batch / workers + 0.1 * wait_s)
    gain = max(0.0, 1.0 - new_step / step_s)
    return Fix.safe(
        f"Load batches in {workers} worker process{'es' if workers > 1 else ''}",
        overrides,
    ), gain
