"""Whole-run numbers computed from a Profile: throughput, step breakdown, utilization.

Pure functions over DataFrames (Holistic Trace Analysis style), shared by the report, the
rules and the experiments so that each number has exactly one definition.
"""

from __future__ import annotations

import math
from typing import Callable, overload

import numpy as np
import pandas as pd

from . import steptime
from .steptime import share, stalled, timed_steps

# What the probe itself costs each step, on the training thread: the step clock's bookkeeping
# (~10 µs on a 2-core CPU, `bookkeeping_us` in benchmarks/probe_overhead.py) plus the hooks'
# wrappers around DataLoader.__next__, backward() and optimizer.step().
PROBE_COST_PER_STEP_S = 15e-6
PROBE_COST_WARN_FRAC = 0.015  # warn when that is this share of the median step (steps under ~1 ms)


OUTSIDE_LOAD_WARN_CORES = 0.5  # other processes' mean CPU use, in cores, that makes the timings suspect
# a window (or a step) a neighbour disturbed: other processes used OUTSIDE_LOAD_WARN_CORES and the script's
# threads waited for a core this much more (in cores: seconds waited per second) than in its quiet ones
DISTURBED_WAIT = 0.05
MIN_QUIET_STEPS = 3  # steps no neighbour disturbed, enough to judge a step's shares on them alone


def took_a_core(other: float, wait: float) -> bool:
    """A neighbour disturbed a window (or a step): other processes used OUTSIDE_LOAD_WARN_CORES or
    more and the script's threads waited for a core DISTURBED_WAIT or more (in cores; `wait` above
    what they wait where no neighbour is, where that is known). A neighbour on a core the script did
    not want costs it nothing, and a script whose own workers oversubscribe the cores waits alone."""
    return other >= OUTSIDE_LOAD_WARN_CORES and wait >= DISTURBED_WAIT


ADVISE_CPU = "advise_cpu_percent"  # the sampler's column: advise's own process (its sampler, its planning)


@overload
def outside(sys_percent: float, tree_percent: float, advise_percent: float, cpu_count: int) -> float: ...
@overload
def outside(sys_percent: pd.Series, tree_percent: pd.Series, advise_percent: pd.Series | float, cpu_count: int) -> pd.Series: ...
def outside(sys_percent: float | pd.Series, tree_percent: float | pd.Series, advise_percent: float | pd.Series,
            cpu_count: int) -> float | pd.Series:
    """The cores processes other than the script's tree and advise's own used: the system's CPU
    (percent of all its cores) less both (percent of one core); a tick's floats or a frame's columns
    alike (clip below 0 either way)."""
    return sys_percent / 100 * cpu_count - tree_percent / 100 - advise_percent / 100


def outside_per_tick(samples: pd.DataFrame, cpu_count: int) -> pd.Series:
    """Per sampler tick, :func:`outside`; advise's own is 0 in runs recorded before it was sampled."""
    own = samples[ADVISE_CPU].fillna(0.0) if ADVISE_CPU in samples else 0.0
    return outside(samples["sys_cpu_percent"], samples["cpu_percent"], own, cpu_count).clip(lower=0)


def outside_cores(samples: pd.DataFrame, cpu_count: int | None) -> float | None:
    """Mean CPU, in cores, that other processes used over `samples` (:func:`outside_per_tick`), or
    None where the sampler could not tell."""
    if not cpu_count or samples.empty or not {"sys_cpu_percent", "cpu_percent"} <= set(samples.columns):
        return None
    if not samples["sys_cpu_percent"].notna().any():
        return None
    return float(outside_per_tick(samples, cpu_count).mean())


IO_BOUND_CPU_SHARE = 0.5  # the script's tree used under this share of the cores: its work waits (disk, network, sleep)


