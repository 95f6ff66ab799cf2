"""Operator nesting: each op's depth among the ops of its thread, its self time, and whether an
ancestor already carries FLOPs (so ``ops.flops.sum()`` counts each GEMM/conv once)."""

from __future__ import annotations

import numpy as np

def thread_codes(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Dense 0..k-1 code per distinct (pid, tid)."""
    n = len(pid)
    o = np.lexsort((tid, pid))
    sp, st = pid[o], tid[o]
    new = np.empty(n, dtype=bool)
    new[:1] = True
    new[1:] = (sp[1:] != sp[:-1]) | (st[1:] != st[:-1])
    codes = np.empty(n, dtype=np.int64)
    codes[o] = np.cumsum(new) - 1
    return codes



def nesting(ts: np.ndarray, dur: np.ndarray, end: np.ndarray, thr_codes: np.ndarray,
            has_flops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Self time and depth per op with one stack per thread (ops sorted by ts, longest first).

    Also returns which ops sit under an ancestor that carries FLOPs (None if no
    op has FLOPs), so that FLOPs are counted only at the outermost op.
    """
    fast = _nesting_nested(ts, dur, end, thr_codes, has_flops)
    return fast if fast is not None else _nesting_stack(ts, dur, end, thr_codes, has_flops)


def _nesting_nested(ts: np.ndarray, dur: np.ndarray, end: np.ndarray, thr_codes: np.ndarray,
                    has_flops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """:func:`nesting` in array operations, where every op lies inside its parent (Kineto's ops
    do; several times faster than the stack); None where one does not: the stack decides.

    An op's ancestors are the earlier ops of its thread still open at its start (end > start, as
    the stack pops), so its depth is the number of earlier ops less those that ended by then, and
    its parent the last earlier op one level up.
    """
    n = len(ts)
    if n == 0:
        return None
    order = np.argsort(thr_codes, kind="stable")  # by thread, each in the given (ts, longest-first) order
    thr, t, e, d = thr_codes[order], ts[order], end[order], dur[order]
    bounds = np.r_[0, np.flatnonzero(thr[1:] != thr[:-1]) + 1, n]
    depth = np.empty(n, dtype=np.int64)
    for a, b in zip(bounds[:-1], bounds[1:]):  # a few threads
        ended = np.searchsorted(np.sort(e[a:b]), t[a:b], side="right")  # ops of the thread ended by each start
        depth[a:b] = np.arange(b - a) - ended
    depth += _later_zero_length(t, e <= t, thr)
    if (depth < 0).any():
        return None
    parent = _parent_rows(depth, thr)
    nested = parent >= 0
    p = parent[nested]
    if (nested != (depth > 0)).any() or (e[nested] > e[p]).any() or (t[nested] < t[p]).any():
        return None  # an op outlives its parent (partial overlap): the stack's rules apply
    child = np.zeros(n)
    np.add.at(child, p, d[nested])
    self_us, depth_out = np.empty(n), np.empty(n, dtype=np.int64)
    self_us[order], depth_out[order] = np.maximum(d - child, 0.0), depth
    if not has_flops.any():
        return self_us, depth_out, None
    hf, cov = has_flops[order], np.zeros(n, dtype=bool)
    for level in range(1, int(depth.max()) + 1):  # top-down: a row's parent is one level up
        rows = np.flatnonzero(depth == level)
        cov[rows] = cov[parent[rows]] | hf[parent[rows]]
    covered = np.empty(n, dtype=bool)
    covered[order] = cov
    return self_us, depth_out, covered


def _later_zero_length(t: np.ndarray, zero: np.ndarray, thr: np.ndarray) -> np.ndarray:
    """Per row: the zero-length ops from it on with its thread and start. The sort puts them after
    longer ops of the same start, and the count of ended ops took them in, as if earlier."""
    out = np.zeros(len(t), dtype=np.int64)
    if not zero.any():
        return out
    group = np.r_[True, (thr[1:] != thr[:-1]) | (t[1:] != t[:-1])]  # rows of one (thread, start)
    gid = np.cumsum(group) - 1
    z = zero.astype(np.int64)
    before = np.cumsum(z) - z  # zero-length rows before each row
    in_group_before = before - before[np.flatnonzero(group)][gid]
    return np.bincount(gid, weights=z).astype(np.int64)[gid] - in_group_before


def _parent_rows(depth: np.ndarray, thr: np.ndarray) -> np.ndarray:
    """Per row: the last earlier row of its thread one level up (-1 at the top level)."""
    n = len(depth)
    parent = np.full(n, -1, dtype=np.int64)
    idx = np.arange(n)
    for level in range(1, int(depth.max()) + 1):
        rows, ups = idx[depth == level], idx[depth == level - 1]
        pos = np.searchsorted(ups, rows) - 1
        cand = ups[np.maximum(pos, 0)]
        ok = (pos >= 0) & (thr[cand] == thr[rows])
        parent[rows[ok]] = cand[ok]
    return parent


def _nesting_stack(ts: np.ndarray, dur: np.ndarray, end: np.ndarray, thr_codes: np.ndarray,
                   has_flops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """:func:`nesting` by a stack per thread, for any overlap."""
    n = len(ts)
    thr = thr_codes.tolist()
    ts_l, dur_l, end_l = ts.tolist(), dur.tolist(), end.tolist()
    child = [0.0] * n
    depth = [0] * n
    stacks: dict = {}
    track = bool(has_flops.any())
    if track:
        hf = has_flops.tolist()
        cov = [False] * n
    for i in range(n):
        st = stacks.get(thr[i])
        if st is None:
            st = stacks[thr[i]] = []
        t = ts_l[i]
        while st and end_l[st[-1]] <= t:
            st.pop()
        if st:
            p = st[-1]
            child[p] += dur_l[i]
            depth[i] = len(st)
            if track and (cov[p] or hf[p]):
                cov[i] = True
        st.append(i)
    self_us = np.maximum(dur - np.array(child, dtype=np.float64), 0.0)
    covered = np.array(cov, dtype=bool) if track else None
    return self_us, np.array(depth, dtype=np.int64), covered

