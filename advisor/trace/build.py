"""The frames built from a trace's columns (:mod:`advisor.trace.read`): steps, annotations, operators
(nested, FLOPs estimated), runtime calls, kernels, copies, Python frames and memory events.

:func:`load_trace` reads a file in this process; :class:`advisor.trace.ahead.ReadAhead` hands
:func:`build` the columns a forked reader read. The frames' layout: :mod:`advisor.trace.frames`.
"""

from __future__ import annotations

import gc
import os
from contextlib import contextmanager
from typing import Callable, Iterator, SupportsInt

import numpy as np
import pandas as pd

from . import intervals
from .copy_kinds import copy_sides
from .device_parts import DATALOADER_PREFIX, OPTIMIZER_PREFIX, device_parts, optimizer_ranges
from .flops import op_flops, per_value, refine_conv_flops
from .frames import (ANN_COLS, KERNEL_COLS, MEM_COLS, MEMCPY_COLS, OPS_COLS, PY_COLS, RUNTIME_COLS, STEP_COLS,
                     TraceFrames, empty_frame, build_frame, nullable_int, name_mask)
from .nesting import nesting, thread_codes
from .read import Coded, Columns, TraceError, concat, read_file


# record_function ranges that the 2021 layout files under "Operator".
_RECORD_FUNCTION_PREFIXES = (
    "ProfilerStep#", "enumerate(DataLoader)", "Optimizer.step", "Optimizer.zero_grad", "##",
)
_STEP_PREFIX = "ProfilerStep#"
Assign = Callable[[np.ndarray], np.ndarray]  # start times -> the step each falls in