def io_bound(samples: pd.DataFrame, steps: pd.DataFrame, cores: int | None, workers: int = 0) -> bool | None:
    """Whether the script's loading waits rather than computes: its process tree used under half of
    `cores` over the measured window (:func:`window_samples`), or, with loader `workers`, they used
    under half of the cores its main process left them (:func:`workers_busy`): 4 workers sleeping
    2 ms a sample beside a main process at 0.6-0.8 cores kept the tree at 0.9-1.0 of 2 cores, and
    read CPU-bound 1 run in 3 (a manual fix where 8 workers were 2.0x faster by hand). None where
    it was not sampled. The one test behind DL001's worker count and the planner's I/O-bound
    worker ladder."""
    s = window_samples(samples, steps)
    if s.empty or "cpu_percent" not in s or not s["cpu_percent"].notna().any() or not cores:
        return None
    if s["cpu_percent"].mean() < 100.0 * IO_BOUND_CPU_SHARE * cores:
        return True
    busy = workers_busy(samples, steps) if workers else None
    if busy is None or "main_cpu_percent" not in s or not s["main_cpu_percent"].notna().any():
        return False
    return bool(busy < IO_BOUND_CPU_SHARE * max(0.0, cores - float(s["main_cpu_percent"].mean()) / 100.0))


def workers_busy(samples: pd.DataFrame, steps: pd.DataFrame) -> float | None:
    """Cores the DataLoader workers (the script's tree less its main process) kept busy on average
    over the measured window (:func:`window_samples`); None without the per-process column (an
    older run dir).

    Workers that exist are not threads that compete: workers that prefetched their batches and
    sleep cost nothing (a minGPT script with 4 idle workers read "6 busy threads on 2 cores")."""
    if samples.empty or not {"t", "main_cpu_percent", "cpu_percent"} <= set(samples.columns):
        return None
    window = window_samples(samples, steps)
    rest = (window["cpu_percent"] - window["main_cpu_percent"]).dropna()
    return float(rest.clip(lower=0).mean()) / 100.0 if len(rest) else None


def workers_starved(samples: pd.DataFrame, steps: pd.DataFrame, cpu_count: int | None) -> float:
    """Cores the DataLoader workers waited runnable for over the measured window, where other
    processes used OUTSIDE_LOAD_WARN_CORES or more (the kernel's wait clock, the tree's less its main
    process's: :mod:`advisor.waits`); 0 on a quiet window or without the clock. What they used
    (:func:`workers_busy`) and this are what they wanted. A neighbour starves the workers of the cores
    they ask for: loader-cpu-workers' 2 workers used 0.48-0.50 cores quiet and 0.12-0.15 beside a
    burner on one of 2 cores, so a count by use read them idle and DL003 was not found. On a quiet
    machine what they used is the count the rule was set on: minGPT's adder's 4 near-idle workers used
    0.14 cores and waited 0.10 more behind the trainer's threads, a hair under counting as one."""
    if samples.empty or not {"runq_wait_s", "main_runq_wait_s"} <= set(samples.columns):
        return 0.0
    outside = outside_cores(window_samples(samples, steps), cpu_count)
    if outside is None or outside < OUTSIDE_LOAD_WARN_CORES:
        return 0.0
    return _rate(samples["t"], samples["runq_wait_s"] - samples["main_runq_wait_s"], measured_window(steps)) or 0.0


def gpu_neighbours(samples: pd.DataFrame) -> int | None:
    """The most processes outside the script's tree NVML saw at once on its GPU over `samples`
    (None where it was not sampled: a CPU run, no NVML)."""
    if samples.empty or "gpu_other_procs" not in samples or not samples["gpu_other_procs"].notna().any():
        return None
    return int(samples["gpu_other_procs"].max())


def shared_gpu_text(others: int) -> str:
    return f"{others} other process{'es' if others > 1 else ''} ran on the script's GPU (NVML)"


