"""report.html: one self-contained page (CSS, JS and SVG charts inlined; no network), from the view model.

Like pyinstrument's HTML renderer, the output is a single file that can be mailed or attached to
an issue; like coverage.py's, the templates hold no logic (see :mod:`advisor.reports.page`).
Jinja autoescape is on for every template, so nothing from the user's script, trace or argv can
become markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

import jinja2
from markupsafe import Markup

from advisor.run_dir.atomic import write_text_atomic
from advisor.report import Report
from advisor.run_dir.layout import resolve_inside

from .page import NO_DOCS, Page, build_page
from .templates import TEMPLATES, asset

if TYPE_CHECKING:
    from advisor.profile import Profile


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        bytecode_cache=_bytecode_cache(),
    )


class _BestEffortCache(jinja2.FileSystemBytecodeCache):
    """A cache that never costs the report: a full or read-only temp dir only means compiling again."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except OSError:
            pass

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates kept in the temp dir: compiling report.html.j2 costs ~0.1 s a command."""
    try:
        return _BestEffortCache()
    except (OSError, RuntimeError):  # no private temp dir to be had: compile each time
        return None


def render_html(page: Page) -> str:
    """The HTML text of `page`."""
    css, js = Markup(asset("report.css")), Markup(asset("report.js"))  # noqa: S704 - our own files: trusted, inlined as is
    return environment().get_template("report.html.j2").render(page=page, css=css, js=js)


def page_path(report: Report, run_dir: str | Path) -> Path:
    """Where a run's page goes: report.html beside report.json (report.rank1.html under torchrun), as
    the report's artifacts name it; refused when that name leads out of `run_dir`."""
    artifacts = report.artifacts
    name = artifacts.report_html or str(Path(artifacts.report_json or "report.json").with_suffix(".html"))
    return resolve_inside(run_dir, name, "artifacts.report_html")


def write_html(report: Report, run_dir: str | Path, profile: Profile | None = None, rule_docs: Mapping[str, str] = NO_DOCS,
               path: str | Path | None = None) -> Path:
    """Render `report` into `path` (by default report.html in `run_dir`) and return where it went.

    `profile` is the run's :class:`advisor.profile.Profile` (timeline, top ops, log tail) or None;
    `rule_docs` maps rule names and/or codes to their documentation.
    """
    target = Path(path) if path is not None else page_path(report, run_dir)
    write_text_atomic(target, render_html(build_page(report, profile, rule_docs)))
    return target
