"""Load a PyTorch profiler (Kineto) Chrome trace into pandas DataFrames.

``load_trace(path)`` reads a ``.json`` or ``.json.gz`` file written by
``torch.profiler`` (any Kineto version seen in the wild: the 2021 layout with
categories ``Operator``/``Runtime``/``Kernel``/``Memcpy``/``Memset`` and the
current one with ``cpu_op``/``cuda_runtime``/``cuda_driver``/``kernel``/
``gpu_memcpy``/``gpu_memset``/``user_annotation``/``gpu_user_annotation``/
``python_function``/``cpu_instant_event``; CUDA and ROCm/HIP naming) and
returns a :class:`TraceFrames`.  The events are walked once in Python and
bucketed by category; every frame is then built once from column arrays.

All times are **microseconds** on the trace's own clock (Kineto writes ``ts``
and ``dur`` in us whatever ``displayTimeUnit`` says; that key only affects how
viewers print numbers), in columns suffixed ``_us``.  ``step`` columns hold the
``N`` of the CPU ``ProfilerStep#N`` range that contains the event (-1: none).
Every frame always has all of its columns, even when empty.  Frames are sorted
by ``ts_us`` (``ops`` by ``ts_us`` then longest first, so parents precede
children) with a fresh ``RangeIndex``.  Not loaded: flow events (``ac2g``,
``fwdbwd``, ``async``), ``cuda_sync`` (GPU-side sync spans), the ``Trace``
span and instant events other than ``[memory]``.  ``TraceFrames.empty()``
gives the same frames with no rows, for runs without a trace.

ops -- CPU operators (cat ``cpu_op`` / ``Operator``).  ``record_function``
ranges are not operators: in old traces, ``Operator`` events named
``ProfilerStep#``, ``enumerate(DataLoader)``, ``Optimizer.step#``,
``Optimizer.zero_grad#`` or ``## ...`` are moved to ``annotations``.

    name (str), ts_us, dur_us, end_us (float, us),
    self_us (float, us): dur minus the durations of direct child ops on the
        same pid/tid (clipped at 0),
    depth (int): nesting level among ops on its thread, 0 = top level,
    pid, tid (int), external_id (Int64, args "External id"; links kernels),
    input_dims, input_types (object: list from args "Input Dims" /
        "Input type", or None when shapes were not recorded),
    flops (float): args "flops" when the profiler wrote it (with_flops=True),
        else estimated for GEMMs and convolutions (see below); NaN otherwise,
    step (int).

    FLOP estimates (multiply-add = 2 FLOPs):
      aten::mm [M,K]x[K,N] and aten::addmm (bias ignored): 2*M*N*K;
      aten::bmm / aten::baddbmm [B,M,K]x[B,K,N]: 2*B*M*N*K;
      aten::conv{1,2,3}d, aten::convolution, aten::_convolution,
      aten::cudnn_convolution, aten::miopen_convolution,
      aten::mkldnn_convolution: 2 * N * Cout * prod(out spatial) *
      (Cin/groups) * prod(kernel) (= 2 * N * prod(out spatial) * prod(weight
      dims)); the output size comes from stride/padding/dilation in args
      "Concrete Inputs" (torch >= 2.0).  Older traces lack those: the output
      shape is then read from the first op that starts after the conv on the
      same thread and takes an [N, Cout, ...] tensor (normally the following
      batch_norm/relu; the search stops at the next conv); failing that it is *approximated as equal to the
      input's* ('same' padding, stride 1), which overestimates strided convs
      (4x for stride 2).  Transposed convs use the input spatial size.
      aten::convolution_backward / aten::cudnn_convolution_backward: the
      forward cost once per requested gradient (input, weight; output_mask
      from "Concrete Inputs", both assumed when unknown).
    No FLOPs are attributed to aten::matmul / aten::linear: they always
    decompose into mm/addmm/bmm children in the profile, which carry them.
    More generally an op whose ancestor op already carries FLOPs gets NaN
    (e.g. aten::convolution under aten::conv2d), so ``ops.flops.sum()`` counts
    each GEMM/conv once.

kernels -- GPU kernels (cat ``kernel`` / ``Kernel``).

    name (str), ts_us, dur_us, end_us (float, us), device, stream (int, -1 if
    unknown), correlation (Int64; matches the launching ``runtime`` row),
    step (int: the step of the launching runtime call when the correlation
    matches one, because a kernel belongs to the step that launched it even
    if it runs later; else the step containing the kernel's start),
    grid, block (object: [x, y, z] list or None),
    registers_per_thread (float, NaN if absent).

memcpy -- GPU copies *and* memsets (cats ``gpu_memcpy``/``Memcpy``/
``gpu_memset``/``Memset``).

    name (str), kind (str: "HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "Memset",
    "other"), src, dst (str: "Pageable", "Pinned", "Device", "Managed", or ""
    when unknown; "Host" in ROCm names is "" because it does not say
    pageable/pinned), bytes (float, NaN if absent), ts_us, dur_us, end_us
    (float, us), device, stream (int), correlation (Int64), step (int, as for
    kernels).

runtime -- CUDA/HIP runtime and driver API calls on CPU threads (cats
``cuda_runtime`` / ``Runtime`` / ``cuda_driver``: cudaLaunchKernel,
cudaMemcpyAsync, cudaStreamSynchronize, cuLaunchKernel, hipLaunchKernel, ...).

    name (str), ts_us, dur_us, end_us (float, us), pid, tid (int),
    correlation (Int64), step (int, by start time).

annotations -- ``record_function`` ranges (cats ``user_annotation`` and
``gpu_user_annotation``; old-layout ranges get cat ``user_annotation``):
ProfilerStep#N, enumerate(DataLoader)#..., Optimizer.step#..., custom ranges.

    name (str), cat (str), ts_us, dur_us, end_us (float, us), pid, tid (int),
    step (int, by start time).

python -- ``python_function`` events (with_stack=True); may be empty.

    name (str), ts_us, dur_us, end_us (float, us), pid, tid (int), step (int).

memory -- ``[memory]`` instant events (profile_memory=True); may be empty.

    ts_us (float, us), bytes (float: allocation size, negative = free),
    total_allocated, total_reserved (float bytes, NaN in old traces),
    device_type (int: 0 = CPU, 1 = CUDA), device_id (int, -1 = CPU).

steps -- one row per CPU ``ProfilerStep#N`` annotation (GPU copies ignored;
a duplicated N keeps the longer range), sorted by index.

    index (int N), ts_us, dur_us, end_us (float, us),
    data_wait_us (float, us): union of ``enumerate(DataLoader)*`` ranges
        (ops or annotations) inside the step,
    optimizer_us (float, us): union of ``Optimizer.step*`` ranges inside it,
    gpu_busy_us (float, us): union of kernel/memcpy/memset intervals of all
        devices clipped to the step span (0 without GPU),
    kernel_us (float, us): sum of durations of kernels assigned to the step,
    n_kernels (int).

meta -- dict: device_properties (list of dicts), distributed (dict),
rank, world_size (int or None), display_time_unit (str or None),
base_time_ns (int or None), trace_span_us (float: last end minus first start
over ops/kernels/memcpy/runtime/annotations/python, 0 if none), n_events (int,
length of traceEvents), has_gpu (bool: any kernel, memcpy or memset),
source (str path), skipped_events (int), warnings (list of str: what was
wrong with the input, one line each).

Events whose times cannot be real are skipped, counted in ``skipped_events``
and described in ``warnings``: a negative, infinite/NaN or longer-than-a-day
duration, or a timestamp more than a day away from the median of the trace's
events (one day is far above any real trace, whose longest event is seconds to
minutes; a 1e12-second event is a broken clock or a hand-edited file).  A
trace in which every timed event is skipped raises :class:`TraceError`.
"""

