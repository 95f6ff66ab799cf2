"""The report page's view model: the report dict, the Profile and the rules' docs, turned into display-ready data.

Like coverage.py's ``IndexPage``: every decision about what to show, in which order and with
which words is made in the view modules, so the templates (HTML and markdown) only loop and
print. Text is left as plain strings; escaping is the renderers' job (jinja autoescape for
HTML, :mod:`advisor.reports.markdown` for markdown). Nothing here reads a file: the caller
hands over what was loaded (:meth:`advisor.profile.Profile.from_run_dir`, the rules registry).

- :mod:`.page`: the page, its header (the verdict) and the navigation
- :mod:`.findings_view`: the ranked findings, the experiments table, the recommended configuration
- :mod:`.ruledoc`: a rule's documentation as HTML
- :mod:`.ops_view`: the top operators and kernels of the trace
- :mod:`.roofline_view`: the top kernels' achieved FLOP/s and bytes/s against the device's peaks
- :mod:`.timeline_view`: the sampler's utilization timeline
- :mod:`.run_view`: step breakdown, steps, environment, the run dir's files
- :mod:`.hta_view`: the GPU time in HTA's temporal-breakdown terms
- :mod:`.words`: how a measurement is said, everywhere
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath
from types import MappingProxyType

from advisor import units
from advisor.model import Finding, Recommendation, findings_of
from advisor.report import Report
from advisor.report_blocks import Throughput
from advisor.run_dir.seen import Env

from . import charts, findings_view, hta_view, ops_view, roofline_view, run_view, timeline_view, words
from .findings_view import ExperimentRow, FindingView, Recommended
from .hta_view import HtaTable
from .ops_view import OpsTable
from .run_view import Artifact, Breakdown, Row, StepRow

if TYPE_CHECKING:
    from advisor.profile import Profile

NO_DOCS: Mapping[str, str] = MappingProxyType({})
STATUS_CLASS = {"ok": "ok", "failed": "bad", "timeout": "bad", "no-steps": "warn", "interrupted": "warn"}
STATUS_TEXT = {
    "ok": "The run finished its measured window.",
    "failed": "The script failed. What the probe saw before that is below.",
    "timeout": "The script was stopped at the time limit. What the probe saw before that is below.",
    "no-steps": "The script ran, but no training step was seen.",
    "interrupted": "The run was interrupted. What was measured before that is below.",
}
FROM_TRACE_TEXT = "Analysed from a profiler trace alone: no sampler timeline, and batch sizes are unknown."
TRACE_HINT = ("Open it in Perfetto (ui.perfetto.dev: drag the file onto the page; it stays on your machine) "
              "or in chrome://tracing. It holds the steps that ran under torch.profiler.")


@dataclass
class Stat:
    """A headline number in the verdict header."""

    label: str
    value: str
    detail: str = ""


@dataclass
class NavItem:
    anchor: str
    label: str


@dataclass
class VerdictView:
    """The header: what ran, how it ended, the headline numbers, the top finding and the recommended gain."""

    status: str
    status_class: str
    status_text: str
    script_name: str
    script: str
    command: str
    stats: list[Stat]
    top_finding: str
    top_finding_anchor: str
    gain: str
    gain_state: str
    error: str
    traceback: str
    log_tail: str
    log_name: str
    seen: str  # for a run that did not end well: what was measured


@dataclass
class Page:
    """Everything the report shows, in page order."""

    title: str
    tool: str
    started_at: str
    wall: str  # "took 1 min 13 s in all (the profiled run 7.76 s, experiments 1 min 2 s in 9 runs)"
    time_spent: str  # where the arms' time went, what the budget left out and the command that measures it
    verdict: VerdictView
    nav: list[NavItem]
    warnings: list[str]
    notes: list[str]
    breakdown: Breakdown | None
    phases: str | None  # the loop's evaluation and checkpoint phases, kept out of the steps
    hta_tables: list[HtaTable]
    step_chart: charts.StepChart | None
    step_chart_empty: str
    timeline: charts.Timeline | None
    timeline_source: str
    timeline_empty: str
    utilization: list[Row]
    findings: list[FindingView]
    findings_empty: str
    experiments: list[ExperimentRow]
    experiments_note: str
    experiments_empty: str
    baseline_note: str  # why the experiments' baseline differs from the headline throughput, or ""
    verified_means: str
    recommended: Recommended | None
    op_tables: list[OpsTable]
    ops_empty: str
    roofline: roofline_view.RooflineTable | None
    steps: list[StepRow]
    ranks: list[run_view.RankRow]
    steps_summary: str
    env: list[Row]
    observed: list[Row]
    artifacts: list[Artifact]
    trace_href: str
    trace_hint: str


def build_page(report: Report, profile: Profile | None = None, rule_docs: Mapping[str, str] = NO_DOCS) -> Page:
    """The whole page from a report (the report.json contract, typed: a report.json's dict is read
    with :func:`advisor.report.load_report` or :meth:`advisor.report.Report.of` first).

    `profile` (an :class:`advisor.profile.Profile`, or None) adds the utilization timeline, the top
    ops and kernels, and a failed run's log tail; `rule_docs` maps rule names and/or codes to their
    documentation (markdown).
    """
    findings = findings_of(report)
    views = findings_view.finding_views(findings, rule_docs, words.experiments_state(report))
    rec = report.recommended
    recommended = findings_view.recommended_view(rec, findings)
    experiments = findings_view.experiment_rows(views)
    op_tables, ops_empty = ops_view.top_tables(report, profile)
    columns = timeline_view.sampler_columns(profile)
    steps = report.steps
    page = Page(
        title=f"advise · {PurePath(str(report.script or 'report')).name}",
        tool=f"{report.tool.name} {report.tool.version}".strip(),
        started_at=str(report.started_at or ""),
        wall=words.wall_words(report),
        time_spent=words.time_spent(report.experiments) or "",
        verdict=verdict(report, profile, views, findings, rec),
        nav=[],
        warnings=[str(w) for w in report.warnings],
        notes=[str(n) for n in report.notes],
        breakdown=run_view.breakdown(report),
        phases=words.phases_words(report.phases),
        hta_tables=hta_view.hta_tables(report),
        step_chart=charts.step_chart(steps),
        step_chart_empty="no measured steps" if not steps else "",
        timeline=timeline_view.timeline(columns, timeline_view.step_spans(profile)),
        timeline_source=timeline_view.source(columns),
        timeline_empty=timeline_view.empty(report, columns),
        utilization=run_view.utilization_rows(report),
        findings=views,
        findings_empty="" if views else findings_view.findings_empty(report),
        experiments=experiments,
        experiments_note=findings_view.experiments_note(report.experiments),
        experiments_empty="" if experiments else findings_view.experiments_empty(views, report),
        baseline_note=findings_view.baseline_note(report, rec, findings),
        verified_means=words.VERIFIED_MEANS,
        recommended=recommended,
        op_tables=op_tables,
        ops_empty=ops_empty,
        roofline=roofline_view.roofline_table(profile),
        steps=run_view.step_rows(report),
        ranks=run_view.rank_rows(report),
        steps_summary=run_view.steps_summary(report),
        env=run_view.env_rows(report),
        observed=run_view.observed_rows(report),
        artifacts=run_view.artifact_links(report),
        trace_href=run_view.trace_href(report),
        trace_hint=TRACE_HINT,
    )
    page.nav = nav(page)
    return page


def verdict(report: Report, profile: Profile | None, findings: list[FindingView], typed: list[Finding],
            rec: Recommendation | None) -> VerdictView:
    """The header; its "recommended configuration" is :func:`words.outcome`: the stacked run's
    result when report.json has one, else why there is none (never another finding's result)."""
    status = str(report.status or "failed")
    script = str(report.script or "")
    argv = [str(a) for a in report.argv]
    artifacts = report.artifacts
    top = findings[0] if findings else None
    gain, gain_state = words.outcome(typed, rec, report)
    bad = status != "ok"
    from_trace = bool(script) and script == artifacts.trace  # `advise analyze TRACE`
    if from_trace:
        command = shlex.join(["advise", "analyze", script])
    else:
        command = shlex.join(["python", script, *argv]) if script else ""
    traceback = str(report.traceback or "") if bad else ""
    log_tail = str(profile.meta.log_tail or "") if profile is not None and bad and not traceback else ""
    return VerdictView(
        status=status,
        status_class=STATUS_CLASS.get(status, "bad"),
        status_text=FROM_TRACE_TEXT if from_trace and status == "ok" else STATUS_TEXT.get(status, ""),
        script_name=PurePath(script).name or script,
        script=script,
        command=command,
        stats=_stats(report),
        top_finding=f"{top.code} {top.title_text}".strip() if top else words.no_findings(report),
        top_finding_anchor=top.anchor if top else "",
        gain=gain,
        gain_state=gain_state,
        error=str(report.error or ""),
        traceback=traceback,
        log_tail=log_tail,
        log_name=str(artifacts.log or ""),
        seen=_seen(report) if bad else "",
    )


def _stats(report: Report) -> list[Stat]:
    env, tp = report.env, report.throughput
    device = env.device + (f" · {env.device_name}" if env.device_name else "")
    stats = [_throughput(tp)]
    stats.append(Stat("step time", units.time_s(tp.step_time_median_s) + " median",
                      (f"p90 {units.time_s(tp.step_time_p90_s)}" if tp.step_time_p90_s is not None else "")
                      + words.step_clock_words(report)))
    memory = words.memory_words(report.memory)
    if memory:
        value, _, detail = memory.partition(" (")
        stats.append(Stat("peak memory", value, detail.rstrip(")")))
    mfu, detail = words.mfu_words(report.mfu)
    if mfu:
        stats.append(Stat("MFU", mfu, detail))
    energy, detail = words.energy_words(report.energy)
    if energy:
        stats.append(Stat("energy", energy, detail))
    stats.append(Stat("device", device, _device_detail(env)))
    stats.append(Stat("steps", f"{len(report.steps)} measured",
                      f"boundaries from {report.step_source}" if report.step_source else "no step boundaries seen"))
    return stats


def _throughput(tp: Throughput) -> Stat:
    if tp.samples_per_s is not None:
        return Stat("throughput", units.rate(tp.samples_per_s, "samples/s"), words.throughput_basis(tp))
    if tp.steps_per_s is not None:
        return Stat("throughput", units.rate(tp.steps_per_s, "steps/s"), "batch size unknown; " + words.throughput_basis(tp))
    return Stat("throughput", units.DASH, "no timed steps")


def _device_detail(env: Env) -> str:
    parts = []
    if env.device_capability:
        parts.append(f"capability {env.device_capability}")
    if env.device_memory_bytes and env.device != "cpu":
        parts.append(units.bytes_(env.device_memory_bytes))
    if env.cpu_count:
        parts.append(f"{env.cpu_count} CPUs")
    if env.world_size:
        parts.append(f"rank {env.rank} of {env.world_size}")
    return ", ".join(parts)


def _seen(report: Report) -> str:
    steps = report.steps
    if not steps:
        return "No measured step was recorded before the run ended."
    return (f"{words.plural(len(steps), 'measured step')} {'was' if len(steps) == 1 else 'were'} recorded before the run ended "
            f"(median {units.time_s(report.throughput.step_time_median_s)}); the numbers below rest on them.")


def nav(page: Page) -> list[NavItem]:
    return [NavItem("breakdown", "Step time"), NavItem("timeline", "Utilization"),
            NavItem("findings", f"Findings ({len(page.findings)})"), NavItem("experiments", "Experiments"),
            NavItem("ops", "Top ops"), *([NavItem("ranks", "Ranks")] if page.ranks else []), NavItem("steps", "Steps"),
            NavItem("environment", "Environment"), NavItem("files", "Files")]