@contextmanager
def no_gc() -> Iterator[None]:
    """The decoding and the building make a few objects per event; the cyclic GC would rescan
    them over and over. Nothing here creates reference cycles."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_trace(path: str | os.PathLike) -> TraceFrames:
    """Parse a Kineto trace (``.json`` / ``.json.gz``) into :class:`TraceFrames`, in this process.

    Raises :class:`TraceError` with a one-line message when the file is
    missing, not (complete) JSON / gzip, or has no ``traceEvents`` list.
    The file is streamed (see :mod:`advisor.trace.read`): memory grows with the
    columns kept, not with the JSON text.
    """
    src = os.fspath(path)
    with no_gc():
        return build(src, *read_file(src))


def build(src: str, doc: dict, cols: dict, n_events: int) -> TraceFrames:
    """The frames of `src` from its columns (:func:`advisor.trace.read.read_file`'s answer)."""
    with no_gc():
        return _build(src, doc, cols, n_events)


def _build(src: str, doc: dict, cols: dict, n_events: int) -> TraceFrames:
    guard = _Guard(cols)

    # Old layout: record_function ranges are "Operator" events; move them.
    op_cols = cols["ops"]
    rec_cols = None
    if len(op_cols):
        rec = _prefix_mask(op_cols["name"], _RECORD_FUNCTION_PREFIXES)
        if rec.any():
            rec_cols, op_cols = op_cols.take(rec), op_cols.take(~rec)
    annotations = _build_annotations(cols["ann"], rec_cols, guard)

    steps_span = _step_spans(annotations)
    s_ts = steps_span["ts_us"].to_numpy()
    s_end = steps_span["end_us"].to_numpy()
    s_idx = steps_span["index"].to_numpy()

    def assign(ts: np.ndarray) -> np.ndarray:
        return _assign_step(ts, s_ts, s_end, s_idx)

    annotations["step"] = assign(annotations["ts_us"].to_numpy())
    ops = _build_ops(op_cols, assign, guard)
    runtime = _build_runtime(cols["runtime"], assign, guard)
    kernels = _build_kernels(cols["kernels"], assign, runtime, guard)
    memcpy = _build_memcpy(cols["memcpy"], cols["memset"], assign, runtime, guard)
    python = _build_python(cols["python"], assign, guard)
    memory = _build_memory(cols["instant"])
    steps = _build_steps(steps_span, ops, annotations, kernels, memcpy, runtime)

    warnings = []
    if guard.skipped:
        if not any(len(f) for f in (ops, kernels, memcpy, runtime, annotations, python)):
            raise TraceError(f"{src}: no usable events: all {guard.skipped} timed events have negative or absurd "
                             f"times ({guard.why()})")
        events_word = "event" if guard.skipped == 1 else "events"
        warnings.append(f"skipped {guard.skipped} trace {events_word} with negative or absurd times ({guard.why()})")

    if not any(len(f) for f in (ops, kernels, memcpy, runtime, annotations, python)):
        raise TraceError(f"{src}: no usable events: " + (f"none of its {n_events} events is a timed trace event (an op, "
                                                           "a kernel, a step or an annotation)" if n_events else "it has none"))

    starts = [f["ts_us"].min() for f in (ops, kernels, memcpy, runtime, annotations, python) if len(f)]
    ends = [f["end_us"].max() for f in (ops, kernels, memcpy, runtime, annotations, python) if len(f)]
    dist = doc.get("distributedInfo")
    dist = dist if isinstance(dist, dict) else {}
    props = doc.get("deviceProperties")
    meta = {
        "device_properties": props if isinstance(props, list) else [],
        "distributed": dist,
        "rank": _opt_int(dist.get("rank")),
        "world_size": _opt_int(dist.get("world_size")),
        "display_time_unit": doc.get("displayTimeUnit"),
        "base_time_ns": _opt_int(doc.get("baseTimeNanoseconds")),
        "trace_span_us": float(max(ends) - min(starts)) if starts else 0.0,
        "n_events": n_events,
        "has_gpu": bool(len(kernels) or len(memcpy)),
        "source": src,
        "skipped_events": guard.skipped,
        "warnings": warnings,
    }
    return TraceFrames(ops=ops, kernels=kernels, memcpy=memcpy, runtime=runtime,
                       annotations=annotations, python=python, memory=memory,
                       steps=steps, meta=meta)


def _prefix_mask(names: Coded, prefixes: str | tuple[str, ...]) -> np.ndarray:
    """Which names start with `prefixes`, decided once per distinct name."""
    return per_value(names, lambda name: name.startswith(prefixes))[names.codes]


# Buckets of complete ('X') events, the ones with a duration.
_TIMED_BUCKETS = ("ops", "ann", "kernels", "memcpy", "memset", "runtime", "python")
# Longer than any real event, farther than any real event from the rest: one day, in us.
_MAX_PLAUSIBLE_US = 86_400e6


class _Guard:
    """Drops, and counts, the timed events whose times cannot be real (as :func:`_x_base` reads them).

    Null (read as NaN), NaN or infinite times, negative or day-long durations, and starts more than a day away from
    the trace's median start. Kept, such values would become negative shares, 10^12-second
    steps and NaN arithmetic in every later number.
    """

    WORDS = {"nan": "with a null, NaN or infinite time", "negative": "with a negative duration",
             "long": "lasting over a day", "far": "starting over a day away from the rest"}

    def __init__(self, columns: dict) -> None:
        self.counts = dict.fromkeys(self.WORDS, 0)
        sample = [np.zeros(0)]
        for name in _TIMED_BUCKETS:  # a spread-out sample is enough to place the median
            c = columns[name]
            if len(c):
                sample.append(c["ts"][:: max(1, len(c) // 1000)])
        ts = np.concatenate(sample)
        ts = ts[np.isfinite(ts)]
        self.centre = float(np.median(ts)) if len(ts) else 0.0

    def keep(self, ts: np.ndarray, dur: np.ndarray) -> np.ndarray | None:
        """The mask of sane events, or None when all are (the common case, no copy)."""
        with np.errstate(invalid="ignore", over="ignore"):
            nonfinite = ~(np.isfinite(ts) & np.isfinite(dur))
            negative = ~nonfinite & (dur < 0)
            long = ~nonfinite & ~negative & (dur > _MAX_PLAUSIBLE_US)
            far = ~nonfinite & ~negative & ~long & (np.abs(ts - self.centre) > _MAX_PLAUSIBLE_US)
        bad = nonfinite | negative | long | far
        if not bad.any():
            return None
        for key, mask in (("nan", nonfinite), ("negative", negative), ("long", long), ("far", far)):
            self.counts[key] += int(mask.sum())
        return ~bad

    @property
    def skipped(self) -> int:
        return sum(self.counts.values())

    def why(self) -> str:
        return ", ".join(f"{n} {self.WORDS[key]}" for key, n in self.counts.items() if n)


def _x_base(c: Columns | None, guard: _Guard | None = None) -> Columns | None:
    """The usable complete ('X') events of a bucket: malformed ones dropped, impossible ones too (`guard`)."""
    if c is None or not len(c):
        return None
    ok = c["ok"]
    mask = ok.copy()
    if guard is not None:
        sub = guard.keep(c["ts"][ok], c["dur"][ok])
        if sub is not None:
            mask[np.flatnonzero(ok)[~sub]] = False
    if mask.all():
        return c
    return c.take(mask) if mask.any() else None


def _opt_int(v: SupportsInt | str | None) -> int | None:
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------
# Steps and intervals


def _assign_step(ts: np.ndarray, s_ts: np.ndarray, s_end: np.ndarray, s_idx: np.ndarray) -> np.ndarray:
    """Index of the step whose [ts, end) contains each time, else -1 (s_* sorted by ts)."""
    out = np.full(len(ts), -1, dtype=np.int64)
    if len(s_ts) == 0 or len(ts) == 0:
        return out
    pos = np.searchsorted(s_ts, ts, side="right") - 1
    ok = pos >= 0
    p = np.where(ok, pos, 0)
    ok &= ts < s_end[p]
    out[ok] = s_idx[p[ok]]
    return out


def _step_spans(ann: pd.DataFrame) -> pd.DataFrame:
    """CPU ProfilerStep#N ranges, one per N (longest kept), sorted by ts."""
    cols = ["index", "ts_us", "dur_us", "end_us"]
    if ann.empty:
        return pd.DataFrame({c: pd.Series([], dtype=STEP_COLS[c]) for c in cols})
    m = (ann["cat"] == "user_annotation") & ann["name"].str.startswith(_STEP_PREFIX)
    st = ann.loc[m, ["name", "ts_us", "dur_us", "end_us"]]
    idx = pd.to_numeric(st["name"].str.slice(len(_STEP_PREFIX)).str.strip(), errors="coerce")
    st = st.assign(index=idx).dropna(subset=["index"])
    st = st.sort_values(["index", "dur_us"], ascending=[True, False]).drop_duplicates("index")
    st = st.sort_values("ts_us", kind="stable")
    out = pd.DataFrame({
        "index": st["index"].to_numpy(dtype=np.int64),
        "ts_us": st["ts_us"].to_numpy(dtype=np.float64),
        "dur_us": st["dur_us"].to_numpy(dtype=np.float64),
        "end_us": st["end_us"].to_numpy(dtype=np.float64),
    })
    return out


def _build_steps(span: pd.DataFrame, ops: pd.DataFrame, ann: pd.DataFrame, kernels: pd.DataFrame, memcpy: pd.DataFrame,
                 runtime: pd.DataFrame) -> pd.DataFrame:
    if span.empty:
        return empty_frame(STEP_COLS)
    lo = span["ts_us"].to_numpy()
    hi = span["end_us"].to_numpy()

    def coverage(prefix: str) -> np.ndarray:
        parts_s, parts_e = [], []
        for f in (ops, ann):
            if len(f):
                m = name_mask(f["name"], lambda name: name.startswith(prefix))
                if m.any():
                    parts_s.append(f["ts_us"].to_numpy()[m])
                    parts_e.append(f["end_us"].to_numpy()[m])
        if not parts_s:
            return np.zeros(len(lo))
        return intervals.coverage(*intervals.merge(np.concatenate(parts_s), np.concatenate(parts_e)), lo, hi)

    gs = np.concatenate([kernels["ts_us"].to_numpy(), memcpy["ts_us"].to_numpy()])
    ge = np.concatenate([kernels["end_us"].to_numpy(), memcpy["end_us"].to_numpy()])
    gpu = intervals.coverage(*intervals.merge(gs, ge), lo, hi)

    idx = span["index"].to_numpy()
    kstep = kernels["step"].to_numpy()
    kdur = kernels["dur_us"].to_numpy()
    pos = {int(v): i for i, v in enumerate(idx.tolist())}
    kernel_us = np.zeros(len(idx))
    n_k = np.zeros(len(idx), dtype=np.int64)
    if len(kstep):
        ks = pd.Series(kdur).groupby(kstep).agg(["sum", "count"])
        for s, row_sum, row_cnt in zip(ks.index.tolist(), ks["sum"].tolist(), ks["count"].tolist()):
            i = pos.get(int(s))
            if i is not None:
                kernel_us[i] = row_sum
                n_k[i] = row_cnt

    dev_start, dev_end = _device_spans(idx, lo, hi, kernels, memcpy)
    if len(kernels) or len(memcpy):
        dev_wait, dev_opt = device_parts(dev_start, dev_end, kernels, memcpy, runtime, ann, optimizer_ranges(ann, ops))
    else:
        dev_wait = dev_opt = np.full(len(idx), np.nan)
    out = pd.DataFrame({
        "index": idx.astype(np.int64),
        "ts_us": lo, "dur_us": span["dur_us"].to_numpy(), "end_us": hi,
        "data_wait_us": coverage(DATALOADER_PREFIX),
        "optimizer_us": coverage(OPTIMIZER_PREFIX),
        "gpu_busy_us": gpu,
        "kernel_us": kernel_us,
        "n_kernels": n_k,
        "device_dur_us": np.maximum(dev_end - dev_start, 0.0),
        "device_data_wait_us": dev_wait,
        "device_optimizer_us": dev_opt,
    })
    return out.sort_values("index", kind="stable").reset_index(drop=True)


def _device_spans(idx: np.ndarray, lo: np.ndarray, hi: np.ndarray, kernels: pd.DataFrame,
                  memcpy: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each step's (start, end) re-anchored to the device: a ProfilerStep span ends when Python
    moves on, the step when the last kernel (or copy) it launched ends (as the profiler's
    TensorBoard plugin reads it). A step ends at the later of the two and starts where the one
    before it ended; the first starts at its span's start. Without device work this is the span
    itself."""
    end = hi.astype(np.float64).copy()
    for frame in (kernels, memcpy):
        if len(frame):
            last = frame[frame["step"] >= 0].groupby("step")["end_us"].max()
            pos = {int(v): i for i, v in enumerate(idx.tolist())}
            for s, e in zip(last.index.tolist(), last.tolist()):
                i = pos.get(int(s))
                if i is not None:
                    end[i] = max(end[i], e)
    order = np.argsort(lo, kind="stable")
    start = lo.astype(np.float64).copy()
    start[order[1:]] = np.maximum(lo[order[1:]], end[order[:-1]])
    return start, end


# --------------------------------------------------------------------------
# Frame builders


def _ts_order(ts: np.ndarray, dur: np.ndarray | None = None) -> np.ndarray:
    if dur is None:
        return np.argsort(ts, kind="stable")
    return np.lexsort((-dur, ts))


def _build_annotations(ann: Columns, rec: Columns | None, guard: _Guard | None = None) -> pd.DataFrame:
    if rec is not None:  # old-layout record_function ranges join the annotations, as user_annotation
        keys = ("name", "ts", "dur", "ok", "pid", "tid")
        if len(ann):
            ann = Columns({k: concat([ann[k], rec[k]]) for k in keys}
                          | {"gpu": np.concatenate([ann["gpu"], np.zeros(len(rec), dtype=bool)])})
        else:
            ann = Columns({k: rec[k] for k in keys} | {"gpu": np.zeros(len(rec), dtype=bool)})
    c = _x_base(ann, guard)
    if c is None:
        return empty_frame(ANN_COLS)
    ts, dur = c["ts"], c["dur"]
    cols = {
        "name": c["name"], "cat": np.where(c["gpu"], "gpu_user_annotation", "user_annotation").astype(object),
        "ts_us": ts, "dur_us": dur, "end_us": ts + dur, "pid": c["pid"], "tid": c["tid"],
        "step": np.full(len(ts), -1, dtype=np.int64),
    }
    return build_frame(cols, ANN_COLS, _ts_order(ts))


def _build_runtime(c: Columns, assign: Assign, guard: _Guard | None = None) -> pd.DataFrame:
    return _build_host_events(c, assign, RUNTIME_COLS, with_correlation=True, guard=guard)


def _gpu_step(ts: np.ndarray, corr: pd.arrays.IntegerArray, runtime: pd.DataFrame, assign: Assign) -> np.ndarray:
    """Step of the launching runtime call (via correlation), else by start time."""
    by_time = assign(ts)
    if runtime.empty or len(ts) == 0:
        return by_time
    rc = runtime["correlation"].array
    rvalid = ~np.asarray(rc.isna())
    if not rvalid.any():
        return by_time
    rcv = np.asarray(rc.to_numpy(dtype=np.int64, na_value=0))[rvalid]
    rst = runtime["step"].to_numpy()[rvalid]
    o = np.argsort(rcv, kind="stable")
    rcv, rst = rcv[o], rst[o]
    kvalid = ~np.asarray(corr.isna())
    kc = np.asarray(corr.to_numpy(dtype=np.int64, na_value=0))
    pos = np.clip(np.searchsorted(rcv, kc), 0, len(rcv) - 1)
    found = kvalid & (rcv[pos] == kc)
    return np.where(found, rst[pos], by_time)


def _build_kernels(c: Columns | None, assign: Assign, runtime: pd.DataFrame, guard: _Guard | None = None) -> pd.DataFrame:
    c = _x_base(c, guard)
    if c is None:
        return empty_frame(KERNEL_COLS)
    ts, dur = c["ts"], c["dur"]
    corr = nullable_int((c["correlation"], c["correlation_na"]))
    cols = {
        "name": c["name"], "ts_us": ts, "dur_us": dur, "end_us": ts + dur,
        "device": c["device"], "stream": c["stream"], "correlation": corr,
        "step": _gpu_step(ts, corr, runtime, assign),
        "grid": c["grid"], "block": c["block"], "registers_per_thread": c["registers"],
    }
    return build_frame(cols, KERNEL_COLS, _ts_order(ts))


_MEMCPY_KEYS = ("name", "ts", "dur", "ok", "pid", "tid", "device", "stream", "kind", "bytes")


def _build_memcpy(cp: Columns, st: Columns, assign: Assign, runtime: pd.DataFrame,
                  guard: _Guard | None = None) -> pd.DataFrame:
    parts = []
    for cols_in, is_set in ((cp, False), (st, True)):
        c = _x_base(cols_in, guard)
        if c is not None:
            parts.append((c, is_set))
    if not parts:
        return empty_frame(MEMCPY_COLS)
    kinds, srcs, dsts = copy_sides((c["name"].tolist(), c["kind"], is_set) for c, is_set in parts)
    cat = {k: concat([c[k] for c, _ in parts]) for k in _MEMCPY_KEYS}
    corr = nullable_int((np.concatenate([c["correlation"] for c, _ in parts]),
                          np.concatenate([c["correlation_na"] for c, _ in parts])))
    ts, dur = cat["ts"], cat["dur"]
    cols = {
        "name": cat["name"], "kind": kinds, "src": srcs, "dst": dsts, "bytes": cat["bytes"],
        "ts_us": ts, "dur_us": dur, "end_us": ts + dur, "device": cat["device"], "stream": cat["stream"],
        "correlation": corr, "step": _gpu_step(ts, corr, runtime, assign),
    }
    return build_frame(cols, MEMCPY_COLS, _ts_order(ts))


def _build_python(c: Columns, assign: Assign, guard: _Guard | None = None) -> pd.DataFrame:
    return _build_host_events(c, assign, PY_COLS, with_correlation=False, guard=guard)


def _build_host_events(c: Columns | None, assign: Assign, schema: dict, *, with_correlation: bool,
                       guard: _Guard | None = None) -> pd.DataFrame:
    """Complete events on a host thread (runtime calls, python frames): name, times, pid/tid, step."""
    c = _x_base(c, guard)
    if c is None:
        return empty_frame(schema)
    ts, dur = c["ts"], c["dur"]
    cols = {
        "name": c["name"], "ts_us": ts, "dur_us": dur, "end_us": ts + dur,
        "pid": c["pid"], "tid": c["tid"], "step": assign(ts),
    }
    if with_correlation:
        cols["correlation"] = nullable_int((c["correlation"], c["correlation_na"]))
    return build_frame(cols, schema, _ts_order(ts))


def _build_memory(c: Columns) -> pd.DataFrame:
    if not len(c):
        return empty_frame(MEM_COLS)
    ok = ~np.isnan(c["ts"])
    if not ok.all():
        c = c.take(ok)
        if not len(c):
            return empty_frame(MEM_COLS)
    cols = {
        "ts_us": c["ts"], "bytes": c["bytes"], "total_allocated": c["total_allocated"],
        "total_reserved": c["total_reserved"], "device_type": c["device_type"], "device_id": c["device_id"],
    }
    return build_frame(cols, MEM_COLS, _ts_order(c["ts"]))


def _build_ops(c: Columns | None, assign: Assign, guard: _Guard | None = None) -> pd.DataFrame:
    c = _x_base(c, guard)
    if c is None:
        return empty_frame(OPS_COLS)
    names, ts, dur = c["name"], c["ts"], c["dur"]
    n = len(ts)
    pid, tid = c["pid"], c["tid"]
    dims = c["input_dims"]
    flops, guessed = op_flops(names, c["flops"], c["concrete"], dims)

    order = _ts_order(ts, dur)
    ts_o, dur_o = ts[order], dur[order]
    end_o = ts_o + dur_o
    pid_o, tid_o = pid[order], tid[order]
    thr = thread_codes(pid_o, tid_o)
    names_o, dims_o = names.take(order), dims.take(order)
    flops_o = flops[order]
    if guessed:
        inv = np.empty(n, dtype=np.int64)
        inv[order] = np.arange(n)
        refine_conv_flops(flops_o, [int(inv[i]) for i in guessed], names_o, dims_o,
                           ts_o.tolist(), end_o.tolist(), thr.tolist())
    self_o, depth_o, covered = nesting(ts_o, dur_o, end_o, thr, ~np.isnan(flops_o))
    if covered is not None:
        flops_o[covered] = np.nan

    ext_vals, ext_mask = c["external_id"], c["external_id_na"]
    cols = {
        "name": names_o, "ts_us": ts_o, "dur_us": dur_o, "end_us": end_o,
        "self_us": self_o, "depth": depth_o, "pid": pid_o, "tid": tid_o,
        "external_id": nullable_int((ext_vals[order], ext_mask[order])),
        "input_dims": dims_o, "input_types": c["input_types"].take(order),
        "flops": flops_o, "step": assign(ts_o),
    }
    return build_frame(cols, OPS_COLS)


