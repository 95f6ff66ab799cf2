"""A step's time, and what each figure made of many steps means: the one module that defines them.

A step is the span between two step boundaries (``docs/explanation/steps.md``). Its time is
`duration_s`, on its `clock`: the device's on a GPU (CUDA events, read after one wait per window:
:mod:`advisor.probe.timeline`), the host's on a CPU. Beside it every step keeps `host_s` (how long
Python took to reach the boundary) and `cpu_s` (the training process's CPU time over the step).

The steps are a frame, one row per step, its columns the protocol's (:data:`STEP_COLUMNS
<advisor.run_dir.protocol.STEP_COLUMNS>`, an arm's loss beside them). This module is the one
place that reads them by name: everything else asks the accessors below (:func:`durations`,
:func:`data_wait`, :func:`batch_sizes`, :func:`profiled`, ...), which also say what a frame that
lacks a column means (a trace alone has no batch sizes, a report.json row no loss).

Each figure over many steps is defined here, once, for the question it answers:

- which steps time a run: :func:`timed_steps` (outside the profiler window, which inflates them);
- which of them stalled: :func:`stalled` (the machine, a checkpoint: left out of every rate);
- a window's rate, work over time: :func:`throughput` (the report), :func:`per_step` (an
  experiment's speedup and its interval);
- where the steps' time went: :func:`share` (the wait on the loader, the optimizer's step);
- a run's figure for the CI gate: its fast steps, :func:`fast` (a neighbour only slows steps);
- the typical step, for sizing a window: :func:`median_step`;
- the loop's phases outside its steps (evaluation, checkpoints): :func:`phase_time`, :func:`loop_phases`;
- the steps as report.json lists them: :func:`records`.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np
import pandas as pd

from ..run_dir.protocol import STEP_COLUMNS, ArmStepLine


def _columns(*names: str) -> tuple[str, ...]:
    """`names`, each checked against the protocol that writes the steps: a field renamed there
    fails here, at import, not as a KeyError (or a silently missing column) in a rule."""
    known = {*STEP_COLUMNS, *ArmStepLine.__struct_fields__}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ImportError(f"not a step column of advisor.run_dir.protocol: {unknown}")
    return names


# The step frame's columns (advisor.run_dir.protocol.StepTimes, StepLine and ArmStepLine's fields).
(INDEX, T_START, T_END, DURATION, HOST, CPU, CLOCK, DATA_WAIT, OPTIMIZER, BACKWARD, SAMPLES, PROFILED, SOURCE,
 LOSS, LOSS_FINITE, T_DEVICE_END, EVAL, EVALS, CHECKPOINT, CHECKPOINTS, LOADER_STARTS, LOADER_END,
 LOADER_ENDS) = _columns(
    "index", "t_start", "t_end", "duration_s", "host_s", "cpu_s", "clock", "data_wait_s", "optimizer_s",
    "backward_s", "samples", "profiled", "source", "loss", "loss_finite", "t_device_end", "eval_s", "evals",
    "checkpoint_s", "checkpoints", "loader_starts", "loader_end_s", "loader_ends")
# The loop's phases (advisor.probe.phases and a training loader's end): name, seconds and count columns
PHASES = (("evaluation", EVAL, EVALS), ("checkpoint", CHECKPOINT, CHECKPOINTS),
          ("loader shutdown", LOADER_END, LOADER_ENDS))
# An evaluation timed in at least this share of a frame's steps runs every step (an EMA's or a
# teacher's forward, an RL rollout): it is part of the step, not a phase of the loop.
PHASE_MOST_STEPS = 0.5

MIN_CLEAN_STEPS = 3  # fewer un-profiled steps than this: fall back to all measured steps
# A run's figure for the gate is read from its fast steps: the 5th percentile of its measured
# steps. A neighbour on a shared runner only ever slows steps down, so a burst that covers part of
# a run moves its mean and (past half the run) its median, while its fastest steps still show the
# code's own speed; a change of the code moves every step, the fast ones too. Measured on the
# 2-core runner with a CPU-burning neighbour (150-400 steps of 13 ms): the spread of back-to-back
# runs' log ratio is 0.11-0.12 at the 5th percentile, 0.35-0.41 at the 25th, 0.40-0.45 at the median.
FAST_QUANTILE = 0.05
MIN_FAST_STEPS = 4  # fewer than this: no fast-steps figure


# --- a step's fields ----------------------------------------------------------------------------
# Each accessor returns a Series on the frame's index, so a mask or a figure lines up with its
# rows; a frame without the column reads as "unknown" in the way each says.

def _floats(steps: pd.DataFrame, column: str, missing: float) -> pd.Series:
    if column not in steps:
        return pd.Series(missing, index=steps.index, dtype=float)
    return steps[column].astype(float)


def durations(steps: pd.DataFrame) -> pd.Series:
    """Each step's training time on its clock, in seconds: its span (`duration_s`) less the loop's
    phases inside it (:func:`phase_time`); NaN where the frame has no span."""
    return (_floats(steps, DURATION, math.nan) - phase_time(steps)).clip(lower=0.0)


def spans(steps: pd.DataFrame) -> pd.Series:
    """Each step's whole span on its clock (`duration_s`), the loop's phases inside it included."""
    return _floats(steps, DURATION, math.nan)


def phase_time(steps: pd.DataFrame) -> pd.Series:
    """Each step's seconds in the loop's phases (:data:`PHASES`): its checkpoint saves, its training
    loaders' shutdowns at an epoch's end, and its evaluations unless they are the steps' own work
    (:func:`_evals_in_most_steps`)."""
    return sum((_floats(steps, seconds, 0.0).fillna(0.0) for _, seconds, _ in _phases_of(steps)),
               pd.Series(0.0, index=steps.index))


def _phases_of(steps: pd.DataFrame) -> tuple[tuple[str, str, str], ...]:
    """The :data:`PHASES` that are the loop's own in these steps: all but an evaluation that ran in
    most of them (:func:`_evals_in_most_steps`: it is the steps' own work)."""
    return tuple(p for p in PHASES if p[1] != EVAL) if _evals_in_most_steps(steps) else PHASES


def _evals_in_most_steps(steps: pd.DataFrame) -> bool:
    """Whether an evaluation ran in PHASE_MOST_STEPS of the frame's steps: then it is their own work."""
    return len(steps) > 0 and float((_floats(steps, EVALS, 0.0).fillna(0.0) > 0).mean()) >= PHASE_MOST_STEPS


def has_durations(steps: pd.DataFrame) -> bool:
    """Whether the frame times its steps at all (a frame made from rows that carry no duration does not)."""
    return DURATION in steps


def data_wait(steps: pd.DataFrame) -> pd.Series:
    """Each step's wait on the DataLoader (`data_wait_s`), 0 where not measured: a step is never
    longer for a wait nobody saw, so subtracting it is safe."""
    return _floats(steps, DATA_WAIT, 0.0).fillna(0.0)


def loader_started(steps: pd.DataFrame) -> pd.Series:
    """The steps in which a training loader's iterator started (an epoch's first batch): slow for
    the loop's own reason (a loader without persistent workers forks them anew each epoch, and the
    training process pays their copy-on-write faults), never a stall of the machine."""
    return _floats(steps, LOADER_STARTS, 0.0).fillna(0.0) > 0


def has_data_wait(steps: pd.DataFrame) -> bool:
    """Whether the steps timed their wait on the loader: without it, zero wait is no evidence of none."""
    return DATA_WAIT in steps


def optimizer_time(steps: pd.DataFrame) -> pd.Series:
    """Each step's time in optimizer.step() (`optimizer_s`), 0 where not measured."""
    return _floats(steps, OPTIMIZER, 0.0).fillna(0.0)


def has_optimizer_time(steps: pd.DataFrame) -> bool:
    """Whether the steps timed optimizer.step(): only then does a step with none say the optimizer skipped it."""
    return OPTIMIZER in steps


def batch_sizes(steps: pd.DataFrame) -> pd.Series:
    """Each step's batch (`samples`) as a float: NaN where unknown (a trace alone, a loader whose
    batch the probe could not count), as a CSV reads an integer column with a gap."""
    if SAMPLES not in steps:
        return pd.Series(math.nan, index=steps.index, dtype=float)
    return pd.to_numeric(steps[SAMPLES], errors="coerce").astype(float)


def knows_batch(steps: pd.DataFrame) -> bool:
    """Whether every step's batch size is known (and there is a step): only then is a rate in
    samples/s, a partial count would read as a slower run."""
    return len(steps) > 0 and SAMPLES in steps and bool(steps[SAMPLES].notna().all())


def profiled(steps: pd.DataFrame) -> pd.Series:
    """Which steps ran under the profiler (a bool mask): False where the frame does not say."""
    if PROFILED not in steps:
        return pd.Series(False, index=steps.index, dtype=bool)
    return steps[PROFILED].fillna(False).astype(bool)


def unprofiled(steps: pd.DataFrame) -> pd.Series:
    """Which steps are known to have run outside the profiler (a bool mask): none where the frame
    does not say which ran under it (a clean step is a claim the frame must make), every step
    that does not say it was profiled otherwise."""
    if PROFILED not in steps:
        return pd.Series(False, index=steps.index, dtype=bool)
    return ~profiled(steps)


def never_profiled(steps: pd.DataFrame) -> bool:
    """Whether the steps say which ran under the profiler and none did: the rules then had no
    trace to read, and their silence says nothing."""
    return len(steps) > 0 and PROFILED in steps and not bool(steps[PROFILED].any())


def has_spans(steps: pd.DataFrame) -> bool:
    """Whether the steps carry their start and end on the probe's clock (a trace alone does not):
    only then can the sampler's ticks be matched to them."""
    return {T_START, T_END} <= set(steps)


def spanned(steps: pd.DataFrame) -> pd.DataFrame:
    """The steps that have both a start and an end."""
    return steps.dropna(subset=[T_START, T_END])


def starts(steps: pd.DataFrame) -> pd.Series:
    """Each step's start (`t_start`) on the probe's monotonic clock, in seconds."""
    return steps[T_START]


def ends(steps: pd.DataFrame) -> pd.Series:
    """Each step's end (`t_end`) on the probe's monotonic clock, in seconds."""
    return steps[T_END]


def span_end(steps: pd.DataFrame) -> float | None:
    """The last step's end on the probe's clock (None: no step carries one)."""
    if not has_spans(steps) or steps[T_END].isna().all():
        return None
    return float(steps[T_END].max())


def work_spans(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each spanned step's (starts, ends), in :func:`spanned`'s order, on the probe's monotonic clock
    as its work ran: a device-timed step's as the device ran it (`t_device_end`, less its duration:
    placed on the host's clock by its window's one wait), the host's span otherwise. On a GPU the
    host's span says when Python queued the step, which can run most of a window ahead of the
    device; the sampler's readings (the GPU's energy) are matched to this one."""
    rows = spanned(steps)
    start, end = starts(rows).to_numpy(float), ends(rows).to_numpy(float)
    if T_DEVICE_END in rows:
        device_end = rows[T_DEVICE_END].to_numpy(float)
        device = np.isfinite(device_end) & np.isfinite(durations(rows).to_numpy(float))
        start = np.where(device, device_end - durations(rows).to_numpy(float), start)
        end = np.where(device, device_end, end)
    return start, end


def window_steps(steps: pd.DataFrame) -> list[tuple[float, float, pd.DataFrame]]:
    """The contiguous runs of steps (a window), each as (first start, last end, its steps), on the
    steps' :func:`work_spans`: a gap longer than a step between two steps starts a new window."""
    rows = spanned(steps).reset_index(drop=True)
    start, end = work_spans(rows)
    out: list[tuple[float, float, list[int]]] = []
    for i in np.argsort(start, kind="stable"):
        a, b = float(start[i]), float(end[i])
        if out and a - out[-1][1] <= max(b - a, 1e-3):
            out[-1] = (out[-1][0], max(out[-1][1], b), out[-1][2] + [int(i)])
        else:
            out.append((a, b, [int(i)]))
    return [(a, b, rows.iloc[sorted(members)]) for a, b, members in out]


