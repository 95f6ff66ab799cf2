"""report.json: the contract users and CI depend on.

``SCHEMA_VERSION`` changes only for a breaking change; within a version, fields are only
ever added. :func:`build_report` builds the typed :class:`Report` (a key no block names fails the
build), :func:`write_report` writes it with every key of its schema (null where there is no value),
and every renderer (terminal, HTML, markdown) reads that same typed report (or one read back from a
report.json by :func:`load_report`), so what a user sees and what CI compares are the same numbers.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
from pathlib import Path
import functools
import typing
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Optional, TypedDict, TypeVar, Union

import msgspec
from msgspec import Meta

from . import __version__
from .run_dir.atomic import write_json_atomic
from .run_dir.interrupt import exit_code
from .model import Finding, Recommendation

if TYPE_CHECKING:  # the CLI imports this module for its exit codes: no pandas at import time
    from .profile import Profile

SCHEMA_VERSION = 1
STATUSES = ("ok", "failed", "timeout", "no-steps", "interrupted")
# The exit codes of the CLI contract (docs/reference/exit-codes.md), beside the statuses they follow from.
EXIT_OK, EXIT_SCRIPT, EXIT_USAGE, EXIT_REGRESSION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_INCONCLUSIVE = 4  # a gate that could not tell: the threshold still inside its interval, or below the noise floor
EXIT_HANGUP, EXIT_TERMINATED = 129, 143  # 128 + the signal, as a shell reports a process it ended
STATUS_EXIT = {"ok": EXIT_OK, "failed": EXIT_SCRIPT, "timeout": EXIT_SCRIPT, "no-steps": EXIT_SCRIPT,
               "interrupted": EXIT_INTERRUPTED}
# An interrupted run exits with its signal's code: Ctrl-C 130, a closed terminal 129, SIGTERM 143.
signal_exit = exit_code


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


FROM_TRACE: Any = object()  # build_report's hta_breakdown: computed from the profile's own trace


def build_report(
    profile: Profile,
    *,
    status: str,
    script: str,
    argv: list[str],
    started_at: str,
    error: str | None = None,
    traceback: str | None = None,
    findings: list[Finding] | None = None,
    recommended: Recommendation | None = None,
    warnings: list[str] | None = None,
    artifacts: dict[str, Any] | None = None,
    notes: list[str] | None = None,
    wall_s: float | None = None,
    total_wall_s: float | None = None,
    experiments: dict | None = None,
    ranks: list[dict] | None = None,
    fingerprint: dict | None = None,
    hta_breakdown: dict | None = FROM_TRACE,
) -> "Report":
    """The typed report of a Profile, the typed findings and how the run ended: the one place the
    result model becomes report.json. A key no block names, or a value of the wrong type, fails
    here (msgspec), not in a reader's hands."""
    from .analysis import metrics, mfu, steptime, temporal  # the analysis: 300 ms (pandas); report.py is read by every command, --version too

    assert status in STATUSES, status
    steps = profile.steps
    report = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "advise", "version": __version__},
        "status": status,
        "error": error,
        "traceback": traceback,
        "script": script,
        "argv": list(argv),
        "started_at": started_at,
        "env": profile.env.record(),
        "step_source": profile.meta.get("step_source"),
        "steps": steptime.records(steps, Step.__struct_fields__),
        "throughput": steptime.throughput(steps),
        "breakdown": metrics.breakdown(steps),
        "memory": metrics.memory(profile.memory.record(), profile.samples),
        "mfu": mfu.model_flops_utilization(profile),
        "hta_breakdown": temporal.hta_breakdown(profile.trace) if hta_breakdown is FROM_TRACE else hta_breakdown,
        "utilization": metrics.utilization(profile.samples, steps),
        "energy": metrics.energy(profile.samples, steptime.timed_steps(steps)[0]),
        "observed": profile.observed.record(),
        "findings": [],  # the model's objects, set below
        "recommended": None,
        "warnings": list(warnings or []),
        "artifacts": dict(artifacts or {}),
        "notes": list(notes or []),
        "wall_s": wall_s,
        "total_wall_s": total_wall_s,
        "experiments": experiments,
        "ranks": list(ranks or []),
    }
    if fingerprint is not None:
        report["fingerprint"] = fingerprint
    report = metrics.clean(report)
    typed = msgspec.convert(report, Report, strict=False)
    lost = _lost(report, msgspec.to_builtins(typed))
    if lost:  # the published schema lets readers take unknown keys, so the writer must not make any
        raise ValueError(f"report.json: {lost} is not a field of its block (advisor.report)")
    # The model's own objects (copies: a later change to a finding does not reach the report), written
    # by their to_dict (as_json)
    typed.findings = copy.deepcopy(list(findings or []))
    typed.recommended = copy.deepcopy(recommended)
    return typed


