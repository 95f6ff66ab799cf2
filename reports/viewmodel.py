"""View models of the report: report.json (plus the run dir's tables) turned into display-ready data.

Like coverage.py's ``IndexPage`` and ``FileData``: every decision about what to show, in which
order and with which words is made here, so the templates (HTML and markdown) only loop and
print. Text is left as plain strings; escaping is the renderers' job (jinja autoescape for HTML,
:mod:`advisor.reports.markdown` for markdown).

Inputs: the report dict (the report.json contract) and, optionally, the run dir (for
``samples.csv``, ``steps.csv``, ``script.log`` and the trace) and an already-loaded
:class:`advisor.profile.Profile` (so ``advise profile`` does not parse the trace twice).
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pandas as pd

from . import charts
from . import format as fmt

TOP_OPS = 15
TOP_KERNELS = 10
LOG_TAIL_LINES = 30
MAX_STEP_ROWS = 200  # the steps table; steps.csv has them all
NAME_MAX = 110  # longer op / kernel names are cut in the table (full name in the tooltip)

SEVERITY_ORDER = {"high": 1, "medium": 2, "low": 3}
STATUS_CLASS = {"ok": "ok", "failed": "bad", "timeout": "bad", "no-steps": "warn", "interrupted": "warn"}
STATUS_TEXT = {
    "ok": "The run finished its measured window.",
    "failed": "The script failed. What the probe saw before that is below.",
    "timeout": "The script was stopped at the time limit. What the probe saw before that is below.",
    "no-steps": "The script ran, but no training step was seen.",
    "interrupted": "The run was interrupted. What was measured before that is below.",
}
APPLICABILITY_TEXT = {
    "safe": "safe: numerics unchanged",
    "unsafe": "unsafe: may change numerics or memory; check the loss",
    "display-only": "a code change to make by hand",
}
SERIES = [
    charts.Series("gpu_util_percent", "GPU utilization", "gpu", fmt.percent, 100.0),
    charts.Series("gpu_mem_used_bytes", "GPU memory used", "gpumem", fmt.bytes_, nice=charts.nice_bytes_max),
    charts.Series("gpu_power_w", "GPU power", "power", fmt.watts),
    charts.Series("cpu_percent", "CPU (the script's processes; 100% = one core)", "cpu", fmt.percent),
    charts.Series("rss_bytes", "RSS (the script's processes)", "rss", fmt.bytes_, nice=charts.nice_bytes_max),
]


# --- view-model dataclasses --------------------------------------------------------------


@dataclass
class Stat:
    """A headline number in the verdict header."""

    label: str
    value: str
    detail: str = ""


@dataclass
class Inline:
    """A run of text, shown as code when `code` (from `backticks` in rule docs and summaries)."""

    text: str
    code: bool = False


@dataclass
class DocBlock:
    """A paragraph (`parts`), a code block (`text`) or a bullet list (`items`) of a rule's doc."""

    kind: str  # "p" | "code" | "list"
    parts: list[Inline] = field(default_factory=list)
    text: str = ""
    items: list[list[Inline]] = field(default_factory=list)


@dataclass
class DocSection:
    """One `## Heading` of a rule's documentation and what follows it."""

    title: str
    blocks: list[DocBlock]


@dataclass
class Row:
    """A key and its formatted value (evidence, environment)."""

    key: str
    value: str


@dataclass
class ExperimentView:
    """An experiment's result, ready to print: speedup, interval, verdict, numbers, loss check."""

    state: str  # "verified" | "estimate" | "slower" | "not-run"
    label: str
    speedup: str
    interval: str  # "95% CI 1.58–1.84×" or ""
    ci: str  # "1.58–1.84×" or ""
    detail: str  # speedup, interval and remark, without the label
    baseline: str
    candidate: str
    loss: str
    loss_state: str  # "ok" | "bad" | "" (no check)
    sentence: str  # the whole result in one line


@dataclass
class SweepRow:
    """One value tried in a parameter sweep (e.g. num_workers=4) and how it fared."""

    label: str
    speedup: str
    ci: str
    verdict: str
    state: str


@dataclass
class Snippet:
    """A fix to paste: its title and code."""

    title: str
    code: str


@dataclass
class FindingView:
    """One finding, ranked: what was found, the numbers, the fix, its measured effect, the rule's doc."""

    anchor: str
    rank: int
    code: str
    rule: str
    severity: str
    severity_class: str
    title: list[Inline]
    title_text: str
    summary: list[Inline]
    summary_text: str
    evidence: list[Row]
    fix_title: str
    fix_kind: str
    fix_applicability: str
    fix_note: str
    fix_overrides: str
    snippet: str
    experiment: ExperimentView | None
    sweep: list[SweepRow]
    sweep_best: str  # the overrides the experiment settled on, when it swept values
    doc: list[DocSection]


@dataclass
class ExperimentRow:
    """A row of the experiments table."""

    anchor: str
    code: str
    fix: str
    result: ExperimentView


