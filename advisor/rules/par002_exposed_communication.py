"""## What it does
Measures the collective communication that no compute hides in each step.

That *exposed* communication is time the rank does nothing but wait for the network.

Collectives are the NCCL/RCCL kernels of a GPU trace (or the `gloo:*` ranges of a CPU one);
compute is every other kernel (on CPU, the operators off the collective threads). Per rank,
the overlap is the share of collective time that compute covers, as Holistic Trace Analysis's
`get_comm_comp_overlap` defines it (here per profiled step); the rest is exposed. In a
multi-rank job the rank with the least exposed communication gives the cost of the
communication itself: what the other ranks wait beyond it is a straggler's doing (see
`straggler-rank`), which no communication setting fixes. With a single rank's trace the two
cannot be told apart, and the finding says so.

For `DistributedDataParallel` (seen from its `DistributedDataParallel.forward` range) the fix
lists the constructor's knobs that change the overlap; with the reducer's unused-parameter
search in the trace, `find_unused_parameters=False` comes first, with its time per step.

## Why is this bad?
DDP launches each gradient bucket's all-reduce as soon as its gradients are ready, so the
communication of late layers runs while the backward pass computes the early ones. Time a
rank spends in a collective with nothing else running is time every GPU of the job idles:
on a fast interconnect it is small, but buckets that fill too late, a last bucket that holds
most of the model, or a graph DDP must search every step leave it exposed.

## Example
```python
model = DistributedDataParallel(model, device_ids=[local_rank], find_unused_parameters=True)
```

Use instead:
```python
model = DistributedDataParallel(
    model, device_ids=[local_rank],
    bucket_cap_mb=50,                 # fewer, larger all-reduces (the default 25 MB suits most)
    gradient_as_bucket_view=True,     # gradients live in the buckets: no copy in or out
    static_graph=True,                # the same parameters are used every step
    find_unused_parameters=False,     # no graph search after each forward
)
```

## Fix safety
Display-only (a manual change, not measured by the experiments, which cannot inject DDP
arguments): `static_graph=True` and `find_unused_parameters=False` are wrong for a model that
leaves some parameters unused in some steps (DDP then raises or hangs), and
`gradient_as_bucket_view=True` breaks code that keeps references to `.grad` across steps.
`bucket_cap_mb` is a tuning knob: larger buckets overlap less at the end of backward, smaller
ones pay more per-collective latency; measure both ways.

## Options
- `min-exposed-frac` (default 0.1): smallest exposed communication, as a share of the step, to report.
"""

from __future__ import annotations

import re
from typing import Iterator

from advisor.analysis import steptime
from advisor.analysis.ranks import name_mask
from advisor.profile import Profile

from . import helpers as h
from .registry import Finding, Fix, rule

_DDP = "DistributedDataParallel.forward"
_UNUSED_SEARCH = "search_unused_parameters"


