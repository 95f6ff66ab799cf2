"""report.json: the contract users and CI depend on.

``SCHEMA_VERSION`` changes only for a breaking change; within a version, fields are only
ever added. Every renderer (terminal, HTML, markdown) reads this same report, typed
(:class:`Report`, read from the dict by :meth:`Report.of`), so what a user sees and what CI
compares are always the same numbers.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import msgspec

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
EXIT_HANGUP, EXIT_TERMINATED = 129, 143  # 128 + the signal, as a shell reports a process it ended
STATUS_EXIT = {"ok": EXIT_OK, "failed": EXIT_SCRIPT, "timeout": EXIT_SCRIPT, "no-steps": EXIT_SCRIPT,
               "interrupted": EXIT_INTERRUPTED}
# An interrupted run exits with its signal's code: Ctrl-C 130, a closed terminal 129, SIGTERM 143.
signal_exit = exit_code
STEP_FIELDS = ("index", "duration_s", "data_wait_s", "samples", "optimizer_s", "backward_s", "profiled", "loss")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


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
    artifacts: dict[str, str] | None = None,
    extra: dict | None = None,
) -> dict:
    """Assemble the report dict from a Profile, the typed findings and how the run ended: the one
place the result model becomes report.json."""
    from .analysis import metrics, mfu, temporal

    assert status in STATUSES, status
    steps = profile.steps
    step_rows = []
    if not steps.empty:
        for row in steps.to_dict("records"):
            step = {k: row.get(k) for k in STEP_FIELDS if k in row}
            step["index"] = int(step["index"])
            if step.get("samples") is not None and step["samples"] == step["samples"]:
                step["samples"] = int(step["samples"])
            step_rows.append(step)
    report = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "advise", "version": __version__},
        "status": status,
        "error": error,
        "traceback": traceback,
        "script": script,
        "argv": list(argv),
        "started_at": started_at,
        "env": profile.env,
        "step_source": profile.meta.get("step_source"),
        "steps": step_rows,
        "throughput": metrics.throughput(steps),
        "breakdown": metrics.breakdown(steps),
        "memory": metrics.memory(profile.memory, profile.samples),
        "mfu": mfu.model_flops_utilization(profile),
        "hta_breakdown": temporal.hta_breakdown(profile.trace),
        "utilization": metrics.utilization(profile.samples, steps),
        "observed": profile.observed,
        "findings": [f.to_dict() for f in findings or []],
        "recommended": recommended.to_dict() if recommended is not None else None,
        "warnings": list(warnings or []),
        "artifacts": dict(artifacts or {}),
    }
    report.update(extra or {})
    return metrics.clean(report)


def write_report(report: dict, path: Path) -> None:
    write_json_atomic(path, report)


class ReportError(ValueError):
    """A report.json that cannot be used: missing, not JSON, or from another schema."""


def load_report(path: str | Path) -> dict:
    """Read and check a report.json; errors are one line, for the CLI to print."""
    path = Path(path)
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReportError(f"{path}: not a report.json ({type(exc).__name__})") from None
    if not isinstance(report, dict) or "schema_version" not in report:
        raise ReportError(f"{path}: not a report.json (no schema_version)")
    if report["schema_version"] != SCHEMA_VERSION:
        raise ReportError(f"{path}: schema_version {report['schema_version']} is not supported (this advise reads {SCHEMA_VERSION})")
    return report


# --- the report as the renderers read it ---------------------------------------------------------
# Typed where the renderers read fields by name; the open blocks (env, memory, observed,
# utilization, artifacts: more keys may come, and the renderers list them as they are) stay dicts.
# Every field has a default: a missing field, or a null one, reads as its default.


class _Block(msgspec.Struct, kw_only=True, omit_defaults=True):
    @classmethod
    def of(cls, block):
        """The typed block of a report's dict (null and unknown keys left out; a block is returned as it is)."""
        if isinstance(block, cls):
            return block
        fields = cls.__struct_fields__
        return msgspec.convert({k: v for k, v in (block or {}).items() if k in fields and v is not None}, cls, strict=False)


class Throughput(_Block):
    samples_per_s: Optional[float] = None
    steps_per_s: Optional[float] = None
    step_time_median_s: Optional[float] = None
    step_time_p90_s: Optional[float] = None
    step_time_mean_s: Optional[float] = None
    n_steps: Optional[int] = None
    stalled_steps: Optional[int] = None
    basis: Optional[str] = None


class Breakdown(_Block):
    data_wait_frac: Optional[float] = None
    optimizer_frac: Optional[float] = None
    compute_frac: Optional[float] = None