@dataclass
class Recommended:
    """The stacked best configuration: all winning fixes together, measured against the baseline."""

    result: ExperimentView
    fixes: str
    overrides: str
    snippets: list[Snippet]


@dataclass
class BreakdownSegment:
    """A share of the step in the breakdown bar."""

    cls: str
    label: str
    pct: str
    width: float  # percent of the bar
    per_step: str
    wide: bool  # room to print the label inside the bar


@dataclass
class Breakdown:
    """Where a step's time goes, from the report's `breakdown`."""

    segments: list[BreakdownSegment]
    basis: str


@dataclass
class OpRow:
    """An operator or kernel, aggregated over the profiled steps."""

    name: str
    full_name: str
    calls: str
    self_time: str
    total_time: str
    share: str
    bar: float  # 0..100, the share relative to the top row
    per_step: str
    flops: str
    dtypes: str


@dataclass
class OpsTable:
    """The top operators (CPU ops by self time) or GPU kernels (by time)."""

    title: str
    caption: str
    rows: list[OpRow]
    flops_column: bool


@dataclass
class StepRow:
    """A measured step in the steps table."""

    index: str
    duration: str
    data_wait: str
    optimizer: str
    backward: str
    samples: str
    loss: str
    profiled: str


@dataclass
class Artifact:
    """A file of the run dir, linked relative to report.html."""

    label: str
    href: str
    description: str


@dataclass
class NavItem:
    anchor: str
    label: str


@dataclass
class Verdict:
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
    wall: str
    verdict: Verdict
    nav: list[NavItem]
    warnings: list[str]
    notes: list[str]
    breakdown: Breakdown | None
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
    recommended: Recommended | None
    op_tables: list[OpsTable]
    ops_empty: str
    steps: list[StepRow]
    steps_summary: str
    env: list[Row]
    observed: list[Row]
    artifacts: list[Artifact]
    trace_href: str
    trace_hint: str


# --- building ------------------------------------------------------------------------------


def build_page(report: dict, run_dir: str | Path | None = None, profile=None) -> Page:
    """The whole page from a report dict; `run_dir` adds the timeline, log tail and ops; `profile` saves a trace reload."""
    run_dir = Path(run_dir) if run_dir is not None else None
    artifacts = report.get("artifacts") or {}
    findings = rank_findings(report.get("findings") or [])
    finding_views = [finding_view(f, i + 1) for i, f in enumerate(findings)]
    ops, kernels, ops_note = top_tables(report, run_dir, profile)
    samples, step_spans = _sampler_tables(run_dir, artifacts)
    timeline = charts.timeline(samples, SERIES, step_spans) if samples else None
    has_gpu_samples = bool(samples) and any(_finite(v) for v in samples.get("gpu_util_percent", []))
    recommended = recommended_view(report.get("recommended"), findings)
    experiments = [ExperimentRow(v.anchor, v.code, v.fix_title, v.experiment) for v in finding_views
                   if v.experiment and v.experiment.state != "estimate"]
    steps = report.get("steps") or []
    page = Page(
        title=f"advise · {Path(str(report.get('script') or 'report')).name}",
        tool=f"{(report.get('tool') or {}).get('name', 'advise')} {(report.get('tool') or {}).get('version', '')}".strip(),
        started_at=str(report.get("started_at") or ""),
        wall=fmt.time_s(report.get("wall_s")) if report.get("wall_s") is not None else "",
        verdict=verdict(report, run_dir, finding_views, recommended),
        nav=[],
        warnings=[str(w) for w in report.get("warnings") or []],
        notes=[str(n) for n in report.get("notes") or []],
        breakdown=breakdown(report),
        step_chart=charts.step_chart(steps),
        step_chart_empty="no measured steps" if not steps else "",
        timeline=timeline,
        timeline_source=("NVML (GPU) and psutil (CPU, RSS), sampled every 100 ms from outside the script"
                         if has_gpu_samples else "psutil (CPU, RSS), sampled every 100 ms from outside the script; no NVML GPU data in this run"),
        timeline_empty=_timeline_empty(report, run_dir, samples),
        utilization=[Row(_util_label(k), _util_value(k, v)) for k, v in (report.get("utilization") or {}).items()],
        findings=finding_views,
        findings_empty="" if finding_views else _findings_empty(report),
        experiments=experiments,
        experiments_note=_experiments_note(report.get("experiments")),
        experiments_empty="" if experiments else _experiments_empty(report, finding_views),
        recommended=recommended,
        op_tables=[t for t in (ops, kernels) if t is not None],
        ops_empty=ops_note,
        steps=[step_row(s) for s in steps[:MAX_STEP_ROWS]],
        steps_summary=_steps_summary(report),
        env=env_rows(report.get("env") or {}, report),
        observed=observed_rows(report.get("observed") or {}, report.get("memory") or {}),
        artifacts=artifact_links(artifacts, run_dir),
        trace_href=_href(artifacts.get("trace"), run_dir) if artifacts.get("trace") else "",
        trace_hint="Open it in Perfetto (ui.perfetto.dev: drag the file onto the page; it stays on your machine) "
                   "or in chrome://tracing. It holds the steps that ran under torch.profiler.",
    )
    page.nav = _nav(page)
    return page


