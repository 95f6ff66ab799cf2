"""The findings, their experiments and the recommended configuration, ready to print.

Read through the typed model (:func:`advisor.model.findings_of`, already in :func:`~advisor.model.rank`
order, and the typed report's ``recommended``); worded by :mod:`advisor.reports.words`,
so the page says what the terminal says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from advisor.reports import format as fmt
from advisor import units
from advisor.model import Experiment, Finding, Patch, Recommendation, Verdict
from advisor.overrides import describe
from advisor.report import Report
from advisor.report_blocks import Experiments

from . import words
from .ruledoc import doc_for, doc_html
from .run_view import Row


@dataclass
class Inline:
    """A run of text, shown as code when `code` (from `backticks` in titles and summaries)."""

    text: str
    code: bool = False


@dataclass
class ExperimentView:
    """An experiment's result, ready to print: speedup, interval, verdict, numbers, loss check."""

    state: str  # "verified" | "slower" | "bad" | "unclear" | "not-run" | "estimate"
    label: str
    speedup: str
    interval: str  # "95% CI 1.58–1.84×" or ""
    ci: str  # "1.58–1.84×" or ""
    detail: str  # speedup, interval and remark, without the label
    baseline: str  # "812.4 samples/s"; a dash when only the other side was measured; "" when neither
    candidate: str
    missing: str  # why one side shows a dash ("no run finished: ..."), else ""
    loss: str
    loss_state: str  # "ok" | "bad" | "" (no check)
    sentence: str  # the whole result in one line
    memory: str = ""  # the peak memory's change, beside the speed ("peak memory 1.2 GiB → 450 MiB (-62.0%)")


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
class PatchView:
    """The recommendation as a patch of the user's files (advise apply): the command that writes it,
    every fix's change together and each alone, and the changes it could not write, each in a line."""

    command: str  # advise apply --write RUN_DIR, or '' when nothing could be written
    whole: str
    parts: list[Snippet]
    refused: list[str]  # "num_workers=8: train.py:12: DataLoader(...) passes **kwargs: ..."
    told: list[str]  # changes said rather than written: the flags an HfArgumentParser script takes
    run_with: str = ""  # the run's command with the script's own flags set, where a fix is one
    by_hand: int = 0  # the changes left to the user: refused, or told where no flag of the script's makes them


@dataclass
class LocationRow:
    """A line of the user's code the finding points at."""

    where: str  # train.py:42
    path: str  # the full path, as a tooltip
    function: str
    op: str
    calls: str


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
    locations: list[LocationRow]
    evidence: list[Row]
    fix_title: str
    fix_flags: str  # "run it with --workers 2, the script's own flag": said before the code, where a flag makes it
    fix_kind: str
    fix_applicability: str
    fix_note: str
    fix_label: str  # kind and applicability in one label, as the terminal and markdown say it
    fix_overrides: str
    snippet: str
    experiment: ExperimentView | None
    sentence: str  # how the fix fared, in one line: the terminal's and the markdown's words
    unmeasured: str  # without an experiment or estimate: why it was not measured ("a manual fix ...")
    sweep: list[SweepRow]
    sweep_best: str  # the overrides the experiment settled on, when it swept values
    doc: str  # the rule's documentation as safe HTML (markupsafe.Markup), or ''


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
    confirmed: str = ""  # --confirm: the fresh-run measurement of the same configuration
    patch: PatchView | None = None  # the same configuration written into the user's code


