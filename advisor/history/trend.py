"""A history read back: its records in stretches of one fingerprint, and the changes in each.

Absolute figures are compared only within one fingerprint (:data:`.store.FINGERPRINT`: the device,
the GPU or CPU model, the CPU count, torch, CUDA) and one script: another machine or another torch
starts a new stretch, marked where it starts and never named a regression. The gate's records carry
a ratio of two revisions measured side by side, which holds across machines, so they make one trend.

Change points (:data:`METHOD`): binary segmentation of the log step time within a stretch. At each
stage the split with the largest Welch's t between the records before it and after it is kept
where its two-sided p is below ``ALPHA`` over the number of splits tried (Bonferroni) and the two
sides' geometric means differ by ``MIN_CHANGE`` or more; then each side is searched the same way.
The change is named by the first record after the split: its commit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..analysis.stats import scipy_stats
from .store import FINGERPRINT

MIN_SEGMENT = 3  # records on each side of a change: fewer cannot tell a change from one odd run
ALPHA = 0.01
MIN_CHANGE = 0.03
METHOD = (f"binary segmentation of the log median step time within one fingerprint and script: the split with the "
          f"largest Welch's t, kept where its two-sided p is below {ALPHA:g} over the splits tried (Bonferroni) and "
          f"the geometric means differ by {MIN_CHANGE:.0%} or more, at least {MIN_SEGMENT} records a side; each side "
          f"searched again")


@dataclass
class Change:
    index: int  # the first record after the change (its place in the history, from 0)
    commit: str | None
    before_s: float  # geometric mean step time before and after, within the stretch
    after_s: float
    p: float

    @property
    def change(self) -> float:
        return self.after_s / self.before_s - 1


@dataclass
class Stretch:
    """Consecutive profile records of one script on one fingerprint."""

    script: str | None
    fingerprint: dict
    indices: list[int] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    after: str = ""  # what changed from the stretch before (empty for the first)

    def label(self) -> str:
        fp = self.fingerprint
        where = fp.get("gpu_name") or fp.get("cpu_model") or fp.get("device") or "?"
        return f"{where} · torch {fp.get('torch') or '?'}"


def stretches(records: list[dict]) -> list[Stretch]:
    """The profile records cut where the script or the fingerprint changes (records that did not end ok,
    or have no step time, are left out)."""
    out: list[Stretch] = []
    latest: dict[str | None, Stretch] = {}  # per script, its stretch now
    for i, r in enumerate(records):
        if r.get("kind") != "profile" or r.get("status") not in (None, "ok") or not _positive(r.get("step_s")):
            continue
        fp = {k: (r.get("fingerprint") or {}).get(k) for k in FINGERPRINT}
        now = latest.get(r.get("script"))
        if now is None or now.fingerprint != fp:
            now = Stretch(r.get("script"), fp, after=_what_changed(now.fingerprint, fp) if now else "")
            latest[r.get("script")] = now
            out.append(now)
        now.indices.append(i)
    for s in out:
        s.changes = change_points([records[i]["step_s"] for i in s.indices], s.indices, records)
    return out


def _positive(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _what_changed(before: dict, after: dict) -> str:
    return ", ".join(f"{k} {before.get(k)} -> {after.get(k)}" for k in FINGERPRINT if before.get(k) != after.get(k))


def change_points(values: list[float], indices: list[int], records: list[dict]) -> list[Change]:
    """The changes in one stretch's step times (:data:`METHOD`), in order."""
    logs = np.log(np.asarray(values, float))
    found: list[Change] = []
    _search(logs, 0, len(logs), indices, records, found)
    return sorted(found, key=lambda c: c.index)


def _search(logs: np.ndarray, lo: int, hi: int, indices: list[int], records: list[dict], found: list[Change]) -> None:
    splits = range(lo + MIN_SEGMENT, hi - MIN_SEGMENT + 1)
    if not splits:
        return
    st = scipy_stats()
    best = None
    for k in splits:
        t, p = st.ttest_ind(logs[lo:k], logs[k:hi], equal_var=False)
        if math.isnan(t):  # no spread on either side and the same mean: no change here
            continue
        if best is None or abs(t) > abs(best[1]):
            best = (k, t, 0.0 if math.isinf(t) else float(p))
    if best is None:
        return
    k, _, p = best
    before, after = float(np.exp(logs[lo:k].mean())), float(np.exp(logs[k:hi].mean()))
    if p * len(splits) >= ALPHA or abs(after / before - 1) < MIN_CHANGE:
        return
    found.append(Change(indices[k], records[indices[k]].get("commit"), before, after, min(1.0, p * len(splits))))
    _search(logs, lo, k, indices, records, found)
    _search(logs, k, hi, indices, records, found)


def gates(records: list[dict]) -> list[tuple[int, dict]]:
    """The gate's records with a ratio: its paired trend, comparable across machines."""
    return [(i, r) for i, r in enumerate(records) if r.get("kind") == "gate" and _positive(r.get("ratio"))]