from __future__ import annotations

import gc
import math
import os
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import intervals
from .intervals import union_length as interval_union_us  # public name kept: union of intervals in us
from .trace_prefetch import read_trace
from .trace_read import Coded, Columns, TraceError, concat

__all__ = ["TraceFrames", "TraceError", "load_trace", "interval_union_us"]


@dataclass
class TraceFrames:
    """All frames from one trace; times in microseconds on the trace's own clock."""

    ops: pd.DataFrame
    kernels: pd.DataFrame
    memcpy: pd.DataFrame
    runtime: pd.DataFrame
    annotations: pd.DataFrame
    python: pd.DataFrame
    memory: pd.DataFrame
    steps: pd.DataFrame
    meta: dict = field(default_factory=dict)

    @classmethod
    def empty(cls, source: str = "") -> "TraceFrames":
        """All frames with their full columns and no rows: stands in for a run without a trace."""
        return cls(
            ops=_empty(_OPS_COLS), kernels=_empty(_KERNEL_COLS), memcpy=_empty(_MEMCPY_COLS),
            runtime=_empty(_RUNTIME_COLS), annotations=_empty(_ANN_COLS), python=_empty(_PY_COLS),
            memory=_empty(_MEM_COLS), steps=_empty(_STEP_COLS),
            meta={"device_properties": [], "distributed": {}, "rank": None, "world_size": None,
                  "display_time_unit": None, "base_time_ns": None, "trace_span_us": 0.0,
                  "n_events": 0, "has_gpu": False, "source": source, "skipped_events": 0, "warnings": []},
        )


