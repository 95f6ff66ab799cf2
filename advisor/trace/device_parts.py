"""A step's parts on the device's timeline: its wait on the DataLoader and its optimizer step.

On a GPU the host runs ahead of the device: it queues a step's kernels and blocks only where the
launch queue is full or something syncs. Its ``Optimizer.step`` range then holds the time it
waited for the backward pass's kernels to drain (ResNet-50's single-tensor SGD: 16% of the step
on the host, 2% on the device), and its ``enumerate(DataLoader)`` range time the device spent
busy with the step before. So the parts are read where the step's time is, on the device, as the
profiler's TensorBoard plugin splits a step (its kernels first, then what the host did while the
device idled):

- the optimizer: the device's time running what the ``Optimizer.step`` ranges launched (kernels
  and copies, found through the launch's correlation id), and its idle time while the host was
  inside such a range (waiting for those launches). A closure (LBFGS, Lightning) runs forward and
  backward inside the range: that part is the model's;
- the data wait: the device's idle time while the host was inside ``enumerate(DataLoader)``.

The rest of the step's device span is forward and backward, with the host's own overhead.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import intervals
from .frames import name_mask

OPTIMIZER_PREFIX = "Optimizer.step"
DATALOADER_PREFIX = "enumerate(DataLoader)"
_BACKWARD_PREFIX = "autograd::engine::evaluate_function"
_HOST = "user_annotation"  # a range on the host (its gpu_user_annotation copy is the device's)


def optimizer_ranges(annotations: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """The host's ``Optimizer.step`` ranges (pid, tid, step, ts_us, end_us) and `work_us`, where the
    optimizer's own work starts: after the last backward op inside the range (same process),
    where ``step(closure)`` ran one (torch's optimizers call the closure first; LBFGS's few vector
    ops between closure calls count with them), else at the range's start."""
    columns = ["pid", "tid", "step", "ts_us", "end_us"]
    if not len(annotations):
        return pd.DataFrame({c: [] for c in columns + ["work_us"]})
    keep = _host_ranges(annotations, OPTIMIZER_PREFIX)
    ranges = annotations.loc[keep, columns].reset_index(drop=True)
    work = ranges["ts_us"].to_numpy(dtype=np.float64).copy()
    backward = ops[name_mask(ops["name"], lambda name: name.startswith(_BACKWARD_PREFIX))] if len(ops) else ops
    if len(backward) and len(ranges):
        b_pid, b_ts, b_end = (backward[c].to_numpy() for c in ("pid", "ts_us", "end_us"))
        for i, r in enumerate(ranges.itertuples()):
            inside = (b_pid == r.pid) & (b_ts >= r.ts_us) & (b_end <= r.end_us)
            if inside.any():
                work[i] = float(b_end[inside].max())
    return ranges.assign(work_us=work)


def device_parts(start: np.ndarray, end: np.ndarray, kernels: pd.DataFrame, memcpy: pd.DataFrame,
                 runtime: pd.DataFrame, annotations: pd.DataFrame,
                 ranges: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(data wait, optimizer) in us for each step's device span [start, end): see the module's
    docstring. The optimizer is NaN everywhere when no device event links to a launch (a trace
    without correlation ids cannot say which kernels the optimizer ran)."""
    start = np.asarray(start, dtype=np.float64)
    end = np.maximum(np.asarray(end, dtype=np.float64), start)
    ev_ts = np.concatenate([kernels["ts_us"].to_numpy(), memcpy["ts_us"].to_numpy()])
    ev_end = np.concatenate([kernels["end_us"].to_numpy(), memcpy["end_us"].to_numpy()])
    ev_corr = np.concatenate([_ids(kernels["correlation"]), _ids(memcpy["correlation"])])
    idle = intervals.subtract(*intervals.merge(start, end), *intervals.merge(ev_ts, ev_end))

    loader = annotations.loc[_host_ranges(annotations, DATALOADER_PREFIX)] if len(annotations) else annotations
    in_loader = intervals.merge(loader["ts_us"].to_numpy(), loader["end_us"].to_numpy())
    data_wait = intervals.coverage(*intervals.intersect(*idle, *in_loader), start, end)

    launch_ids = _ids(runtime["correlation"])
    if not np.isin(ev_corr[~np.isnan(ev_corr)], launch_ids).any():
        return data_wait, np.full(len(start), np.nan)
    mine = np.isin(ev_corr, _launched_in(runtime, launch_ids, ranges))
    busy = intervals.coverage(*intervals.merge(ev_ts[mine], ev_end[mine]), start, end)
    in_step = intervals.merge(ranges["work_us"].to_numpy(), ranges["end_us"].to_numpy())
    waiting = intervals.coverage(*intervals.intersect(*intervals.subtract(*idle, *in_loader), *in_step), start, end)
    return data_wait, busy + waiting


def _launched_in(runtime: pd.DataFrame, ids: np.ndarray, ranges: pd.DataFrame) -> np.ndarray:
    """Correlation ids of the runtime calls made inside the ranges' own work, on the range's thread."""
    found = [np.zeros(0)]
    r_tid, r_ts = runtime["tid"].to_numpy(), runtime["ts_us"].to_numpy()
    for tid, group in ranges.groupby("tid"):
        ws, we = intervals.merge(group["work_us"].to_numpy(), group["end_us"].to_numpy())
        on = np.flatnonzero(r_tid == tid)
        i = np.searchsorted(ws, r_ts[on], side="right") - 1
        inside = (i >= 0) & (r_ts[on] < we[np.maximum(i, 0)]) if len(ws) else np.zeros(len(on), bool)
        found.append(ids[on[inside]])
    out = np.concatenate(found)
    return out[~np.isnan(out)]


def _host_ranges(annotations: pd.DataFrame, prefix: str) -> np.ndarray:
    """Which annotations are host ranges named `prefix` (not their copies on the device's timeline)."""
    named = name_mask(annotations["name"], lambda name: name.startswith(prefix))
    return named & (annotations["cat"].to_numpy() == _HOST)


def _ids(column: pd.Series) -> np.ndarray:
    """A nullable correlation column as floats, NaN where missing."""
    return np.asarray(column.to_numpy(dtype="float64", na_value=np.nan), dtype=np.float64)