def _n(count, word: str) -> str:
    """`3 steps`, `1 step`."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _num(x) -> float | None:
    return float(x) if _finite(x) else None


# --- verdict -------------------------------------------------------------------------------


def verdict(report: dict, run_dir: Path | None, findings: list[FindingView], recommended: Recommended | None) -> Verdict:
    status = str(report.get("status") or "failed")
    env, tp = report.get("env") or {}, report.get("throughput") or {}
    script = str(report.get("script") or "")
    argv = [str(a) for a in report.get("argv") or []]
    device = str(env.get("device") or "cpu")
    if env.get("device_name"):
        device += f" · {env['device_name']}"
    stats = []
    if tp.get("samples_per_s") is not None:
        stats.append(Stat("throughput", fmt.rate(tp["samples_per_s"], "samples/s"), _basis(tp)))
    elif tp.get("steps_per_s") is not None:
        stats.append(Stat("throughput", fmt.rate(tp["steps_per_s"], "steps/s"), "batch size unknown; " + _basis(tp)))
    else:
        stats.append(Stat("throughput", fmt.DASH, "no timed steps"))
    stats.append(Stat("step time", fmt.time_s(tp.get("step_time_median_s")) + " median",
                      f"p90 {fmt.time_s(tp.get('step_time_p90_s'))}" if tp.get("step_time_p90_s") is not None else ""))
    stats.append(Stat("device", device, _device_detail(env)))
    stats.append(Stat("steps", f"{len(report.get('steps') or [])} measured",
                      f"boundaries from {report['step_source']}" if report.get("step_source") else "no step boundaries seen"))
    top = findings[0] if findings else None
    if recommended is not None:
        gain, gain_state = recommended.result.sentence, recommended.result.state
    elif top is not None and top.experiment is not None and top.experiment.state == "estimate":
        gain, gain_state = f"not measured ({top.code} estimates {top.experiment.detail.split(',')[0]})", "not-run"
    elif top is not None and top.experiment is not None:
        gain, gain_state = f"{top.code}: {top.experiment.sentence}", top.experiment.state
    else:
        gain, gain_state = "no experiment was run", "not-run"
    artifacts = report.get("artifacts") or {}
    log_name = artifacts.get("log") or ""
    bad = status != "ok"
    from_trace = bool(script) and script == artifacts.get("trace")  # `advise analyze TRACE`
    if from_trace:
        command = " ".join(shlex.quote(a) for a in ["advise", "analyze", script])
    else:
        command = " ".join(shlex.quote(a) for a in ["python", script, *argv]) if script else ""
    status_text = STATUS_TEXT.get(status, "")
    if from_trace and status == "ok":
        status_text = "Analysed from a profiler trace alone: no sampler timeline, and batch sizes are unknown."
    return Verdict(
        status=status,
        status_class=STATUS_CLASS.get(status, "bad"),
        status_text=status_text,
        script_name=Path(script).name or script,
        script=script,
        command=command,
        stats=stats,
        top_finding=f"{top.code} {top.title_text}".strip() if top else "no findings",
        top_finding_anchor=top.anchor if top else "",
        gain=gain,
        gain_state=gain_state,
        error=str(report.get("error") or ""),
        traceback=str(report.get("traceback") or "") if bad else "",
        log_tail=_log_tail(run_dir, log_name) if bad and not report.get("traceback") else "",
        log_name=log_name,
        seen=_seen(report) if bad else "",
    )


def _basis(tp: dict) -> str:
    basis, n = tp.get("basis"), tp.get("n_steps")
    if basis == "unprofiled":
        return f"over {_n(n, 'step')} outside the profiler"
    if basis == "all":
        return f"over all {_n(n, 'measured step')}" if n != 1 else "over the one measured step"
    return ""


def _device_detail(env: dict) -> str:
    parts = []
    if env.get("device_capability"):
        parts.append(f"capability {env['device_capability']}")
    if env.get("device_memory_bytes") and env.get("device") not in (None, "cpu"):
        parts.append(fmt.bytes_(env["device_memory_bytes"]))
    if env.get("cpu_count"):
        parts.append(f"{env['cpu_count']} CPUs")
    if env.get("world_size"):
        parts.append(f"rank {env.get('rank')} of {env['world_size']}")
    return ", ".join(parts)


def _seen(report: dict) -> str:
    steps = report.get("steps") or []
    if not steps:
        return "No measured step was recorded before the run ended."
    tp = report.get("throughput") or {}
    return (f"{_n(len(steps), 'measured step')} {'was' if len(steps) == 1 else 'were'} recorded before the run ended "
            f"(median {fmt.time_s(tp.get('step_time_median_s'))}); the numbers below rest on them.")


def _log_tail(run_dir: Path | None, name: str) -> str:
    if run_dir is None or not name:
        return ""
    try:
        lines = (run_dir / name).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])


# --- breakdown -----------------------------------------------------------------------------


BREAKDOWN_PARTS = [  # (report key, css class, label); `other_frac` shows when the report has it
    ("data_wait_frac", "data", "data wait"),
    ("compute_frac", "compute", "forward/backward"),
    ("optimizer_frac", "optimizer", "optimizer"),
    ("other_frac", "other", "other"),
]


def breakdown(report: dict) -> Breakdown | None:
    bd = report.get("breakdown") or {}
    step = _num((report.get("throughput") or {}).get("step_time_mean_s")) or _num((report.get("throughput") or {}).get("step_time_median_s"))
    parts = [(cls, label, float(bd[key])) for key, cls, label in BREAKDOWN_PARTS if _finite(bd.get(key))]
    if not parts or sum(p[2] for p in parts) <= 0:
        return None
    total = sum(max(0.0, f) for _, _, f in parts)
    segments = []
    for cls, label, f in parts:
        width = round(100 * max(0.0, f) / total, 2)
        segments.append(BreakdownSegment(cls, label, fmt.frac(f), width,
                                         f"{fmt.time_s(f * step)} per step" if step else "", width >= 12))
    tp = report.get("throughput") or {}
    return Breakdown(segments, _basis(tp) or "over the measured steps")


# --- findings ------------------------------------------------------------------------------


def rank_findings(findings: list[dict]) -> list[dict]:
    """Measured gain first (verified, then measured but unverified, then the rules' estimates; bigger
    first), then severity, then the rules' order. A fix measured slower ranks with the unmeasured."""

    def key(item):
        i, f = item
        exp = f.get("experiment") or {}
        sp = _num(exp.get("speedup"))
        if sp is not None and exp.get("verified"):
            tier, gain = 0, sp
        elif sp is not None and sp >= 1:
            tier, gain = 1, sp
        else:
            est = _num((f.get("evidence") or {}).get("estimated_gain_frac"))
            tier, gain = (2, 1 + est) if est else (3, 0.0)
        return (tier, -gain, SEVERITY_ORDER.get(str(f.get("severity", "")).lower(), 5), i)

    return [f for _, f in sorted(enumerate(f for f in findings if isinstance(f, dict)), key=key)]


