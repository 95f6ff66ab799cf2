"""## What it does
Flags CPU training steps that are mostly framework overhead. Hundreds of operators a step
each pay a fixed dispatch cost, which adds up to a large share of the step.

From the trace of the profiled steps, on the thread that runs the loop: the top-level
operators per step outside DataLoader `__next__` (forward, autograd's backward nodes, the
optimizer's operators) and their median length. Each is charged a fixed cost: `op-cost-us` (but
never more than the median operator takes whole on this machine) for its Python call, and
`nested-op-cost-us` for every operator it dispatches in turn (`linear` runs `t` and `addmm`,
`AddmmBackward0` two `mm`s and a `sum`), never more than the operator's own time. The sum is set
against the fastest step outside the profiler (the one least slowed by other processes on the
machine), less its DataLoader wait; per sample where steps differ in their batch (episodes).

## Why is this bad?
Eager PyTorch pays a fixed cost for every operator: a Python call, argument parsing, dispatch
through autograd and the kernel registry, an output allocation. On a CPU that is one to ten
microseconds, as long as the arithmetic of a small layer. A deep stack of narrow layers, an
elementwise-heavy block (norms, activations, residuals) or a small batch spends most of its
step there, and more cores or a faster BLAS change nothing. `torch.compile` traces the model
once and runs it as a few generated C++ loops with fused elementwise work, so the per-operator
cost is paid per graph instead.

Its fix is torch.compile's default mode alone. A GPU's launch-bound step measures three modes as
one sweep (`launch-bound`), but a CPU has no CUDA graphs (`reduce-overhead`), and in a training
step `max-autotune-no-cudagraphs` has no matmul to search (Inductor's CPU GEMM templates need
frozen weights): on 2 cores it benchmarked nothing and compiled as long as the default (about 31 s
of CPU time either way for a two-layer GPT), so its arm would pay a compile to measure the same
kernels again.

## Example
```python
model = nn.Sequential(*[Block(32) for _ in range(48)])   # 48 x (LayerNorm, Linear, GELU, add)
for x, y in loader:
    loss = loss_fn(model(x), y)
```

Use instead:
```python
model = torch.compile(nn.Sequential(*[Block(32) for _ in range(48)]))
```

## Fix safety
Unsafe: compiled code fuses and reorders floating-point work, so results differ at rounding
level, and compilation costs seconds to minutes at start-up (the experiment reports it as the
switch cost, apart from the step times). Graph breaks (data-dependent Python control flow,
unsupported calls) can leave parts of the model in eager mode; the measurement shows what is
left of the gain.

## Options
- `min-ops-per-step` (default 300): fewest top-level operators per step to call the step op-heavy.
- `min-overhead-frac` (default 0.3): smallest share of the step in per-operator overhead.
- `op-cost-us` (default 5.0): fixed cost of one eager operator on a CPU, in microseconds
  (Python call, argument parsing, dispatch, output allocation), lowered to the median operator's
  measured time where that is less; an operator shorter than it is charged its own time.
- `nested-op-cost-us` (default 1.0): fixed cost of an operator another one dispatches from C++
  (the dispatcher and an output allocation, no Python), in microseconds. Without it a stack of
  composite layers read as arithmetic: on a slower CPU (an AMD EPYC without AVX-512) 726 top-level
  operators a step of 48 LayerNorm/Linear/GELU blocks on 8x16 tensors ran 4,443 operators in all,
  about 4 us each, and the top-level charge alone came to 19-24% of a step that is nearly all dispatch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

from advisor import units
from advisor.analysis import steptime

from . import helpers as h
from .registry import Finding, rule

if TYPE_CHECKING:
    from advisor.profile import Profile


@rule(code="CPU001", name="op-overhead-bound")
def check(profile: Profile, *, min_ops_per_step: int = 300, min_overhead_frac: float = 0.3,
          op_cost_us: float = 5.0, nested_op_cost_us: float = 1.0) -> Iterator[Finding]:
    if profile.has_gpu or not h.is_training(profile):
        return
    per_step = _per_step(profile)
    if not per_step:
        return
    clean_us, batches = _clean_step_us(profile, len(per_step))
    if not clean_us:
        return
    ops = float(np.median([len(d) for d, _ in per_step]))
    dispatched = float(np.median([len(d) + n.sum() for d, n in per_step]))
    median_op_us = float(np.median(np.concatenate([d for d, _ in per_step])))
    # The fixed cost is no more than the median op takes whole on this machine (an assumed 5 us read
    # 2x what the ops of a reinforcement-learning script took, 2.5 us, and claimed 100% of its step).
    cost_us = min(op_cost_us, median_op_us)
    charged = np.array([np.minimum(d, cost_us + nested_op_cost_us * n).sum() for d, n in per_step])
    at_batch: float | None = None
    if batches is None:
        overhead_us = float(np.median(charged))
    else:  # steps of unequal work (episodes): each step's charge per sample, at the median batch
        at_batch = float(np.median(batches))
        overhead_us = float(np.median(charged / batches)) * at_batch
    overhead_us = min(overhead_us, clean_us)
    frac = h.frac(overhead_us, clean_us)
    if ops < min_ops_per_step or frac < min_overhead_frac:
        return
    yield Finding(
        title=f"{ops:.0f} operators a step, {frac:.0%} of the step in framework overhead",
        summary=(f"Each step runs {ops:.0f} operators (median {median_op_us:.1f} us under the profiler), "
                 f"{dispatched:.0f} with the ones they dispatch; at about {cost_us:.1f} us of dispatch each (at most "
                 f"the median op's time) and {nested_op_cost_us:.1f} us for each one dispatched from C++, that is "
                 f"{units.time_us(overhead_us)} of a {units.time_us(clean_us)} step ({frac:.0%})"
                 f"{f', per sample at the median batch of {at_batch:.0f}' if at_batch is not None else ''}. "
                 f"torch.compile runs the model as a few fused loops instead."),
        severity="high" if frac >= 0.6 else "medium",
        evidence={
            "ops_per_step": h.r3(ops),
            "dispatched_ops_per_step": h.r3(dispatched),
            "median_op_us": h.r3(median_op_us),
            "op_cost_us": h.r3(cost_us),
            "overhead_us_per_step": h.r3(overhead_us),
            "fastest_step_us": h.r3(clean_us),
            "overhead_frac": h.r3(frac),
            **({"per_sample_at_batch": h.r3(at_batch)} if at_batch is not None else {}),
        },
        # compile removes most of the dispatch cost but not Python around the model, nor the optimizer's ops
        estimated_gain_frac=h.r3(0.5 * frac),
        fix=h.compile_fix(h.device(profile)),
    )


def _per_step(profile: Profile) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per profiled step: the durations of the top-level ops on the loop's thread, outside
    DataLoader ``__next__`` (a loader without workers runs its transforms there), and how many
    ops each dispatched in turn (the ops that start inside it on that thread)."""
    ops, steps = profile.ops, h.trace_steps(profile)
    tid = h.main_thread(profile)
    if ops.empty or steps.empty or tid is None:
        return []
    mine = ops[(ops["tid"] == tid) & ops["step"].isin(steps["index"])]
    top = mine[mine["depth"] == 0]
    loading = h.dataloader_ranges(profile)
    if len(top) and len(loading):
        inside = h.in_disjoint(loading[["ts_us", "end_us", "tid"]].reset_index(drop=True),
                               top["ts_us"].to_numpy(), top["tid"].to_numpy())
        top = top[inside < 0]
    starts = np.sort(mine.loc[mine["depth"] > 0, "ts_us"].to_numpy())
    nested = (np.searchsorted(starts, top["end_us"].to_numpy(), side="left")  # the next op's first child
              - np.searchsorted(starts, top["ts_us"].to_numpy(), side="left"))  # may start where this one ends
    return [(g["dur_us"].to_numpy(dtype=float), g["nested"].to_numpy(dtype=float))
            for _, g in top.assign(nested=nested).groupby("step")]


def _clean_step_us(profile: Profile, profiled: int) -> tuple[float | None, np.ndarray | None]:
    """The fastest unprofiled step, less its DataLoader wait (microseconds), and the profiled steps'
    batches where steps differ in theirs (None where they do not, or some batch is unknown).

    Steps of unequal work (a reinforcement-learning script's episodes of 12 to 91 samples) are set
    against each other per sample, at the profiled steps' median batch: the fastest step alone is a
    short episode, and it read a long profiled one's overhead as 100% of a step."""
    steps = h.timed_steps(profile)
    clean = steptime.unprofiled(steps)
    if not clean.any():
        return None, None
    us = (steptime.durations(steps) - steptime.data_wait(steps)) * 1e6
    probe = profile.steps
    batches = steptime.batch_sizes(probe[steptime.profiled(probe)]).to_numpy()
    clean_batches = steptime.batch_sizes(steps)[clean]
    known = len(batches) == profiled > 0 and bool((batches > 0).all()) and bool((clean_batches > 0).all())
    if not known or (np.unique(batches).size == 1 and (clean_batches == batches[0]).all()):
        return float(us[clean].min()), None
    return float((us[clean] / clean_batches).min() * np.median(batches)), batches