def windows(steps: pd.DataFrame) -> list[tuple[float, float]]:
    """The windows of :func:`window_steps` as (first start, last end)."""
    return [(a, b) for a, b, _ in window_steps(steps)]


def losses(steps: pd.DataFrame) -> pd.Series:
    """Each step's loss as the probe read it (an arm's steps): NaN where not seen."""
    return _floats(steps, LOSS, math.nan)


def loss_finite(steps: pd.DataFrame) -> pd.Series:
    """Whether each step's loss was finite, where the probe saw one (JSON has no NaN, so a NaN
    loss reads as a missing one: this tells them apart); empty where the frame does not say."""
    return steps[LOSS_FINITE].dropna() if LOSS_FINITE in steps else pd.Series(dtype=bool)


def from_rows(rows: list[dict]) -> pd.DataFrame:
    """The steps of report.json's `steps` rows that have a positive duration (a value that is not
    a number counts as none); an empty frame where no row carries one. A field null in every row
    is left out, as a row without it: a report that does not say which steps were profiled
    claims no clean step."""
    steps = pd.DataFrame(rows).dropna(axis=1, how="all")
    if DURATION not in steps:
        return pd.DataFrame(columns=[DURATION])
    steps = steps.assign(**{DURATION: pd.to_numeric(steps[DURATION], errors="coerce")})
    return steps[durations(steps) > 0]