def finding_view(f: dict, rank: int) -> FindingView:
    fix = f.get("fix") or {}
    code = str(f.get("code") or "")
    exp = f.get("experiment")
    summary = str(f.get("summary") or "")
    title = str(f.get("title") or f.get("rule") or code)
    overrides = fix.get("overrides")
    applicability = str(fix.get("applicability") or "")
    severity = str(f.get("severity") or "").lower()
    return FindingView(
        anchor=f"finding-{rank}",
        rank=rank,
        code=code,
        rule=str(f.get("rule") or ""),
        severity=str(f.get("severity") or ""),
        severity_class=severity if severity in SEVERITY_ORDER else "other",
        title=inline(title),
        title_text=title,
        summary=inline(summary),
        summary_text=summary,
        evidence=[Row(str(k), fmt.by_suffix(str(k), v)) for k, v in (f.get("evidence") or {}).items()],
        fix_title=str(fix.get("title") or ""),
        fix_kind=str(fix.get("kind") or ""),
        fix_applicability=applicability,
        fix_note=APPLICABILITY_TEXT.get(applicability, applicability),
        fix_overrides=_compact_json(overrides) if overrides else "",
        snippet=str(fix.get("snippet") or ""),
        experiment=experiment_view(exp) if isinstance(exp, dict) else estimate_view(f),
        sweep=sweep_rows(exp) if isinstance(exp, dict) else [],
        sweep_best=_flat(exp.get("overrides")) if isinstance(exp, dict) and exp.get("sweep") and exp.get("verified") else "",
        doc=doc_sections(rule_doc(f)),
    )


VERDICT_STATE = {  # experiments' `verdict` -> (state for styling, label)
    "faster": ("verified", "verified"),
    "slower": ("slower", "slower"),
    "loss-changed": ("bad", "loss changed"),
    "no-significant-change": ("unclear", "no clear gain"),
    "failed": ("bad", "failed"),
    "not-measured": ("not-run", "not measured"),
}


def experiment_view(exp: dict) -> ExperimentView:
    """An experiment (or the recommended block): `verified`, `speedup`, `ci_low`, `ci_high`, `verdict`,
    `baseline`, `candidate`, `loss_check`, and `reason` / `error` when it was not measured."""
    sp = _num(exp.get("speedup"))
    lo, hi = _num(exp.get("ci_low")), _num(exp.get("ci_high"))
    verdict = str(exp.get("verdict") or "")
    if exp.get("verified") and sp is not None:
        state, label = "verified", "verified"
    elif verdict in VERDICT_STATE:
        state, label = VERDICT_STATE[verdict]
    elif sp is None:
        state, label = "not-run", "not measured"
    elif sp < 1 and hi is not None and hi < 1:
        state, label = "slower", "slower"
    else:
        state, label = "unclear", "not verified"
    loss, loss_state = loss_text(exp.get("loss_check"))
    ivl = f"95% CI {fmt.interval(lo, hi)}" if lo is not None and hi is not None else ""
    why = str(exp.get("reason") or exp.get("error") or "")
    if sp is None:
        detail = why or label
        sentence = f"{label}: {why}" if why else label
    else:
        detail = fmt.speedup_words(sp) + (f" ({ivl})" if ivl else "")
        sentence = f"{detail}, {label}"
        if state == "unclear" and lo is not None and hi is not None and lo <= 1 <= hi:
            detail += ": the interval includes no gain"
            sentence = f"{detail}, not verified"
        elif state == "slower":
            sentence = detail
    return ExperimentView(
        state=state, label=label, speedup=fmt.speedup(sp), interval=ivl, ci=fmt.interval(lo, hi), detail=detail,
        baseline=measure_text(exp.get("baseline")), candidate=measure_text(exp.get("candidate")),
        loss=loss, loss_state=loss_state, sentence=sentence,
    )


