"""The report.json and compare.json contract as types: the one source of their JSON Schemas.

report.json is declared once, as the typed :class:`advisor.report.Report` that :mod:`advisor.report`
builds, writes and reads back: its blocks (``Step``, ``Throughput``, ``Memory``, ``Rank``...) with
their descriptions, the open blocks (``Env``, ``Utilization``, ``Fingerprint``) and the result model
(:mod:`advisor.model`: ``Finding``, ``Fix``, ``Experiment``, ``SourceLocation``, ``Recommendation``).
:func:`published` reads that struct as report.json promises it, and :func:`schema` turns it into a
JSON Schema with msgspec; compare.json and the agent summary are described here.
``advise schema`` prints them, the package ships them (``advisor/schemas/``, checked equal to the
generated ones by the tests), and the docs site publishes them.

The published schema lets objects carry fields it does not name: within a ``schema_version``
fields are only ever added, so a consumer holding an older schema still accepts a newer report.
:func:`report_schema` with ``strict=True`` closes every object described here (except the open
ones: ``env``, ``observed``, a finding's ``evidence``...); the test suite validates every report
it writes against that, so a field added to the code without its description fails a test.
"""

from __future__ import annotations

import inspect
import json

import typing
from typing import TYPE_CHECKING, Annotated, Literal, Optional, TypeVar, TypedDict, get_args, get_origin

import msgspec
from msgspec import Meta

from .report import SCHEMA_VERSION, Report
from .report_blocks import Block, Num, Published, Status

if TYPE_CHECKING:
    import jsonschema

COMPARE_SCHEMA_VERSION = 1  # compare.json's, which advisor.gate.compare writes: fields only added within a version, as report.json's


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

def published(struct: type[msgspec.Struct]) -> type[msgspec.Struct]:
    """`struct` as its JSON Schema describes it: each field's :class:`advisor.report.Published` type
    where it has one (the struct reads some fields more loosely than report.json promises them), its
    description kept, the fields in alphabetical order (the order of report.json's schema since
    version 1) and the struct's docstring its description."""
    hints = typing.get_type_hints(struct, include_extras=True)
    fields = []
    for name in sorted(struct.__struct_fields__):
        kind = hints[name]
        if get_origin(kind) is Annotated:
            base, *extras = get_args(kind)
            said = [x.kind for x in extras if isinstance(x, Published)]
            metas = tuple(x for x in extras if isinstance(x, Meta))
            kind = said[0] if said else base
            if metas:
                kind = Annotated[(kind,) + metas]
        fields.append((name, kind))
    return msgspec.defstruct(struct.__name__, fields, namespace={"__doc__": struct.__doc__}, module=__name__)


SCHEMAS = {"report": (published(Report), SCHEMA_VERSION), "compare": (Compare, COMPARE_SCHEMA_VERSION),
           "summary": (Summary, 1)}
BASE_URL = "https://advise.dev/schema"  # the $id's base; the files ship in advisor/schemas/


def schema(name: str = "report", *, strict: bool = False) -> dict:
    """The JSON Schema (draft 2020-12) of report.json ("report"), compare.json ("compare") or the
    agent summary ("summary"). `strict` closes every described object but the open ones."""
    kind, version = SCHEMAS[name]
    body = msgspec.json.schema(kind)
    for title, definition in body.get("$defs", {}).items():
        definition.pop("additionalProperties", None)  # a block refuses unknown keys when built, never when read
        block = _BLOCKS.get(title)
        if block is not None:  # its fields' defaults are the reader's (a report may lack any of them), not the file's
            definition.pop("required", None)
            for field in definition.get("properties", {}).values():
                field.pop("default", None)
            if block.required:
                definition["required"] = list(block.required)
    out = {"$schema": "https://json-schema.org/draft/2020-12/schema",
           "$id": f"{BASE_URL}/{name}.v{version}.schema.json", **typing.cast(dict, _stable(body))}
    if strict:
        for title, definition in out["$defs"].items():
            if definition.get("type") == "object" and "properties" in definition and title not in OPEN:
                definition["additionalProperties"] = False
    return out


def _stable(node: object) -> object:
    """The schema as every msgspec writes it: each description as inspect.cleandoc leaves it, and no
    empty-container default. msgspec 0.23 cleans a block's docstring (0.22 kept its continuation
    lines' indent) and states a dataclass's `default_factory=list` (0.22 did not), so the shipped file
    read differently by the msgspec installed; an empty default says nothing a reader needs."""
    if isinstance(node, dict):
        return {k: inspect.cleandoc(v) if k == "description" and isinstance(v, str) else _stable(v)
                for k, v in node.items() if not (k == "default" and v in ([], {}))}
    if isinstance(node, list):
        return [_stable(v) for v in node]
    return node


def schema_text(name: str = "report") -> str:
    return json.dumps(schema(name), indent=2, sort_keys=False) + "\n"


def checker(name: str = "report", *, strict: bool = False) -> jsonschema.Draft202012Validator:
    """A jsonschema validator for `name` (tests and tools; jsonschema is not a runtime dependency)."""
    import jsonschema  # jsonschema: a test dependency, not a runtime one

    return jsonschema.Draft202012Validator(schema(name, strict=strict))