def _lost(given, kept, at: str = "report") -> str | None:
    """The first key of `given` that the typed report dropped (a key no block names), or None."""
    if isinstance(given, dict) and isinstance(kept, dict):
        for key, value in given.items():
            if key not in kept:
                return f"{at}.{key}"
            lost = _lost(value, kept[key], f"{at}.{key}")
            if lost:
                return lost
    elif isinstance(given, list) and isinstance(kept, list):
        for i, (value, typed) in enumerate(zip(given, kept)):
            lost = _lost(value, typed, f"{at}[{i}]")
            if lost:
                return lost
    return None


def as_json(report: "Report") -> dict:
    """report.json's JSON value: every field of the typed report, nulls included (a reader finds
    each key of its schema version), as written and as `--json` prints it. The findings and the
    recommendation are the model's objects, written as their ``to_dict``."""
    from .analysis.metrics import clean  # JSON-safe numbers: NaN as null, numpy scalars as Python's

    out = msgspec.to_builtins(msgspec.structs.replace(report, findings=[], recommended=None))
    out["findings"] = clean([f.to_dict() for f in report.findings])
    out["recommended"] = clean(report.recommended.to_dict()) if report.recommended is not None else None
    return out


def write_report(report: "Report", path: Path) -> None:
    write_json_atomic(path, as_json(report))


class ReportError(ValueError):
    """A report.json that cannot be used: missing, not JSON, or from another schema."""


def load_report(path: str | Path, *, any_version: bool = False) -> "Report":
    """Read and check a report.json, typed; errors are one line, for the CLI to print. `any_version`
    reads a report of another schema version too (advise compare --force)."""
    path = Path(path)
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReportError(f"{path}: not a report.json ({type(exc).__name__})") from None
    if not isinstance(report, dict) or "schema_version" not in report:
        raise ReportError(f"{path}: not a report.json (no schema_version)")
    if report["schema_version"] != SCHEMA_VERSION and not any_version:
        raise ReportError(f"{path}: schema_version {report['schema_version']} is not supported (this advise reads {SCHEMA_VERSION})")
    try:
        return Report.of(report)
    except ValueError as exc:  # a value of the wrong type (msgspec), a finding's unknown severity
        raise ReportContentError(f"{path}: {exc}", exc) from None


class ReportContentError(ReportError):
    """A report.json whose values do not fit its schema (`cause`: what said so)."""

    def __init__(self, message: str, cause: ValueError) -> None:
        super().__init__(message)
        self.cause = cause


# --- the report's blocks, typed ------------------------------------------------------------------
# One description of each block, for two readers: the renderers read these classes (a field
# missing or null reads as its default), and :mod:`advisor.schema` builds report.json's JSON
# Schema from them, descriptions included. The open blocks (env, observed, artifacts: more keys
# may come, and the renderers list them as they are) stay dicts here and are described there.

Num = Optional[float]  # a figure that can be missing (null: not measured, or NaN in the measurement)
Number = Union[int, float, None]  # as report.json has it (an int stays an int)


