"""Renderers for `advise ab`: the terminal table, markdown (CI job summaries) and a self-contained page.

All read the same :class:`advisor.gate.ab.ABResult`, so the log, the job summary and the uploaded page
show the same numbers; the metric rows use compare's words and marks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import html as _html

from rich.console import Console
from rich.table import Table
from rich.text import Text

from advisor.reports import format as fmt
from advisor import units

from . import slower_ops
from .compare_output import HEADLINE, MD_MARK, VERDICT_STYLE, VERDICT_TEXT, inconclusive_line

if TYPE_CHECKING:
    from advisor.gate.ab import ABResult
    from advisor.gate.sequential import MetricDecision

WIDE = 150
HEAD = ("metric", "base", "candidate", "change", "95% CI", "p", "A/A floor", "could see", "verdict")


def _row(m: MetricDecision) -> list[str]:
    return [m.label, fmt.in_unit(m.base, m.unit), fmt.in_unit(m.current, m.unit), fmt.change(m.change, m.unit),
            fmt.change_interval(m.ci, m.unit), fmt.p_value(m.p_value) if m.gated else units.DASH,
            f"{m.floor:.1%}" if m.floor is not None else units.DASH,
            f"{m.mdc:.1%}" if m.mdc is not None and m.gated else units.DASH]  # the minimum detectable change


def _rounds_line(result: ABResult) -> str:
    d = result.decision
    how = ("both alive, taking turns, the pair restarted each round" if result.mode == "duet"
           else "base and candidate interleaved, B C / C B")
    return f"{d.rounds} paired rounds ({how}), decided at look {d.look} of {len(d.looks)}; {result.wall_s:.0f} s"


def _round_dirs(result: ABResult) -> str:
    if result.mode == "duet":
        return "Each restart's sides: base/round-NN and candidate/round-NN (their steps and logs)."
    return "Each round's own report: base/round-NN/report.html, candidate/round-NN/report.html."


def _verdict_line(result: ABResult) -> str:
    if result.failed:
        return "regression: " + ", ".join(m.label for m in result.decision.regressions)
    if result.decision.inconclusive:
        return inconclusive_line(result.decision.inconclusive, result.inconclusive_policy)
    return "no regression"


def print_table(result: ABResult, con: Console) -> None:
    word, style, _ = HEADLINE[result.verdict]
    title = Text.assemble(("advise ab ", "bold"), (word, style), f"  {result.script}")
    if not con.is_terminal and con.width < WIDE:
        con.width = WIDE  # CI logs: one row per metric and per op rather than wrapped cells
    table = Table(title=title, title_justify="left", box=None, pad_edge=False, header_style="dim")
    for name in HEAD:
        table.add_column(name, justify="left" if name in ("metric", "verdict") else "right", no_wrap=name != "verdict")
    for m in result.decision.metrics:
        table.add_row(*_row(m), Text(VERDICT_TEXT.get(m.verdict, m.verdict), style=VERDICT_STYLE.get(m.verdict, "")))
    con.print(table)
    con.print(Text(_rounds_line(result), style="dim"))
    con.print(Text(result.decision.rule, style="dim"))
    for m in result.decision.metrics:
        if m.note and m.verdict != "ok":
            con.print(Text(f"note: {m.label}: {m.note}", style="yellow"))
    if result.slower_ops is not None or result.ops_note:
        slower_ops.print_table(result.slower_ops, result.ops_note, con)
    for w in result.warnings:
        con.print(Text("warning: " + w, style="yellow"))
    con.print(Text(_verdict_line(result), style=HEADLINE[result.verdict][1]))


def markdown(result: ABResult) -> str:
    lines = [f"### advise ab: {HEADLINE[result.verdict][2]}", "",
             f"base `{result.base_dir}` → candidate `{result.candidate_dir}` · script `{result.script}` · "
             + _rounds_line(result), "",
             "| " + " | ".join(HEAD) + " |", "|---|--:|--:|--:|--:|--:|--:|--:|---|"]
    for m in result.decision.metrics:
        lines.append("| " + " | ".join(_row(m) + [MD_MARK.get(m.verdict, m.verdict)]) + " |")
    lines += ["", result.decision.rule + "."]
    notes = [f"{m.label}: {m.note}" for m in result.decision.metrics if m.note and m.verdict != "ok"]
    if result.decision.inconclusive:
        notes.append(_verdict_line(result))
    if notes or result.warnings:
        lines += [""] + [f"> ⚠️ {t}  " for t in notes + result.warnings]
    if result.slower_ops is not None or result.ops_note:
        lines += [""] + slower_ops.markdown(result.slower_ops, result.ops_note)
    return "\n".join(lines) + "\n"


def page(result: ABResult) -> str:
    """ab.html: the table, the rule and the slower ops, self-contained (opens offline)."""
    head = "".join(f"<th>{_html.escape(h)}</th>" for h in HEAD)
    rows = "".join("<tr>" + "".join(f"<td>{_html.escape(c)}</td>" for c in _row(m))
                   + f"<td class='{_html.escape(m.verdict)}'>{_html.escape(VERDICT_TEXT.get(m.verdict, m.verdict))}</td></tr>"
                   for m in result.decision.metrics)
    notes = "".join(f"<li>{_html.escape(t)}</li>" for t in
                    [f"{m.label}: {m.note}" for m in result.decision.metrics if m.note and m.verdict != "ok"]
                    + ([_verdict_line(result)] if result.decision.inconclusive else []) + result.warnings)
    verdict = HEADLINE[result.verdict][0]
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>advise ab: {verdict}</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse}}
td,th{{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}}td:first-child,th:first-child,td:nth-child(2){{text-align:left}}
.regression{{color:#b00;font-weight:bold}}.ok,.improvement{{color:#070}}.not-significant,.inconclusive{{color:#a60}}.inconclusive{{font-weight:bold}}</style></head><body>
<h1>advise ab: {verdict}</h1><p>base <code>{_html.escape(result.base_dir)}</code> → candidate
<code>{_html.escape(result.candidate_dir)}</code>, script <code>{_html.escape(result.script)}</code>.
{_html.escape(_rounds_line(result))}</p>
<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>
<p><small>{_html.escape(result.decision.rule)}</small></p><ul>{notes}</ul>
{slower_ops.html(result.slower_ops, result.ops_note) if result.slower_ops is not None or result.ops_note else ""}
<p>{_html.escape(_round_dirs(result))}</p>
</body></html>
"""
