"""## What it does
Flags gradient accumulation over many tiny micro-batches.

Each optimizer step draws several batches from the DataLoader (the samples per step divided
by the loader's batch size; or, when the probe timed batches because the optimizer steps
too rarely, the batches per optimizer step), and each batch holds only a few samples.

## Why is this bad?
Every micro-batch pays the fixed costs of a forward and backward pass (Python, operator
dispatch, kernel launches, one DataLoader fetch and collate) for very little arithmetic:
small matmuls run far below the hardware's peak on any device. The same effective batch in
fewer, larger micro-batches does the same math with a fraction of the overhead; accumulate
only as much as memory really requires.

## Example
```python
loader = DataLoader(dataset, batch_size=2)
accum = 16                                  # effective batch 32
for i, (x, y) in enumerate(loader):
    (loss_fn(model(x), y) / accum).backward()
    if (i + 1) % accum == 0:
        optimizer.step(); optimizer.zero_grad()
```

Use instead:
```fix
{"batch_size_scale": 2}
```

## Fix safety
Unsafe: the experiment scales the DataLoader's batch size and keeps the script's accumulation
count, so the effective batch grows with it; to keep the optimization identical, divide the
accumulation count by the same factor (batch-norm statistics still see larger batches).

## Options
- `min-micro-batches` (default 4): smallest number of micro-batches per optimizer step to report.
- `max-micro-batch` (default 8): largest micro-batch, in samples, that counts as tiny.
"""

from __future__ import annotations

from typing import Iterator

from advisor.analysis import steptime
from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule


@rule(code="STEP001", name="tiny-micro-batches")
def check(profile: Profile, *, min_micro_batches: int = 4, max_micro_batch: int = 8) -> Iterator[Finding]:
    steps = h.timed_steps(profile)
    loaders = profile.observed.dataloaders
    if not steptime.knows_batch(steps) or not loaders:
        return
    samples = float(steptime.batch_sizes(steps).median())
    sizes = [dl.batch_size for dl in loaders if dl.batch_size]
    fitting = [b for b in sizes if samples >= b and samples % b == 0]
    if not fitting:
        return
    micro = min(fitting)
    k = samples / micro
    if k == 1 and profile.step_source in ("dataloader", "backward") and steptime.has_optimizer_time(steps):
        # Boundaries came from batches: the optimizer stepped only every few of them.
        stepped = int((steptime.optimizer_time(steps) > 0).sum())
        k = len(steps) / stepped if stepped else 1
        samples = micro * k
    if k < min_micro_batches or micro > max_micro_batch:
        return
    step_s = float(steptime.durations(steps).median())
    scale = 2
    while scale * 2 <= k and micro * scale * 2 <= 32:
        scale *= 2
    per_sample_ms = step_s / samples * 1e3
    yield Finding(
        title=f"Each step accumulates {k:.0f} micro-batches of {micro} samples",
        summary=(f"One optimizer step draws {k:.0f} batches of {micro} samples ({samples:.0f} samples, "
                 f"{step_s * 1e3:.1f} ms, {per_sample_ms:.2f} ms per sample): every micro-batch pays a full "
                 "forward/backward's fixed overhead for a few samples."),
        severity="medium",
        evidence={
            "micro_batches_per_step": h.r3(k),
            "micro_batch_size": int(micro),
            "samples_per_step": int(samples),
            "step_time_median_s": h.r3(step_s),
            "time_per_micro_batch_s": h.r3(step_s / k),
            "suggested_batch_scale": scale,
        },
        fix=Fix.unsafe(
            f"Use {scale}x larger micro-batches and {scale}x fewer accumulation steps "
            f"(accum_steps = {int(k) // scale}, was {int(k)}: the effective batch stays {int(samples)})",
            {"batch_size_scale": scale},
        ),
    )


