"""Renderers for `advise compare`: terminal table (rich), markdown (CI step summaries), JUnit XML.

All three read the same :class:`advisor.gate.compare.Comparison`, so the numbers a CI log, a PR
summary and a test dashboard show are the same numbers.
"""

from __future__ import annotations

import datetime as _dt
import xml.etree.ElementTree as ET

from typing import TYPE_CHECKING, Iterable, Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

from advisor.reports import format as fmt
from advisor import units

from . import slower_ops

if TYPE_CHECKING:
    from advisor.gate.compare import Comparison, Metric
    from advisor.gate.sequential import MetricDecision

VERDICT_TEXT = {
    "regression": "REGRESSION",
    "improvement": "improved",
    "ok": "ok",
    "not-significant": "not significant",
    "reported": "",
    "n/a": "n/a",
    "inconclusive": "INCONCLUSIVE",
}
VERDICT_STYLE = {"regression": "bold red", "improvement": "green", "ok": "green", "not-significant": "yellow",
                 "reported": "dim", "n/a": "dim", "inconclusive": "bold yellow"}
WIDTH = 110
MD_MARK = {"regression": "❌ regression", "improvement": "🚀 improved", "ok": "✅ ok",
           "not-significant": "⚠️ slower, not significant", "reported": "", "n/a": "n/a",
           "inconclusive": "❓ inconclusive"}
# The gate's own verdict (regression, inconclusive, pass): its title word, style and markdown head.
HEADLINE = {"regression": ("REGRESSION", "bold red", "❌ regression"),
            "inconclusive": ("INCONCLUSIVE", "bold yellow", "❓ inconclusive"),
            "pass": ("pass", "bold green", "✅ no regression")}


def inconclusive_line(metrics: Iterable[Metric | MetricDecision], policy: str) -> str:
    """'inconclusive: step time: these runs cannot tell ...; exit 4': what was not settled, and what that exits."""
    names = ", ".join(m.label for m in metrics)
    ends = "exit 4 (--inconclusive pass makes it 0)" if policy == "fail" else "exit 0 (--inconclusive pass)"
    return f"inconclusive: {names}: the runs could not rule out a regression beyond the threshold; {ends}"


def _verdict_line(result: Comparison) -> str:
    if result.regressions:
        names = ", ".join(m.label for m in result.regressions)
        return f"regression: {names}"
    if result.findings_fail:
        return f"regression: {len(result.new_findings)} new finding(s) (--fail-on-new-findings)"
    if result.inconclusive:
        return inconclusive_line(result.inconclusive, result.inconclusive_policy)
    return "no regression"


def _noted(m: Metric) -> bool:
    return m.verdict in ("not-significant", "inconclusive") or (m.verdict == "reported" and bool(m.note))


def _finding_text(f: dict) -> str:
    code = f.get("code") or f.get("rule") or "?"
    sev = f" [{f['severity']}]" if f.get("severity") else ""
    return f"{code}{sev} {f.get('title') or ''}".rstrip()


def print_table(result: Comparison, con: Console) -> None:
    word, style, _ = HEADLINE[result.verdict]
    title = Text.assemble(("advise compare ", "bold"), (word, style), f"  {result.script}")
    if not con.is_terminal and con.width < WIDTH:
        con.width = WIDTH  # CI logs: one row per metric rather than wrapped cells
    table = Table(title=title, title_justify="left", box=None, pad_edge=False, header_style="dim")
    columns: tuple[tuple[str, Literal["left", "right"]], ...] = (
        ("metric", "left"), ("baseline", "right"), ("current", "right"), ("change", "right"), ("95% CI", "right"),
        ("p", "right"), ("verdict", "left"))
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=name != "verdict")
    for m in result.metrics:
        table.add_row(
            m.label + ("" if m.gated else " *"),
            fmt.in_unit(m.baseline, m.unit), fmt.in_unit(m.current, m.unit), fmt.change(m.change, m.unit),
            fmt.change_interval(m.ci, m.unit), fmt.p_value(m.p_value) if m.gated else units.DASH,
            Text(VERDICT_TEXT.get(m.verdict, m.verdict), style=VERDICT_STYLE.get(m.verdict, "")),
        )
    con.print(table)
    con.print(Text("* reported, not gating. " + result.rule, style="dim"))
    con.print(Text(result.floor_note, style="dim"))
    for f in result.new_findings:
        style = "bold red" if result.fail_on_new_findings else "yellow"
        con.print(Text("new finding: " + _finding_text(f), style=style))
    for f in result.resolved_findings:
        con.print(Text("resolved: " + _finding_text(f), style="green"))
    for m in result.metrics:
        if _noted(m):
            con.print(Text(f"note: {m.label}: {m.note}", style="yellow"))
    if result.slower_ops is not None:
        slower_ops.print_table(result.slower_ops, "", con)
    for w in result.warnings:
        con.print(Text("warning: " + w, style="yellow"))
    con.print(Text(_verdict_line(result), style=HEADLINE[result.verdict][1]))


