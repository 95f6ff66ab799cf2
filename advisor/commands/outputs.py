"""What a command writes and prints: the rules' diagnosis, report.html and the markdown summary,
the terminal or JSON output. Shared by `advise profile` (:mod:`advisor.commands.pipeline`) and `advise
analyze` (:mod:`advisor.commands.analyze`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from advisor.reports import terminal

from .cli_exit import DISK_ERRNOS
from ..model import Finding, split_screened
from ..profile import Profile
from ..report import as_json as report_json


def write_renderings(report: dict, out: Path | None, profile: Profile | None, con, summary: bool = True) -> Path | None:
    """report.html beside report.json, and (`summary`) the markdown summary when $GITHUB_STEP_SUMMARY is set.

    A rendering problem is a warning: it never costs the user the run or report.json.
    """
    from advisor.reports import html, markdown, ruledoc  # the renderers: 290 ms; analyze imports them while its trace is read (analyze.py)
    from advisor.rules.registry import load_rules  # rules: 17 ms, imported with the renderers

    path = None
    try:
        rule_docs = ruledoc.docs_by_key(load_rules().rules)
        if out is not None:
            path = html.write_html(report, out, profile, rule_docs)
        if summary:
            markdown.append_step_summary(report, profile, rule_docs)
    except Exception as exc:  # noqa: BLE001
        if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS and _inside(exc.filename, out):
            raise  # the run dir itself is full or read-only: exit 2 (cli.run_dir_errors)
        con.print(f"warning: the HTML/markdown report was not written: {type(exc).__name__}: {exc}",
                  style="yellow", highlight=False)
    return path


def _inside(filename, folder: Path | None) -> bool:
    """`filename` lies in `folder` (as named, symlinks not followed)."""
    if filename is None or folder is None:
        return False
    return Path(os.path.abspath(filename)).is_relative_to(os.path.abspath(folder))


def say_html(path: Path | None, con, as_json: bool) -> None:
    if path is not None and not as_json:
        con.print(f"html: {path}", style="dim", highlight=False)


def emit(report, con, as_json: bool, run_dir: str | None) -> None:
    if as_json:
        click.echo(json.dumps(report_json(report), indent=2))
    else:
        terminal.print_summary(report, con, run_dir)


def diagnose(profile: Profile, rule_settings, screen: bool = False) -> tuple[list[Finding], list[str]]:
    """Run the selected rules (advisor.engine); a run with no measured step has nothing to diagnose.

    Screened fixes (EXP001) are kept only where in-process arms will measure them (`screen`)."""
    from ..engine import run_rules  # engine: 23 ms; analyze imports it after asking its reader to split (analyze.py)

    if profile.steps.empty:
        return [], []
    findings, warnings = run_rules(profile, rule_settings)
    return (findings if screen else split_screened(findings)[0]), warnings
