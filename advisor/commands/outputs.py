"""What a command writes and prints: every rendering goes out through :func:`render_report`; the
rules' diagnosis; report.html and the markdown summary of a run; its terminal or JSON output.
Shared by `advise profile` (:mod:`advisor.commands.pipeline`), `advise analyze`
(:mod:`advisor.commands.analyze`), `advise report` and the CI gate's commands (:mod:`advisor.commands.ci_gate`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from advisor.reports.render import Drawn, Renderer
from advisor.reports.renderers import MARKDOWN, PAGE, REPORT_JSON, TERMINAL, RunReport

from .cli_exit import DISK_ERRNOS, OneLineError
from ..model import Finding, split_screened
from ..run_dir.atomic import write_text_atomic

if TYPE_CHECKING:
    from rich.console import Console

    from ..engine import Settings
    from ..profile import Profile
    from ..report import Report


class RenderError(OneLineError):
    """A renderer raised: nothing was written, and the command says so in one line (exit 2).

    `error` is the renderer's own exception; a report outside the report.json contract (a
    ValueError) says why in its own words."""

    def __init__(self, renderer: Renderer, error: Exception) -> None:
        self.error = error
        super().__init__(str(error) if isinstance(error, ValueError)
                         else f"the {renderer.name} rendering failed: {type(error).__name__}: {error}")


def render_report(document: object, renderer: Renderer, output: str | Path = "-", *, err: bool = False) -> Path | None:
    """`document` rendered by `renderer` into `output`: ``-`` is stdout (stderr with `err`), any other
    path a file written atomically. Returns the file written, None for a stream.

    The text is whole before anything is written: a renderer that raises (:class:`RenderError`)
    prints nothing and leaves no file, and a write that fails (its OSError, for the caller to
    word) leaves the old file as it was. A terminal's rendering is drawn for the stream it goes to
    and written as drawn (its colours kept where rich chose them).
    """
    if err and isinstance(renderer, Drawn):
        renderer = renderer.on_stderr()
    text = _rendered(document, renderer)
    if output == "-":
        click.echo(text, nl=False, err=err, color=True if isinstance(renderer, Drawn) else None)
        return None
    write_text_atomic(output, text)
    return Path(output)


def _rendered(document: object, renderer: Renderer) -> str:
    try:
        return renderer.render(document)
    except Exception as exc:  # any renderer's failure is one line (RenderError), never a traceback
        raise RenderError(renderer, exc) from exc


def append_step_summary(document: object, renderer: Renderer) -> Path | None:
    """`document`'s markdown appended to $GITHUB_STEP_SUMMARY when that is set (GitHub Actions' job
    summary), a blank line after it so the next step's summary starts a block of its own."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    text = _rendered(document, renderer)
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(text if text.endswith("\n\n") else text + "\n")
    return Path(target)


def rule_docs() -> Mapping[str, str]:
    """The rules' documentation by name and code, for the page and the markdown."""
    from advisor.reports import ruledoc  # the renderers: 290 ms; analyze imports them while its trace is read (analyze.py)
    from advisor.rules.registry import load_rules  # rules: 17 ms, imported with the renderers

    return ruledoc.docs_by_key(load_rules().rules)


def write_renderings(report: Report, out: Path | None, profile: Profile | None, con: Console,
                     summary: bool = True) -> Path | None:
    """report.html beside report.json, and (`summary`) the markdown summary when $GITHUB_STEP_SUMMARY is set.

    A rendering problem is a warning: it never costs the user the run or report.json.
    """
    from advisor.reports.html import page_path  # the page's renderer: 290 ms; analyze imports it while its trace is read

    path = None
    try:
        docs = rule_docs()
        document = RunReport(report, profile_of=lambda: profile, rule_docs_of=lambda: docs)
        if out is not None:
            path = render_report(document, PAGE, page_path(report, out))
        if summary:
            append_step_summary(document, MARKDOWN)
    except Exception as exc:  # a rendering's failure, whatever it is, is a warning (re-raised only for a full run dir)
        if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS and _inside(exc.filename, out):
            raise  # the run dir itself is full or read-only: exit 2 (cli.run_dir_errors)
        error = exc.error if isinstance(exc, RenderError) else exc
        con.print(f"warning: the HTML/markdown report was not written: {type(error).__name__}: {error}",
                  style="yellow", highlight=False)
    return path


def _inside(filename: str | None, folder: Path | None) -> bool:
    """`filename` lies in `folder` (as named, symlinks not followed)."""
    if filename is None or folder is None:
        return False
    return Path(os.path.abspath(filename)).is_relative_to(os.path.abspath(folder))


def say_html(path: Path | None, con: Console, as_json: bool) -> None:
    if path is not None and not as_json:
        con.print(f"html: {path}", style="dim", highlight=False)


def emit(report: Report, as_json: bool, run_dir: str | None) -> None:
    """A run's report on stdout: report.json itself (`as_json`), else the terminal summary."""
    render_report(RunReport(report, run_dir=run_dir), REPORT_JSON if as_json else TERMINAL)


def saved_report(report: Report, path: Path) -> RunReport:
    """`advise report`'s document: the report read from `path`; the run's Profile and the rules'
    docs are read only for the renderers that ask (the page and the markdown)."""

    def profile() -> Profile | None:
        from advisor.profile import Profile  # profile: 340 ms (pandas), only for the page and the markdown
        from advisor.trace import TraceError  # trace: 10 ms, only for report

        trace = report.artifacts.trace
        found = Profile.from_run_dir(path.parent, _rank_of_trace(trace))
        if found.trace is None and trace and Path(trace).is_absolute() and Path(trace).is_file():
            try:  # `advise analyze --out`: the trace stays where the user keeps it
                found = Profile.from_trace(trace)
            except TraceError:
                pass  # the page says the trace was not loaded
        return found

    def docs() -> Mapping[str, str]:
        try:
            return rule_docs()
        except Exception:  # noqa: BLE001 - the report renders whatever state the rules are in
            return {}

    return RunReport(report, run_dir=str(path.parent), source=str(path), profile_of=profile, rule_docs_of=docs)


def _rank_of_trace(trace: object) -> str:
    """The rank suffix of a run dir's trace named in its report (``trace.rank0.json.gz``: '.rank0')."""
    found = re.fullmatch(r"trace(\.rank\d+)?\.json(\.gz)?", trace) if isinstance(trace, str) else None
    return (found.group(1) or "") if found else ""


def diagnose(profile: Profile, rule_settings: Settings | None, screen: bool = False) -> tuple[list[Finding], list[str]]:
    """Run the selected rules (advisor.engine); a run with no measured step has nothing to diagnose.

    Screened fixes (EXP001) are kept only where in-process arms will measure them (`screen`)."""
    from ..engine import run_rules  # engine: 23 ms; analyze imports it after asking its reader to split (analyze.py)

    if profile.steps.empty:
        return [], []
    findings, warnings = run_rules(profile, rule_settings)
    return (findings if screen else split_screened(findings)[0]), warnings