def contention_warning(steps: pd.DataFrame, samples: pd.DataFrame, cpu_count: int | None) -> str | None:
    """Say when the machine was not the script's alone: stalled steps (:func:`stalled`), and CPU
    used by processes outside the script's tree (system CPU less the tree's, sampled)."""
    timed, _ = timed_steps(steps)
    dur = steptime.durations(timed)
    stalls = stalled(timed) if not timed.empty else pd.Series(dtype=bool)
    said = []
    if stalls.any():
        said.append(f"{int(stalls.sum())} of {len(dur)} measured steps stalled (up to {dur[stalls].max() * 1e3:,.0f} ms beside "
                    f"a median of {dur.median() * 1e3:,.1f} ms) and were left out of the throughput")
    hit = disturbed_steps(timed, samples, cpu_count) if not timed.empty else pd.Series(dtype=bool)
    if hit.any():
        quiet = int((~hit).sum())
        said.append(f"{int(hit.sum())} of {len(hit)} measured steps waited for a core while other processes ran "
                    "(the kernel's wait clock)" + (f"; a step's length is read on the other {quiet}"
                                                  if quiet >= MIN_QUIET_STEPS else ""))
    window = window_samples(samples, steps) if not samples.empty and "t" in samples else pd.DataFrame()
    other = outside_cores(window, cpu_count)
    if other is not None and other >= OUTSIDE_LOAD_WARN_CORES:
        said.append(f"processes outside the script used {other:.1f} of {cpu_count} cores on average while it was "
                    "measured")
    shared = gpu_neighbours(window)
    if shared:
        said.append(shared_gpu_text(shared) + " while it was measured")
    if not said:
        return None
    return "the machine looks contended: " + "; ".join(said) + ". Timings and measured speedups may not reproduce"


def probe_cost_warning(tp: dict) -> str | None:
    """A warning when the probe's own per-step cost is a visible share of the (tiny) step."""
    median = tp.get("step_time_median_s")
    if not isinstance(median, (int, float)) or not math.isfinite(median) or median <= 0:
        return None
    share = PROBE_COST_PER_STEP_S / median
    if share < PROBE_COST_WARN_FRAC:
        return None
    return (f"steps are very short (median {median * 1e6:,.0f} µs): the probe's own bookkeeping, about "
            f"{PROBE_COST_PER_STEP_S * 1e6:.0f} µs a step (benchmarks/probe_overhead.py), is about {share:.0%} of each, "
            "so throughput here reads up to that much lower than without advise")


def breakdown(steps: pd.DataFrame) -> dict:
    """Share of step time waiting for data, in the optimizer, and the rest (forward/backward)."""
    timed, _ = timed_steps(steps)
    total = float(steptime.durations(timed).sum())
    if total <= 0:
        return {"data_wait_frac": None, "optimizer_frac": None, "compute_frac": None}

    data, opt = (share(timed, part) or 0.0 for part in (steptime.DATA_WAIT, steptime.OPTIMIZER))
    return {"data_wait_frac": data, "optimizer_frac": opt, "compute_frac": max(0.0, 1.0 - data - opt)}


def measured_window(steps: pd.DataFrame) -> tuple[float, float] | None:
    """[first step's start, last step's end] in seconds on the probe's monotonic clock, or None.

    The sampler's clock is the same, so this is the span its ticks are judged over; None when
    the steps carry no times (a trace-only profile) or the times are not usable.
    """
    if steps.empty or not steptime.has_spans(steps):
        return None
    lo, hi = float(steptime.starts(steps).min()), float(steptime.ends(steps).max())
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) and hi >= lo else None


def window_wait(samples: pd.DataFrame, steps: pd.DataFrame) -> float | None:
    """The script's tree's run-queue wait over the span of `steps`, in cores (seconds waited per second:
    0.3 is three tenths of a core's time spent runnable but not running), from the sampler's
    cumulative `runq_wait_s` (:mod:`advisor.waits`) interpolated at the span's ends; None where the
    kernel gave no such clock or the span is not sampled."""
    if samples.empty or "runq_wait_s" not in samples:
        return None
    return _rate(samples["t"], samples["runq_wait_s"], measured_window(steps))


def _rate(t: pd.Series, clock: pd.Series, window: tuple[float, float] | None) -> float | None:
    """A cumulative `clock` (seconds, sampled at `t`)'s rise per second over `window`, interpolated at
    its ends; None where the window is not sampled from end to end."""
    read = pd.DataFrame({"t": t, "c": clock}).dropna()
    if window is None or window[1] <= window[0] or len(read) < 2 or read["t"].iloc[0] > window[0] \
            or read["t"].iloc[-1] < window[1]:
        return None
    start, end = np.interp(window, read["t"], read["c"])
    return max(0.0, float(end - start)) / (window[1] - window[0])


