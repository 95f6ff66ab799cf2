"""report.html: one self-contained page (CSS, JS and SVG charts inlined; no network), from the view model.

Like pyinstrument's HTML renderer, the output is a single file that can be mailed or attached to
an issue; like coverage.py's, the templates hold no logic (see :mod:`advisor.reports.viewmodel`).
Jinja autoescape is on for every template, so nothing from the user's script, trace or argv can
become markup.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jinja2
from markupsafe import Markup

from advisor.atomic import write_text_atomic

from .viewmodel import Page, build_page

TEMPLATES = Path(__file__).parent / "templates"


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _asset(name: str) -> Markup:
    """Our own CSS or JS, inlined as is (trusted text that must not be escaped)."""
    text = (TEMPLATES / name).read_text(encoding="utf-8")
    assert "</" + "style" not in text and "</" + "script" not in text, name
    return Markup(text)


def render_html(page: Page) -> str:
    """The HTML text of `page`."""
    return environment().get_template("report.html.j2").render(page=page, css=_asset("report.css"), js=_asset("report.js"))


def html_name(report: dict) -> str:
    """report.html beside report.json (report.rank1.html under torchrun)."""
    json_name = (report.get("artifacts") or {}).get("report_json") or "report.json"
    return str(Path(json_name).with_suffix(".html"))


def write_html(report: dict, run_dir: str | Path, profile=None, path: str | Path | None = None) -> Path:
    """Render `report` (with the tables of `run_dir`) into `path`, by default report.html in the run dir."""
    run_dir = Path(run_dir)
    target = Path(path) if path is not None else run_dir / html_name(report)
    write_text_atomic(target, render_html(build_page(report, run_dir, profile)))
    return target


def rerender(run_dir: Path, fmt: str = "html") -> int:
    """`advise report`: a run dir's report.json as report.html (written beside it) or markdown (stdout).

    Reads only what the run left; nothing is re-run. A missing or foreign report.json is a
    usage error (exit 2, one line).
    """
    import click

    from advisor.cli_exit import fail
    from advisor.report import ReportError, load_report

    path = run_dir / "report.json" if run_dir.is_dir() else run_dir
    try:
        report = load_report(path)
    except ReportError as exc:
        fail(str(exc))
    if fmt == "markdown":
        from .markdown import markdown_for_run

        click.echo(markdown_for_run(report, path.parent), nl=False)
    else:
        click.echo(write_html(report, path.parent))
    return 0
