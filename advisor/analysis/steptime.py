"""A step's time, and what each figure made of many steps means: the one module that defines them.

A step is the span between two step boundaries (``docs/explanation/steps.md``). Its time is
`duration_s`, on its `clock`: the device's on a GPU (CUDA events, read after one wait per window:
:mod:`advisor.probe.timeline`), the host's on a CPU. Beside it every step keeps `host_s` (how long
Python took to reach the boundary) and `cpu_s` (the training process's CPU time over the step).

Each figure over many steps is defined here, once, for the question it answers:

- which steps time a run: :func:`timed_steps` (outside the profiler window, which inflates them);
- which of them stalled: :func:`stalled` (the machine, a checkpoint: left out of every rate);
- a window's rate, work over time: :func:`throughput` (the report), :func:`per_step` (an
  experiment's speedup and its bootstrap interval);
- where the steps' time went: :func:`share` (the wait on the loader, the optimizer's step);
- a run's figure for the CI gate: its fast steps, :func:`fast` (a neighbour only slows steps);
- the typical step, for sizing a window: :func:`median_step`;
- the steps as report.json lists them: :func:`rows`.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np
import pandas as pd

MIN_CLEAN_STEPS = 3  # fewer un-profiled steps than this: fall back to all measured steps
# A run's figure for the gate is read from its fast steps: the 5th percentile of its measured
# steps. A neighbour on a shared runner only ever slows steps down, so a burst that covers part of
# a run moves its mean and (past half the run) its median, while its fastest steps still show the
# code's own speed; a change of the code moves every step, the fast ones too. Measured on the
# 2-core runner with a CPU-burning neighbour (150-400 steps of 13 ms): the spread of back-to-back
# runs' log ratio is 0.11-0.12 at the 5th percentile, 0.35-0.41 at the 25th, 0.40-0.45 at the median.
FAST_QUANTILE = 0.05
MIN_FAST_STEPS = 4  # fewer than this: no fast-steps figure


def timed_steps(steps: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The steps to time: those outside the profiler window when there are enough of them.

    The profiler inflates step time, so throughput comes from clean steps; the basis used is
    returned so the report can say which.
    """
    if steps.empty or "duration_s" not in steps:
        return steps, "none"
    if "profiled" in steps:
        clean = steps[~steps["profiled"].fillna(False).astype(bool)]
        if len(clean) >= MIN_CLEAN_STEPS:
            return clean, "unprofiled"
    return steps, "all"


def stalled(steps: pd.DataFrame) -> pd.Series:
    """Steps far slower than the rest (beyond Tukey's far fence, Q3 + 3 IQR, and over twice the
    median) even without their wait on the DataLoader (`data_wait_s`, where the frame has it): a
    stall of the machine, a checkpoint, an evaluation inside a step. One 500 ms stall beside 6 ms
    steps would otherwise set the throughput. A step slow from waiting on its loader is the
    loader's rhythm, and counts: with w workers the batches come in bursts, one step in w waits
    for the next burst (8 workers: leaving those out read 22x where 9x is true)."""
    durations = steps["duration_s"].astype(float)
    if len(durations) < 8:
        return pd.Series(False, index=durations.index)
    q1, q3, median = durations.quantile(0.25), durations.quantile(0.75), durations.median()
    fence = max(q3 + 3 * (q3 - q1), 2 * median)
    busy = durations - steps["data_wait_s"].fillna(0.0).astype(float) if "data_wait_s" in steps else durations
    return (durations > fence) & (busy > fence)


def per_step(steps: pd.DataFrame, by_samples: bool) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, work) per step, stalls left out (:func:`stalled`); work is the batch size for
    samples/s, else 1 for steps/s. A window's rate is the sum of the work over the sum of the time."""
    steps = steps[~stalled(steps)]
    dur = steps["duration_s"].to_numpy(float)
    work = steps["samples"].to_numpy(float) if by_samples else np.ones_like(dur)
    return dur, work


def throughput(steps: pd.DataFrame) -> dict:
    """samples/s and steps/s over the timed steps less stalls (:func:`stalled`), median and p90 step time."""
    timed, basis = timed_steps(steps)
    if timed.empty:
        return {"samples_per_s": None, "steps_per_s": None, "step_time_median_s": None, "step_time_p90_s": None,
                "step_time_mean_s": None, "n_steps": 0, "stalled_steps": 0, "basis": basis}
    dur = timed["duration_s"].astype(float)
    kept = ~stalled(timed)
    total = float(dur[kept].sum())
    samples = timed["samples"] if "samples" in timed else pd.Series(dtype=float)
    known = samples.notna().all() and len(samples) == len(timed)
    return {
        "samples_per_s": float(samples[kept].sum()) / total if known and total > 0 else None,
        "steps_per_s": int(kept.sum()) / total if total > 0 else None,
        "stalled_steps": int((~kept).sum()),
        "step_time_median_s": float(dur.median()),
        "step_time_p90_s": float(dur.quantile(0.9)),
        "step_time_mean_s": float(dur.mean()),
        "n_steps": int(len(timed)),
        "basis": basis,
    }


def fast(values: Iterable) -> float | None:
    """A run's figure at its fast steps: the FAST_QUANTILE of its finite, positive per-step values
    (`duration_s`, `cpu_s`); None with fewer than MIN_FAST_STEPS of them."""
    kept = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    return float(np.quantile(kept, FAST_QUANTILE)) if len(kept) >= MIN_FAST_STEPS else None


def share(steps: pd.DataFrame, *parts: str) -> float | None:
    """The share of the steps' time spent in `parts` (``data_wait_s``, ``optimizer_s``), summed over
    the steps: a burst of long waits counts as much as the same wait spread out (a median misses a
    loader whose workers hand over their batches in bursts). None where a part was not measured
    (no column, or no value) or the steps took no time."""
    if steps.empty or "duration_s" not in steps or any(p not in steps or not steps[p].notna().any() for p in parts):
        return None
    total = float(steps["duration_s"].sum())
    if not total > 0 or not math.isfinite(total):
        return None
    return sum(float(steps[p].astype(float).fillna(0.0).clip(lower=0.0).sum()) for p in parts) / total


def median_step(steps: pd.DataFrame) -> float | None:
    """The typical step's time (the median `duration_s`), None without a positive one."""
    durations = steps["duration_s"].dropna() if "duration_s" in steps else pd.Series(dtype=float)
    median = float(durations.median()) if len(durations) else 0.0
    return median if median > 0 else None


def rows(steps: pd.DataFrame, fields: Iterable[str]) -> list[dict]:
    """Each step as report.json lists it: the `fields` the frame has, the index and the batch size
    as integers (a frame column of floats where a batch is unknown)."""
    fields = [f for f in fields if f in steps]
    out = []
    for row in steps[fields].to_dict("records") if not steps.empty else []:
        row["index"] = int(row["index"])
        if row.get("samples") is not None and row["samples"] == row["samples"]:
            row["samples"] = int(row["samples"])
        out.append(row)
    return out
