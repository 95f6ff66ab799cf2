"""report.json: the contract users and CI depend on.

``SCHEMA_VERSION`` changes only for a breaking change; within a version, fields are only
ever added. Every renderer (terminal, HTML, markdown) reads this same dict, so what a user
sees and what CI compares are always the same numbers.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__
from .atomic import write_json_atomic
from .interrupt import exit_code
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
    from . import metrics, mfu, temporal

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
