"""## What it does
Flags runs that ask for more busy CPU threads than the machine has cores.

On a CPU-trained model, that is the intra-op threads of the training process
(`torch.get_num_threads()`) plus the DataLoader workers that are busy; on a GPU-trained model,
busy workers that leave no core to the main process. Workers count by the CPU they used in the
measured window (the script's process tree less its main process, sampled): workers that have
prefetched their batches and sleep compete with nothing. Beside another process that takes a core,
the time they waited, runnable, for one (the kernel's run-queue wait) counts too: workers a
neighbour starves still ask for their cores. It counts for the share of the steps the main process
computed: while it waits on its loader its threads are idle, and workers that wait for a core then
wait behind the neighbour alone (an I/O loader, `dataloader-starvation`'s). It reports only when the measured
window actually saturated the CPU (the script's process tree, or the whole machine, at or near
full use of every core).

## Why is this bad?
PyTorch's intra-op thread pool (OpenMP) splits each operator across its threads and waits for
the slowest one. When worker processes compete for the same cores, the OS preempts those
threads and every parallel operator stalls at its barrier: the step slows down far more than
the workers' own work would explain, and adding workers makes it worse. DataLoader workers
already run with one intra-op thread each; it is the training process that must leave them
room. The DataLoader wait such a run shows is a symptom (workers starved of CPU), so
`dataloader-starvation` leaves it to this rule.

## Example
```python
# 8 cores: 8 intra-op threads in the trainer + 4 busy workers = 12 threads on 8 cores
loader = DataLoader(dataset, batch_size=64, num_workers=4)
```

Use instead:
```fix
{"torch_threads": 1, "dataloader": {"num_workers": 1}}
```

When the workers outnumber the cores, the workers cut to the cores with the trainer's threads kept
is measured beside the split, and first where the workers are mostly idle (under
`IDLE_WORKERS_CORES` of CPU): then their number costs (each forked, copied on write, scheduled),
not their work (pytorch/vision's train.py, 16 workers using 0.25 cores on 2: `-j 2` 1.78x by hand,
one thread and one worker 1.54x). A loader whose workers are forked anew every
epoch (no `persistent_workers`, an epoch short enough that the measured steps met its start) also
keeps them for the run (`persistent_workers=True`): each epoch's start no longer forks and joins them.

## Fix safety
Safe: results are unchanged (reductions may be split differently across threads, within
floating-point rounding). Fewer intra-op threads can slow compute-bound steps when the
workers are mostly idle; the experiment measures it.

## Options
- `min-cpu-busy-frac` (default 0.85): smallest mean CPU use, as a share of all cores (the
  script's process tree or the whole machine, whichever is higher), that counts as saturated.
"""

from __future__ import annotations

from typing import Iterator

from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule


IDLE_WORKERS_CORES = 0.5  # the workers used under this many cores in all: mostly idle


@rule(code="DL003", name="cpu-oversubscription")
def check(profile: Profile, *, min_cpu_busy_frac: float = 0.85) -> Iterator[Finding]:
    over = h.oversubscription(profile, min_cpu_busy_frac)
    if over is None:
        return
    cores, threads, workers, demand, busy = (over.cpu_count, over.torch_threads, over.num_workers,
                                             over.threads_demanded, over.cpu_busy_frac)
    on_cpu = profile.device == "cpu"

    restart = h.workers_forked_each_epoch(profile)
    ladder: list[dict] = []
    if on_cpu:
        new_workers = workers if workers < cores else max(1, cores // 2)
        new_threads = max(1, cores - new_workers)
        overrides: dict = {"torch_threads": new_threads}
        if new_workers != workers:
            overrides["dataloader"] = {"num_workers": new_workers, **restart}
        title = f"Run {new_threads} intra-op thread{'s' if new_threads > 1 else ''}" + (
            f" and {new_workers} DataLoader worker{'s' if new_workers > 1 else ''}" if new_workers != workers else
            f" beside the {workers} DataLoader worker{'s' if workers > 1 else ''}")
        if workers > cores:  # or the workers cut to the cores, the trainer's threads kept
            cut = {"dataloader": {"num_workers": cores, **restart}}
            idle = over.workers_busy_cores is not None and over.workers_busy_cores < IDLE_WORKERS_CORES
            if idle:  # their number costs, not their work: the cut first, the split beside it
                ladder, overrides = [overrides], cut
                title = f"Load batches in {cores} worker processes, the trainer's {threads} threads kept"
            else:
                ladder = [cut]
        who = f"{threads} intra-op threads + {_workers_words(over)}"
    else:
        new_workers = max(1, cores - 1)
        overrides = {"dataloader": {"num_workers": new_workers, **restart}}
        title = f"Use at most {new_workers} DataLoader workers on {cores} cores"
        who = f"{_workers_words(over)} + the training process"
    ratio = demand / cores
    yield Finding(
        title=f"{demand} busy threads compete for {cores} CPU cores",
        summary=(f"{who} ask for {demand} threads on {cores} cores ({ratio:.1f}x) while the CPU was "
                 f"{busy:.0%} busy: preempted intra-op threads stall every parallel operator."),
        severity="high" if ratio >= 2 else "medium",
        evidence={
            "cpu_count": cores,
            "torch_threads": threads,
            "num_workers": workers,
            "threads_demanded": demand,
            "oversubscription_ratio": h.r3(ratio),
            "cpu_busy_frac": h.r3(busy),
            "device": profile.device,
            "data_wait_frac": h.r3(h.data_wait_frac(profile)),
            "workers_busy_cores": over.workers_busy_cores,
            "workers_wanted_cores": over.workers_wanted_cores,
        },
        fix=Fix.safe(title, overrides, ladder or None),
    )



def _workers_words(over: h.Oversubscription) -> str:
    busy = over.workers_busy_cores
    text = f"{over.num_workers} DataLoader workers"
    return text if busy is None else f"{text} (busy {busy:.1f} cores on average)"