def estimate_view(finding: dict) -> ExperimentView | None:
    """A rule's own estimate of the gain (`evidence.estimated_gain_frac`) when nothing was measured."""
    gain = _num((finding.get("evidence") or {}).get("estimated_gain_frac"))
    if gain is None or gain <= 0:
        return None
    text = f"up to {fmt.frac(gain)} faster, by the rule's estimate"
    return ExperimentView(state="estimate", label="estimate", speedup="", interval="", ci="", detail=text, baseline="",
                          candidate="", loss="", loss_state="", sentence=f"estimate: {text} (not measured)")


def measure_text(m) -> str:
    """A baseline or candidate measurement: samples/s, else steps/s or step time; a number as is."""
    if isinstance(m, dict):
        if _finite(m.get("samples_per_s")):
            return fmt.rate(m["samples_per_s"], "samples/s")
        if _finite(m.get("steps_per_s")):
            return fmt.rate(m["steps_per_s"], "steps/s")
        if _finite(m.get("step_time_median_s")):
            return fmt.time_s(m["step_time_median_s"]) + " / step"
        return ""
    if _finite(m):
        return fmt.value(float(m))
    return "" if m is None else str(m)


def loss_text(check) -> tuple[str, str]:
    """The numerics check (`checked`, `passed`, `baseline_mean`, `candidate_mean`, `tolerance`, `reason`)
    as words, and "ok" / "bad" / "" (no verdict)."""
    if check is None:
        return "", ""
    if isinstance(check, bool):
        return ("loss check passed" if check else "loss check failed"), ("ok" if check else "bad")
    if not isinstance(check, dict):
        return str(check), ""
    if check.get("checked") is False:
        return f"loss not checked: {check.get('reason') or 'not visible to the probe'}", ""
    passed = check.get("passed")
    if check.get("finite") is False:
        return "loss check failed: the loss was not finite", "bad"
    detail = str(check.get("detail") or "")
    if not detail and _finite(check.get("baseline_mean")) and _finite(check.get("candidate_mean")):
        detail = f"mean {check['candidate_mean']:.4g} vs {check['baseline_mean']:.4g}"
        if _finite(check.get("tolerance")):
            detail += f" (tolerance ±{check['tolerance']:.2g})"
    head = "loss check passed" if passed is True else "loss check failed" if passed is False else "loss check"
    return head + (f": {detail}" if detail else ""), ("ok" if passed is True else "bad" if passed is False else "")


def sweep_rows(exp: dict) -> list[SweepRow]:
    rows = []
    for point in exp.get("sweep") or []:
        if isinstance(point, dict):
            state, label = VERDICT_STATE.get(str(point.get("verdict") or ""), ("unclear", str(point.get("verdict") or "")))
            rows.append(SweepRow(str(point.get("label") or _compact_json(point.get("overrides"))), fmt.speedup(point.get("speedup")),
                                 fmt.interval(point.get("ci_low"), point.get("ci_high")), label, state))
    return rows


def recommended_view(rec, findings: list[dict] | None = None) -> Recommended | None:
    """The stacked run: `fixes` (rule names), `overrides`, the measurement, `snippets` [{key, value, snippet}]."""
    if not isinstance(rec, dict) or not rec:
        return None
    codes = {f.get("rule"): f.get("code") for f in findings or [] if isinstance(f, dict)}
    snippets = []
    for item in rec.get("snippets") or []:
        if isinstance(item, dict) and item.get("snippet"):
            snippets.append(Snippet(str(item.get("key") or item.get("title") or ""), str(item["snippet"])))
        elif isinstance(item, str) and item:
            snippets.append(Snippet("", item))
    fixes = [f"{codes[x]} {x}" if codes.get(x) else str(x) for x in rec.get("fixes") or []]
    return Recommended(
        result=experiment_view(rec),
        fixes=" + ".join(fixes),
        overrides=_compact_json(rec.get("overrides")) if rec.get("overrides") else "",
        snippets=snippets,
    )


def _flat(overrides) -> str:
    """{"dataloader": {"num_workers": 2}, "torch_threads": 1} -> "num_workers=2, torch_threads=1"."""
    if not isinstance(overrides, dict):
        return ""
    parts = []
    for key, value in overrides.items():
        items = value.items() if isinstance(value, dict) else [(key, value)]
        parts += [f"{k}={fmt.value(v) if not isinstance(v, bool) else v}" for k, v in items]
    return ", ".join(parts)