class Step(_Block):
    index: Optional[int] = None
    duration_s: Optional[float] = None
    data_wait_s: Optional[float] = None
    samples: Optional[int] = None
    optimizer_s: Optional[float] = None
    backward_s: Optional[float] = None
    profiled: Optional[bool] = None
    loss: Optional[float] = None


class Rank(_Block):
    rank: Optional[int] = None
    status: Optional[str] = None  # none: a trace's rank (advise analyze), which has no status
    node: Optional[int] = None
    host: Optional[str] = None
    error: Optional[str] = None
    samples_per_s: Optional[float] = None
    step_time_median_s: Optional[float] = None
    step_time_p90_s: Optional[float] = None
    duration_s: Optional[float] = None  # analyze: the median profiled step
    exposed_comm_s: Optional[float] = None

    @property
    def step_s(self) -> Optional[float]:
        """The rank's median step: its own steps' (profile), else its profiled steps' (analyze)."""
        return self.step_time_median_s if self.step_time_median_s is not None else self.duration_s


Number = Union[int, float, None]  # as report.json has it (an int stays an int)


class Memory(_Block):
    """The figures the renderers name (report.json's `memory` is listed whole, as a dict)."""

    peak_allocated_bytes: Number = None
    device_total_bytes: Number = None
    peak_rss_bytes: Number = None
    peak_pss_bytes: Number = None
    basis: Optional[str] = None


class Mfu(_Block):
    achieved_tflops: Number = None
    peak_tflops: Number = None
    mfu: Number = None
    dtype: Optional[str] = None
    peak_source: Optional[str] = None


class Experiments(_Block):
    n_runs: Optional[int] = None
    child_wall_s: Number = None


class HtaStep(_Block):
    step_us: Number = None
    compute_us: Number = None
    communication_us: Number = None
    memory_us: Number = None
    other_us: Number = None
    idle_us: Number = None


class HtaRank(_Block):
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


class HtaBreakdown(_Block):
    basis: Optional[str] = None
    ranks: Optional[list[HtaRank]] = None


class Tool(_Block):
    name: str = "advise"
    version: str = ""


class Report(_Block):
    """report.json as the renderers read it (:mod:`advisor.schema` describes every field)."""

    schema_version: int = SCHEMA_VERSION
    tool: Tool = msgspec.field(default_factory=Tool)
    status: Optional[str] = None
    error: Optional[str] = None
    traceback: Optional[str] = None
    script: Optional[str] = None
    argv: list[str] = []
    started_at: Optional[str] = None
    env: dict[str, Any] = {}
    step_source: Optional[str] = None
    steps: list[Step] = []
    throughput: Throughput = msgspec.field(default_factory=Throughput)
    breakdown: Breakdown = msgspec.field(default_factory=Breakdown)
    memory: dict[str, Any] = {}
    mfu: Optional[Mfu] = None
    hta_breakdown: Optional[HtaBreakdown] = None
    utilization: dict[str, Any] = {}
    observed: dict[str, Any] = {}
    findings: list[Any] = []  # the model's dicts: model.findings_of reads them as Findings
    recommended: Optional[dict] = None
    warnings: list[Any] = []
    artifacts: dict[str, Any] = {}
    notes: list[Any] = []
    wall_s: Optional[float] = None
    total_wall_s: Optional[float] = None
    experiments: Optional[Experiments] = None  # none: no experiments ran
    ranks: list[Rank] = []

    @classmethod
    def of(cls, report: "Report | dict") -> "Report":
        """The typed report of a report dict (a Report is returned as it is)."""
        if isinstance(report, Report):
            return report
        return msgspec.convert(_no_nulls(report), cls, strict=False)

    @property
    def ok(self) -> bool:
        return (self.status or "ok") == "ok"


_TOP = set(Report.__struct_fields__)
_LISTS = {"steps": set(Step.__struct_fields__), "ranks": set(Rank.__struct_fields__)}
_BLOCKS = {"tool": set(Tool.__struct_fields__), "throughput": set(Throughput.__struct_fields__),
           "breakdown": set(Breakdown.__struct_fields__)}


def _no_nulls(report: dict) -> dict:
    """The fields the typed report reads, null ones left out (they read as their defaults)."""
    out = {k: v for k, v in report.items() if k in _TOP and v is not None}
    for key, fields in _BLOCKS.items():
        if isinstance(out.get(key), dict):
            out[key] = {k: v for k, v in out[key].items() if k in fields and v is not None}
    for key, fields in _LISTS.items():
        if isinstance(out.get(key), list):
            out[key] = [{k: v for k, v in row.items() if k in fields and v is not None}
                        for row in out[key] if isinstance(row, dict)]
    for key in ("mfu", "hta_breakdown", "experiments"):  # not an object: as if missing
        if not isinstance(out.get(key), dict):
            out.pop(key, None)
    return out
