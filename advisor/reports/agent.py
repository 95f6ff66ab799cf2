"""The agent summary: `advise report RUN_DIR --format json`.

A coding agent or a CI bot wants the verdict, the findings with their fixes and snippets, and
whether each gain was measured, in a few hundred bytes it can act on, not the whole report.json
(steps, samples, HTA tables). The shape is ``advisor.schema.Summary`` (``advise schema summary``);
its words are the terminal's (:mod:`advisor.reports.words`), so the two never disagree.
"""

from __future__ import annotations

from advisor.model import Finding, estimated_speedup, findings_of
from advisor.units import finite
from advisor.report import Report

from . import words
from .findings_view import recommended_view


def _ci(lo: object, hi: object) -> list[float] | None:
    lo, hi = finite(lo), finite(hi)
    return [lo, hi] if lo is not None and hi is not None else None


def _finding(f: Finding) -> dict:
    exp = f.experiment
    return {
        "code": f.code, "rule": f.rule, "severity": f.severity.value, "title": f.title,
        "locations": [loc.short for loc in f.locations],
        "fix": f.fix.title, "flags": f.fix.flags or [], "fix_kind": f.fix.kind.value, "safe": f.fix.applicability.value == "safe",
        "speedup": finite(exp.speedup) if exp is not None else None,
        "ci": _ci(exp.ci_low, exp.ci_high) if exp is not None else None,
        "verified": bool(exp is not None and exp.verified),
        "verdict": exp.verdict.value if exp is not None else None,
        "estimated_speedup": estimated_speedup(f.estimated_gain_frac),
        "snippet": f.fix.snippet,
    }


def summary(report: Report, report_path: str) -> dict:
    """The short, stable summary of `report` (read from `report_path`)."""
    findings = findings_of(report)
    rec = report.recommended
    view = recommended_view(rec, findings)
    if view is not None and rec is not None:
        verdict = f"recommended: {view.fixes}: {view.result.sentence}"
        recommended = {"fixes": view.fixes.split(" + "), "speedup": finite(rec.speedup), "ci": _ci(rec.ci_low, rec.ci_high),
                       "verified": bool(rec.verified), "measured_by": rec.measured_by,
                       "snippets": [s.code for s in view.snippets]}
    else:
        verdict = "recommended: " + words.outcome(findings, None, report)[0]
        recommended = None
    tp = report.throughput
    return {
        "schema_version": 1,
        "status": report.status,
        "error": report.error,
        "script": report.script or "",
        "device": report.device,
        "samples_per_s": finite(tp.samples_per_s),
        "step_time_median_s": finite(tp.step_time_median_s),
        "verdict": verdict,
        "recommended": recommended,
        "findings": [_finding(f) for f in findings],
        "warnings": list(report.warnings),
        "report": report_path,
    }