def disturbed_steps(steps: pd.DataFrame, samples: pd.DataFrame, cpu_count: int | None) -> pd.Series:
    """The steps a neighbour disturbed, by the kernel's wait clock (:mod:`advisor.waits`): other
    processes used OUTSIDE_LOAD_WARN_CORES or more around the step and the script's threads waited
    for a core DISTURBED_WAIT more (in cores) than over its quietest tenth of steps, since a script
    whose own workers oversubscribe the cores waits in every step alike. All False where the kernel
    gave no clock or the sampler did not cover the steps. Beside a neighbour that takes a core a
    2-thread step can run 15 times slower (conv-mnist: 448 ms against 30 ms), and their median is
    then no step of the script's. An epoch's start (:func:`steptime.loader_started`) is not one: the
    workers it forks are the script's, though the sampler may see them first as another process's."""
    return _disturbed(steps, _step_clock(steps, samples, cpu_count))


def _disturbed(steps: pd.DataFrame, clock: tuple[np.ndarray, pd.Series] | None) -> pd.Series:
    """:func:`disturbed_steps` on the steps' :func:`_step_clock` (None: no step disturbed)."""
    if clock is None:
        return pd.Series(False, index=steps.index)
    near, share = clock
    floor = float(share.quantile(0.1)) if share.notna().any() else 0.0
    hit = [took_a_core(n, w) for n, w in zip(near, (share - floor).fillna(-1.0))]
    return pd.Series(hit, index=steps.index, dtype=bool) & ~steptime.loader_started(steps)


def _step_clock(steps: pd.DataFrame, samples: pd.DataFrame, cpu_count: int | None) -> tuple[np.ndarray, pd.Series] | None:
    """Per step: the most cores other processes used on the sampler's ticks that bracket it, and the
    script's run-queue wait over it, in cores (NaN where the clock does not cover it); None where the
    kernel gave no clock or the sampler no load."""
    if steps.empty or samples.empty or not cpu_count or not {"t", "runq_wait_s", "sys_cpu_percent",
                                                               "cpu_percent"} <= set(samples.columns):
        return None
    clock = samples[["t", "runq_wait_s"]].dropna()
    if len(clock) < 2 or not steptime.has_spans(steps):
        return None
    start, end = steptime.starts(steps).to_numpy(float), steptime.ends(steps).to_numpy(float)
    inside = (start >= clock["t"].iloc[0]) & (end <= clock["t"].iloc[-1]) & (end > start)
    if not inside.any():
        return None
    waited = np.interp(end, clock["t"], clock["runq_wait_s"]) - np.interp(start, clock["t"], clock["runq_wait_s"])
    share = pd.Series(np.where(inside, waited / np.maximum(end - start, 1e-9), np.nan), index=steps.index)
    load = samples.dropna(subset=["t", "sys_cpu_percent", "cpu_percent"])
    if load.empty:
        return None
    outside = outside_per_tick(load, cpu_count).to_numpy(float)
    # the sampler's ticks are 0.1 s apart: a step's neighbour is read on the ticks that bracket it
    t = load["t"].to_numpy(float)
    lo, hi = np.searchsorted(t, start, "left") - 1, np.searchsorted(t, end, "right")
    near = np.array([outside[max(0, a):min(len(t), b + 1)].max(initial=0.0) for a, b in zip(lo, hi)])
    return near, share


def quiet_part(steps: pd.DataFrame, samples: pd.DataFrame, cpu_count: int | None) -> tuple[pd.Series, float, float] | None:
    """A window a neighbour disturbed in part, read on the rest: (which steps to keep, the cores
    other processes used around them, the script's run-queue wait over them in cores). A step is
    kept half a sampler's tick away from any :func:`disturbed_steps` at least (the clock spreads a
    tick's wait over the steps in it), and only where at least half the window's steps and
    MIN_QUIET_STEPS are: beside a burner on one of two cores, mingpt-adder's 35 ms baseline steps
    ran 35-45 ms between its bursts and 80-1,545 ms in them, and the whole window read 178 ms a step.
    None: nothing disturbed, too little left, or no clock."""
    clock = _step_clock(steps, samples, cpu_count)
    hit = _disturbed(steps, clock)
    if clock is None or not hit.any():
        return None
    near, share = clock
    start, end = steptime.starts(steps).to_numpy(float), steptime.ends(steps).to_numpy(float)
    margin = float(np.median(np.diff(samples["t"].dropna().to_numpy(float)))) / 2  # half a tick
    h0, h1 = start[hit.to_numpy()], end[hit.to_numpy()]
    close = np.array([bool(np.any((h0 < b + margin) & (h1 > a - margin))) for a, b in zip(start, end)])
    keep = pd.Series(~close, index=steps.index)
    kept = int(keep.sum())
    if kept < MIN_QUIET_STEPS or 2 * kept < len(steps) or share[keep].isna().any():
        return None
    dur = (end - start)[keep.to_numpy()]
    return keep, float(near[keep.to_numpy()].mean()), float((share[keep] * dur).sum() / dur.sum())