def markdown(result: Comparison) -> str:
    head = HEADLINE[result.verdict][2]
    lines = [
        f"### advise compare: {head}",
        "",
        f"`{result.baseline_path}` → `{result.current_path}` · script `{result.script}`",
        "",
        "| metric | baseline | current | change | 95% CI | p | verdict |",
        "|---|--:|--:|--:|--:|--:|---|",
    ]
    for m in result.metrics:
        lines.append(" | ".join([
            "| " + m.label + ("" if m.gated else " \\*"),
            fmt.in_unit(m.baseline, m.unit), fmt.in_unit(m.current, m.unit), fmt.change(m.change, m.unit),
            fmt.change_interval(m.ci, m.unit), fmt.p_value(m.p_value) if m.gated else units.DASH,
            MD_MARK.get(m.verdict, m.verdict) + " |",
        ]))
    lines += ["", f"\\* reported, not gating. {result.rule}.", "", f"_{result.floor_note}._"]
    if result.new_findings:
        lines += ["", "**New findings** (not in the baseline"
                  + (", failing the gate: `--fail-on-new-findings`" if result.fail_on_new_findings else "") + "):"]
        lines += [f"- `{f.get('code') or f.get('rule')}` {f.get('title') or ''}" for f in result.new_findings]
    if result.resolved_findings:
        lines += ["", "**Resolved findings:**"]
        lines += [f"- `{f.get('code') or f.get('rule')}` {f.get('title') or ''}" for f in result.resolved_findings]
    notes = [f"{m.label}: {m.note}" for m in result.metrics if _noted(m)]
    if result.inconclusive:
        notes.append(_verdict_line(result))
    if notes or result.warnings:
        lines += [""] + [f"> ⚠️ {text}" + "  " for text in notes + result.warnings]
    if result.slower_ops is not None:
        lines += [""] + slower_ops.markdown(result.slower_ops, "")
    return "\n".join(lines) + "\n"


def junit(result: Comparison) -> str:
    """JUnit XML: one testcase per metric (a failure for each regression), plus one for findings."""
    cases = []
    for m in result.metrics:
        case = ET.Element("testcase", classname="advise.compare", name=m.name, time="0")
        detail = (f"{m.label}: baseline {fmt.in_unit(m.baseline, m.unit)}, current {fmt.in_unit(m.current, m.unit)}, "
                  f"change {fmt.change(m.change, m.unit)}, 95% CI {fmt.change_interval(m.ci, m.unit)}, p {fmt.p_value(m.p_value)}, "
                  f"verdict {m.verdict}" + (f" ({m.note})" if m.note else "") + ("" if m.gated else ", not gating"))
        if m.verdict == "regression":
            failure = ET.SubElement(case, "failure", message=f"{m.label}: {m.note or 'regression'}", type="regression")
            failure.text = detail + "\n" + result.rule
        elif m.verdict == "inconclusive" and result.inconclusive_policy == "fail":
            failure = ET.SubElement(case, "failure", message=f"{m.label}: inconclusive: {m.note}", type="inconclusive")
            failure.text = detail + "\n" + result.rule
        elif m.verdict == "inconclusive":
            ET.SubElement(case, "skipped", message=f"{m.label}: inconclusive (--inconclusive pass): {m.note}")
        ET.SubElement(case, "system-out").text = detail
        cases.append(case)
    case = ET.Element("testcase", classname="advise.compare", name="findings", time="0")
    text = "; ".join("new " + _finding_text(f) for f in result.new_findings) or "no new findings"
    if result.findings_fail:
        ET.SubElement(case, "failure", message=f"{len(result.new_findings)} new finding(s)", type="new-finding").text = text
    ET.SubElement(case, "system-out").text = text
    cases.append(case)

    failures = sum(1 for c in cases if c.find("failure") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    suites = ET.Element("testsuites", name="advise compare", tests=str(len(cases)), failures=str(failures), errors="0")
    suite = ET.SubElement(suites, "testsuite", name=f"advise compare {result.script}", tests=str(len(cases)),
                          failures=str(failures), errors="0", skipped=str(skipped),
                          timestamp=_dt.datetime.now().isoformat(timespec="seconds"))
    props = ET.SubElement(suite, "properties")
    for key, value in (("baseline", result.baseline_path), ("current", result.current_path), ("rule", result.rule)):
        ET.SubElement(props, "property", name=key, value=value)
    suite.extend(cases)
    if result.warnings:
        ET.SubElement(suite, "system-err").text = "\n".join(result.warnings)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
