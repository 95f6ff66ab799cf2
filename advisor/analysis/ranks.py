"""A multi-rank job as one object: per-rank Profiles, their step times and collective intervals.

The cross-rank rules (stragglers, exposed communication, data imbalance) need every rank at
once; :class:`JobProfile` holds the per-rank :class:`~advisor.profile.Profile` objects (one per
rank, ordered by rank) and derives, HTA-style, one frame per question:

- :meth:`JobProfile.step_table`: one row per (rank, step): ``rank``, ``index``, ``duration_s``,
  ``comm_s`` (union of the rank's collective intervals inside the step), ``exposed_comm_s``
  (the part of it no compute overlaps: where the rank waits), ``compute_s`` (union of compute
  inside the step), ``busy_s`` (``duration_s - exposed_comm_s``: the rank's own work),
  ``flops`` (the FLOPs of its operators: the work it was given, samples and sequence lengths
  alike; NaN when the trace has no shapes).
- :meth:`JobProfile.per_rank`: the medians over steps, one row per rank, with ``samples`` (the
  median batch of the rank's measured steps; NaN when unknown, as in a trace alone).

What counts as a collective and as compute depends on what the trace holds:

- with GPU kernels (NCCL/RCCL): collectives are the ``nccl``/``rccl`` kernels, compute the
  other kernels (HTA's `get_comm_comp_overlap` classes them the same way; copies are neither);
- on CPU (gloo): collectives are the ``gloo:*`` ranges the c10d backend records on its own
  threads (they last until every rank has joined, so they hold the wait), compute the CPU
  operators on the other threads.

A single-rank run is a JobProfile of one; every rule that needs two ranks says nothing then.
"""

from __future__ import annotations


import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..trace.intervals import coverage, merge, subtract
from . import steptime
from ..trace import name_mask as trace_name_mask

from .view import ProfileView


_GPU_COLLECTIVE = re.compile(r"nccl|rccl", re.IGNORECASE)
_CPU_COLLECTIVE = re.compile(r"^gloo:")
_C10D = re.compile(r"^c10d::")
# a rank's step keeps the step frame's name for its time (steptime.durations reads both frames)
COLUMNS = ("rank", "index", steptime.DURATION, "comm_s", "exposed_comm_s", "compute_s", "busy_s", "flops")


def name_mask(names: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """Which names `pattern` finds, tried once per distinct name (kernel names repeat thousands of times)."""
    return trace_name_mask(names, pattern.search)


def collectives(profile: ProfileView) -> pd.DataFrame:
    """The rank's collective intervals (``name``, ``ts_us``, ``end_us``, ``where``: gpu or cpu)."""
    kernels = profile.kernels
    if len(kernels):
        k = kernels[name_mask(kernels["name"], _GPU_COLLECTIVE)]
        return pd.DataFrame({"name": k["name"], "ts_us": k["ts_us"], "end_us": k["end_us"], "where": "gpu"})
    frames = []
    for frame in (profile.annotations, profile.ops):
        if len(frame):
            hit = frame[name_mask(frame["name"], _CPU_COLLECTIVE)]
            frames.append(pd.DataFrame({"name": hit["name"], "ts_us": hit["ts_us"], "end_us": hit["end_us"],
                                        "where": "cpu", "tid": hit["tid"]}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["name", "ts_us", "end_us", "where"])


def compute_intervals(profile: ProfileView, comm: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Merged compute intervals: non-collective kernels on GPU; CPU ops off the collective threads."""
    kernels = profile.kernels
    if len(kernels):
        k = kernels[~name_mask(kernels["name"], _GPU_COLLECTIVE)]
        return merge(k["ts_us"], k["end_us"])
    ops = profile.ops
    if not len(ops):
        return merge([], [])
    comm_threads = set(comm["tid"]) if "tid" in comm and len(comm) else set()
    mine = ops[(ops["depth"] == 0) & ~ops["tid"].isin(comm_threads) & ~name_mask(ops["name"], _C10D)]
    return merge(mine["ts_us"], mine["end_us"])


@dataclass
class JobProfile:
    """Every rank's Profile, ordered by rank (a single-rank run has one)."""

    profiles: list = field(default_factory=list)
    _table: pd.DataFrame | None = field(default=None, repr=False, compare=False)

    @property
    def ranks(self) -> list[int]:
        return [rank_of(p, i) for i, p in enumerate(self.profiles)]

    def __len__(self) -> int:
        return len(self.profiles)

    def step_table(self) -> pd.DataFrame:
        """One row per (rank, profiled step); see the module docstring for the columns (computed once)."""
        if self._table is None:
            rows = [_rank_steps(p, r) for p, r in zip(self.profiles, self.ranks)]
            rows = [r for r in rows if len(r)]
            self._table = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=list(COLUMNS))
        return self._table

    def per_rank(self) -> pd.DataFrame:
        """Medians over steps, one row per rank (medians: one slow step is not a slow rank)."""
        table = self.step_table()
        if table.empty:
            return table
        out = table.groupby("rank", sort=True).median(numeric_only=True).drop(columns="index").reset_index()
        samples = {r: _median_samples(p) for p, r in zip(self.profiles, self.ranks)}
        out[steptime.SAMPLES] = out["rank"].map(samples).astype(float)
        return out


def rank_of(profile: ProfileView, fallback: int) -> int:
    """The rank a Profile says it is (env, from the trace's distributedInfo or the probe), else its position."""
    rank = profile.env.rank
    if rank is None:
        return fallback
    try:
        return int(rank)
    except (TypeError, ValueError):
        return fallback


def _median_samples(profile: ProfileView) -> float:
    """The median batch of the rank's steps (NaN where unknown: a trace alone)."""
    return float(steptime.batch_sizes(profile.steps).median())


def _rank_steps(profile: ProfileView, rank: int) -> pd.DataFrame:
    ready = profile.memo.get("rank_steps") if hasattr(profile, "memo") else None
    if ready is not None:  # a rank summarised where it ran (advisor.job.rank_summary): its own trace made this
        return ready.assign(rank=rank) if len(ready) else pd.DataFrame(columns=list(COLUMNS))
    steps = profile.trace_steps
    if not len(steps):
        return pd.DataFrame(columns=list(COLUMNS))
    comm = collectives(profile)
    cs, ce = merge(comm["ts_us"], comm["end_us"])
    ks, ke = compute_intervals(profile, comm)
    es, ee = subtract(cs, ce, ks, ke)
    lo, hi = steps["ts_us"].to_numpy(float), steps["end_us"].to_numpy(float)
    duration = (hi - lo) / 1e6
    exposed = coverage(es, ee, lo, hi) / 1e6
    ops = profile.ops
    flops = (ops.groupby("step")["flops"].sum(min_count=1) if len(ops) and ops["flops"].notna().any()
             else pd.Series(dtype=float))
    index = steps["index"].astype(int)
    return pd.DataFrame({
        "rank": rank,
        "index": index.to_numpy(),
        steptime.DURATION: duration,
        "comm_s": coverage(cs, ce, lo, hi) / 1e6,
        "exposed_comm_s": exposed,
        "compute_s": coverage(ks, ke, lo, hi) / 1e6,
        "busy_s": duration - exposed,
        "flops": index.map(flops).to_numpy(dtype=float),
    })