# --------------------------------------------------------------------------
# Frame schemas (column -> dtype) so that empty frames look like full ones.

_STR = "str"
_OPS_COLS = {
    "name": "category", "ts_us": "float64", "dur_us": "float64", "end_us": "float64",
    "self_us": "float64", "depth": "int64", "pid": "int64", "tid": "int64",
    "external_id": "Int64", "input_dims": "object", "input_types": "object",
    "flops": "float64", "step": "int64",
}
_KERNEL_COLS = {
    "name": "category", "ts_us": "float64", "dur_us": "float64", "end_us": "float64",
    "device": "int64", "stream": "int64", "correlation": "Int64", "step": "int64",
    "grid": "object", "block": "object", "registers_per_thread": "float64",
}
_MEMCPY_COLS = {
    "name": "category", "kind": _STR, "src": _STR, "dst": _STR, "bytes": "float64",
    "ts_us": "float64", "dur_us": "float64", "end_us": "float64",
    "device": "int64", "stream": "int64", "correlation": "Int64", "step": "int64",
}
_RUNTIME_COLS = {
    "name": "category", "ts_us": "float64", "dur_us": "float64", "end_us": "float64",
    "pid": "int64", "tid": "int64", "correlation": "Int64", "step": "int64",
}
_ANN_COLS = {
    "name": "category", "cat": "category", "ts_us": "float64", "dur_us": "float64",
    "end_us": "float64", "pid": "int64", "tid": "int64", "step": "int64",
}
_PY_COLS = {
    "name": "category", "ts_us": "float64", "dur_us": "float64", "end_us": "float64",
    "pid": "int64", "tid": "int64", "step": "int64",
}
_MEM_COLS = {
    "ts_us": "float64", "bytes": "float64", "total_allocated": "float64",
    "total_reserved": "float64", "device_type": "int64", "device_id": "int64",
}
_STEP_COLS = {
    "index": "int64", "ts_us": "float64", "dur_us": "float64", "end_us": "float64",
    "data_wait_us": "float64", "optimizer_us": "float64", "gpu_busy_us": "float64",
    "kernel_us": "float64", "n_kernels": "int64",
}

# record_function ranges that the 2021 layout files under "Operator".
_RECORD_FUNCTION_PREFIXES = (
    "ProfilerStep#", "enumerate(DataLoader)", "Optimizer.step", "Optimizer.zero_grad", "##",
)
_DATALOADER_PREFIX = "enumerate(DataLoader)"
_OPTIMIZER_PREFIX = "Optimizer.step"
_STEP_PREFIX = "ProfilerStep#"


# --------------------------------------------------------------------------
# Public helpers


def load_trace(path: str | os.PathLike) -> TraceFrames:
    """Parse a Kineto trace (``.json`` / ``.json.gz``) into :class:`TraceFrames`.

    Raises :class:`TraceError` with a one-line message when the file is
    missing, not (complete) JSON / gzip, or has no ``traceEvents`` list.
    The file is streamed (see :mod:`advisor.trace_read`): memory grows with the
    columns kept, not with the JSON text.
    """
    src = os.fspath(path)
    # The decoding makes a few objects per event; the cyclic GC would rescan them
    # over and over.  Nothing here creates reference cycles.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _load(src)
    finally:
        if gc_was_enabled:
            gc.enable()


