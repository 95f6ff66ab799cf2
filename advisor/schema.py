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

from typing import Any, Literal, Optional, TypedDict, Union

import msgspec

from .model import Finding, Recommendation
from .report import (SCHEMA_VERSION, STATUSES, Block, Breakdown, Energy, Experiments, HtaBreakdown, Memory, Mfu, Num, Rank,
                     Step, Throughput, Tool, described)

COMPARE_SCHEMA_VERSION = 1  # advisor.gate.compare's (a stage: the core cannot import it; a test checks they agree)


Status = Literal["ok", "failed", "timeout", "no-steps", "interrupted"]
assert set(Status.__args__) == set(STATUSES)


class Env(TypedDict, total=False):
    """The machine and the torch build the script ran on (open: more keys may appear)."""

    python: str
    torch: str
    cuda: Optional[str]
    platform: str
    hostname: str
    cpu_count: Optional[int]
    cpu_usable: described("the CPUs the script's process may run on (its affinity mask: a cgroup, taskset, srun --cpu-bind)",
                   Optional[int])
    physical_cores: Optional[int]
    torch_threads: Optional[int]
    device: str
    device_name: Optional[str]
    device_capability: described("[major, minor] from the probe; a trace's deviceProperties give it as text", Union[list[int], str, None])
    device_memory_bytes: Optional[int]
    float32_matmul_precision: Optional[str]
    cudnn_benchmark: Optional[bool]
    cuda_matmul_allow_tf32: Optional[bool]
    cudnn_allow_tf32: Optional[bool]
    bf16_supported: Optional[bool]
    cuda_alloc_conf: described("PYTORCH_CUDA_ALLOC_CONF as the script started with it", Optional[str])
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
    load_avg_1m_start: described("the machine's 1-minute load average before the script started", Num)
    load_avg_1m_end: Num
    gpu_name: Optional[str]
    gpu_count: Optional[int]
    driver_version: Optional[str]
    gpu_max_sm_clock_mhz: Num
    gpu_app_sm_clock_mhz: Num
    gpu_app_mem_clock_mhz: Num
    gpu_power_limit_w: Num


class _ReportBase(TypedDict):
    schema_version: described("1: within a version fields are only added, never changed or removed", Literal[1])
    tool: Tool
    status: described("how the run ended", Status)
    error: described("the script's error when status is not ok", Optional[str])
    traceback: described("the script's traceback, without advise's frames", Optional[str])
    script: str
    argv: described("the script's own arguments", list[str])
    started_at: described("ISO 8601, with the local offset", str)
    env: Env
    step_source: described("what marked the steps: optimizer, dataloader, backward, marker or trace", Optional[str])
    steps: list[Step]
    throughput: Throughput
    breakdown: Breakdown
    memory: Memory
    mfu: Optional[Mfu]
    hta_breakdown: Optional[HtaBreakdown]
    utilization: Utilization
    observed: described("what the probe saw of the script: optimizers, DataLoaders, zero_grad calls (open)", dict)
    findings: described("ranked as every renderer shows them: measured gain first", list[Finding])
    recommended: described("the winners stacked and measured together, with the code change for each", Optional[Recommendation])
    warnings: list[str]
    artifacts: described("the run dir's files, relative to it (analyze: the traces' absolute paths)", dict[str, Any])


class Report(_ReportBase, total=False):
    """report.json: one run of `advise profile` (or `advise analyze`)."""

    notes: described("what the probe could not do and why, said once", list[str])
    wall_s: described("the profiled run", Num)
    total_wall_s: described("the whole command: run, analysis and experiments", Num)
    experiments: Optional[Experiments]
    energy: Optional[Energy]
    ranks: described("each rank of a job (empty for one process)", list[Rank])
    fingerprint: described("advise profile: what makes two runs comparable (advise compare)", Fingerprint)


# --- compare.json ------------------------------------------------------------------------------


class CompareMetric(TypedDict):
    name: str
    label: str
    unit: described("samples/s, steps/s, s, bytes or fraction", str)
    higher_is_better: bool
    gated: described("whether this metric can fail the gate", bool)
    baseline: Num
    current: Num
    change: described("current / baseline - 1 (fractions: the difference in points)", Num)
    ci: described("95% bootstrap interval of the change", Optional[list[float]])
    p_value: described("one-sided: the current run is worse", Num)
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
    exit_code: described("0 pass, 3 regression, 4 inconclusive (0 with --inconclusive pass)", int)
    rule: described("the gate's rule, in words", str)
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
    regressions: described("names of the metrics that regressed", list[str])
    findings: CompareFindings
    warnings: list[str]


class Inconclusive(TypedDict):
    policy: Literal["fail", "pass"]
    metrics: list[str]
    why: list[str]


class NoiseFloor(TypedDict, total=False):
    known: described("whether the runner's noise was measured (advise ab), not assumed", bool)
    resolvable_change: described("half the 95% CI of the median step's change: the smallest change these runs resolve", Num)
    note: str


class Compare(_CompareBase, total=False):
    """compare.json: `advise compare` (or `advise profile --baseline`) of two report.json files."""

    schema_version: described("compare.json's own version (fields only added within it)", Literal[1])
    noise_floor: NoiseFloor
    inconclusive: described("policy (fail: exit 4, pass: exit 0), and the metrics these runs could not settle, with why",
                            Inconclusive)
    slower_ops: described("where the time went, op by op, when both runs have a trace", Optional[list[dict]])


# --- the agent summary: `advise report DIR --format json` ---------------------------------------


class SummaryFinding(TypedDict):
    code: str
    rule: str
    severity: Literal["high", "medium", "low"]
    title: str
    locations: described("file:line of the user's code the finding is about, most calls first", list[str])
    fix: described("what to do", str)
    fix_kind: Literal["automatic", "manual"]
    safe: described("true when the fix leaves numerics unchanged", bool)
    speedup: described("measured throughput ratio (null: not measured)", Num)
    ci: described("its 95% interval", Optional[list[float]])
    verified: described("true only when the speedup was measured in this run and its interval clears 1", bool)
    verdict: described("the experiment's verdict (null: no experiment)", Optional[str])
    estimated_speedup: described("the rule's own estimate, never measured", Num)
    snippet: str


class SummaryRecommendation(TypedDict):
    fixes: described("the stacked fixes, each as CODE rule-name", list[str])
    speedup: Num
    ci: Optional[list[float]]
    verified: bool
    measured_by: Optional[str]
    snippets: described("the code change that makes each fix permanent", list[str])


class Summary(TypedDict):
    """`advise report RUN_DIR --format json`: the verdict, findings, fixes and snippets, short and stable."""

    schema_version: Literal[1]
    status: Status
    error: Optional[str]
    script: str
    device: Optional[str]
    samples_per_s: Num
    step_time_median_s: Num
    verdict: described("one line: what to do first, or why nothing is recommended", str)
    recommended: Optional[SummaryRecommendation]
    findings: list[SummaryFinding]
    warnings: list[str]
    report: described("the full report.json this summary was read from", str)


def _subclasses(cls: type) -> list[type]:
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