def inline(text: str) -> list[Inline]:
    """Split on backticks: `code` runs become code, the rest plain text."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: keep it as text
        parts = parts[:-2] + [parts[-2] + "`" + parts[-1]]
    return [Inline(p, i % 2 == 1) for i, p in enumerate(parts) if p]


def finding_views(findings: list[Finding], rule_docs: Mapping[str, str], experiments: str = "ran") -> list[FindingView]:
    """`findings` (already ranked) as views, numbered from 1; `experiments` is
    :func:`words.experiments_state` of the report (why a finding without an experiment has none)."""
    return [finding_view(f, i + 1, rule_docs, experiments) for i, f in enumerate(findings)]


def finding_view(f: Finding, rank: int, rule_docs: Mapping[str, str], experiments: str = "ran") -> FindingView:
    title = f.title or f.rule or f.code
    evidence = dict(f.evidence)
    if f.estimated_gain_frac is not None:  # the rule's estimate is evidence too (report.json keeps it there)
        evidence["estimated_gain_frac"] = f.estimated_gain_frac
    exp = f.experiment
    result = experiment_view(exp) if exp is not None else estimate_view(f)
    sentence = words.finding_sentence(f, experiments)
    if result is not None and exp is not None and exp.verdict is Verdict.NOT_MEASURED and words.has_estimate(f):
        result.detail = f"{result.detail}; {words.estimate_detail(f.estimated_gain_frac)}"
        result.sentence = sentence
    return FindingView(
        anchor=f"finding-{rank}",
        rank=rank,
        code=f.code,
        rule=f.rule,
        severity=f.severity.value,
        severity_class=f.severity.value,
        title=inline(title),
        title_text=title,
        summary=inline(f.summary),
        summary_text=f.summary,
        locations=[LocationRow(loc.short, loc.file, loc.function, loc.op, words.plural(loc.count, "call"))
                   for loc in f.locations],
        evidence=[Row(str(k), fmt.by_suffix(str(k), v)) for k, v in evidence.items()],
        fix_title=f.fix.title,
        fix_flags=words.fix_flags(f.fix),
        fix_kind=f.fix.kind.value,
        fix_applicability=f.fix.applicability.value,
        fix_note=words.applicability_words(f.fix.applicability),
        fix_label="; ".join(filter(None, (words.fix_label(f.fix), words.fix_where(f.fix)))),
        fix_overrides=_compact_json(f.fix.overrides) if f.fix.overrides else "",
        snippet=f.fix.snippet,
        experiment=result,
        sentence=sentence,
        unmeasured=sentence.split(": ", 1)[1] if sentence.startswith(words.NOT_MEASURED + ": ") else "",
        sweep=sweep_rows(exp) if exp is not None else [],
        sweep_best=describe(exp.overrides) if exp is not None and exp.sweep and exp.verified and isinstance(exp.overrides, dict) else "",
        doc=doc_html(doc_for(f, rule_docs)),
    )


def experiment_view(result: Experiment | Recommendation) -> ExperimentView:
    """An experiment's (or the recommended configuration's) measurement, in the words of :mod:`words`."""
    state, label = words.state_and_label(result)
    loss, loss_state = words.loss_words(result.loss_check)
    baseline, candidate, missing = words.pair_words(result)
    return ExperimentView(
        state=state, label=label, speedup=units.speedup(result.speedup), interval=fmt.interval(result.ci_low, result.ci_high, ci=True),
        ci=fmt.interval(result.ci_low, result.ci_high), detail=words.measured_detail(result),
        baseline=baseline, candidate=candidate, missing=missing,
        loss=loss, loss_state=loss_state, sentence=words.measured_sentence(result), memory=words.resource_effects(result),
    )


def estimate_view(finding: Finding) -> ExperimentView | None:
    """A rule's own estimate of the gain when nothing was measured; None without one."""
    if not words.has_estimate(finding):
        return None
    gain = finding.estimated_gain_frac
    return ExperimentView(state="estimate", label="estimate", speedup="", interval="", ci="", detail=words.estimate_detail(gain),
                          baseline="", candidate="", missing="", loss="", loss_state="", sentence=words.estimate_sentence(gain))


def sweep_rows(exp: Experiment) -> list[SweepRow]:
    rows = []
    for point in exp.sweep or []:
        if isinstance(point, dict):
            state, label = words.verdict_words(point.get("verdict"))
            if point.get("oom"):
                state, label = "bad", "out of memory"
            elif point.get("fits") is False:
                state, label = "bad", "over the memory budget"
            elif point.get("reason"):  # a value the run or its time budget ended before
                label = f"{label}: {point['reason']}"
            rows.append(SweepRow(str(point.get("label") or _compact_json(point.get("overrides"))), units.speedup(point.get("speedup")),
                                 fmt.interval(point.get("ci_low"), point.get("ci_high")), label, state))
    return rows


