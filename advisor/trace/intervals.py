"""Unions of [start, end) time intervals: the one definition the trace loader and the rules share.

"How long was the GPU busy", "how much of this step was data wait": overlapping work (several
streams, nested ranges) must be counted once, so intervals are merged before they are measured.
Real traces carry a few broken events (a NaN end, an end before the start); they are dropped or
made empty here so that every caller gets the same answer from the same events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["merge", "coverage", "subtract", "intersect", "union_length"]


def merge(starts: ArrayLike, ends: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, disjoint (start, end) float arrays covering the union of the inputs.

    Intervals with a NaN bound are dropped; an end before its start counts as empty. Intervals
    that only touch are merged (the union has no gap there).
    """
    s = np.asarray(starts, dtype=np.float64).ravel()
    e = np.asarray(ends, dtype=np.float64).ravel()
    ok = ~(np.isnan(s) | np.isnan(e))
    if not ok.all():
        s, e = s[ok], e[ok]
    if s.size == 0:
        return s, e
    e = np.maximum(e, s)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], run_end[last]


def coverage(ms: np.ndarray, me: np.ndarray, lo: ArrayLike, hi: ArrayLike) -> np.ndarray:
    """For each window [lo, hi], how long the merged intervals (ms, me) from :func:`merge` cover it.

    Vectorised over windows (one binary search each, not a loop over intervals), so the per-step
    numbers of a 200k-event trace cost milliseconds. A window with a NaN bound or ``hi < lo`` is
    covered 0.
    """
    ms = np.asarray(ms, dtype=np.float64)
    me = np.asarray(me, dtype=np.float64)
    lo = np.atleast_1d(np.asarray(lo, dtype=np.float64))
    hi = np.atleast_1d(np.asarray(hi, dtype=np.float64))
    if ms.size == 0 or lo.size == 0:
        return np.zeros(np.broadcast(lo, hi).size, dtype=np.float64)
    cum = np.concatenate(([0.0], np.cumsum(me - ms)))
    i0 = np.searchsorted(me, lo, side="right")  # first interval ending after lo
    i1 = np.searchsorted(ms, hi, side="left")  # intervals [0, i1) start before hi
    total = cum[np.maximum(i1, i0)] - cum[i0]
    has = i1 > i0
    j0 = np.minimum(i0, ms.size - 1)
    j1 = np.clip(i1 - 1, 0, ms.size - 1)
    total -= np.where(has, np.clip(lo - ms[j0], 0.0, None), 0.0)
    total -= np.where(has, np.clip(me[j1] - hi, 0.0, None), 0.0)
    return np.where(hi >= lo, np.clip(total, 0.0, None), 0.0)


def subtract(ms: np.ndarray, me: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merged intervals (ms, me) less merged intervals (cs, ce): what no (cs, ce) covers, merged.

    Vectorised: the bounds of both cut the line into pieces; a piece is kept when its start lies in
    an (ms, me) interval and in no (cs, ce) one (tested at the start, an input value, so no
    rounding), and kept pieces that touch are joined.
    """
    ms, me, cs, ce = (np.asarray(a, dtype=np.float64) for a in (ms, me, cs, ce))
    if not ms.size or not cs.size:
        return ms.copy(), me.copy()
    points = np.unique(np.concatenate([ms, me, cs, ce]))
    lo, hi = points[:-1], points[1:]
    keep = _inside(lo, ms, me) & ~_inside(lo, cs, ce)
    first = keep & np.concatenate(([True], ~keep[:-1]))
    last = keep & np.concatenate((~keep[1:], [True]))
    return lo[first], hi[last]


def intersect(ms: np.ndarray, me: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merged intervals (ms, me) within merged intervals (cs, ce): what both cover, merged (the
    first less what it has outside the second, so it rounds as :func:`subtract` does)."""
    outside = subtract(ms, me, cs, ce)
    return subtract(ms, me, *outside)


def _inside(t: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Whether each time lies in one of the sorted, disjoint [start, end) intervals."""
    i = np.searchsorted(starts, t, side="right") - 1
    return (i >= 0) & (t < ends[np.maximum(i, 0)])


def union_length(starts: ArrayLike, ends: ArrayLike) -> float:
    """Total length covered by the union of [start, end) intervals (0 for none)."""
    ms, me = merge(starts, ends)
    return float((me - ms).sum()) if ms.size else 0.0