B = TypeVar("B", bound="Block")


class Block(msgspec.Struct, kw_only=True):
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


class Experiments(Block):
    """What the experiments ran and what they cost."""

    runs: Annotated[list[dict], Meta(description="fresh runs of the script (in-process arms need none)")] = []
    n_runs: Optional[int] = None
    child_wall_s: Number = None
    screened: list[Screened] = []


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


class Env(TypedDict, total=False):
    """The machine and the torch build the script ran on (open: more keys may appear)."""

    python: str
    torch: str
    cuda: Optional[str]
    platform: str
    hostname: str
    cpu_count: Optional[int]
    cpu_usable: Annotated[Optional[int], Meta(description="the CPUs the script's process may run on (its affinity mask: a "
                                                          "cgroup, taskset, srun --cpu-bind)")]
    physical_cores: Optional[int]
    torch_threads: Optional[int]
    device: str
    device_name: Optional[str]
    device_capability: Annotated[Union[list[int], str, None], Meta(description="[major, minor] from the probe; a trace's "
                                                                               "deviceProperties give it as text")]
    device_memory_bytes: Optional[int]
    float32_matmul_precision: Optional[str]
    cudnn_benchmark: Optional[bool]
    cuda_matmul_allow_tf32: Optional[bool]
    cudnn_allow_tf32: Optional[bool]
    bf16_supported: Optional[bool]
    cuda_alloc_conf: Annotated[Optional[str], Meta(description="PYTORCH_CUDA_ALLOC_CONF as the script started with it")]
    rank: Optional[int]
    local_rank: Optional[int]
    world_size: Optional[int]
    local_world_size: Optional[int]


class Utilization(TypedDict, total=False):
    """Sampler means and maxima over the measured window."""

    gpu_util_percent_mean: Num
    gpu_util_percent_max: Num
    gpu_mem_used_bytes_mean: Num
    gpu_mem_used_bytes_max: Num
    gpu_power_w_mean: Num
    gpu_power_w_max: Num
    cpu_percent_mean: Num
    cpu_percent_max: Num
    rss_bytes_mean: Num
    rss_bytes_max: Num


class Fingerprint(TypedDict, total=False):
    """What makes two runs comparable: the software, the machine and how busy it was (advise compare
    lists every difference; another device or GPU model makes two runs incomparable)."""

    device: str
    cpu_model: Optional[str]
    cpu_count: Optional[int]
    torch: Optional[str]
    cuda: Optional[str]
    python: Optional[str]
    torch_threads: Optional[int]
    argv: list[str]
    platform: str
    load_avg_1m_start: Annotated[Num, Meta(description="the machine's 1-minute load average before the script started")]
    load_avg_1m_end: Num
    gpu_name: Optional[str]
    gpu_count: Optional[int]
    driver_version: Optional[str]
    gpu_max_sm_clock_mhz: Num
    gpu_app_sm_clock_mhz: Num
    gpu_app_mem_clock_mhz: Num
    gpu_power_limit_w: Num


class Published:
    """A field's type as report.json promises it, where the typed report reads the field more loosely
    (an open block kept as its dict, a status as any string): :mod:`advisor.schema` publishes this one."""

    def __init__(self, kind: Any) -> None:
        self.kind = kind


