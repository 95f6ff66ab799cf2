"""## What it does
Finds ranks of one job given more work per step than others (samples, sequence lengths).

Uneven shards, or longer sequences on one rank, make the ranks' work per step differ.

Per rank it reads the median batch of its steps (samples, when the run knows them) and the
median FLOPs of its operators per step (from the trace's shapes: a batch twice as large, or
sequences twice as long, doubles them). It reports when the rank with the most work has more
than `min-imbalance` above the rank with the least, with each rank's figures and its own
work time per step, so the cost is visible: in a synchronous job every rank waits for the one
with the most.

Needs two ranks or more (`advise analyze` with one trace per rank, or a multi-rank run).

## Why is this bad?
Data-parallel training assumes every rank does the same work per step. A sampler that shards
unevenly, a bucketing collate that gives one rank the long sequences, or a last batch that is
only full on some ranks, makes one rank slower, and the gradient all-reduce makes every other
rank wait for it (see `straggler-rank`). Throughput is set by the rank with the most work.

## Example
```python
# each rank reads its own file; the files have different sizes and sequence lengths
dataset = load_shard(f"shard-{rank}.jsonl")
loader = DataLoader(dataset, batch_size=32, collate_fn=pad_to_longest)
```

Use instead:
```python
sampler = DistributedSampler(dataset, shuffle=True, drop_last=True)  # same count per rank
loader = DataLoader(dataset, batch_size=32, sampler=sampler,
                    collate_fn=pad_to_longest)  # or bucket by length across ranks, or pack tokens
```

## Fix safety
Display-only: how data is split and padded is the training code's choice (and can change
which samples each rank sees); the rule shows the imbalance and its cost.

## Options
- `min-imbalance` (default 0.1): smallest excess of the busiest rank's work over the lightest rank's to report.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterator

from advisor.analysis import steptime
from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule

if TYPE_CHECKING:
    import pandas as pd


@rule(code="PAR004", name="rank-load-imbalance")
def check(profile: Profile, *, min_imbalance: float = 0.1) -> Iterator[Finding]:
    job = profile.job
    if len(job) < 2:
        return
    ranks = job.per_rank()
    if len(ranks) < 2:
        return
    measures = [(col, unit) for col, unit in ((steptime.SAMPLES, "samples"), ("flops", "FLOPs")) if _known(ranks[col])]
    for column, unit in measures:
        heavy = ranks.loc[ranks[column].idxmax()]
        light = ranks.loc[ranks[column].idxmin()]
        excess = h.frac(heavy[column] - light[column], light[column])
        if excess < min_imbalance:
            continue
        hr, lr = int(heavy["rank"]), int(light["rank"])
        extra_ms = (heavy["busy_s"] - light["busy_s"]) * 1e3
        step_s = float(steptime.durations(ranks).median())
        yield Finding(
            title=f"Rank {hr} gets {excess:.0%} more work per step than rank {lr} ({unit} per step)",
            summary=(f"Per step rank {hr} gets {_num(heavy[column])} {unit}, rank {lr} {_num(light[column])}; "
                     f"rank {hr}'s own work takes {extra_ms:,.1f} ms more per step, time every other rank waits "
                     f"in the collective."),
            severity="high" if excess >= 0.5 else "medium" if excess >= 0.2 else "low",
            evidence={
                "measure": column,
                "heaviest_rank": hr,
                "lightest_rank": lr,
                "imbalance": h.r3(excess),
                f"{column}_per_step_by_rank": {str(int(r.rank)): h.r3(getattr(r, column)) for r in ranks.itertuples()},
                "busy_s_by_rank": {str(int(r.rank)): h.r3(r.busy_s) for r in ranks.itertuples()},
                "extra_busy_s_per_step": h.r3(extra_ms / 1e3),
                "n_ranks": len(ranks),
            },
            estimated_gain_frac=h.r3(max(0.0, h.frac(extra_ms / 1e3, step_s)) / 2),  # evened out: half the gap
            fix=Fix.manual(
                "Give every rank the same work per step (DistributedSampler, drop_last, length bucketing)",
                ("sampler = DistributedSampler(dataset, drop_last=True)   # the same number of samples per rank\n"
                 "loader = DataLoader(dataset, batch_size=B, sampler=sampler)\n"
                 "# variable lengths: bucket by length (the same bucket on every rank) or pack to a fixed token count"),
            ),
        )
        return  # one finding: samples explain the FLOPs when both differ


def _known(column: pd.Series) -> bool:
    return bool(column.notna().all() and (column > 0).all())


def _num(x: float) -> str:
    if not math.isfinite(x):
        return "?"
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:,.1f}{suffix}"
    return f"{x:,.0f}"