def records(steps: pd.DataFrame, fields: Iterable[str]) -> list[dict]:
    """The steps as report rows of those `fields` the frame has: the index and a known batch size
    as ints (a CSV column with a gap reads back as floats)."""
    fields = tuple(fields)
    out = []
    for row in steps.to_dict("records"):
        step = {k: row.get(k) for k in fields if k in row}
        step[INDEX] = int(step[INDEX])
        if step.get(SAMPLES) is not None and step[SAMPLES] == step[SAMPLES]:
            step[SAMPLES] = int(step[SAMPLES])
        out.append(step)
    return out


# --- figures over many steps --------------------------------------------------------------------

def mark_unprofiled(steps: pd.DataFrame) -> pd.DataFrame:
    """The steps marked as run outside the profiler, so that a figure over them (:func:`throughput`)
    reads every one: an arm window's (the profiler never runs there), steps already chosen to time
    (:func:`timed_steps`'s)."""
    return steps.assign(**{PROFILED: False})


def timed_steps(steps: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The steps to time: those outside the profiler window when there are enough of them.

    The profiler inflates step time, so throughput comes from clean steps; the basis used is
    returned so the report can say which.
    """
    if steps.empty or not has_durations(steps):
        return steps, "none"
    if PROFILED in steps:
        clean = steps[unprofiled(steps)]
        if len(clean) >= MIN_CLEAN_STEPS:
            return clean, "unprofiled"
    return steps, "all"


def stalled(steps: pd.DataFrame) -> pd.Series:
    """Steps far slower than the rest (beyond Tukey's far fence, Q3 + 3 IQR, and over twice the
    median and the mean step) even without their wait on the DataLoader (`data_wait_s`, where the
    frame has it): a stall of the machine, a checkpoint, an evaluation inside a step. One 500 ms
    stall beside 6 ms steps would otherwise set the throughput. A step slow from waiting on its
    loader is the loader's rhythm, and counts: with w workers the batches come in bursts, one step in
    w waits for the next burst (8 workers: leaving those out read 22x where 9x is true); so is an
    epoch's start (:func:`loader_started`). The mean keeps a burst's step too: it spends 2-6 ms
    taking in the burst's batches beside its 60 ms wait, where an 8-worker loader's median step is
    0.5 ms, and a fence on the median alone left one such step of ten out, reading that arm 10% fast."""
    dur = durations(steps)
    if len(dur) < 8:
        return pd.Series(False, index=dur.index)
    q1, q3, median = dur.quantile(0.25), dur.quantile(0.75), dur.median()
    fence = max(q3 + 3 * (q3 - q1), 2 * median, 2 * dur.mean())
    busy = dur - data_wait(steps)
    return (dur > fence) & (busy > fence) & ~loader_started(steps)


def per_step(steps: pd.DataFrame, by_samples: bool) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, work) per step, stalls left out (:func:`stalled`); work is the batch size for
    samples/s, else 1 for steps/s. A window's rate is the sum of the work over the sum of the time."""
    steps = steps[~stalled(steps)]
    dur = durations(steps).to_numpy(float)
    work = batch_sizes(steps).to_numpy(float) if by_samples else np.ones_like(dur)
    return dur, work


def seconds_per_sample(steps: pd.DataFrame) -> np.ndarray | None:
    """Each step's time over its batch (seconds per sample), None unless the frame has batch sizes
    and every one is a positive number: a run whose batch changed is then compared per sample."""
    if SAMPLES not in steps:
        return None
    samples = batch_sizes(steps)
    if samples.isna().any() or (samples <= 0).any():
        return None
    return (durations(steps) / samples).to_numpy()


def throughput(steps: pd.DataFrame) -> dict:
    """samples/s and steps/s over the timed steps less stalls (:func:`stalled`), median and p90 step time."""
    timed, basis = timed_steps(steps)
    if timed.empty:
        return {"samples_per_s": None, "steps_per_s": None, "step_time_median_s": None, "step_time_p90_s": None,
                "step_time_mean_s": None, "n_steps": 0, "stalled_steps": 0, "basis": basis}
    dur = durations(timed)
    kept = ~stalled(timed)
    total = float(dur[kept].sum())
    known = knows_batch(timed)
    return {
        "samples_per_s": float(batch_sizes(timed)[kept].sum()) / total if known and total > 0 else None,
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
    """The share of the steps' time spent in `parts` (columns: :data:`DATA_WAIT`, :data:`OPTIMIZER`,
    as :func:`advisor.overrides.parts` names them), summed over the steps: a burst of long waits
    counts as much as the same wait spread out (a median misses a loader whose workers hand over
    their batches in bursts). None where a part was not measured (no column, or no value) or the
    steps took no time."""
    if steps.empty or not has_durations(steps) or any(p not in steps or not steps[p].notna().any() for p in parts):
        return None
    total = float(durations(steps).sum())
    if not total > 0 or not math.isfinite(total):
        return None
    return sum(float(steps[p].astype(float).fillna(0.0).clip(lower=0.0).sum()) for p in parts) / total


def loop_phases(steps: pd.DataFrame) -> list[dict]:
    """The loop's phases in the steps (report.json's ``phases``): per phase its seconds, its share of
    the steps' whole spans (the window's wall time), how often it ran and every how many steps; an
    evaluation that ran in most steps is the steps' own work (:func:`phase_time`), not listed."""
    total = float(spans(steps).sum()) if len(steps) else 0.0
    if not total > 0 or not math.isfinite(total):
        return []
    out = []
    for name, seconds, count in _phases_of(steps):
        if count not in steps:
            continue
        counts = _floats(steps, count, 0.0).fillna(0.0)
        n = int(counts.sum())
        if n == 0:
            continue
        spent = float(_floats(steps, seconds, 0.0).fillna(0.0).sum())
        # every how many steps it comes: two saves at one epoch's end (the latest and the epoch's own file)
        # are one checkpoint phase, not one every half epoch
        ran_in = int((counts > 0).sum())
        out.append({"name": name, "seconds": spent, "share": spent / total, "count": n, "steps": ran_in,
                    "every_steps": len(steps) / ran_in})
    return out


def pace(steps: pd.DataFrame) -> float | None:
    """The seconds a step takes on average, stalls left out (:func:`stalled`) and the profiler's
    steps too where enough others ran (:func:`timed_steps`): what a window of n steps costs. Not the
    median: a DataLoader's workers hand over batches in bursts, and a 4-worker I/O loader's median
    step was 3.8 ms where its steps took 17 ms each, so windows planned at the median took 4x their
    prediction and a confirming pass sized on them never fitted the budget. Not the profiled steps:
    tiny-gpt's 4.5 ms steps ran 2-3x under the profiler, and windows sized on them lasted 0.3 s.
    None without a positive one."""
    dur, _ = per_step(timed_steps(steps)[0], by_samples=False)
    dur = dur[np.isfinite(dur)]
    mean = float(dur.mean()) if len(dur) else 0.0
    return mean if mean > 0 else None


def time_per_work(steps: pd.DataFrame) -> float | None:
    """The steps' seconds per sample where every step counts its samples, else per step (None: no
    positive one): a window of a larger batch compares with the baseline's per sample."""
    if steps.empty or not has_durations(steps):
        return None
    total = float(durations(steps).sum())
    work = float(batch_sizes(steps).sum()) if knows_batch(steps) else float(len(steps))
    return total / work if total > 0 and work > 0 else None


def median_step(steps: pd.DataFrame) -> float | None:
    """The typical step's time (the median `duration_s`), None without a positive one."""
    known = durations(steps).dropna()
    median = float(known.median()) if len(known) else 0.0
    return median if median > 0 else None