# report.json, typed: what :func:`build_report` returns, :func:`load_report` reads and the renderers
# read; the one declaration of the top level: :mod:`advisor.schema` publishes its JSON Schema from it
# (each field's Published type where it has one, and its description). The docstring is the schema's.
class Report(Block):
    """report.json: one run of `advise profile` (or `advise analyze`)."""

    schema_version: Annotated[int, Published(Literal[1]), Meta(
        description="1: within a version fields are only added, never changed or removed")] = SCHEMA_VERSION
    tool: Tool = msgspec.field(default_factory=Tool)
    status: Annotated[Optional[str], Published(Status), Meta(description="how the run ended")] = None
    error: Annotated[Optional[str], Meta(description="the script's error when status is not ok")] = None
    traceback: Annotated[Optional[str], Meta(description="the script's traceback, without advise's frames")] = None
    script: Annotated[Optional[str], Published(str)] = None
    argv: Annotated[list[str], Meta(description="the script's own arguments")] = []
    started_at: Annotated[Optional[str], Published(str), Meta(description="ISO 8601, with the local offset")] = None
    env: Annotated[dict[str, Any], Published(Env)] = {}
    step_source: Annotated[Optional[str], Meta(description="what marked the steps: optimizer, dataloader, backward, marker or "
                                                           "trace")] = None
    steps: list[Step] = []
    throughput: Throughput = msgspec.field(default_factory=Throughput)
    breakdown: Breakdown = msgspec.field(default_factory=Breakdown)
    memory: Annotated[dict[str, Any], Published(Memory)] = {}  # read through Memory.of where a figure is wanted
    mfu: Optional[Mfu] = None
    hta_breakdown: Optional[HtaBreakdown] = None
    utilization: Annotated[dict[str, Any], Published(Utilization)] = {}
    energy: Optional[Energy] = None
    observed: Annotated[dict[str, Any], Meta(description="what the probe saw of the script: optimizers, DataLoaders, zero_grad "
                                                         "calls (open)")] = {}
    # The result model's objects (advisor.model): written by their to_dict, read by their from_dict
    findings: Annotated[list[Finding], Meta(description="ranked as every renderer shows them: measured gain first")] = []
    recommended: Annotated[Optional[Recommendation], Meta(description="the winners stacked and measured together, with the "
                                                                      "code change for each")] = None
    warnings: Annotated[list[Any], Published(list[str])] = []
    artifacts: Annotated[dict[str, Any], Meta(description="the run dir's files, relative to it (analyze: the traces' absolute "
                                                          "paths)")] = {}
    notes: Annotated[list[Any], Published(list[str]), Meta(description="what the probe could not do and why, said once")] = []
    wall_s: Annotated[Num, Meta(description="the profiled run")] = None
    total_wall_s: Annotated[Num, Meta(description="the whole command: run, analysis and experiments")] = None
    experiments: Optional[Experiments] = None  # none: no experiments ran
    ranks: Annotated[list[Rank], Meta(description="each rank of a job (empty for one process)")] = []
    fingerprint: Annotated[Union[dict[str, Any], msgspec.UnsetType], Published(Fingerprint), Meta(
        description="advise profile: what makes two runs comparable (advise compare)")] = msgspec.UNSET  # advise profile's alone

    @property
    def device(self) -> str | None:
        """The device the run used ("cpu", "cuda", ...); None where the report does not say (an analyzed trace)."""
        device = self.env.get("device")
        return device if isinstance(device, str) else None

    @classmethod
    def of(cls, block: object) -> "Report":
        """The typed report of a report.json's dict: its blocks as :meth:`Block.of` reads them, its
        findings and recommendation as the model's ``from_dict`` does (a report is returned as it is)."""
        if isinstance(block, Report):
            return block
        data = block if isinstance(block, dict) else {}
        report = super().of({k: v for k, v in data.items() if k not in _MODEL_FIELDS})
        rows, rec = data.get("findings"), data.get("recommended")
        report.findings = [Finding.from_dict(d) for d in rows if isinstance(d, dict)] if isinstance(rows, list) else []
        report.recommended = Recommendation.from_dict(rec) if isinstance(rec, dict) and rec else None
        return report

    @property
    def ok(self) -> bool:
        return (self.status or "ok") == "ok"


_MODEL_FIELDS = ("findings", "recommended")  # the result model's (advisor.model): its to_dict and from_dict, not msgspec's


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


def _block_in(kind: Any) -> tuple[Optional[type[Block]], bool]:
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
