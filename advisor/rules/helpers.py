"""Small analyses over a Profile that several rules share (ruff's ``helpers.rs``).

Pure functions over the Profile's DataFrames, vectorised with numpy so that a rule over a
200k-event trace costs milliseconds. Times are microseconds (``_us``) on trace frames and
seconds (``_s``) on the probe's step table, as in :mod:`advisor.profile`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, SupportsFloat

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.trace import intervals
from advisor.analysis import metrics, steptime
from advisor.model import Fix
from advisor.overrides.cores import cores_per_rank
from advisor.overrides import compile_ladder

if TYPE_CHECKING:
    from advisor.profile import Profile

# --------------------------------------------------------------------------- steps


def timed_steps(profile: Profile) -> pd.DataFrame:
    """Steps to judge per-step shares on: clean (unprofiled) probe steps, else all steps."""
    steps, _ = steptime.timed_steps(profile.steps)
    if steps.empty or not steptime.has_durations(steps):
        return steps
    return steps[steptime.durations(steps) > 0]


def quiet_steps(profile: Profile) -> pd.DataFrame:
    """:func:`timed_steps` less those a neighbour disturbed (:func:`metrics.disturbed_steps`) where
    `MIN_QUIET_STEPS` remain: the steps a step's length is read on. A neighbour that takes a core
    stretches every step it overlaps (conv-mnist beside one: a median step of 134-298 ms against 30 ms
    quiet, and its GEMMs' 60% share read as 7-14%, under PR001's bar). Shares within a step stay on
    every timed step: the steps a neighbour disturbs are not a fair sample of them (a 4-worker I/O
    loader's workers meet the neighbour in the steps that wait on them, and its wait's share fell
    under DL001's bar on the rest)."""
    return profile.derived("quiet_steps", lambda: _quiet_steps(profile))


def _quiet_steps(profile: Profile) -> pd.DataFrame:
    steps = timed_steps(profile)
    if steps.empty:
        return steps
    hit = metrics.disturbed_steps(steps, profile.samples, profile.environment.cpu_count)
    return steps[~hit] if hit.any() and (~hit).sum() >= metrics.MIN_QUIET_STEPS else steps


def data_wait_frac(profile: Profile) -> float | None:
    """Share of the timed steps spent waiting for the DataLoader (None: not measured)."""
    return steptime.share(timed_steps(profile), steptime.DATA_WAIT)


def optimizer_frac(profile: Profile) -> float | None:
    """Share of the timed steps spent in optimizer.step() (None: not measured)."""
    return steptime.share(timed_steps(profile), steptime.OPTIMIZER)


def trace_steps(profile: Profile) -> pd.DataFrame:
    """The trace's ProfilerStep rows that have a duration (a cut-off last step has none)."""
    ts = profile.trace_steps
    return ts[ts["dur_us"] > 0]


def quiet_trace_steps(profile: Profile) -> pd.DataFrame:
    """:func:`trace_steps` less those a neighbour disturbed (:func:`metrics.disturbed_steps`, read on the
    probe's record of its profiled steps, in order), else the shortest of them: a profiled step that
    waited for a core holds its GEMMs' time inflated too (conv-mnist: 143 ms against 17-20 ms), and
    over a quiet step's length read as 100% of it."""
    steps, probe = trace_steps(profile), profile.steps
    if steps.empty or probe.empty:
        return steps
    profiled = probe[steptime.profiled(probe)]
    if len(profiled) != len(steps):
        return steps
    hit = metrics.disturbed_steps(probe, profile.samples, profile.environment.cpu_count)[profiled.index].to_numpy()
    if not hit.any():
        return steps
    kept = steps[~hit]
    return kept if not kept.empty else steps.nsmallest(1, "dur_us")


def is_training(profile: Profile) -> bool:
    """Whether the run trains (an optimizer stepped, or backward ran), not just infers."""
    if profile.observed.optimizers:
        return True
    if profile.step_source in ("optimizer", "backward"):
        return True
    ann = profile.annotations
    if len(ann) and ann["name"].str.startswith("Optimizer.step").any():
        return True
    ops = profile.ops
    return bool(len(ops) and ops["name"].str.contains("Backward|backward", regex=True).any())


# --------------------------------------------------------------------------- intervals


def gpu_busy(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """Merged intervals in which any GPU kernel, copy or memset runs."""
    k, m = profile.kernels, profile.memcpy
    return intervals.merge(np.concatenate([k["ts_us"].to_numpy(), m["ts_us"].to_numpy()]),
                           np.concatenate([k["end_us"].to_numpy(), m["end_us"].to_numpy()]))


def main_thread(profile: Profile) -> int | None:
    """The thread that runs the training loop: the one holding the ProfilerStep ranges."""
    ann = profile.annotations
    steps = ann[ann["name"].str.startswith("ProfilerStep#")]
    if len(steps):
        return int(steps["tid"].mode().iloc[0])
    ops = profile.ops
    return int(ops["tid"].mode().iloc[0]) if len(ops) else None


def dataloader_ranges(profile: Profile) -> pd.DataFrame:
    """``enumerate(DataLoader)...__next__`` ranges (annotations, or ops in old traces)."""
    ann = profile.annotations
    rows = ann[ann["name"].str.startswith("enumerate(DataLoader)")]
    if len(rows):
        return rows
    ops = profile.ops
    return ops[ops["name"].str.startswith("enumerate(DataLoader)")]


# --------------------------------------------------------------------------- devices


@dataclass(frozen=True)
class Device:
    """What the training device can do for lower precision."""

    kind: str  # "cuda" (NVIDIA), "rocm" (AMD) or "cpu"
    name: str
    capability: tuple[int, int] | None
    fp16_tensor_cores: bool
    tf32: bool
    bf16: bool

    @property
    def capability_str(self) -> str | None:
        return f"{self.capability[0]}.{self.capability[1]}" if self.capability else None


_AMD = re.compile(r"\b(AMD|Instinct|Radeon|MI\d{2,3}X?)\b", re.I)


def device(profile: Profile) -> Device:
    env = profile.env
    name = env.device_name or ""
    if not profile.has_gpu:
        return Device("cpu", name or "cpu", None, False, False, bool(env.bf16_supported))
    cap = None
    raw = env.device_capability
    if raw:
        try:
            major, minor = (int(x) for x in str(raw).split(".")[:2])
            cap = (major, minor)
        except ValueError:
            cap = None
    if _AMD.search(name) or env.hip:
        # CDNA (MI100 and later) has fp16 and bf16 matrix cores; PyTorch's TF32 flag does not apply.
        return Device("rocm", name, cap, True, False, True)
    if cap is None:
        return Device("cuda", name, None, False, False, False)
    return Device("cuda", name, cap, cap >= (7, 0), cap >= (8, 0), cap >= (8, 0))


COMPILE_LADDER_SAID = ("torch.compile's modes are measured as one fix, its best verified mode leading, each with what "
                      "compiling cost and the steps that pay it back: the default fuses kernels; reduce-overhead also "
                      "replays the step's launches as CUDA graphs (static shapes: a new input shape records again); "
                      "max-autotune-no-cudagraphs searches faster matmul kernels at a longer compile.")


def compile_fix(dev: Device) -> Fix:
    """The fix of a step whose device waits on the host issuing work: torch.compile, on a GPU its
    modes measured as one sweep (:func:`advisor.overrides.compile_ladder`)."""
    first, *ladder = compile_ladder(gpu=dev.kind != "cpu")
    title = ("Compile the model: torch.compile's default, reduce-overhead (CUDA graphs) and "
             "max-autotune-no-cudagraphs modes, measured as one sweep" if ladder else "Compile the model with torch.compile")
    return Fix.unsafe(title, first, ladder=ladder or None)


# --------------------------------------------------------------------------- kernels and ops


def kernel_launches(profile: Profile) -> pd.DataFrame:
    """Kernels joined to the runtime call that launched them (``launch_ts_us``, ``tid``)."""
    k = profile.kernels
    rt = profile.runtime
    if k.empty or rt.empty:
        return k.assign(launch_ts_us=np.nan, launch_end_us=np.nan, tid=-1)
    launches = rt[rt["correlation"].notna()].drop_duplicates("correlation")
    joined = k.merge(
        launches[["correlation", "ts_us", "end_us", "tid"]].rename(columns={"ts_us": "launch_ts_us", "end_us": "launch_end_us"}),
        on="correlation", how="left",
    )
    joined["tid"] = joined["tid"].fillna(-1).astype(np.int64)
    return joined


def in_disjoint(intervals: pd.DataFrame, ts: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Position (iloc) in `intervals` (disjoint per thread: ts_us, end_us, tid) containing each point, or -1."""
    out = np.full(len(ts), -1, dtype=np.int64)
    if intervals.empty or len(ts) == 0:
        return out
    itid = intervals["tid"].to_numpy()
    starts_all = intervals["ts_us"].to_numpy()
    ends_all = intervals["end_us"].to_numpy()
    for thread in np.unique(itid):
        rows = np.flatnonzero(itid == thread)
        rows = rows[np.argsort(starts_all[rows], kind="stable")]
        pos = np.flatnonzero(tid == thread)
        if len(pos) == 0:
            continue
        i = np.searchsorted(starts_all[rows], ts[pos], side="right") - 1
        ok = (i >= 0) & (ts[pos] <= ends_all[rows[np.maximum(i, 0)]])
        out[pos[ok]] = rows[i[ok]]
    return out


def enclosing_ops(profile: Profile, ts: float, end: float, tid: int) -> list[str]:
    """Names of the ops around [ts, end] on thread `tid`, outermost first."""
    ops = profile.ops
    if ops.empty:
        return []
    mask = (ops["tid"].to_numpy() == tid) & (ops["ts_us"].to_numpy() <= ts) & (ops["end_us"].to_numpy() >= end)
    hit = ops[mask].sort_values("depth")
    return hit["name"].tolist()


_NOT_USER = re.compile(
    r"(^<built-in|^<string>|^<frozen|torch/|site-packages/|dist-packages/|threading\.py|multiprocessing/|runpy\.py|"
    r"advisor/|^\w+\.py\(\d+\): (?:_call_impl|_wrapped_call_impl)$|^nn\.Module:|^torch_)"
)


def python_call_site(profile: Profile, ts: float, end: float, tid: int) -> str | None:
    """The innermost user frame (``file.py(line): func``) around [ts, end], when stacks were recorded."""
    py = profile.python
    if py.empty:
        return None
    mask = (py["tid"].to_numpy() == tid) & (py["ts_us"].to_numpy() <= ts) & (py["end_us"].to_numpy() >= end)
    frames = py[mask].sort_values(["ts_us", "dur_us"], ascending=[True, False])["name"].tolist()
    for name in reversed(frames):
        if not _NOT_USER.search(name):
            return name
    return None


def op_dtype(types: object) -> str | None:
    """The first tensor dtype of an op's "Input type" list ('float', 'c10::Half', ...)."""
    if not isinstance(types, list):
        return None
    for t in types:
        if isinstance(t, str) and t and t not in ("Scalar", "GenericList", "TensorList", "Int", "Bool", "ScalarList", "None"):
            return t
    return None


FP32 = {"float", "float32"}
LOW_PRECISION = {"c10::Half", "c10::BFloat16", "Half", "BFloat16", "float16", "bfloat16",
                 "c10::Float8_e4m3fn", "c10::Float8_e5m2", "c10::Float8_e4m3fnuz", "c10::Float8_e5m2fnuz"}
CONV_NAMES = ("conv", "convolution")


def gemm_ops(profile: Profile) -> pd.DataFrame:
    """Outermost GEMM/convolution ops (those carrying FLOPs) with ``dtype`` and ``is_conv``: read
    once per Profile (PR001, PR002, GPU004 and EXP001 each read it, some twice)."""
    return profile.derived("gemm_ops", lambda: _gemm_ops(profile))


def _gemm_ops(profile: Profile) -> pd.DataFrame:
    ops = profile.ops
    f = ops[ops["flops"].notna()]
    if f.empty:
        return f.assign(dtype=pd.Series(dtype=object), is_conv=pd.Series(dtype=bool))
    return f.assign(dtype=[op_dtype(t) for t in f["input_types"]],
                    is_conv=f["name"].str.contains("conv", regex=False).to_numpy())


CPU_BF16_MIN_OP_MFLOPS = 100.0  # smaller GEMMs gain nothing from a CPU's bf16: the casts cost what the matmul saves
BF16_GEMM_SAVES = 0.5  # of a GEMM's time, moved from FP32 to bf16 units about twice as fast
FUSED_SAVES_OVER_SINGLE = 0.65  # of a CPU optimizer step's time, fused over the single-tensor loop (about 3x less)
FUSED_SAVES_OVER_FOREACH = 0.3  # ... over foreach kernels


def clean_step_us(profile: Profile) -> float | None:
    """The median step outside the profiler that no neighbour disturbed (:func:`quiet_steps`), in
    microseconds (None when every step was profiled)."""
    steps = quiet_steps(profile)
    if not steptime.unprofiled(steps).any():
        return None
    return float(steptime.durations(steps).median()) * 1e6


def cpu_fp32_gemm_share(profile: Profile, min_op_mflops: float = CPU_BF16_MIN_OP_MFLOPS) -> tuple[float | None, pd.DataFrame]:
    """The share of a step the profiled steps' FP32 GEMMs and convolutions of `min_op_mflops` or more
    take on the host (over the median step outside the profiler, whose hooks inflate small ops more
    than big GEMMs; at most 1: timed on a contended window they can add up to more than a clean
    step), and those ops; None where the trace timed no step."""
    ops, steps = gemm_ops(profile), quiet_trace_steps(profile)
    if steps.empty:
        return None, ops
    ops = ops[ops["step"].isin(steps["index"]) & ops["dtype"].isin(FP32)]
    big = ops[ops["flops"] >= min_op_mflops * 1e6]
    n_steps = len(steps)
    return min(1.0, frac(big["dur_us"].sum() / n_steps, clean_step_us(profile) or steps["dur_us"].sum() / n_steps)), big


# --------------------------------------------------------------------------- numbers


def frac(x: float, total: float) -> float:
    return float(x) / float(total) if total and total > 0 and math.isfinite(total) else 0.0


def r3(x: SupportsFloat | None) -> float | None:
    """Round for evidence: 3 significant decimals where it matters, JSON-safe."""
    if x is None:
        return None
    x = float(x)
    if not math.isfinite(x):
        return None
    return round(x, 4) if abs(x) < 10 else round(x, 1)


SYNC_CALLS = r"(?:cuda|hip)(?:Stream|Device|Event)Synchronize"


def draining_syncs(profile: Profile, steps: pd.DataFrame) -> pd.DataFrame:
    """Sync calls inside `steps` that found the GPU busy, i.e. that emptied a queue of work.

    A sync issued while the GPU is already idle returns at once and costs nothing; only one
    that waited leaves a bubble behind it (the GPU idles until the CPU issues new work).
    """
    rt = profile.runtime
    syncs = rt[rt["name"].str.contains(SYNC_CALLS, regex=True) & rt["step"].isin(steps["index"])]
    if syncs.empty:
        return syncs
    bs, be = gpu_busy(profile)
    waited = intervals.coverage(bs, be, syncs["ts_us"].to_numpy(), syncs["ts_us"].to_numpy() + 1.0) > 0
    return syncs[waited]


def cpu_busy_frac(profile: Profile, cores: int) -> float | None:
    """Mean CPU use over the measured window as a share of all cores (tree or machine, the higher)."""
    samples = profile.samples
    if samples.empty or "t" not in samples:
        return None
    window = metrics.window_samples(samples, profile.steps)
    values = []
    if "cpu_percent" in window and window["cpu_percent"].notna().any():
        values.append(float(window["cpu_percent"].mean()) / (100.0 * cores))
    if "sys_cpu_percent" in window and window["sys_cpu_percent"].notna().any():
        values.append(float(window["sys_cpu_percent"].mean()) / 100.0)
    return min(1.0, max(values)) if values else None


@dataclass(frozen=True)
class Oversubscription:
    cpu_count: int
    torch_threads: int
    num_workers: int
    threads_demanded: int
    cpu_busy_frac: float
    workers_busy_cores: float | None  # sampled; None in an older run dir
    workers_wanted_cores: float | None = None  # used, and waited for beside a neighbour (the kernel's wait clock)


def oversubscription(profile: Profile, min_cpu_busy_frac: float = 0.85) -> Oversubscription | None:
    """More busy threads than cores on a saturated CPU (see cpu-oversubscription), or None.

    CPU training: intra-op threads + DataLoader workers; GPU training: workers + the main process.
    """
    env = profile.env
    cores, threads = env.cpu_count, env.torch_threads
    workers = profile.observed.max_workers
    if not cores or not threads or workers == 0:
        return None
    busy_workers = metrics.workers_busy(profile.samples, profile.steps)
    # and what a neighbour starved them of while the trainer computed: they still ask for it. While the
    # main process waits on its loader its threads are idle, so workers that wait for a core then wait
    # behind the neighbour (an I/O loader's 2 workers beside a test suite on 2 cores waited 0.22-0.24
    # cores while the main process waited on them 57-69% of its steps: counted whole, DL003 took DL001's finding)
    computing = 1.0 - min(1.0, data_wait_frac(profile) or 0.0)
    starved = metrics.workers_starved(profile.samples, profile.steps, cores) * computing
    wanted = None if busy_workers is None else busy_workers + starved
    working = workers if wanted is None else min(workers, math.ceil(wanted - 0.25))
    demand = threads + working if profile.device == "cpu" else working + 1
    if demand <= cores_per_rank(profile.env):  # each rank's share of the node
        return None
    busy = cpu_busy_frac(profile, cores)
    if busy is None or busy < min_cpu_busy_frac:
        return None
    return Oversubscription(cores, threads, workers, demand, busy,
                            None if busy_workers is None else round(busy_workers, 3),
                            None if wanted is None else round(wanted, 3))


def workers_forked_each_epoch(profile: Profile) -> dict:
    """``{"persistent_workers": True}`` where the script's training loader forks its workers anew each
    epoch and the measured steps met an epoch's start (:func:`steptime.loader_started`), else ``{}``:
    the part of a loader fix that keeps them for the run."""
    loaders = [d for d in profile.observed.dataloaders if d.num_workers]
    timed = timed_steps(profile)
    if not loaders or any(d.persistent_workers for d in loaders) or not steptime.loader_started(timed).any():
        return {}
    return {"persistent_workers": True}
