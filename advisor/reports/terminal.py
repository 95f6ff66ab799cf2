"""Terminal output: a live progress line while probing, then the summary table.

On a TTY the progress is a rich live line; elsewhere (CI logs, pipes) it falls back to plain
lines: the first step of a phase, then each fifth of the way, then the last, so a phase
prints at most about six lines however many steps it has (``--steps 2000`` included).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from advisor import units
from advisor.model import Finding, findings_of
from advisor.overrides import describe
from advisor.report import Report

from . import words
from .findings_view import recommended_view

if TYPE_CHECKING:
    from rich.status import Status

PLAIN_LINES = 5  # plain mode: a line each fifth of a phase (plus its first step)


def console(stderr: bool = False) -> Console:
    # force_jupyter=False: in a notebook (advisor.api) the output is plain text on the streams, which quiet=True can redirect
    return Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False, force_jupyter=False)  # :fire: stays text


class ProbeProgress:
    """Shows `phase, step k of N`; use as a context manager around the probe."""

    def __init__(self, con: Console, label: str) -> None:
        self.con = con
        self.label = label
        self.live = con.is_terminal and sys.stdout.isatty()
        self._status: Status | None = None
        self._last: tuple[str, int] | None = None
        self._printed: dict[str, int] = {}  # plain mode: the last step printed, per phase
        self._measuring = False
        self._quiet_steps = False  # plain logs: no per-step lines for experiment runs

    def __enter__(self) -> "ProbeProgress":
        if self.live:
            self._status = status = self.con.status(f"{self.label}: starting the script")
            status.__enter__()
        else:
            say(self.con, Text(f"{self.label}: starting the script"), hang=2)
        return self

    def phase(self, text: str) -> None:
        if self._status is not None:
            self._status.update(f"{self.label}: {text}")
        else:
            say(self.con, Text(f"{self.label}: {text}"), hang=2)

    def update(self, phase: str, done: int, total: int) -> None:
        """Step `done` of `total` in `phase` ("warmup" or "measure") has ended.

        Start-up (step 0) is not a warm-up step, and once measuring has begun a warm-up count
        (the profiler's own warm-up step between the measured ones) is not news: neither shows.
        """
        if phase == "measure":
            self._measuring = True
        elif done < 1 or self._measuring:
            return
        key = (phase, done)
        if key == self._last:
            return
        self._last = key
        text = f"{'warm-up' if phase == 'warmup' else 'measuring'} step {done} of {total}"
        if self._status is not None:
            self._status.update(f"{self.label}: {text}")
        elif not self._quiet_steps and self._plain_due(phase, done, total):
            say(self.con, Text(f"{self.label}: {text}"), hang=2)

    def _plain_due(self, phase: str, done: int, total: int) -> bool:
        """Plain mode: the first step, then a line each time a fifth of the phase is crossed, and the last."""
        last = self._printed.get(phase)
        every = max(1, -(-total // PLAIN_LINES))  # ceil(total / PLAIN_LINES)
        due = last is None or done >= total or done // every > last // every
        if due and (last is None or done > last):
            self._printed[phase] = done
            return True
        return False

    def experiment(self, label: str, index: int, total: int) -> None:
        """An experiment starts: name it (with how many remain); plain logs get one line per run."""
        self.label = f"experiment: {label}"
        self._last = None
        self._printed.clear()
        self._measuring = False
        self._quiet_steps = True
        self.phase("starting")

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._status is not None:
            self._status.__exit__(exc_type, exc, tb)


def finding_lines(finding: Finding, experiments: str = "ran") -> list[Text]:
    """A finding as the HTML page words it: code, severity and title; the fix, with its one label
    (kind and applicability, from the typed Fix); how the fix fared."""
    lines = [Text.assemble(("  " + finding.code, "bold"), f" [{finding.severity}] ", finding.title)]
    where = words.where_line(finding)
    if where:
        lines.append(Text("      " + where, style="cyan"))
    fix = finding.fix
    if fix.title:
        where = words.fix_where(fix)
        flags = words.fix_flags(fix)
        lines.append(Text.assemble("      fix: ", (f"{flags}: " if flags else "", "bold"), fix.title,
                                   (f" ({words.fix_label(fix)})", "dim"), (f" {where}" if where else "", "cyan")))
    lines.append(Text("      " + result_line(finding, experiments), style=RESULT_STYLE.get(_state(finding), "")))
    return lines


def result_line(finding: Finding, experiments: str = "ran") -> str:
    """The finding's result sentence (as on the page), with the loss check and a sweep's best value."""
    text = words.finding_sentence(finding, experiments)
    exp = finding.experiment
    if exp is None:
        return text
    if exp.sweep and exp.verified and isinstance(exp.overrides, dict):
        text += f"; best of {len(exp.sweep)} values tried: {describe(exp.overrides)}"
    loss, _ = words.loss_words(exp.loss_check)
    memory = words.resource_effects(exp)
    return text + (f"; {loss}" if loss else "") + (f"; {memory}" if memory else "")


def _state(finding: Finding) -> str:
    if finding.experiment is not None:
        return words.state_and_label(finding.experiment)[0]
    return "estimate" if words.has_estimate(finding) else "not-run"


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


RESULT_STYLE = {"verified": "green", "slower": "red", "bad": "red", "unclear": "yellow", "not-run": "dim", "estimate": "dim"}
STATUS_STYLE = {"ok": "bold green", "failed": "bold red", "timeout": "bold red", "no-steps": "bold yellow", "interrupted": "bold yellow"}


# A value and its unit, a figure and its interval: wrapped lines never split these (nor a number,
# which has no space in it): "11.5 MiB", "1,176.3 samples/s", "95% CI 3.51–3.84×", "3 of 20".
_GLUED = re.compile(r"(?<![\w.])(?:\d[\d,.]* of \d[\d,.]*(?: [A-Za-z]+)?"
                    r"|\d[\d,.]*%? (?:CI [\d.]+[–-][\d.]+×?|[A-Za-zµ%×/]+(?:/s)?))")
_JOIN = "\ue000"  # stands for a space inside a value while lines are wrapped: not whitespace, one cell wide


def wrapping(con: Console) -> bool:
    """Whether lines are wrapped to the console's width here: on a terminal, or where COLUMNS is set
    (`COLUMNS=80 advise profile ...`). Logs and pipes otherwise keep one line per item, for grep."""
    return con.is_terminal or bool(os.environ.get("COLUMNS"))


def glue(text: str) -> str:
    """`text` with the spaces inside each value held (:data:`_JOIN`), so a wrapped line breaks between values."""
    return _GLUED.sub(lambda m: m.group(0).replace(" ", _JOIN), text)


def say(con: Console, line: Text, hang: int = 0) -> None:
    """Print one line; when wrapping, at word boundaries only, continuation lines `hang` columns
    further in than its first."""
    if not wrapping(con):
        con.print(line)
        return
    plain = line.plain
    indent = len(plain) - len(plain.lstrip(" "))
    body = line[indent:]
    body.plain = glue(body.plain)  # same length: the styles stay where they were
    for i, part in enumerate(body.wrap(con, max(20, con.width - indent - hang))):
        part.rstrip()
        part.plain = part.plain.replace(_JOIN, " ")
        con.print(Text(" " * (indent + (hang if i else 0))) + part, soft_wrap=True)


def captured(con: Console, print_on: Callable[[Console], None]) -> str:
    """What `print_on(con)` prints, as text the way `con` writes it (its colours and width)."""
    with con.capture() as capture:
        print_on(con)
    return capture.get()


def summary_text(report: Report, con: Console, run_dir: str | None = None) -> str:
    """The summary a user reads after `advise profile`, as `con` prints it; wrapped to the width where
    it is wrapped (:func:`wrapping`), with no value split across lines."""
    glued = wrapping(con)
    text = captured(con, lambda c: _print_summary(report, c, run_dir, glued=glued))
    return text.replace(_JOIN, " ") if glued else text  # the table's cells were glued too


def print_summary(report: Report, con: Console, run_dir: str | None = None) -> None:
    """:func:`summary_text`, printed on `con`."""
    if not wrapping(con):
        _print_summary(report, con, run_dir)
        return
    con.file.write(summary_text(report, con, run_dir))
    con.file.flush()


def _print_summary(report: Report, con: Console, run_dir: str | None = None, glued: bool = False) -> None:
    cell = glue if glued else str
    env, tp, bd = report.env, report.throughput, report.breakdown
    status = report.status or "ok"
    title = Text.assemble(("advise ", "bold"), (status, STATUS_STYLE.get(status, "bold")), f"  {report.script or ''}")
    table = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column(style="dim")
    table.add_column()

    def add(label: str, value: RenderableType | None) -> None:
        table.add_row(label, cell(value) if isinstance(value, str) else value)

    name = env.device_name
    add("device", f"{env.device}" + (f" ({name})" if name else ""))
    add("steps", f"{len(report.steps)} measured, boundaries from {report.step_source or units.DASH}")
    if tp.samples_per_s is not None:
        add("throughput", units.rate(tp.samples_per_s, "samples/s"))
    elif tp.steps_per_s is not None:
        add("throughput", units.rate(tp.steps_per_s, "steps/s") + " (batch size unknown)")
    add("step time", f"median {units.time_s(tp.step_time_median_s)}, p90 {units.time_s(tp.step_time_p90_s)}"
                     + words.step_clock_words(report))
    if bd.data_wait_frac is not None:
        add(
            "step breakdown",
            f"data wait {units.frac(bd.data_wait_frac)} · forward/backward {units.frac(bd.compute_frac)} · optimizer {units.frac(bd.optimizer_frac)}",
        )
    phases = words.phases_words(report.phases)
    if phases:  # kept out of the steps above: never read as stalls of the machine
        add("loop phases", phases)
    memory = words.memory_words(report.memory)
    if memory:
        add("peak memory", memory)
    mfu, detail = words.mfu_words(report.mfu)
    if mfu:
        add("MFU", f"{mfu} ({detail})")
    energy, detail = words.energy_words(report.energy)
    if energy:
        add("energy", f"{energy} ({detail})")
    ranks = words.ranks_words(report.ranks)
    if ranks:  # below the figures it says are rank 0's
        add("ranks", ranks)
    if report.error:
        add("error", Text(cell(report.error), style="red"))
    con.print(table)
    findings = findings_of(report)
    experiments = words.experiments_state(report)
    if findings:
        con.print(Text("findings", style="bold"))
    elif status == "ok":
        say(con, Text.assemble(("findings: ", "bold"), words.no_findings(report)))
    for finding in findings:
        for line in finding_lines(finding, experiments):
            say(con, line, hang=0 if line.plain.startswith("      ") else 4)
    rec = recommended_view(report.recommended, findings)
    if rec is not None:
        style = "bold green" if rec.result.state == "verified" else RESULT_STYLE.get(rec.result.state, "")
        say(con, Text.assemble(("recommended: ", "bold"), rec.fixes, "  ", (rec.result.sentence, style)))
        if rec.confirmed:
            say(con, Text("      " + rec.confirmed))
        if rec.patch is not None and rec.patch.run_with:
            say(con, Text("      run it with: " + rec.patch.run_with), hang=8)
        for snippet in rec.snippets:
            con.print(Text(_indent(snippet.code, "      "), style="dim"))
        if rec.patch is not None and (rec.patch.command or not rec.patch.run_with):
            say(con, Text("      " + words.patch_line(rec.patch.command, rec.patch.by_hand)), hang=4)
    elif findings:
        text, state = words.outcome(findings, None, report)
        say(con, Text.assemble(("recommended: ", "bold"), (text, RESULT_STYLE.get(state, ""))))
    if spent := words.time_spent(report.experiments):
        say(con, Text("time: " + spent, style="dim"), hang=2)
    for warning in report.warnings:
        say(con, Text("warning: " + warning, style="yellow"), hang=2)
    if run_dir:
        con.print(Text(f"report: {run_dir}/{report.artifacts.report_json or 'report.json'}", style="dim"))
