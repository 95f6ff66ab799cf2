"""The report.json and compare.json contract as types: the one source of their JSON Schemas.

:mod:`advisor.report` builds report.json as a dict from the Profile and the typed result model
(:mod:`advisor.model`: ``Finding``, ``Fix``, ``Experiment``, ``SourceLocation``,
``Recommendation``); this module describes that dict's top level and the blocks around the model,
and :func:`report_schema` turns the description, model included, into a JSON Schema with msgspec.
``advise schema`` prints it, the package ships it (``advisor/schemas/``, checked equal to the
generated one by the tests), and the docs site publishes it.

The published schema lets objects carry fields it does not name: within a ``schema_version``
fields are only ever added, so a consumer holding an older schema still accepts a newer report.
:func:`report_schema` with ``strict=True`` closes every object described here (except the open
ones: ``env``, ``observed``, a finding's ``evidence``...); the test suite validates every report
it writes against that, so a field added to the code without its description fails a test.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, TypedDict, Union

import msgspec

from .model import Finding, Recommendation
from .report import SCHEMA_VERSION, STATUSES

COMPARE_SCHEMA_VERSION = 1  # advisor.compare's (a stage: the core cannot import it; a test checks they agree)


Num = Optional[float]  # a figure that can be missing (null: not measured, or NaN in the measurement)


def _d(text: str, kind: Any = None) -> Any:
    """A field described: the description lands in the schema (and the docs' field tables)."""
    return Annotated[kind, msgspec.Meta(description=text)]


Status = Literal["ok", "failed", "timeout", "no-steps", "interrupted"]
assert set(Status.__args__) == set(STATUSES)


class Tool(TypedDict):
    """The program that wrote the report."""

    name: Literal["advise"]
    version: str


class Env(TypedDict, total=False):
    """The machine and the torch build the script ran on (open: more keys may appear)."""

    python: str
    torch: str
    cuda: Optional[str]
    platform: str
    hostname: str
    cpu_count: Optional[int]
    cpu_usable: _d("the CPUs the script's process may run on (its affinity mask: a cgroup, taskset, srun --cpu-bind)",
                   Optional[int])
    physical_cores: Optional[int]
    torch_threads: Optional[int]
    device: str
    device_name: Optional[str]
    device_capability: _d("[major, minor] from the probe; a trace's deviceProperties give it as text", Union[list[int], str, None])
    device_memory_bytes: Optional[int]
    float32_matmul_precision: Optional[str]
    cudnn_benchmark: Optional[bool]
    cuda_matmul_allow_tf32: Optional[bool]
    cudnn_allow_tf32: Optional[bool]
    bf16_supported: Optional[bool]
    rank: Optional[int]
    local_rank: Optional[int]
    world_size: Optional[int]
    local_world_size: Optional[int]


class Step(TypedDict, total=False):
    """One measured step (the profiler's warm-up step is not one)."""

    index: int
    duration_s: Num
    data_wait_s: Num
    samples: Optional[int]
    optimizer_s: Num
    backward_s: Num
    profiled: Optional[bool]
    loss: Num


class Throughput(TypedDict, total=False):
    """Rates over the measured steps outside the profiler, stalled steps left out."""

    samples_per_s: _d("samples per second (null when the batch size is unknown)", Num)
    steps_per_s: Num
    step_time_median_s: Num
    step_time_p90_s: Num
    step_time_mean_s: Num
    n_steps: int
    stalled_steps: _d("steps far slower than the rest (beyond Q3 + 3 IQR and twice the median) even without their wait on the DataLoader, left out of the rates", int)
    basis: _d("which steps the rates come from", str)


class Breakdown(TypedDict, total=False):
    """Shares of the step time."""

    data_wait_frac: Num
    optimizer_frac: Num
    compute_frac: _d("forward and backward: the rest of the step", Num)


class Tensors(TypedDict, total=False):
    parameters_bytes: Optional[int]
    gradients_bytes: Optional[int]
    optimizer_state_bytes: Optional[int]
    live_gradients_bytes: Optional[int]


class Memory(TypedDict, total=False):
    """Peak memory: the accelerator's (CUDA), the measured window's, and the script's process tree's."""

    peak_allocated_bytes: _d("CUDA: torch.cuda.max_memory_allocated", Optional[int])
    peak_reserved_bytes: Optional[int]
    device_total_bytes: Optional[int]
    peak_memory_bytes: _d("the measured window's peak, by memory_basis", Optional[int])
    memory_basis: _d("cuda-max-allocated, cpu-allocator or rss-high-water", Optional[str])
    peak_rss_hwm_bytes: Optional[int]
    runtime_bytes: Optional[int]
    budget_bytes: _d("the memory the run may use (--memory-budget, else the device's capacity)", Optional[int])
    budget_source: _d("option or device", Optional[str])
    tensors: _d("parameters, gradients and optimizer state, in bytes", Optional[Tensors])
    checkpointable: _d("what activation checkpointing would wrap", Optional[dict])
    peak_rss_bytes: _d("summed RSS of the script's processes over the run (an upper bound)", Num)
    peak_pss_bytes: Num
    peak_uss_bytes: Num
    basis: _d("pss or rss: the figure that stands for the process tree's peak", str)
    basis_note: str


class Mfu(TypedDict, total=False):
    """Model FLOPs utilization; null without a trace."""

    achieved_tflops: Num
    peak_tflops: Num
    mfu: _d("achieved / peak (null without a peak for the device and dtype)", Num)
    dtype: Optional[str]
    device_name: Optional[str]
    flops_per_step: Num
    basis: str
    peak_source: Optional[str]


class HtaStep(TypedDict, total=False):
    index: int
    step_us: float
    compute_us: float
    communication_us: float
    memory_us: float
    other_us: float
    idle_us: float


class HtaRank(TypedDict, total=False):
    rank: int
    kernel_time_us: float
    idle_us: float
    compute_us: float
    non_compute_us: float
    communication_us: float
    memory_us: float
    other_us: float
    last_step_dropped: bool
    steps: list[HtaStep]


class HtaBreakdown(TypedDict):
    """GPU time as Holistic Trace Analysis' temporal breakdown splits it, per rank and per step."""

    basis: str
    ranks: list[HtaRank]


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


class Screened(TypedDict, total=False):
    """A fix screened (EXP001) and left out of the findings: not verified faster."""

    fix: str
    overrides: Optional[dict]
    verdict: str
    speedup: Num
    ci_low: Num
    ci_high: Num
    baseline_drift_frac: Num
    reason: Optional[str]


class Experiments(TypedDict, total=False):
    """What the experiments ran and what they cost."""

    runs: _d("fresh runs of the script (in-process arms need none)", list[dict])
    n_runs: int
    child_wall_s: float
    screened: list[Screened]


class Rank(TypedDict, total=False):
    """One rank of a job: how it ended (advise profile) or its trace's figures (advise analyze)."""

    rank: int
    status: _d("profile: the rank's status (done, finished, failed, interrupted, died; missing: it sent rank 0 "
               "no summary)", str)
    node: _d("profile, a job a launcher started: the node the rank ran on (GROUP_RANK, SLURM_NODEID)", Optional[int])
    host: _d("profile, a job a launcher started: the rank's host name", Optional[str])
    measured_steps: int
    error: Optional[str]
    traceback: Optional[str]
    ended_at: Num
    arm_windows_switched: _d("windows this rank ran with a fix switched on", int)
    samples_per_s: Num
    step_time_median_s: Num
    step_time_p90_s: Num
    trace: _d("analyze: the rank's trace file", str)
    duration_s: _d("analyze: the median profiled step", Num)
    comm_s: _d("collective time per step", Num)
    exposed_comm_s: _d("collective time no compute overlaps (waiting)", Num)
    compute_s: Num
    busy_s: _d("the step less the exposed collective time: the rank's own work", Num)
    flops: _d("FLOPs per step", Num)
    samples: _d("samples per step", Num)


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
    load_avg_1m_start: _d("the machine's 1-minute load average before the script started", Num)
    load_avg_1m_end: Num
    gpu_name: Optional[str]
    gpu_count: Optional[int]
    driver_version: Optional[str]
    gpu_max_sm_clock_mhz: Num
    gpu_app_sm_clock_mhz: Num
    gpu_app_mem_clock_mhz: Num
    gpu_power_limit_w: Num


class _ReportBase(TypedDict):
    schema_version: _d("1: within a version fields are only added, never changed or removed", Literal[1])
    tool: Tool
    status: _d("how the run ended", Status)
    error: _d("the script's error when status is not ok", Optional[str])
    traceback: _d("the script's traceback, without advise's frames", Optional[str])
    script: str
    argv: _d("the script's own arguments", list[str])
    started_at: _d("ISO 8601, with the local offset", str)
    env: Env
    step_source: _d("what marked the steps: optimizer, dataloader, backward, marker or trace", Optional[str])
    steps: list[Step]
    throughput: Throughput
    breakdown: Breakdown
    memory: Memory
    mfu: Optional[Mfu]
    hta_breakdown: Optional[HtaBreakdown]
    utilization: Utilization
    observed: _d("what the probe saw of the script: optimizers, DataLoaders, zero_grad calls (open)", dict)
    findings: _d("ranked as every renderer shows them: measured gain first", list[Finding])
    recommended: _d("the winners stacked and measured together, with the code change for each", Optional[Recommendation])
    warnings: list[str]
    artifacts: _d("the run dir's files, relative to it (analyze: the traces' absolute paths)", dict[str, Any])


class Report(_ReportBase, total=False):
    """report.json: one run of `advise profile` (or `advise analyze`)."""

    notes: _d("what the probe could not do and why, said once", list[str])
    wall_s: _d("the profiled run", Num)
    total_wall_s: _d("the whole command: run, analysis and experiments", Num)
    experiments: Optional[Experiments]
    ranks: _d("each rank of a job (empty for one process)", list[Rank])
    fingerprint: _d("advise profile: what makes two runs comparable (advise compare)", Fingerprint)


# --- compare.json ------------------------------------------------------------------------------


class CompareMetric(TypedDict):
    name: str
    label: str
    unit: _d("samples/s, steps/s, s, bytes or fraction", str)
    higher_is_better: bool
    gated: _d("whether this metric can fail the gate", bool)
    baseline: Num
    current: Num
    change: _d("current / baseline - 1 (fractions: the difference in points)", Num)
    ci: _d("95% bootstrap interval of the change", Optional[list[float]])
    p_value: _d("one-sided: the current run is worse", Num)
    verdict: Literal["regression", "improvement", "ok", "not-significant", "reported", "n/a"]
    note: str


class FindingBrief(TypedDict):
    code: Optional[str]
    rule: Optional[str]
    severity: Optional[str]
    title: Optional[str]


class CompareFindings(TypedDict):
    new: list[FindingBrief]
    resolved: list[FindingBrief]
    fail_on_new: bool


class CompareSteps(TypedDict):
    baseline: int
    current: int


class _CompareBase(TypedDict):
    verdict: Literal["pass", "regression"]
    exit_code: _d("0 pass, 3 regression", int)
    rule: _d("the gate's rule, in words", str)
    baseline: str
    current: str
    script: str
    max_regression: float
    max_memory_regression: float
    memory_floor_bytes: int
    alpha: float
    n_steps: CompareSteps
    significance_testable: bool
    metrics: list[CompareMetric]
    regressions: _d("names of the metrics that regressed", list[str])
    findings: CompareFindings
    warnings: list[str]


class NoiseFloor(TypedDict, total=False):
    known: _d("whether the runner's noise was measured (advise ab), not assumed", bool)
    resolvable_change: _d("half the 95% CI of the median step's change: the smallest change these runs resolve", Num)
    note: str


class Compare(_CompareBase, total=False):
    """compare.json: `advise compare` (or `advise profile --baseline`) of two report.json files."""

    schema_version: _d("compare.json's own version (fields only added within it)", Literal[1])
    noise_floor: NoiseFloor
    slower_ops: _d("where the time went, op by op, when both runs have a trace", Optional[list[dict]])


# --- the agent summary: `advise report DIR --format json` ---------------------------------------


class SummaryFinding(TypedDict):
    code: str
    rule: str
    severity: Literal["high", "medium", "low"]
    title: str
    locations: _d("file:line of the user's code the finding is about, most calls first", list[str])
    fix: _d("what to do", str)
    fix_kind: Literal["automatic", "manual"]
    safe: _d("true when the fix leaves numerics unchanged", bool)
    speedup: _d("measured throughput ratio (null: not measured)", Num)
    ci: _d("its 95% interval", Optional[list[float]])
    verified: _d("true only when the speedup was measured in this run and its interval clears 1", bool)
    verdict: _d("the experiment's verdict (null: no experiment)", Optional[str])
    estimated_speedup: _d("the rule's own estimate, never measured", Num)
    snippet: str


class SummaryRecommendation(TypedDict):
    fixes: _d("the stacked fixes, each as CODE rule-name", list[str])
    speedup: Num
    ci: Optional[list[float]]
    verified: bool
    measured_by: Optional[str]
    snippets: _d("the code change that makes each fix permanent", list[str])


class Summary(TypedDict):
    """`advise report RUN_DIR --format json`: the verdict, findings, fixes and snippets, short and stable."""

    schema_version: Literal[1]
    status: Status
    error: Optional[str]
    script: str
    device: Optional[str]
    samples_per_s: Num
    step_time_median_s: Num
    verdict: _d("one line: what to do first, or why nothing is recommended", str)
    recommended: Optional[SummaryRecommendation]
    findings: list[SummaryFinding]
    warnings: list[str]
    report: _d("the full report.json this summary was read from", str)


# Objects whose keys are open (they hold what the run saw, or more keys may come): never closed.
OPEN = {"Env"}

SCHEMAS = {"report": (Report, SCHEMA_VERSION), "compare": (Compare, COMPARE_SCHEMA_VERSION),
           "summary": (Summary, 1)}
BASE_URL = "https://advise.dev/schema"  # the $id's base; the files ship in advisor/schemas/


def schema(name: str = "report", *, strict: bool = False) -> dict:
    """The JSON Schema (draft 2020-12) of report.json ("report"), compare.json ("compare") or the
    agent summary ("summary"). `strict` closes every described object but the open ones."""
    kind, version = SCHEMAS[name]
    body = msgspec.json.schema(kind)
    out = {"$schema": "https://json-schema.org/draft/2020-12/schema",
           "$id": f"{BASE_URL}/{name}.v{version}.schema.json", **body}
    if strict:
        for title, definition in out["$defs"].items():
            if definition.get("type") == "object" and "properties" in definition and title not in OPEN:
                definition["additionalProperties"] = False
    return out


def schema_text(name: str = "report") -> str:
    import json

    return json.dumps(schema(name), indent=2, sort_keys=False) + "\n"


def checker(name: str = "report", *, strict: bool = False):
    """A jsonschema validator for `name` (tests and tools; jsonschema is not a runtime dependency)."""
    import jsonschema

    return jsonschema.Draft202012Validator(schema(name, strict=strict))
