"""The report.json and compare.json contract as types: the one source of their JSON Schemas.

:mod:`advisor.report` builds report.json as a dict from the Profile and the typed result model
(:mod:`advisor.model`: ``Finding``, ``Fix``, ``Experiment``, ``SourceLocation``,
``Recommendation``), and types its blocks (``Step``, ``Throughput``, ``Memory``, ``Rank``...) for
the renderers, with their descriptions; this module describes the top level and the open blocks
(``env``, ``utilization``, ``fingerprint``), and :func:`schema` turns the description, blocks and
model included, into a JSON Schema with msgspec.
``advise schema`` prints it, the package ships it (``advisor/schemas/``, checked equal to the
generated one by the tests), and the docs site publishes it.

The published schema lets objects carry fields it does not name: within a ``schema_version``
fields are only ever added, so a consumer holding an older schema still accepts a newer report.
:func:`report_schema` with ``strict=True`` closes every object described here (except the open
ones: ``env``, ``observed``, a finding's ``evidence``...); the test suite validates every report
it writes against that, so a field added to the code without its description fails a test.
"""

from __future__ import annotations

import json

from typing import Annotated, Any, Literal, Optional, TypedDict, TypeVar, Union, get_args

import msgspec
from msgspec import Meta

from .model import Finding, Recommendation
from .report import (SCHEMA_VERSION, STATUSES, Block, Breakdown, Energy, Experiments, HtaBreakdown, Memory, Mfu, Num, Rank,
                     Step, Throughput, Tool)

COMPARE_SCHEMA_VERSION = 1  # advisor.gate.compare's (a stage: the core cannot import it; a test checks they agree)


Status = Literal["ok", "failed", "timeout", "no-steps", "interrupted"]
assert set(get_args(Status)) == set(STATUSES)


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


class _ReportBase(TypedDict):
    schema_version: Annotated[Literal[1], Meta(description="1: within a version fields are only added, never changed or removed")]
    tool: Tool
    status: Annotated[Status, Meta(description="how the run ended")]
    error: Annotated[Optional[str], Meta(description="the script's error when status is not ok")]
    traceback: Annotated[Optional[str], Meta(description="the script's traceback, without advise's frames")]
    script: str
    argv: Annotated[list[str], Meta(description="the script's own arguments")]
    started_at: Annotated[str, Meta(description="ISO 8601, with the local offset")]
    env: Env
    step_source: Annotated[Optional[str], Meta(description="what marked the steps: optimizer, dataloader, backward, marker or "
                                                           "trace")]
    steps: list[Step]
    throughput: Throughput
    breakdown: Breakdown
    memory: Memory
    mfu: Optional[Mfu]
    hta_breakdown: Optional[HtaBreakdown]
    utilization: Utilization
    observed: Annotated[dict, Meta(description="what the probe saw of the script: optimizers, DataLoaders, zero_grad calls "
                                               "(open)")]
    findings: Annotated[list[Finding], Meta(description="ranked as every renderer shows them: measured gain first")]
    recommended: Annotated[Optional[Recommendation], Meta(description="the winners stacked and measured together, with the code "
                                                                      "change for each")]
    warnings: list[str]
    artifacts: Annotated[dict[str, Any], Meta(description="the run dir's files, relative to it (analyze: the traces' absolute "
                                                          "paths)")]


class Report(_ReportBase, total=False):
    """report.json: one run of `advise profile` (or `advise analyze`)."""

    notes: Annotated[list[str], Meta(description="what the probe could not do and why, said once")]
    wall_s: Annotated[Num, Meta(description="the profiled run")]
    total_wall_s: Annotated[Num, Meta(description="the whole command: run, analysis and experiments")]
    experiments: Optional[Experiments]
    energy: Optional[Energy]
    ranks: Annotated[list[Rank], Meta(description="each rank of a job (empty for one process)")]
    fingerprint: Annotated[Fingerprint, Meta(description="advise profile: what makes two runs comparable (advise compare)")]


# --- compare.json ------------------------------------------------------------------------------


class CompareMetric(TypedDict):
    name: str
    label: str
    unit: Annotated[str, Meta(description="samples/s, steps/s, s, bytes or fraction")]
    higher_is_better: bool
    gated: Annotated[bool, Meta(description="whether this metric can fail the gate")]
    baseline: Num
    current: Num
    change: Annotated[Num, Meta(description="current / baseline - 1 (fractions: the difference in points)")]
    ci: Annotated[Optional[list[float]], Meta(description="95% bootstrap interval of the change")]
    p_value: Annotated[Num, Meta(description="one-sided: the current run is worse")]
    verdict: Literal["regression", "improvement", "ok", "not-significant", "reported", "n/a", "inconclusive"]
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
    verdict: Literal["pass", "regression", "inconclusive"]
    exit_code: Annotated[int, Meta(description="0 pass, 3 regression, 4 inconclusive (0 with --inconclusive pass)")]
    rule: Annotated[str, Meta(description="the gate's rule, in words")]
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
    regressions: Annotated[list[str], Meta(description="names of the metrics that regressed")]
    findings: CompareFindings
    warnings: list[str]