def _load(src: str) -> TraceFrames:
    doc, cols, n_events = read_trace(src)
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

    def assign(ts):
        return _assign_step(ts, s_ts, s_end, s_idx)

    annotations["step"] = assign(annotations["ts_us"].to_numpy())
    ops = _build_ops(op_cols, assign, guard)
    runtime = _build_runtime(cols["runtime"], assign, guard)
    kernels = _build_kernels(cols["kernels"], assign, runtime, guard)
    memcpy = _build_memcpy(cols["memcpy"], cols["memset"], assign, runtime, guard)
    python = _build_python(cols["python"], assign, guard)
    memory = _build_memory(cols["instant"])
    steps = _build_steps(steps_span, ops, annotations, kernels, memcpy)

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


def _prefix_mask(names: Coded, prefixes) -> np.ndarray:
    """Which names start with `prefixes`, decided once per distinct name."""
    return _per_value(names, lambda name: name.startswith(prefixes))[names.codes]


def _per_value(column: Coded, test) -> np.ndarray:
    """`test` of each of the column's table's values, by code."""
    values = column.table.values
    return np.fromiter(map(test, values), dtype=bool, count=len(values))


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

    def __init__(self, columns: dict):
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


def _nullable_int(pair: tuple) -> pd.arrays.IntegerArray:
    vals, mask = pair
    return pd.arrays.IntegerArray(np.asarray(vals, dtype=np.int64), np.asarray(mask, dtype=bool))


def _frame(cols: dict, schema: dict, order: np.ndarray | None = None) -> pd.DataFrame:
    """Build a frame with exactly the schema's columns, optionally reordered."""
    data = {}
    for c, dt in schema.items():
        v = cols.get(c)
        if v is None:
            data[c] = pd.Series([], dtype=dt)
            continue
        if order is not None:
            if isinstance(v, Coded):
                v = v.take(order)
            elif isinstance(v, list):
                v = [v[i] for i in order.tolist()]
            else:
                v = v[order]
        if isinstance(v, Coded):
            s = _categorical(v) if dt == "category" else pd.Series(_objects(v), dtype=object)
        elif dt == "object":
            s = pd.Series(v, dtype=object) if len(v) else pd.Series([], dtype=object)
        elif dt == _STR:
            s = pd.Series(v, dtype=_STR) if len(v) else pd.Series([], dtype=_STR)
        else:
            s = pd.Series(v, dtype=dt)
        data[c] = s.reset_index(drop=True) if order is not None else s
    return pd.DataFrame(data)


def _categorical(column: Coded) -> pd.Series:
    """The column as pandas would infer it from its values: categories the distinct values present, sorted."""
    codes, values = column.codes, column.table.values
    present = np.flatnonzero(np.bincount(codes, minlength=len(values)))
    categories = sorted(values[i] for i in present.tolist())
    position = {value: i for i, value in enumerate(categories)}
    recode = np.full(len(values), -1, dtype=codes.dtype)
    recode[present] = [position[values[i]] for i in present.tolist()]
    return pd.Series(pd.Categorical.from_codes(recode[codes], categories=categories))


def _objects(column: Coded) -> np.ndarray:
    """The column's values (shared objects: one per distinct value) in an object array."""
    table = np.empty(len(column.table.values), dtype=object)
    for i, value in enumerate(column.table.values):  # one by one: a list value must stay one element
        table[i] = value
    return table[column.codes]


def _empty(schema: dict) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=dt) for c, dt in schema.items()})


def _opt_int(v):
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
        return pd.DataFrame({c: pd.Series([], dtype=_STEP_COLS[c]) for c in cols})
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


def name_mask(names: pd.Series, test) -> np.ndarray:
    """``test(name)`` for each row, decided once per distinct name (see :func:`per_name`)."""
    return per_name(names, lambda name: bool(test(name)), bool, False)