def _compact_json(x) -> str:
    try:
        return json.dumps(x, sort_keys=True, separators=(", ", ": "))
    except (TypeError, ValueError):
        return str(x)


def inline(text: str) -> list[Inline]:
    """Split on backticks: `code` runs become code, the rest plain text."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: keep it as text
        parts = parts[:-2] + [parts[-2] + "`" + parts[-1]]
    return [Inline(p, i % 2 == 1) for i, p in enumerate(parts) if p]


# --- rule documentation --------------------------------------------------------------------


def rule_doc(finding: dict) -> str:
    """The rule's own documentation from the rules registry ('' when the rule is not installed)."""
    if isinstance(finding.get("doc"), str):
        return finding["doc"]
    catalogue = _catalogue()
    for key in (finding.get("rule"), finding.get("code")):
        found = catalogue.find(str(key)) if catalogue is not None and key else None
        if found is not None:
            return found.doc
    return ""


@lru_cache(maxsize=1)
def _catalogue():
    """The rules registry, or None: the report must render whatever state the rules are in."""
    try:
        from advisor.rules.registry import load_rules

        return load_rules()
    except Exception:  # noqa: BLE001
        return None


def doc_sections(doc: str) -> list[DocSection]:
    """ruff-style rule docs (`## What it does`, `## Example`, ...) as sections of paragraphs, code and lists."""
    if not doc or not doc.strip():
        return []
    sections: list[DocSection] = []
    title, lines = "", []

    def flush():
        blocks = _blocks(lines)
        if blocks or title:
            sections.append(DocSection(title, blocks))

    for line in _dedent(doc).splitlines():
        if line.startswith("#"):
            flush()
            title, lines = line.lstrip("#").strip(), []
        else:
            lines.append(line)
    flush()
    return sections


def _dedent(doc: str) -> str:
    import inspect

    return inspect.cleandoc(doc)


def _blocks(lines: list[str]) -> list[DocBlock]:
    blocks: list[DocBlock] = []
    para: list[str] = []
    items: list[str] = []
    code: list[str] = []
    fenced = False

    def end_para():
        if para:
            blocks.append(DocBlock("p", parts=inline(" ".join(s.strip() for s in para))))
            para.clear()

    def end_items():
        if items:
            blocks.append(DocBlock("list", items=[inline(i) for i in items]))
            items.clear()

    def end_code():
        if code:
            while code and not code[-1].strip():
                code.pop()
            blocks.append(DocBlock("code", text="\n".join(code)))
            code.clear()

    for line in lines:
        if line.strip().startswith("```"):
            if fenced:
                end_code()
            else:
                end_para(), end_items()
            fenced = not fenced
            continue
        if fenced:
            code.append(line)
        elif line.startswith("    ") and not items:
            end_para()
            code.append(line[4:])
        elif not line.strip():
            if code:
                code.append("")
            else:
                end_para(), end_items()
        elif line.lstrip().startswith(("- ", "* ")):
            end_para(), end_code()
            items.append(line.lstrip()[2:].strip())
        elif items and line.startswith(" "):
            items[-1] += " " + line.strip()
        else:
            end_code(), end_items()
            para.append(line)
    end_para(), end_items(), end_code()
    return blocks


# --- top ops and kernels -------------------------------------------------------------------


def top_tables(report: dict, run_dir: Path | None, profile=None) -> tuple[OpsTable | None, OpsTable | None, str]:
    """The top CPU ops by self time and, with a GPU trace, the top kernels; or why there are none."""
    frames, why = _trace_frames(report, run_dir, profile)
    if frames is None:
        return None, None, why
    ops, kernels, n_steps = frames
    return ops_table(ops, n_steps), kernels_table(kernels, n_steps), ("" if len(ops) or len(kernels) else "the trace holds no operators")


def _trace_frames(report: dict, run_dir: Path | None, profile):
    if profile is not None and getattr(profile, "trace", None) is not None:
        return (profile.ops, profile.kernels, len(profile.trace_steps)), ""
    trace = (report.get("artifacts") or {}).get("trace")
    if not trace:
        return None, "no trace was recorded in this run (the profiler window did not run)"
    path = _resolve(trace, run_dir)
    if path is None:
        return None, f"the trace {trace} is not in the run dir"
    try:
        from advisor.trace import TraceError, load_trace

        frames = load_trace(path)
    except TraceError as exc:
        return None, f"the trace could not be read: {exc}"
    return (frames.ops, frames.kernels, len(frames.steps)), ""