class Inconclusive(TypedDict):
    policy: Literal["fail", "pass"]
    metrics: list[str]
    why: list[str]


class NoiseFloor(TypedDict, total=False):
    known: Annotated[bool, Meta(description="whether the runner's noise was measured (advise ab), not assumed")]
    resolvable_change: Annotated[Num, Meta(description="half the 95% CI of the median step's change: the smallest change these "
                                                       "runs resolve")]
    note: str


class Compare(_CompareBase, total=False):
    """compare.json: `advise compare` (or `advise profile --baseline`) of two report.json files."""

    schema_version: Annotated[Literal[1], Meta(description="compare.json's own version (fields only added within it)")]
    noise_floor: NoiseFloor
    inconclusive: Annotated[Inconclusive, Meta(description="policy (fail: exit 4, pass: exit 0), and the metrics these runs "
                                                           "could not settle, with why")]
    slower_ops: Annotated[Optional[list[dict]], Meta(description="where the time went, op by op, when both runs have a trace")]


# --- the agent summary: `advise report DIR --format json` ---------------------------------------


class SummaryFinding(TypedDict):
    code: str
    rule: str
    severity: Literal["high", "medium", "low"]
    title: str
    locations: Annotated[list[str], Meta(description="file:line of the user's code the finding is about, most calls first")]
    fix: Annotated[str, Meta(description="what to do")]
    fix_kind: Literal["automatic", "manual"]
    safe: Annotated[bool, Meta(description="true when the fix leaves numerics unchanged")]
    speedup: Annotated[Num, Meta(description="measured throughput ratio (null: not measured)")]
    ci: Annotated[Optional[list[float]], Meta(description="its 95% interval")]
    verified: Annotated[bool, Meta(description="true only when the speedup was measured in this run and its interval clears 1")]
    verdict: Annotated[Optional[str], Meta(description="the experiment's verdict (null: no experiment)")]
    estimated_speedup: Annotated[Num, Meta(description="the rule's own estimate, never measured")]
    snippet: str


class SummaryRecommendation(TypedDict):
    fixes: Annotated[list[str], Meta(description="the stacked fixes, each as CODE rule-name")]
    speedup: Num
    ci: Optional[list[float]]
    verified: bool
    measured_by: Optional[str]
    snippets: Annotated[list[str], Meta(description="the code change that makes each fix permanent")]


class Summary(TypedDict):
    """`advise report RUN_DIR --format json`: the verdict, findings, fixes and snippets, short and stable."""

    schema_version: Literal[1]
    status: Status
    error: Optional[str]
    script: str
    device: Optional[str]
    samples_per_s: Num
    step_time_median_s: Num
    verdict: Annotated[str, Meta(description="one line: what to do first, or why nothing is recommended")]
    recommended: Optional[SummaryRecommendation]
    findings: list[SummaryFinding]
    warnings: list[str]
    report: Annotated[str, Meta(description="the full report.json this summary was read from")]


_T = TypeVar("_T")


def _subclasses(cls: type[_T]) -> list[type[_T]]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


_BLOCKS = {c.__name__: c for c in _subclasses(Block)}

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
    for title, definition in body.get("$defs", {}).items():
        block = _BLOCKS.get(title)
        if block is not None:  # its fields' defaults are the reader's (a report may lack any of them), not the file's
            definition.pop("required", None)
            for field in definition.get("properties", {}).values():
                field.pop("default", None)
            if block.required:
                definition["required"] = list(block.required)
    out = {"$schema": "https://json-schema.org/draft/2020-12/schema",
           "$id": f"{BASE_URL}/{name}.v{version}.schema.json", **body}
    if strict:
        for title, definition in out["$defs"].items():
            if definition.get("type") == "object" and "properties" in definition and title not in OPEN:
                definition["additionalProperties"] = False
    return out


def schema_text(name: str = "report") -> str:
    return json.dumps(schema(name), indent=2, sort_keys=False) + "\n"


def checker(name: str = "report", *, strict: bool = False):
    """A jsonschema validator for `name` (tests and tools; jsonschema is not a runtime dependency)."""
    import jsonschema  # jsonschema: a test dependency, not a runtime one

    return jsonschema.Draft202012Validator(schema(name, strict=strict))
