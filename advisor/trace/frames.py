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
        (ops or annotations) inside the step, on the host,
    optimizer_us (float, us): union of ``Optimizer.step*`` ranges inside it, on the host,
    gpu_busy_us (float, us): union of kernel/memcpy/memset intervals of all
        devices clipped to the step span (0 without GPU),
    kernel_us (float, us): sum of durations of kernels assigned to the step,
    n_kernels (int),
    device_dur_us (float, us): the step re-anchored to the device: from where the step before it
        ended to the end of the last kernel or copy it launched (its span where it launched none).
    device_data_wait_us, device_optimizer_us (float, us): the wait on the DataLoader and the
        optimizer's step on the device's timeline, inside that span
        (:mod:`advisor.trace.device_parts`); NaN without device work, the optimizer's NaN too
        where no kernel links to its launch.

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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

from .read import Coded

__all__ = ["TraceFrames", "name_mask", "per_name"]


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
            ops=empty_frame(OPS_COLS), kernels=empty_frame(KERNEL_COLS), memcpy=empty_frame(MEMCPY_COLS),
            runtime=empty_frame(RUNTIME_COLS), annotations=empty_frame(ANN_COLS), python=empty_frame(PY_COLS),
            memory=empty_frame(MEM_COLS), steps=empty_frame(STEP_COLS),
            meta={"device_properties": [], "distributed": {}, "rank": None, "world_size": None,
                  "display_time_unit": None, "base_time_ns": None, "trace_span_us": 0.0,
                  "n_events": 0, "has_gpu": False, "source": source, "skipped_events": 0, "warnings": []},
        )


# --------------------------------------------------------------------------
# Frame schemas (column -> dtype) so that empty frames look like full ones.

_STR = "str"
OPS_COLS = {
    "name": "category", "ts_us": "float64", "dur_us": "float64", "end_us": "float64",
    "self_us": "float64", "depth": "int64", "pid": "int64", "tid": "int64",
    "external_id": "Int64", "input_dims": "object", "input_types": "object",
    "flops": "float64", "step": "int64",
}
KERNEL_COLS = {
    "name": "category", "ts_us": "float64", "dur_us": "float64", "end_us": "float64",
    "device": "int64", "stream": "int64", "correlation": "Int64", "step": "int64",
    "grid": "object", "block": "object", "registers_per_thread": "float64",
}
MEMCPY_COLS = {
    "name": "category", "kind": _STR, "src": _STR, "dst": _STR, "bytes": "float64",
    "ts_us": "float64", "dur_us": "float64", "end_us": "float64",
    "device": "int64", "stream": "int64", "correlation": "Int64", "step": "int64",
}
RUNTIME_COLS = {
    "name": "category", "ts_us": "float64", "dur_us": "float64", "end_us": "float64",
    "pid": "int64", "tid": "int64", "correlation": "Int64", "step": "int64",
}
ANN_COLS = {
    "name": "category", "cat": "category", "ts_us": "float64", "dur_us": "float64",
    "end_us": "float64", "pid": "int64", "tid": "int64", "step": "int64",
}
PY_COLS = {
    "name": "category", "ts_us": "float64", "dur_us": "float64", "end_us": "float64",
    "pid": "int64", "tid": "int64", "step": "int64",
}
MEM_COLS = {
    "ts_us": "float64", "bytes": "float64", "total_allocated": "float64",
    "total_reserved": "float64", "device_type": "int64", "device_id": "int64",
}
STEP_COLS = {
    "index": "int64", "ts_us": "float64", "dur_us": "float64", "end_us": "float64",
    "data_wait_us": "float64", "optimizer_us": "float64", "gpu_busy_us": "float64",
    "kernel_us": "float64", "n_kernels": "int64", "device_dur_us": "float64",
    "device_data_wait_us": "float64", "device_optimizer_us": "float64",
}


# --------------------------------------------------------------------------
# Frames from columns


def nullable_int(pair: tuple) -> pd.arrays.IntegerArray:
    vals, mask = pair
    return pd.arrays.IntegerArray(np.asarray(vals, dtype=np.int64), np.asarray(mask, dtype=bool))


def build_frame(cols: dict, schema: dict, order: np.ndarray | None = None) -> pd.DataFrame:
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


def empty_frame(schema: dict) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=dt) for c, dt in schema.items()})


def name_mask(names: pd.Series, test: Callable[[str], object]) -> np.ndarray:
    """``test(name)`` for each row, decided once per distinct name (see :func:`per_name`)."""
    return per_name(names, lambda name: bool(test(name)), bool, False)


def per_name(names: pd.Series, value_of: Callable[[str], object], dtype: DTypeLike, missing: object) -> np.ndarray:
    """``value_of(name)`` for each row, worked out once per distinct name: a frame's categories
    (names repeat thousands of times), else the distinct values. A missing or non-text name gets
    `missing`."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        codes, distinct = names.cat.codes.to_numpy(), names.cat.categories
    else:
        codes, distinct = pd.factorize(names.to_numpy(dtype=object))
    per = np.fromiter((value_of(n) if isinstance(n, str) else missing for n in distinct), dtype, len(distinct))
    return np.append(per, np.array(missing, dtype=dtype))[codes]  # code -1 (missing) reads the last slot