def per_name(names: pd.Series, value_of, dtype, missing) -> np.ndarray:
    """``value_of(name)`` for each row, worked out once per distinct name: a frame's categories
    (names repeat thousands of times), else the distinct values. A missing or non-text name gets
    `missing`."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        codes, distinct = names.cat.codes.to_numpy(), names.cat.categories
    else:
        codes, distinct = pd.factorize(names.to_numpy(dtype=object))
    per = np.fromiter((value_of(n) if isinstance(n, str) else missing for n in distinct), dtype, len(distinct))
    return np.append(per, np.array(missing, dtype=dtype))[codes]  # code -1 (missing) reads the last slot


def _build_steps(span, ops, ann, kernels, memcpy) -> pd.DataFrame:
    if span.empty:
        return _empty(_STEP_COLS)
    lo = span["ts_us"].to_numpy()
    hi = span["end_us"].to_numpy()

    def coverage(prefix):
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

    out = pd.DataFrame({
        "index": idx.astype(np.int64),
        "ts_us": lo, "dur_us": span["dur_us"].to_numpy(), "end_us": hi,
        "data_wait_us": coverage(_DATALOADER_PREFIX),
        "optimizer_us": coverage(_OPTIMIZER_PREFIX),
        "gpu_busy_us": gpu,
        "kernel_us": kernel_us,
        "n_kernels": n_k,
    })
    return out.sort_values("index", kind="stable").reset_index(drop=True)


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
        return _empty(_ANN_COLS)
    ts, dur = c["ts"], c["dur"]
    cols = {
        "name": c["name"], "cat": np.where(c["gpu"], "gpu_user_annotation", "user_annotation").astype(object),
        "ts_us": ts, "dur_us": dur, "end_us": ts + dur, "pid": c["pid"], "tid": c["tid"],
        "step": np.full(len(ts), -1, dtype=np.int64),
    }
    return _frame(cols, _ANN_COLS, _ts_order(ts))


def _build_runtime(c: Columns, assign, guard: _Guard | None = None) -> pd.DataFrame:
    return _build_host_events(c, assign, _RUNTIME_COLS, with_correlation=True, guard=guard)


def _gpu_step(ts: np.ndarray, corr: pd.arrays.IntegerArray, runtime: pd.DataFrame, assign) -> np.ndarray:
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


def _build_kernels(c: Columns, assign, runtime: pd.DataFrame, guard: _Guard | None = None) -> pd.DataFrame:
    c = _x_base(c, guard)
    if c is None:
        return _empty(_KERNEL_COLS)
    ts, dur = c["ts"], c["dur"]
    corr = _nullable_int((c["correlation"], c["correlation_na"]))
    cols = {
        "name": c["name"], "ts_us": ts, "dur_us": dur, "end_us": ts + dur,
        "device": c["device"], "stream": c["stream"], "correlation": corr,
        "step": _gpu_step(ts, corr, runtime, assign),
        "grid": c["grid"], "block": c["block"], "registers_per_thread": c["registers"],
    }
    return _frame(cols, _KERNEL_COLS, _ts_order(ts))


_MEM_RE = re.compile(r"^\s*Mem(?:cpy|set)\s*([A-Za-z]+)?\s*(?:\(\s*([A-Za-z]+)\s*(?:->\s*([A-Za-z]+)\s*)?\))?")
_COPY_KINDS = {"HtoD", "DtoH", "DtoD", "HtoH", "PtoP"}
_MEM_SIDES = {"Pageable", "Pinned", "Device", "Managed"}


def _parse_mem_name(name: str, is_memset: bool, args_kind):
    """'Memcpy HtoD (Pageable -> Device)' -> ('HtoD', 'Pageable', 'Device')."""
    m = _MEM_RE.match(name)
    tok = a = b = None
    if m:
        tok, a, b = m.groups()
    if is_memset:
        # 'Memset (Device)': the single side is the destination.
        dst = a if a in _MEM_SIDES else ""
        return "Memset", "", dst
    kind = tok if tok in _COPY_KINDS else (args_kind if args_kind in _COPY_KINDS else "other")
    src = a if a in _MEM_SIDES else ""
    dst = b if b in _MEM_SIDES else ""
    return kind, src, dst


_MEMCPY_KEYS = ("name", "ts", "dur", "ok", "pid", "tid", "device", "stream", "kind", "bytes")


def _build_memcpy(cp: Columns, st: Columns, assign, runtime: pd.DataFrame,
                  guard: _Guard | None = None) -> pd.DataFrame:
    parts = []
    for cols_in, is_set in ((cp, False), (st, True)):
        c = _x_base(cols_in, guard)
        if c is not None:
            parts.append((c, is_set))
    if not parts:
        return _empty(_MEMCPY_COLS)
    cache: dict = {}
    kinds, srcs, dsts = [], [], []
    for c, s in parts:
        for name, k in zip(c["name"].tolist(), c["kind"]):
            key = (name, s, k)
            r = cache.get(key)
            if r is None:
                r = cache[key] = _parse_mem_name(name, s, k)
            kinds.append(r[0])
            srcs.append(r[1])
            dsts.append(r[2])
    cat = {k: concat([c[k] for c, _ in parts]) for k in _MEMCPY_KEYS}
    corr = _nullable_int((np.concatenate([c["correlation"] for c, _ in parts]),
                          np.concatenate([c["correlation_na"] for c, _ in parts])))
    ts, dur = cat["ts"], cat["dur"]
    cols = {
        "name": cat["name"], "kind": kinds, "src": srcs, "dst": dsts, "bytes": cat["bytes"],
        "ts_us": ts, "dur_us": dur, "end_us": ts + dur, "device": cat["device"], "stream": cat["stream"],
        "correlation": corr, "step": _gpu_step(ts, corr, runtime, assign),
    }
    return _frame(cols, _MEMCPY_COLS, _ts_order(ts))


def _build_python(c: Columns, assign, guard: _Guard | None = None) -> pd.DataFrame:
    return _build_host_events(c, assign, _PY_COLS, with_correlation=False, guard=guard)


def _build_host_events(c: Columns, assign, schema: dict, *, with_correlation: bool,
                       guard: _Guard | None = None) -> pd.DataFrame:
    """Complete events on a host thread (runtime calls, python frames): name, times, pid/tid, step."""
    c = _x_base(c, guard)
    if c is None:
        return _empty(schema)
    ts, dur = c["ts"], c["dur"]
    cols = {
        "name": c["name"], "ts_us": ts, "dur_us": dur, "end_us": ts + dur,
        "pid": c["pid"], "tid": c["tid"], "step": assign(ts),
    }
    if with_correlation:
        cols["correlation"] = _nullable_int((c["correlation"], c["correlation_na"]))
    return _frame(cols, schema, _ts_order(ts))


def _build_memory(c: Columns) -> pd.DataFrame:
    if not len(c):
        return _empty(_MEM_COLS)
    ok = ~np.isnan(c["ts"])
    if not ok.all():
        c = c.take(ok)
        if not len(c):
            return _empty(_MEM_COLS)
    cols = {
        "ts_us": c["ts"], "bytes": c["bytes"], "total_allocated": c["total_allocated"],
        "total_reserved": c["total_reserved"], "device_type": c["device_type"], "device_id": c["device_id"],
    }
    return _frame(cols, _MEM_COLS, _ts_order(c["ts"]))


def _build_ops(c: Columns, assign, guard: _Guard | None = None) -> pd.DataFrame:
    c = _x_base(c, guard)
    if c is None:
        return _empty(_OPS_COLS)
    names, ts, dur = c["name"], c["ts"], c["dur"]
    n = len(ts)
    pid, tid = c["pid"], c["tid"]
    dims = c["input_dims"]
    flops, guessed = _op_flops(names, c["flops"], c["concrete"], dims)

    order = _ts_order(ts, dur)
    ts_o, dur_o = ts[order], dur[order]
    end_o = ts_o + dur_o
    pid_o, tid_o = pid[order], tid[order]
    thr = _thread_codes(pid_o, tid_o)
    names_o, dims_o = names.take(order), dims.take(order)
    flops_o = flops[order]
    if guessed:
        inv = np.empty(n, dtype=np.int64)
        inv[order] = np.arange(n)
        _refine_conv_flops(flops_o, [int(inv[i]) for i in guessed], names_o, dims_o,
                           ts_o.tolist(), end_o.tolist(), thr.tolist())
    self_o, depth_o, covered = _nesting(ts_o, dur_o, end_o, thr, ~np.isnan(flops_o))
    if covered is not None:
        flops_o[covered] = np.nan

    ext_vals, ext_mask = c["external_id"], c["external_id_na"]
    cols = {
        "name": names_o, "ts_us": ts_o, "dur_us": dur_o, "end_us": end_o,
        "self_us": self_o, "depth": depth_o, "pid": pid_o, "tid": tid_o,
        "external_id": _nullable_int((ext_vals[order], ext_mask[order])),
        "input_dims": dims_o, "input_types": c["input_types"].take(order),
        "flops": flops_o, "step": assign(ts_o),
    }
    return _frame(cols, _OPS_COLS)


def _thread_codes(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
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


def _refine_conv_flops(flops, positions, names, dims, ts, end, thr, look_ahead: int = 32) -> None:
    """Old traces have no stride/padding: read the conv's output shape from its consumer.

    Among the next few ops that start after the conv ends on the same thread,
    the first one whose first input is [N, Cout, *spatial] (normally the
    following batch_norm / relu) gives the output size; the search stops at
    the next convolution.  When nothing matches the 'same'-size guess stays.
    """
    n = len(ts)
    for j in positions:
        x, w = dims[j][0], dims[j][1]
        rank = len(x)
        e = end[j]
        t = thr[j]
        for k in range(j + 1, min(n, j + look_ahead)):
            if thr[k] != t or ts[k] < e:
                continue
            if names[k] in _CONV_OPS:
                break
            d = dims[k]
            y = d[0] if isinstance(d, list) and d else None
            if (isinstance(y, list) and len(y) == rank and y[0] == x[0] and y[1] == w[0]
                    and all(isinstance(v, int) and 0 < v <= xi for v, xi in zip(y[2:], x[2:]))):
                flops[j] = 2.0 * x[0] * math.prod(y[2:]) * math.prod(w)
                break


def _nesting(ts, dur, end, thr_codes, has_flops):
    """Self time and depth per op with one stack per thread (ops sorted by ts, longest first).

    Also returns which ops sit under an ancestor that carries FLOPs (None if no
    op has FLOPs), so that FLOPs are counted only at the outermost op.
    """
    fast = _nesting_nested(ts, dur, end, thr_codes, has_flops)
    return fast if fast is not None else _nesting_stack(ts, dur, end, thr_codes, has_flops)


def _nesting_nested(ts, dur, end, thr_codes, has_flops):
    """:func:`_nesting` in array operations, where every op lies inside its parent (Kineto's ops
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


def _later_zero_length(t, zero, thr):
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


def _parent_rows(depth, thr):
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


def _nesting_stack(ts, dur, end, thr_codes, has_flops):
    """:func:`_nesting` by a stack per thread, for any overlap."""
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


# --------------------------------------------------------------------------
# FLOP estimates

# name -> (index of A, index of B, batched)
_MM_OPS = {
    "aten::mm": (0, 1, False), "aten::addmm": (1, 2, False),
    "aten::bmm": (0, 1, True), "aten::baddbmm": (1, 2, True),
}
# name -> (stride, padding, dilation, transposed) positions in the schema
_CONV_OPS = {
    "aten::conv1d": (3, 4, 5, None), "aten::conv2d": (3, 4, 5, None), "aten::conv3d": (3, 4, 5, None),
    "aten::convolution": (3, 4, 5, 6), "aten::_convolution": (3, 4, 5, 6),
    "aten::cudnn_convolution": (3, 2, 4, None),
    "aten::miopen_convolution": (4, 3, 5, None), "aten::mkldnn_convolution": (4, 3, 5, None),
}
# name -> (grad_output index, input index, weight index, transposed index, output_mask index)
_CONV_BWD_OPS = {
    "aten::convolution_backward": (0, 1, 2, 7, 10),
    "aten::cudnn_convolution_backward": (1, 0, 2, None, 10),
}
_FLOP_OPS = set(_MM_OPS) | set(_CONV_OPS) | set(_CONV_BWD_OPS)


def _op_flops(names: Coded, given: np.ndarray, concretes: Coded, dims: Coded):
    """FLOPs per op (NaN if unknown) and the positions of convs whose output size was guessed.

    Estimated once per distinct (name, shapes, concrete inputs): a trace repeats a few hundred."""
    out = given.copy()
    guessed: list = []
    candidates = (_per_value(names, _FLOP_OPS.__contains__)[names.codes] & np.isnan(out)
                  & _per_value(dims, bool)[dims.codes])
    done: dict = {}  # key -> (FLOPs or None, whether the conv's output size is a guess)
    for i in np.flatnonzero(candidates).tolist():
        key = (names.codes[i], dims.codes[i], concretes.codes[i])
        known = done.get(key)
        if known is None:
            name, concrete = names[i], concretes[i]
            try:
                f = _estimate_flops(name, dims[i], concrete)
            except (TypeError, ValueError, IndexError, ZeroDivisionError):
                f = None
            known = done[key] = (f if f is not None and f >= 0 else None, name in _CONV_OPS and not concrete)
        if known[0] is not None:
            out[i] = known[0]
            if known[1]:
                guessed.append(i)
    return out, guessed


def _shape(x) -> list | None:
    if isinstance(x, list) and all(isinstance(v, int) for v in x):
        return x
    return None


def _parse_ints(concrete, idx, nsp):
    """'[2, 2]' or '2' from "Concrete Inputs" -> list of nsp ints (None if unknown)."""
    if not concrete or idx is None or idx >= len(concrete):
        return None
    s = concrete[idx]
    if not isinstance(s, str):
        return None
    s = s.strip().strip("[]()")
    if not s:
        return None
    vals = [int(v) for v in s.replace(" ", "").split(",") if v]
    if len(vals) == 1:
        vals = vals * nsp
    return vals if len(vals) == nsp else None


def _parse_bool(concrete, idx):
    if not concrete or idx is None or idx >= len(concrete) or not isinstance(concrete[idx], str):
        return None
    s = concrete[idx].strip().lower()
    return True if s == "true" else False if s == "false" else None


def _estimate_flops(name: str, dims: list, concrete) -> float | None:
    mm = _MM_OPS.get(name)
    if mm is not None:
        ia, ib, batched = mm
        a, b = _shape(dims[ia]), _shape(dims[ib])
        if a is None or b is None:
            return None
        if batched and len(a) == 3 and len(b) == 3:
            return 2.0 * a[0] * a[1] * a[2] * b[2]
        if not batched and len(a) == 2 and len(b) == 2:
            return 2.0 * a[0] * a[1] * b[1]
        return None
    conv = _CONV_OPS.get(name)
    if conv is not None:
        x, w = _shape(dims[0]), _shape(dims[1])
        if x is None or w is None or len(x) < 3 or len(w) != len(x):
            return None
        return _conv_fwd_flops(x, w, concrete, *conv)
    bwd = _CONV_BWD_OPS.get(name)
    if bwd is not None:
        ig, ix, iw, it, im = bwd
        g, x, w = _shape(dims[ig]), _shape(dims[ix]), _shape(dims[iw])
        if g is None or x is None or w is None or len(g) < 3 or len(w) != len(g):
            return None
        spatial = x[2:] if _parse_bool(concrete, it) else g[2:]
        one = 2.0 * g[0] * math.prod(spatial) * math.prod(w)
        passes = 2
        if concrete and im < len(concrete) and isinstance(concrete[im], str):
            mask = [v.strip().lower() == "true" for v in concrete[im].strip("[]").split(",")]
            if len(mask) >= 2:
                passes = int(mask[0]) + int(mask[1])
        return one * passes
    return None


def _conv_fwd_flops(x, w, concrete, i_stride, i_pad, i_dil, i_transposed) -> float:
    nsp = len(x) - 2
    if _parse_bool(concrete, i_transposed):
        spatial = x[2:]
    else:
        stride = _parse_ints(concrete, i_stride, nsp)
        pad_s = concrete[i_pad].strip().lower() if concrete and i_pad < len(concrete) and isinstance(concrete[i_pad], str) else ""
        if stride is None:
            spatial = x[2:]  # no "Concrete Inputs": assume 'same' output size
        elif pad_s in ("same", "'same'", '"same"'):
            spatial = [-(-x[2 + i] // stride[i]) for i in range(nsp)]
        else:
            pad = [0] * nsp if pad_s in ("valid", "'valid'", '"valid"') else (_parse_ints(concrete, i_pad, nsp) or [0] * nsp)
            dil = _parse_ints(concrete, i_dil, nsp) or [1] * nsp
            spatial = [
                (x[2 + i] + 2 * pad[i] - dil[i] * (w[2 + i] - 1) - 1) // stride[i] + 1
                for i in range(nsp)
            ]
            spatial = [max(s, 0) for s in spatial]
    return 2.0 * x[0] * math.prod(spatial) * math.prod(w)