def experiment_rows(views: list[FindingView]) -> list[ExperimentRow]:
    """The experiments table: every finding whose fix was tried (not the rules' estimates)."""
    return [ExperimentRow(v.anchor, v.code, v.fix_title, v.experiment) for v in views
            if v.experiment is not None and v.experiment.state != "estimate"]


def recommended_view(rec: Recommendation | None, findings: list[Finding]) -> Recommended | None:
    """The stacked run: its fixes (with their codes), overrides, measurement and snippets."""
    if rec is None:
        return None
    codes = {f.rule: f.code for f in findings}
    snippets = []
    said = {p.key for p in rec.patch.parts if p.flags} if rec.patch and rec.patch.run_with else set()
    for item in rec.snippets or []:
        if isinstance(item, dict) and item.get("key") in said:
            continue  # said as the script's own flag (and the patch): generic code would do what the flag does
        if isinstance(item, dict) and item.get("snippet"):
            snippets.append(Snippet(str(item.get("key") or item.get("title") or ""), str(item["snippet"])))
        elif isinstance(item, str) and item:
            snippets.append(Snippet("", item))
    fixes = [f"{codes[x]} {x}" if codes.get(x) else str(x) for x in rec.fixes or []]
    result = experiment_view(rec)
    result.sentence = words.recommended_sentence(rec)
    return Recommended(result=result, fixes=" + ".join(fixes),
                       overrides=_compact_json(rec.overrides) if rec.overrides else "", snippets=snippets,
                       confirmed=words.confirmed_words(rec.confirmed), patch=patch_view(rec.patch))


def patch_view(patch: Patch | None) -> PatchView | None:
    """The patch of the recommendation, ready to print; None where the report has none."""
    if patch is None:
        return None
    parts = [Snippet(part.title or part.key, part.diff) for part in patch.parts if part.diff]
    return PatchView(patch.command, patch.diff, parts if len(parts) > 1 else [],
                     [f"{part.title or part.key}: {line}" for part in patch.parts for line in part.refused],
                     [f"{part.title or part.key}: {line}" for part in patch.parts for line in part.told],
                     patch.run_with, len(patch.refused) + sum(len(p.told) for p in patch.parts if not p.flags))


def findings_empty(report: Report) -> str:
    text = words.no_findings(report)
    return f"{text} (no rule fired in this run)" if text.endswith(words.NO_BOTTLENECK) else text


def experiments_empty(views: list[FindingView], report: Report | None = None) -> str:
    if not views:
        return "none: there was nothing to try"
    state = words.experiments_state(report or Report())
    if state != "ran":
        return "none: " + words.UNTRIED[state].split(": ", 1)[1]
    if not any(v.fix_kind == "automatic" for v in views):
        return "none: every fix found is a manual code change, so there was nothing to re-run"
    return "none: no fix was re-measured in this run"


def baseline_note(report: Report, recommended: Recommendation | None, findings: list[Finding]) -> str:
    """Why the experiments' baseline differs from the headline throughput, when it does by more than 5%."""
    tp = report.throughput
    source = recommended if recommended is not None else next(
        (f.experiment for f in findings if f.experiment is not None and isinstance(f.experiment.baseline, dict)
         and f.experiment.baseline.get("samples_per_s") is not None), None)
    base = source.baseline if source is not None and isinstance(source.baseline, dict) else {}
    return words.baseline_vs_headline(tp, base)


def experiments_note(block: Experiments | None) -> str:
    """How many child runs the experiments took, from report.json's `experiments`."""
    if block is None or not block.n_runs:
        return ""
    return f"{block.n_runs} child runs of the script, {units.time_s(block.child_wall_s)} in all."


def _compact_json(x: object) -> str:
    try:
        return json.dumps(x, sort_keys=True, separators=(", ", ": "))
    except (TypeError, ValueError):
        return str(x)

