"""report.json's blocks, typed: one declaration of each, for two readers.

The renderers read these classes (a field missing or null reads as its default) and
:mod:`advisor.schema` builds report.json's JSON Schema from them, descriptions included. The top
level (:class:`advisor.report.Report`) is built from them in :mod:`advisor.report`.
"""

from __future__ import annotations

import functools
import typing
from typing import Annotated, ClassVar, Literal, Optional, TypeVar, Union

import msgspec
from msgspec import Meta

STATUSES = ("ok", "failed", "timeout", "no-steps", "interrupted")


# --- the report's blocks, typed ------------------------------------------------------------------
# One description of each block, for two readers: the renderers read these classes (a field
# missing or null reads as its default), and :mod:`advisor.schema` builds report.json's JSON
# Schema from them, descriptions included. What the probe saw (env, observed) is typed where the
# probe writes it (advisor/run_dir/seen.py); the report holds those structs.

Num = Optional[float]  # a figure that can be missing (null: not measured, or NaN in the measurement)
Number = Union[int, float, None]  # as report.json has it (an int stays an int)


B = TypeVar("B", bound="Block")


class Block(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A block of report.json. Built from a key it does not name, it fails (the writer may not make
    keys its schema lacks); read back through :meth:`of`, unknown keys are left out (a newer report
    still reads)."""

    required: ClassVar[tuple[str, ...]] = ()  # the schema's required keys (a reader takes a report without them)

    @classmethod
    def of(cls: type[B], block: object) -> B:
        """The typed block of a report's dict (null and unknown keys left out; a block is returned as it is)."""
        if isinstance(block, cls):
            return block
        return msgspec.convert(_readable(cls, block if isinstance(block, dict) else {}), cls, strict=False)


class Tool(Block):
    """The program that wrote the report."""

    required = ("name", "version")
    name: Annotated[str, msgspec.Meta(extra_json_schema={"enum": ["advise"]})] = "advise"  # a reader takes any name
    version: str = ""


class Step(Block):
    """One measured step (the profiler's warm-up step is not one)."""

    index: Optional[int] = None
    duration_s: Annotated[Num, Meta(description="the step's time on its clock: on a GPU the device's, between the events "
                                                "recorded at its two boundaries; on a CPU the host's "
                                                "(docs/explanation/steps.md)")] = None
    host_s: Annotated[Num, Meta(description="the same span on the host's clock: on a GPU, how long Python took to queue the "
                                            "step")] = None
    cpu_s: Annotated[Num, Meta(description="the training process's CPU time over the step (all its threads, not its loader "
                                           "workers'): a busy neighbour delays the step, it barely inflates this")] = None
    clock: Annotated[Optional[Literal["device", "host"]], Meta(description="which clock duration_s was read from")] = None
    data_wait_s: Num = None
    samples: Optional[int] = None
    optimizer_s: Num = None
    backward_s: Num = None
    profiled: Optional[bool] = None
    loss: Num = None


class Throughput(Block):
    """Rates over the measured steps outside the profiler, stalled steps left out."""

    samples_per_s: Annotated[Num, Meta(description="samples per second (null when the batch size is unknown)")] = None
    steps_per_s: Num = None
    step_time_median_s: Num = None
    step_time_p90_s: Num = None
    step_time_mean_s: Num = None
    n_steps: Optional[int] = None
    stalled_steps: Annotated[Optional[int], Meta(description="steps far slower than the rest (beyond Q3 + 3 IQR and twice the "
                                                             "median) even without their wait on the DataLoader, left out of the "
                                                             "rates")] = None
    basis: Annotated[Optional[str], Meta(description="which steps the rates come from")] = None


class LoopPhase(Block):
    """A phase of the training loop outside its training steps (advisor.probe.phases): evaluation
    passes, checkpoint saves, or a training loader's workers shut down at an epoch's end, inside the
    measured window, kept out of the steps' time and samples."""

    name: Annotated[Optional[Literal["evaluation", "checkpoint", "loader shutdown"]],
                    Meta(description="what the phase is")] = None
    seconds: Annotated[Num, Meta(description="its time in the measured window, in all")] = None
    share: Annotated[Num, Meta(description="its share of the measured window's wall time")] = None
    count: Annotated[Optional[int], Meta(description="how many times it ran in the window (two saves at one step are two)")] = None
    steps: Annotated[Optional[int], Meta(description="how many of the window's steps it ran in")] = None
    every_steps: Annotated[Num, Meta(description="every how many measured steps it comes (the window's steps over `steps`)")] = None


class Breakdown(Block):
    """Shares of the step time."""

    data_wait_frac: Num = None
    optimizer_frac: Num = None
    compute_frac: Annotated[Num, Meta(description="forward and backward: the rest of the step")] = None


class Rank(Block):
    """One rank of a job: how it ended (advise profile) or its trace's figures (advise analyze)."""

    rank: Optional[int] = None
    status: Annotated[Optional[str], Meta(description="profile: the rank's status (done, finished, failed, interrupted, died; "
                                                      "missing: it sent rank 0 no summary); none for a trace's rank (advise "
                                                      "analyze)")] = None
    node: Annotated[Optional[int], Meta(description="profile, a job a launcher started: the node the rank ran on (GROUP_RANK, "
                                                    "SLURM_NODEID)")] = None
    host: Annotated[Optional[str], Meta(description="profile, a job a launcher started: the rank's host name")] = None
    measured_steps: Optional[int] = None
    error: Optional[str] = None
    traceback: Optional[str] = None
    ended_at: Num = None
    arm_windows_switched: Annotated[Optional[int], Meta(description="windows this rank ran with a fix switched on")] = None
    samples_per_s: Num = None
    step_time_median_s: Num = None
    step_time_p90_s: Num = None
    trace: Annotated[Optional[str], Meta(description="analyze: the rank's trace file")] = None
    duration_s: Annotated[Num, Meta(description="analyze: the median profiled step")] = None
    comm_s: Annotated[Num, Meta(description="collective time per step")] = None
    exposed_comm_s: Annotated[Num, Meta(description="collective time no compute overlaps (waiting)")] = None
    compute_s: Num = None
    busy_s: Annotated[Num, Meta(description="the step less the exposed collective time: the rank's own work")] = None
    flops: Annotated[Num, Meta(description="FLOPs per step")] = None
    samples: Annotated[Num, Meta(description="samples per step")] = None

    @property
    def step_s(self) -> Optional[float]:
        """The rank's median step: its own steps' (profile), else its profiled steps' (analyze)."""
        return self.step_time_median_s if self.step_time_median_s is not None else self.duration_s


class Tensors(Block):
    parameters_bytes: Optional[int] = None
    gradients_bytes: Optional[int] = None
    optimizer_state_bytes: Optional[int] = None
    live_gradients_bytes: Optional[int] = None


class Memory(Block):
    """Peak memory: the accelerator's (CUDA), the measured window's, and the script's process tree's."""

    peak_allocated_bytes: Annotated[Number, Meta(description="CUDA: torch.cuda.max_memory_allocated")] = None
    peak_reserved_bytes: Number = None
    device_total_bytes: Number = None
    device_free_bytes: Annotated[Number, Meta(description="CUDA: free device memory when the probe started "
                                                          "(torch.cuda.mem_get_info): other processes' use shows here")] = None
    peak_memory_bytes: Annotated[Number, Meta(description="the measured window's peak, by memory_basis")] = None
    memory_basis: Annotated[Optional[str], Meta(description="cuda-max-allocated, cpu-allocator or rss-high-water")] = None
    peak_rss_hwm_bytes: Number = None
    runtime_bytes: Number = None
    budget_bytes: Annotated[Number, Meta(description="the memory the run may use (--memory-budget, else the device's "
                                                     "capacity)")] = None
    budget_source: Annotated[Optional[str], Meta(description="option or device")] = None
    tensors: Annotated[Optional[Tensors], Meta(description="parameters, gradients and optimizer state, in bytes")] = None
    checkpointable: Annotated[Optional[dict], Meta(description="what activation checkpointing would wrap")] = None
    peak_rss_bytes: Annotated[Number, Meta(description="summed RSS of the script's processes over the run (an upper "
                                                       "bound)")] = None
    peak_pss_bytes: Number = None
    peak_uss_bytes: Number = None
    basis: Annotated[Optional[str], Meta(description="pss or rss: the figure that stands for the process tree's peak")] = None
    basis_note: Optional[str] = None
    error: Annotated[Optional[str], Meta(description="why the probe could not read some of the figures above (the device's, "
                                                     "after a CUDA error of the script's poisoned it): those are missing")] = None


class Mfu(Block):
    """Model FLOPs utilization; null without a trace."""

    achieved_tflops: Number = None
    peak_tflops: Number = None
    mfu: Annotated[Number, Meta(description="achieved / peak (null without a peak for the device and dtype)")] = None
    dtype: Annotated[Optional[str], Meta(description="the precision of the peak: the dtype carrying most FLOPs; fp32 matmuls or "
                                                     "convolutions the run let use TF32 count as tf32")] = None
    precision_basis: Annotated[Optional[str], Meta(description="why that precision")] = None
    device_name: Optional[str] = None
    flops_per_step: Number = None
    basis: Optional[str] = None
    peak_source: Optional[str] = None


class Energy(Block):
    """The GPU's energy over the timed steps, as the device ran them (advisor.analysis.metrics.energy):
    NVML's energy counter between each window's ends, or its power samples over each window where the
    GPU has no counter; null where the GPU was not sampled (a CPU run)."""

    joules: Num = None
    seconds: Num = None
    watts_mean: Num = None
    joules_per_step: Num = None
    joules_per_sample: Annotated[Num, Meta(description="joules per sample (null when the batch size is unknown)")] = None
    source: Annotated[Optional[Literal["energy-counter", "power-samples"]], Meta(
        description="energy-counter: the rise of NVML's energy counter between each window's ends; power-samples: NVML power (a "
                    "one-second average on Hopper and later) averaged over each window, where the GPU has no energy counter "
                    "(before Volta)")] = None


class Screened(Block):
    """A fix screened (EXP001) and left out of the findings: not verified faster."""

    fix: Optional[str] = None
    overrides: Optional[dict] = None
    verdict: Optional[str] = None
    speedup: Num = None
    ci_low: Num = None
    ci_high: Num = None
    baseline_drift_frac: Num = None
    reason: Optional[str] = None
    recompiles: Annotated[Optional[dict], Meta(description="a compile screen's recompiles: count, the inputs whose shape varied, "
                                                           "and `said`, the line that tells them (as an experiment's "
                                                           "`recompiles`)")] = None


class ArmCost(Block):
    """One arm's share of the experiments' time (the baseline's windows are one arm)."""

    arm: Optional[str] = None
    windows: Optional[int] = None
    steps: Annotated[Optional[int], Meta(description="timed steps")] = None
    seconds: Annotated[Num, Meta(description="its windows in all: timed and untimed steps, and switching")] = None
    switch_s: Annotated[Num, Meta(description="of `seconds`, switching it on and off: a compilation, a loader's rebuild")] = None
    predicted_s: Annotated[Num, Meta(description="what the plan predicted its windows would take (each window closes "
                                                 "at 1.5x its timed steps' prediction)")] = None


class LeftOut(Block):
    """A fix the time budget left without a verdict: predicted not to fit, so never started (no
    `speedup`), or started and cut while it leaned faster (its `speedup` so far)."""

    fix: Optional[str] = None
    code: Optional[str] = None
    overrides: Annotated[Optional[dict], Meta(description="what it changes (the values its windows read, if started)")] = None
    predicted_s: Annotated[Num, Meta(description="its windows' predicted seconds, compiling included")] = None
    compile_s: Annotated[Num, Meta(description="of `predicted_s`, compiling (measured in this run, else a prior)")] = None
    command: Annotated[Optional[str], Meta(description="the command that measures it (its rule's fixes here, both passes)")] = None
    speedup: Annotated[Num, Meta(description="started: what its windows read before the budget ended (none: not started)")] = None
    ci_low: Num = None
    ci_high: Num = None


class Experiments(Block):
    """What the experiments ran and what they cost."""

    runs: Annotated[list[dict], Meta(description="fresh runs of the script (in-process arms need none)")] = []
    n_runs: Optional[int] = None
    child_wall_s: Number = None
    screened: list[Screened] = []
    budget_s: Annotated[Num, Meta(description="the in-process arms' time budget: --time-budget, or set automatically "
                                              "(1.35x the run's time to its profiled window, 5-240 s)")] = None
    budget_given: Annotated[Optional[bool], Meta(description="true: --time-budget; false: the automatic budget")] = None
    window_again_s: Annotated[Num, Meta(description="seconds added to the budget for measuring the profiled window "
                                                    "again until a quiet window (a neighbour disturbed it)")] = None
    disturbed_s: Annotated[Num, Meta(description="seconds added to the budget for the arms' windows a neighbour "
                                                 "disturbed and that were set aside (at most the budget again)")] = None
    held_s: Annotated[Num, Meta(description="seconds added to the budget while the arms' windows waited to start "
                                            "for a neighbour to leave the cores the script's steps use (at most the "
                                            "budget again)")] = None
    arms: Annotated[list[ArmCost], Meta(description="where the in-process arms' time went, the costliest first")] = []
    between_steps_s: Annotated[Num, Meta(description="the in-process arms' seconds between their windows' steps, from the "
                                               "child's wait for its first plan (where the budget starts) to the "
                                               "last window's end: what the loop ran between the steps (evaluation, "
                                               "checkpoints, the loader's restart at an epoch's end), the switches "
                                               "between windows and the child's wait while each round was planned")] = None
    cut_window_s: Annotated[Num, Meta(description="seconds of a window the run ended inside (the time budget's end): "
                                                  "its steps ran, none of them is read")] = None
    left_out: Annotated[list[LeftOut], Meta(description="fixes the time budget left without a verdict: not started "
                                                        "(predicted to outlast the budget left), or cut while "
                                                        "they leaned faster")] = []


class HtaStep(Block):
    index: Optional[int] = None
    step_us: Number = None
    compute_us: Number = None
    communication_us: Number = None
    memory_us: Number = None
    other_us: Number = None
    idle_us: Number = None


class HtaRank(Block):
    rank: Optional[int] = None
    kernel_time_us: Number = None
    idle_us: Number = None
    compute_us: Number = None
    non_compute_us: Number = None
    communication_us: Number = None
    memory_us: Number = None
    other_us: Number = None
    last_step_dropped: Optional[bool] = None
    steps: Optional[list[HtaStep]] = None


class HtaBreakdown(Block):
    """GPU time as Holistic Trace Analysis' temporal breakdown splits it, per rank and per step."""

    required = ("basis", "ranks")
    basis: Optional[str] = None
    ranks: Optional[list[HtaRank]] = None


Status = Literal["ok", "failed", "timeout", "no-steps", "interrupted"]
assert set(typing.get_args(Status)) == set(STATUSES)


class Utilization(Block):
    """Sampler means and maxima over the measured window."""

    gpu_util_percent_mean: Num = None
    gpu_util_percent_max: Num = None
    gpu_mem_used_bytes_mean: Num = None
    gpu_mem_used_bytes_max: Num = None
    gpu_power_w_mean: Num = None
    gpu_power_w_max: Num = None
    cpu_percent_mean: Num = None
    cpu_percent_max: Num = None
    rss_bytes_mean: Num = None
    rss_bytes_max: Num = None


class Fingerprint(Block):
    """What makes two runs comparable: the software, the machine and how busy it was (advise compare
    lists every difference; another device or GPU model makes two runs incomparable)."""

    device: Optional[str] = None
    cpu_model: Optional[str] = None
    cpu_count: Optional[int] = None
    torch: Optional[str] = None
    cuda: Optional[str] = None
    python: Optional[str] = None
    torch_threads: Optional[int] = None
    argv: Optional[list[str]] = None
    platform: Optional[str] = None
    load_avg_1m_start: Annotated[Num, Meta(description="the machine's 1-minute load average before the script started")] = None
    load_avg_1m_end: Num = None
    gpu_name: Optional[str] = None
    gpu_count: Optional[int] = None
    driver_version: Optional[str] = None
    gpu_max_sm_clock_mhz: Num = None
    gpu_app_sm_clock_mhz: Num = None
    gpu_app_mem_clock_mhz: Num = None
    gpu_power_limit_w: Num = None


class Artifacts(Block, omit_defaults=True):
    """The run dir's files, relative to it (analyze: the traces' absolute paths); a file the run did
    not write is not listed."""

    report_json: Optional[str] = None
    report_html: Optional[str] = None
    trace: Optional[str] = None
    rank_traces: Annotated[Optional[list[str]], Meta(description="analyze: every rank's trace")] = None
    steps_csv: Optional[str] = None
    samples_csv: Optional[str] = None
    log: Optional[str] = None
    probe_json: Optional[str] = None
    sources_json: Optional[str] = None

    def listed(self) -> list[tuple[str, str | list[str]]]:
        """The files written, as (name, path) in the declared order."""
        return [(name, value) for name in self.__struct_fields__ if (value := getattr(self, name))]


class Published:
    """A field's type as report.json promises it, where the typed report reads the field more loosely
    (an open block kept as its dict, a status as any string): :mod:`advisor.schema` publishes this one."""

    def __init__(self, kind: object) -> None:
        self.kind = kind


# report.json, typed: what :func:`build_report` returns, :func:`load_report` reads and the renderers
# read; the one declaration of the top level: :mod:`advisor.schema` publishes its JSON Schema from it
# (each field's Published type where it has one, and its description). The docstring is the schema's.
def _readable(cls: type[Block], data: dict) -> dict:
    """`data` as `cls` reads it: keys it does not name and null values left out, the blocks inside
    alike (a block that is not an object reads as missing; the open dicts are kept as they are)."""
    fields = _fields(cls)
    out = {}
    for key, value in data.items():
        if key not in fields or value is None:
            continue
        block, many = fields[key]
        if block is not None and many:
            if not isinstance(value, list):
                continue
            value = [_readable(block, row) for row in value if isinstance(row, dict)]
        elif block is not None:
            if not isinstance(value, dict):
                continue
            value = _readable(block, value)
        out[key] = value
    return out


@functools.cache
def _fields(cls: type[Block]) -> dict[str, tuple[Optional[type[Block]], bool]]:
    """Each field of `cls`: the block class it holds (Optional[...] and list[...] unwrapped; None
    for a plain value or an open dict) and whether a list of them."""
    return {name: _block_in(kind) for name, kind in typing.get_type_hints(cls).items() if name in cls.__struct_fields__}


def _block_in(kind: object) -> tuple[Optional[type[Block]], bool]:
    many = False
    while True:
        origin, args = typing.get_origin(kind), typing.get_args(kind)
        if origin is Union:
            inner = [a for a in args if a is not type(None)]
            if len(inner) != 1:
                return None, False
            kind = inner[0]
        elif origin is list:
            kind, many = args[0], True
        else:
            return (kind, many) if isinstance(kind, type) and issubclass(kind, Block) else (None, False)