def ops_table(ops: pd.DataFrame, n_steps: int) -> OpsTable | None:
    if ops is None or ops.empty:
        return None
    g = ops.groupby("name", sort=False).agg(calls=("name", "size"), self_us=("self_us", "sum"), dur_us=("dur_us", "sum"),
                                            flops=("flops", "sum"))
    types = ops.dropna(subset=["input_types"]).groupby("name", sort=False)["input_types"].first() if "input_types" in ops else None
    total_self = float(g["self_us"].sum()) or 1.0
    top = g.sort_values(["self_us", "calls"], ascending=False).head(TOP_OPS)
    first = float(top["self_us"].iloc[0]) or 1.0
    rows = []
    for name, r in top.iterrows():
        dt = types.get(name) if types is not None else None
        rows.append(OpRow(
            name=_cut(str(name)), full_name=str(name), calls=fmt.count(r["calls"]),
            self_time=fmt.time_us(r["self_us"]), total_time=fmt.time_us(r["dur_us"]),
            share=fmt.frac(r["self_us"] / total_self, 1), bar=round(100 * float(r["self_us"]) / first, 1),
            per_step=fmt.time_us(r["self_us"] / n_steps) if n_steps else fmt.DASH,
            flops=fmt.flops(r["flops"]), dtypes=_dtypes(dt),
        ))
    steps = f"{n_steps} profiled step{'s' if n_steps != 1 else ''}" if n_steps else "the whole trace"
    return OpsTable("CPU operators", f"by self time over {steps}; {len(g):,} distinct operators, {len(ops):,} calls",
                    rows, flops_column=bool(g["flops"].fillna(0).gt(0).any()))


def kernels_table(kernels: pd.DataFrame, n_steps: int) -> OpsTable | None:
    if kernels is None or kernels.empty:
        return None
    g = kernels.groupby("name", sort=False).agg(calls=("name", "size"), dur_us=("dur_us", "sum"))
    total = float(g["dur_us"].sum()) or 1.0
    top = g.sort_values(["dur_us", "calls"], ascending=False).head(TOP_KERNELS)
    first = float(top["dur_us"].iloc[0]) or 1.0
    rows = [OpRow(
        name=_cut(str(name)), full_name=str(name), calls=fmt.count(r["calls"]), self_time=fmt.time_us(r["dur_us"]),
        total_time=fmt.time_us(r["dur_us"]), share=fmt.frac(r["dur_us"] / total, 1), bar=round(100 * float(r["dur_us"]) / first, 1),
        per_step=fmt.time_us(r["dur_us"] / n_steps) if n_steps else fmt.DASH, flops="", dtypes="",
    ) for name, r in top.iterrows()]
    return OpsTable("GPU kernels", f"by time on the device; {len(g):,} distinct kernels, {len(kernels):,} launches", rows, False)


def _cut(name: str) -> str:
    return name if len(name) <= NAME_MAX else name[: NAME_MAX - 1] + "…"


def _dtypes(types) -> str:
    if not isinstance(types, (list, tuple)):
        return ""
    seen = []
    for t in types:
        if t and t not in seen and t not in ("Scalar", "ScalarList", "TensorList", ""):
            seen.append(str(t))
    return ", ".join(seen[:3])


# --- sampler timeline ----------------------------------------------------------------------


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (OSError, ValueError, pd.errors.EmptyDataError):
        return pd.DataFrame()


def _sampler_tables(run_dir: Path | None, artifacts: dict) -> tuple[dict[str, list[float]], list[tuple[float, float, bool]]]:
    if run_dir is None or not artifacts.get("samples_csv"):
        return {}, []
    samples = _read_csv(run_dir / artifacts["samples_csv"])
    if samples.empty or "t" not in samples:
        return {}, []
    columns = {"t": [float(x) for x in pd.to_numeric(samples["t"], errors="coerce")]}
    for s in SERIES:
        if s.column in samples:
            columns[s.column] = [float(x) for x in pd.to_numeric(samples[s.column], errors="coerce")]
    spans = []
    if artifacts.get("steps_csv"):
        steps = _read_csv(run_dir / artifacts["steps_csv"])
        if {"t_start", "t_end"} <= set(steps):
            prof = steps["profiled"].astype(bool) if "profiled" in steps else pd.Series(False, index=steps.index)
            spans = [(float(a), float(b), bool(p)) for a, b, p in zip(steps["t_start"], steps["t_end"], prof)]
    return columns, spans


def _timeline_empty(report: dict, run_dir: Path | None, samples: dict) -> str:
    if samples:
        return "the sampler recorded too few points to draw"
    if run_dir is None or not (report.get("artifacts") or {}).get("samples_csv"):
        return "no sampler data: this report was made from a trace alone" if (report.get("artifacts") or {}).get("trace") else "no sampler data in this run"
    return "the sampler recorded nothing"


def _util_label(key: str) -> str:
    return key.replace("_percent", " %").replace("_bytes", "").replace("_w_", " W ").replace("_", " ")


def _util_value(key: str, v) -> str:
    base = key.rsplit("_", 1)[0]  # drop _mean / _max
    return fmt.by_suffix(base, v)


# --- steps, environment, artifacts ---------------------------------------------------------