def neighbour(samples: pd.DataFrame, steps: pd.DataFrame, cpu_count: int | None) -> tuple[float | None, float | None]:
    """Over the span of `steps`: the cores other processes used (:func:`outside_cores`) and the
    script's run-queue wait in cores (:func:`window_wait`), each None where it cannot be told:
    what :func:`took_a_core` judges a window on."""
    return outside_cores(window_samples(samples, steps), cpu_count), window_wait(samples, steps)


def window_samples(samples: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The sampler ticks inside :func:`measured_window`: the one definition every mean uses.

    Start-up (imports, CUDA init, data loading before step 1) idles the GPU and busies one core;
    counting those ticks would bias every mean toward "idle". A window shorter than a few
    sampling periods takes the `MIN_TICKS` ticks nearest its end instead (the steps just before it
    are warm-up steps of the same loop), so one tick never decides; all ticks are kept when the
    window is unknown.
    """
    if samples.empty or "t" not in samples:
        return samples
    window = measured_window(steps)
    if window is None:
        return samples
    t = samples["t"]
    inside = samples[(t >= window[0]) & (t <= window[1])]
    if len(inside) >= MIN_TICKS:
        return inside
    return samples[t <= window[1]].tail(MIN_TICKS) if (t <= window[1]).any() else samples


MIN_TICKS = 3  # sampler ticks a window mean rests on, at least


def utilization(samples: pd.DataFrame, steps: pd.DataFrame) -> dict:
    """Sampler means over the measured window (not start-up), e.g. GPU util and CPU %."""
    if samples.empty or "t" not in samples:
        return {}
    window = window_samples(samples, steps)
    out = {}
    for column in ("gpu_util_percent", "gpu_mem_used_bytes", "gpu_power_w", "cpu_percent", "rss_bytes"):
        if column in window and window[column].notna().any():
            out[f"{column}_mean"] = float(window[column].mean())
            out[f"{column}_max"] = float(window[column].max())
    return out


ENERGY_COUNTER, POWER_SAMPLES = "energy-counter", "power-samples"  # where a window's joules come from
ENERGY_SOURCES = (ENERGY_COUNTER, POWER_SAMPLES)  # in the order they are tried


def energy(samples: pd.DataFrame, steps: pd.DataFrame, source: str | None = None) -> dict | None:
    """The GPU's energy over timed steps, as Zeus measures a window: joules, joules per step and per
    sample, and the `source` they come from (None on a CPU, or where no window could be read).

    - ``energy-counter``: the rise of NVML's energy counter (`gpu_energy_mj`, read by the parent's
      sampler each tick) between each window's ends, the counter interpolated linearly between the
      ticks around them. The window's ends are where the device ran its steps
      (:func:`steptime.work_spans`: placed on the monotonic clock by the window's one wait), so the
      figure is exact to those ends, to within the counter's own update period (20-100 ms). The
      child could read the counter itself only where the device is synced, and a window is synced
      at its end alone: a read at its start would need a second wait, or would count the tail of
      the work queued before it. Read by the parent, the counter costs the training process nothing
      (no NVML in it, nothing inside a window). A window the ticks do not bracket (the sampler
      stopped before its end) is left out.
    - ``power-samples``, only where the counter is missing (before Volta, NotSupported, a run dir from
      before the counter): the mean NVML power over the ticks inside each window, times its length.
      NVML power is a one-second average on Hopper and later, so a window of ten 20 ms steps reads
      power from before it.

    `steps` may hold several windows (an arm's, the baseline's): each is read on its own, and the sums
    are divided by the steps and samples of the windows read. `source` asks for one source only (an
    arm is read as its baseline was)."""
    if samples.empty or "t" not in samples or steps.empty or not steptime.has_spans(steps):
        return None
    windows = steptime.window_steps(steps)
    for name, reader in ((ENERGY_COUNTER, _counter_joules), (POWER_SAMPLES, _power_joules)):
        read = reader(samples) if source in (None, name) else None
        got = _sum_windows(windows, read) if read is not None else None
        if got is not None:
            return {**got, "source": name}
    return None


def _readings(samples: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray] | None:
    if column not in samples:
        return None
    read = samples[["t", column]].dropna().sort_values("t")
    return (read["t"].to_numpy(float), read[column].to_numpy(float)) if len(read) else None


def _counter_joules(samples: pd.DataFrame) -> Callable[[float, float], float | None] | None:
    """(start, end) -> the counter's rise in J between them, None where the ticks do not bracket
    them or the counter fell (the driver reloaded)."""
    read = _readings(samples, "gpu_energy_mj")
    if read is None or len(read[0]) < 2:
        return None
    t, mj = read

    def joules(start: float, end: float) -> float | None:
        if start < t[0] or end > t[-1]:
            return None
        rise = float(np.interp(end, t, mj) - np.interp(start, t, mj)) / 1000.0
        return rise if rise >= 0 else None
    return joules


def _power_joules(samples: pd.DataFrame) -> Callable[[float, float], float | None] | None:
    """(start, end) -> mean NVML power over the ticks inside, times the span (None: no tick inside)."""
    read = _readings(samples, "gpu_power_w")
    if read is None:
        return None
    t, watts = read

    def joules(start: float, end: float) -> float | None:
        inside = (t >= start) & (t <= end)
        return float(watts[inside].mean()) * (end - start) if inside.any() else None
    return joules


def _sum_windows(windows: list[tuple[float, float, pd.DataFrame]],
                 joules_of: Callable[[float, float], float | None]) -> dict | None:
    joules, seconds, read = 0.0, 0.0, []
    for start, end, rows in windows:
        got = joules_of(start, end)
        if got is None:
            continue
        joules, seconds = joules + got, seconds + (end - start)
        read.append(rows)
    if seconds <= 0:
        return None
    timed = pd.concat(read)
    n_samples = float(steptime.batch_sizes(timed).sum()) if steptime.knows_batch(timed) else None
    return {"joules": joules, "seconds": seconds, "watts_mean": joules / seconds, "joules_per_step": joules / len(timed),
            "joules_per_sample": joules / n_samples if n_samples else None}


MEMORY_BASIS_WORDS = {
    "pss": "proportional set size summed over the script's processes: pages shared with DataLoader "
           "workers are split between them, not counted once per process",
    "rss": "resident set size summed over the script's processes (unique memory could not be read): "
           "pages shared between processes count once per process, an upper bound",
}


def memory(accelerator: dict, samples: pd.DataFrame) -> dict:
    """report.json's `memory`: the accelerator's peaks from the probe (CUDA), and the host memory
    of the script's process tree over the whole run, from the sampler.

    `peak_rss_bytes` sums RSS over the processes (an upper bound: forked DataLoader workers
    share pages); `peak_pss_bytes` / `peak_uss_bytes` count shared pages once (split between the
    processes) / not at all. `basis` names the figure that stands for the tree's peak ("pss"
    when it could be read, else "rss") and `basis_note` says what it means.
    """
    out = dict(accelerator or {})
    if samples.empty or "rss_bytes" not in samples or not samples["rss_bytes"].notna().any():
        return out
    out["peak_rss_bytes"] = float(samples["rss_bytes"].max())
    for column, key in (("pss_bytes", "peak_pss_bytes"), ("uss_bytes", "peak_uss_bytes")):
        if column in samples and samples[column].notna().any():
            out[key] = float(samples[column].max())
    out["basis"] = "pss" if "peak_pss_bytes" in out else "rss"
    out["basis_note"] = MEMORY_BASIS_WORDS[out["basis"]]
    return out