@rule(code="PAR002", name="exposed-communication")
def check(profile: Profile, *, min_exposed_frac: float = 0.1) -> Iterator[Finding]:
    job = profile.job
    ranks = job.per_rank()
    if ranks.empty or not ranks["comm_s"].gt(0).any():
        return
    fewest = ranks["exposed_comm_s"].idxmin()
    least = ranks.loc[fewest]
    step_s = float(steptime.durations(ranks).loc[fewest])
    exposed_s, comm_s = float(least["exposed_comm_s"]), float(least["comm_s"])
    exposed_frac = h.frac(exposed_s, step_s)
    if exposed_frac < min_exposed_frac:
        return
    overlap = {str(int(r.rank)): h.r3(1 - h.frac(r.exposed_comm_s, r.comm_s)) for r in ranks.itertuples() if r.comm_s > 0}
    ddp = any(_names_contain(p, _DDP) for p in job.profiles)
    search_s = _unused_search_s(profile)
    single = len(job) < 2
    where = "on GPU" if profile.has_gpu else "on CPU (gloo)"
    caveat = (" With one rank's trace, time spent waiting for a slower rank counts as exposed too: analyse every "
              "rank's trace together to tell them apart." if single else
              f" The least any rank waits (rank {int(least['rank'])}) is counted: a rank that waits longer "
              "waits for a slower rank (straggler-rank), not for the network.")
    yield Finding(
        title=f"Communication is exposed for {exposed_frac:.0%} of the step ({exposed_s * 1e3:,.1f} ms): "
              f"{1 - h.frac(exposed_s, comm_s):.0%} of it overlaps compute",
        summary=(f"Each step spends {comm_s * 1e3:,.1f} ms in collectives {where}, {exposed_s * 1e3:,.1f} ms of it with no "
                 f"compute running (of a {step_s * 1e3:,.1f} ms step)." + caveat),
        severity="high" if exposed_frac >= 0.3 else "medium" if exposed_frac >= 0.15 else "low",
        evidence={
            "exposed_comm_s_per_step": h.r3(exposed_s),
            "exposed_comm_frac": h.r3(exposed_frac),
            "comm_s_per_step": h.r3(comm_s),
            "comm_comp_overlap_by_rank": overlap,
            "exposed_comm_s_by_rank": {str(int(r.rank)): h.r3(r.exposed_comm_s) for r in ranks.itertuples()},
            "rank": int(least["rank"]),
            "n_ranks": len(ranks),
            "ddp": ddp,
            "unused_parameter_search_s_per_step": h.r3(search_s) if search_s is not None else None,
        },
        estimated_gain_frac=h.r3(_gain(ddp, exposed_frac, h.frac(search_s or 0.0, step_s))),
        fix=Fix.manual(_title(ddp, search_s), _snippet(ddp, search_s)),
    )


DDP_KNOBS_GAIN = 0.1  # share of the exposed time DDP's knobs (buckets, bucket views, static graph) can hide


def _gain(ddp: bool, exposed_frac: float, search_frac: float) -> float:
    """What the fix can save, as a share of the step. DDP already overlaps its bucketed all-reduces
    with backward; its knobs only trim the last bucket and the copies (a gloo DDP job whose
    exposed share estimated 1.2-1.3x measured 1.03x with them), plus the unused-parameter search
    when it runs. Hand-issued collectives can overlap about half of their exposed time."""
    if not ddp:
        return 0.5 * exposed_frac
    return min(exposed_frac, search_frac + DDP_KNOBS_GAIN * exposed_frac)


def _names_contain(profile: Profile, text: str) -> bool:
    pattern = re.compile(re.escape(text))
    return any(name_mask(f["name"], pattern).any() for f in (profile.annotations, profile.ops))


def _unused_search_s(profile: Profile) -> float | None:
    """Host time per step in DDP's unused-parameter search (find_unused_parameters=True), or None."""
    pattern = re.compile(re.escape(_UNUSED_SEARCH))
    frames = [f[name_mask(f["name"], pattern)] for f in (profile.annotations, profile.ops)]
    hits = [f for f in frames if len(f)]
    steps = max(len(profile.trace_steps), 1)
    return float(sum(f["dur_us"].sum() for f in hits)) / 1e6 / steps if hits else None


def _title(ddp: bool, search_s: float | None) -> str:
    if search_s is not None:
        return "Turn off DDP's unused-parameter search and let DDP overlap gradient all-reduces with backward"
    if ddp:
        return "Tune DistributedDataParallel so gradient all-reduces overlap the backward pass"
    return "Overlap collectives with compute (issue them asynchronously, earlier, in fewer larger calls)"


def _snippet(ddp: bool, search_s: float | None) -> str:
    if not ddp and search_s is None:
        return ("work = dist.all_reduce(t, async_op=True)   # start it, compute something else\n"
                "...\nwork.wait()                                # wait only when the result is needed")
    lines = ["model = DistributedDataParallel(", "    model, device_ids=[local_rank],"]
    if search_s is not None:
        lines.append(f"    find_unused_parameters=False,    # the search costs {search_s * 1e3:.1f} ms per step")
    lines += ["    gradient_as_bucket_view=True,    # no copy of gradients into and out of the buckets",
              "    static_graph=True,               # only if every step uses the same parameters",
              "    bucket_cap_mb=50,                # try 10 and 50 against the default 25",
              ")"]
    if search_s is None:
        lines.insert(2, "    find_unused_parameters=False,    # the default; True searches the graph every step")
    return "\n".join(lines)
