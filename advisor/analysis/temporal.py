"""GPU time split as Holistic Trace Analysis's temporal breakdown splits it, so HTA users recognise the numbers.

HTA's ``TraceAnalysis.get_temporal_breakdown`` takes a rank's GPU events (kernels, memcpy,
memset); when the trace has two or more ``ProfilerStep``s it keeps only those launched before
the last step starts (the last step is cut short by the profiler). Over their merged intervals:

- ``kernel_time``: from the first event's start to the last one's end;
- ``idle``: ``kernel_time`` minus the union of all the events;
- ``compute``: the union of compute kernels (HTA's rule: a name that is not ``nccl...Kernel``,
  holds no ``Memcpy``, does not start with ``Memset`` and holds no ``Sync``);
- ``non_compute``: the rest, ``kernel_time - compute - idle``.

HTA stops there; ``non_compute`` is split here too, each part outside the ones before it:
``communication`` (NCCL kernels), ``memory`` (``Memcpy``/``Memset``/``dma``: copies and fills),
``other``. The same categories are also given per ``ProfilerStep`` window (every step, the last
included), so a step's time reads as compute + communication + memory + other + idle.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from ..trace import intervals
from ..trace import per_name

if TYPE_CHECKING:
    from ..trace import TraceFrames
    import pandas as pd

# HTA's own patterns (hta/utils/utils.py), matched at the start of the name as re.match does.
_COMM = re.compile(r"^nccl.*Kernel")
_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
CATEGORIES = ("compute", "communication", "memory", "other", "idle")
BASIS = "GPU kernels, memcpy and memset, as HTA's get_temporal_breakdown"


def category_of(name: str) -> str:
    """compute, communication, memory or other: HTA's kernel type of a GPU event's name."""
    if _COMM.match(name):
        return "communication"
    if _MEMORY.match(name):
        return "memory"
    if not _NOT_COMPUTE.match(name):
        return "compute"
    return "other"


def hta_breakdown(trace: "TraceFrames | None") -> dict | None:
    """HTA's temporal breakdown of one trace (one rank), with the per-step split; None without GPU events."""
    if trace is None:
        return None
    cats, ts, end, corr = _gpu_events(trace)
    if len(ts) == 0:
        return None
    keep = _launched_before_last_step(trace, corr)
    whole = _split(ts[keep], end[keep], cats[keep], None, None)
    steps = trace.steps
    per_step = []
    if len(steps):
        lo, hi = steps["ts_us"].to_numpy(), steps["end_us"].to_numpy()
        split = _split(ts, end, cats, lo, hi)
        for i, index in enumerate(steps["index"].tolist()):
            per_step.append({"index": int(index), "step_us": float(hi[i] - lo[i]),
                             **{f"{c}_us": float(split[c][i]) for c in CATEGORIES}})
    rank = trace.meta.get("rank")
    row = {"rank": rank if rank is not None else 0, "kernel_time_us": float(whole["span"]),
           "idle_us": float(whole["idle"]), "compute_us": float(whole["compute"]),
           "non_compute_us": float(whole["span"] - whole["compute"] - whole["idle"]),
           "communication_us": float(whole["communication"]), "memory_us": float(whole["memory"]),
           "other_us": float(whole["other"]), "last_step_dropped": bool(not keep.all()), "steps": per_step}
    return {"basis": BASIS, "ranks": [row]}


def for_ranks(traces: list) -> dict | None:
    """One row per rank's trace (a multi-rank job, as HTA's table has one row per rank); None without GPU events."""
    rows = [row for t in traces for row in (hta_breakdown(t) or {}).get("ranks", [])]
    return {"basis": BASIS, "ranks": sorted(rows, key=lambda r: r["rank"])} if rows else None


def _gpu_events(trace: "TraceFrames") -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(category codes: _KINDS' positions, starts, ends, correlations) of the kernels, copies and fills."""
    k, m = trace.kernels, trace.memcpy
    kinds = np.concatenate([_kind_codes(k["name"]), _kind_codes(m["name"])])
    ts = np.concatenate([k["ts_us"].to_numpy(dtype=np.float64), m["ts_us"].to_numpy(dtype=np.float64)])
    end = np.concatenate([k["end_us"].to_numpy(dtype=np.float64), m["end_us"].to_numpy(dtype=np.float64)])
    corr = np.concatenate([k["correlation"].to_numpy(dtype=np.float64, na_value=np.nan),
                           m["correlation"].to_numpy(dtype=np.float64, na_value=np.nan)])
    return kinds, ts, end, corr


_KINDS = ("compute", "communication", "memory", "other")  # the order each is taken outside the ones before


def _kind_codes(names: pd.Series) -> np.ndarray:
    """Each event's category as its position in _KINDS, decided once per distinct name."""
    return per_name(names, lambda name: _KINDS.index(category_of(name)), np.int8, _KINDS.index("other"))


def _launched_before_last_step(trace: "TraceFrames", corr: np.ndarray) -> np.ndarray:
    """HTA's filter: with 2+ ProfilerSteps, the GPU events whose launch starts before the last step does."""
    steps = trace.steps
    if len(steps) < 2:
        return np.ones(len(corr), dtype=bool)
    last_start = float(steps["ts_us"].max())
    rt = trace.runtime
    before = rt.loc[rt["ts_us"].to_numpy() < last_start, "correlation"].dropna()
    launched = np.unique(before.to_numpy(dtype=np.float64))
    return np.isin(corr, launched)


def _split(ts: np.ndarray, end: np.ndarray, cats: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None) -> dict:
    """Time per category, each outside the ones before it (compute, communication, memory, other), and idle.

    With windows (`lo`, `hi`): arrays, one value per window, the events clipped to it. Without: one
    number each over the events' own span (``span``: first start to last end), as HTA measures it.
    """
    if lo is None or hi is None:  # both or neither
        lo, hi = np.array([ts.min()]), np.array([end.max()])
        scalar = True
    else:
        scalar = False
    covered, out = np.zeros(len(lo)), {}
    mask = np.zeros(len(ts), dtype=bool)
    for code, c in enumerate(_KINDS):
        mask |= cats == code
        upto = intervals.coverage(*intervals.merge(ts[mask], end[mask]), lo, hi)
        out[c] = upto - covered
        covered = upto
    out["idle"] = (hi - lo) - covered
    out["span"] = hi - lo
    if scalar:
        return {k: float(v[0]) for k, v in out.items()}
    return out
