"""## What it does
Finds the rank whose slower work per step the other ranks wait for in the collective.

A straggler's own work per step takes longer than the other ranks', and they wait for it in the
collective (the gradient all-reduce, an all-gather).

For every rank and step it takes the step time, the rank's collective time (NCCL/RCCL kernels on
GPU, the `gloo:*` ranges on CPU) and the part of it that no compute overlaps: the *exposed*
communication, where the rank sits waiting. The rest of the step is the rank's own work
(`busy`). The straggler is the rank whose median busy time is highest; it is reported when it
exceeds the median of the other ranks by `min-extra-frac` of the step (and `min-extra-ms`), the
others' exposed communication exceeds the straggler's by at least half that much (they do wait
for it), and it is the busiest rank in at least two thirds of the steps (a rank the OS
deschedules now and then is noise, not a straggler). The evidence gives the rank, its extra time per step, and the wait it causes on
each other rank.

Needs a trace per rank (`advise analyze trace_rank0.json.gz trace_rank1.json.gz ...`, or a
profiled multi-rank run); with one rank it says nothing.

## Why is this bad?
Data-parallel ranks synchronise every step: the all-reduce cannot finish before the slowest rank
has produced its gradients, so every rank runs at the straggler's pace. A rank that is 30 ms
slower costs 30 ms on every rank, every step: with 8 ranks, 8 times the hardware time. Common
causes: more data on that rank (uneven shards, longer sequences), a slower or throttled device,
a noisy neighbour on its node, extra work only that rank does (logging, checkpointing,
evaluation on rank 0).

## Example
```python
loss = model(batch)
if dist.get_rank() == 0:
    log_images(batch)            # only rank 0 does this: every other rank waits for it
loss.backward()                  # the all-reduce waits for the slowest rank
```

Use instead:
```python
loss = model(batch)
loss.backward()
if dist.get_rank() == 0 and step % 100 == 0:
    log_images(batch.detach())   # rarely, and after the collective
```

## Fix safety
Display-only: the cause lives in the straggler's own code path, data or machine; the rule names
the rank and the time, the author finds the reason.

## Options
- `min-extra-frac` (default 0.1): smallest extra work of the straggler, as a share of the median step, to report.
- `min-extra-ms` (default 5.0): smallest extra work of the straggler per step, in milliseconds, to report
  (CPU jobs with millisecond steps see that much scheduling noise on a busy machine).
- `min-steps` (default 3): fewest profiled steps (on every rank) to name a straggler: over two
  steps, one rank can come out slowest in both by chance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from advisor.analysis import steptime
from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule

if TYPE_CHECKING:
    import pandas as pd

CONSISTENT_SHARE = 2 / 3  # the straggler is the busiest rank in at least this share of the steps


@rule(code="PAR001", name="straggler-rank")
def check(profile: Profile, *, min_extra_frac: float = 0.1, min_extra_ms: float = 5.0, min_steps: int = 3) -> Iterator[Finding]:
    job = profile.job
    if len(job) < 2:
        return
    ranks = job.per_rank()
    if len(ranks) < 2 or not ranks["comm_s"].gt(0).any():
        return  # no collective seen: nothing says the ranks wait for each other
    slow = ranks.loc[ranks["busy_s"].idxmax()]
    others = ranks[ranks["rank"] != slow["rank"]]
    step_s = float(steptime.durations(ranks).median())
    extra_s = float(slow["busy_s"] - others["busy_s"].median())
    waits = {int(r.rank): float(r.exposed_comm_s - slow["exposed_comm_s"]) for r in others.itertuples()}
    wait_s = sorted(waits.values())[len(waits) // 2]  # the median other rank's wait
    if extra_s < max(min_extra_frac * step_s, min_extra_ms / 1e3) or wait_s < 0.5 * extra_s:
        return
    rank = int(slow["rank"])
    table = job.step_table()
    if table.groupby("rank")["index"].nunique().min() < min_steps:
        return  # too few steps to tell a straggler from chance
    consistent = _slowest_share(table, rank)
    if consistent < CONSISTENT_SHARE:
        return  # slowest now and then, not every step: scheduling noise, not a straggler
    worst = max(waits, key=waits.__getitem__)
    share = h.frac(wait_s, step_s)
    yield Finding(
        title=f"Rank {rank} is a straggler: {extra_s * 1e3:,.1f} ms more work per step, the other ranks wait for it",
        summary=(f"Rank {rank} spends {slow['busy_s'] * 1e3:,.1f} ms per step on its own work against "
                 f"{others['busy_s'].median() * 1e3:,.1f} ms on the other ranks (median); they wait "
                 f"{wait_s * 1e3:,.1f} ms per step for it in the collective ({share:.0%} of the "
                 f"{step_s * 1e3:,.1f} ms step; rank {worst} waits {waits[worst] * 1e3:,.1f} ms)."),
        severity="high" if share >= 0.2 else "medium" if share >= 0.05 else "low",
        evidence={
            "straggler_rank": rank,
            "extra_s_per_step": h.r3(extra_s),
            "wait_caused_s_per_step": h.r3(wait_s),
            "wait_caused_by_rank_s": {str(r): h.r3(w) for r, w in sorted(waits.items())},
            "busy_s_by_rank": {str(int(r.rank)): h.r3(r.busy_s) for r in ranks.itertuples()},
            "exposed_comm_s_by_rank": {str(int(r.rank)): h.r3(r.exposed_comm_s) for r in ranks.itertuples()},
            "step_time_median_s": h.r3(step_s),
            "slowest_in_steps_frac": h.r3(consistent),
            "n_ranks": len(ranks),
        },
        estimated_gain_frac=h.r3(h.frac(extra_s, step_s)),  # the straggler brought to the others' pace
        fix=Fix.manual(
            f"Find what rank {rank} does more than the others (data, device, work only it does)",
            (f"# rank {rank} does {extra_s * 1e3:.1f} ms more work per step; check in order:\n"
             "#  - its data: samples / sequence lengths per rank (see rank-load-imbalance)\n"
             "#  - work only it does: `if rank == 0:` logging, checkpoints, evaluation inside the step\n"
             "#  - its device: clocks, temperature, other processes (nvidia-smi -i <gpu>)"),
        ),
    )


def _slowest_share(table: pd.DataFrame, rank: int) -> float:
    """In how many of the steps every rank recorded `rank` had the most work of all ranks."""
    busy = table.pivot_table(index="index", columns="rank", values="busy_s").dropna()
    return float((busy.idxmax(axis=1) == rank).mean()) if len(busy) else 0.0