def step_row(s: dict) -> StepRow:
    return StepRow(
        index=str(s.get("index", "")), duration=fmt.time_s(s.get("duration_s")), data_wait=fmt.time_s(s.get("data_wait_s")),
        optimizer=fmt.time_s(s.get("optimizer_s")), backward=fmt.time_s(s.get("backward_s")), samples=fmt.count(s.get("samples")),
        loss=f"{s['loss']:.4g}" if _finite(s.get("loss")) else fmt.DASH, profiled="yes" if s.get("profiled") else "",
    )


def _steps_summary(report: dict) -> str:
    steps = report.get("steps") or []
    prof = sum(1 for s in steps if s.get("profiled"))
    if not steps:
        return "no measured steps"
    if len(steps) > MAX_STEP_ROWS:
        return (f"the first {MAX_STEP_ROWS} of {len(steps)} measured steps ({prof} under the profiler); "
                "steps.csv in the run dir has them all")
    return f"{_n(len(steps), 'measured step')} ({prof} under the profiler, whose overhead inflates them; throughput is {_basis(report.get('throughput') or {}) or 'over all of them'})"


ENV_ORDER = ["python", "torch", "cuda", "device", "device_name", "device_capability", "device_memory_bytes", "device_count",
             "cpu_count", "torch_threads", "platform", "hostname", "rank", "local_rank", "world_size"]


def env_rows(env: dict, report: dict) -> list[Row]:
    keys = [k for k in ENV_ORDER if k in env] + sorted(k for k in env if k not in ENV_ORDER)
    rows = [Row(k, fmt.by_suffix(k, env[k])) for k in keys if env[k] is not None]
    if report.get("step_source"):
        rows.append(Row("step_source", str(report["step_source"])))
    return rows


def observed_rows(observed: dict, memory: dict) -> list[Row]:
    rows = []
    for i, o in enumerate(observed.get("optimizers") or []):
        if isinstance(o, dict):
            rows.append(Row(f"optimizer {i}", _kv(o, first="class")))
    for i, d in enumerate(observed.get("dataloaders") or []):
        if isinstance(d, dict):
            rows.append(Row(f"DataLoader {i}", _kv(d, first="dataset")))
    for k, v in observed.items():
        if k not in ("optimizers", "dataloaders") and v is not None:
            rows.append(Row(k, fmt.value(v)))
    for k, v in memory.items():
        if v is not None:
            rows.append(Row(k, fmt.by_suffix(k, v)))
    return rows


def _kv(d: dict, first: str) -> str:
    head = str(d.get(first, "")) if d.get(first) is not None else ""
    rest = ", ".join(f"{k}={fmt.value(v)}" for k, v in d.items() if k != first and v is not None)
    return f"{head} ({rest})" if head and rest else head or rest


ARTIFACT_TEXT = {
    "report_json": ("report.json", "this report as data (the versioned contract)"),
    "trace": ("trace", "Kineto trace of the profiled steps"),
    "steps_csv": ("steps", "one row per measured step"),
    "samples_csv": ("samples", "the sampler's ticks (CPU, RSS; GPU with NVML)"),
    "log": ("script log", "the script's stdout and stderr"),
}


def artifact_links(artifacts: dict, run_dir: Path | None) -> list[Artifact]:
    out = []
    for key, path in artifacts.items():
        if not path:
            continue
        label, text = ARTIFACT_TEXT.get(key, (key, ""))
        out.append(Artifact(str(path), _href(path, run_dir), text))
    return out


def _resolve(name, run_dir: Path | None) -> Path | None:
    """An artifact's file: relative to the run dir, else as written (`advise analyze` keeps the user's path)."""
    for candidate in ([run_dir / str(name)] if run_dir is not None else []) + [Path(str(name))]:
        if candidate.exists():
            return candidate
    return None


def _href(path, run_dir: Path | None) -> str:
    """A link relative to report.html (which sits in the run dir); files elsewhere get an absolute file URL."""
    from urllib.parse import quote

    p = Path(str(path))
    if p.is_absolute():
        return p.as_uri()
    if run_dir is not None and not (run_dir / p).exists() and p.exists():
        return p.resolve().as_uri()
    return quote(str(path))


# --- empty states and navigation -----------------------------------------------------------


def _findings_empty(report: dict) -> str:
    if report.get("status") != "ok":
        return "none: the rules need a finished measured window"
    return "none: no rule found a bottleneck in this run"


def _experiments_empty(report: dict, findings: list[FindingView]) -> str:
    if not findings:
        return "none: there was nothing to try"
    return "none: no fix was re-measured in this run (experiments were off, or none of the fixes is automatic)"


def _experiments_note(block) -> str:
    if not isinstance(block, dict) or not block.get("n_runs"):
        return ""
    return f"{block['n_runs']} child runs of the script, {fmt.time_s(block.get('child_wall_s'))} in all."


def _nav(page: Page) -> list[NavItem]:
    items = [NavItem("breakdown", "Step time"), NavItem("timeline", "Utilization"),
             NavItem("findings", f"Findings ({len(page.findings)})"), NavItem("experiments", "Experiments"),
             NavItem("ops", "Top ops"), NavItem("steps", "Steps"), NavItem("environment", "Environment"),
             NavItem("files", "Files")]
    return items
