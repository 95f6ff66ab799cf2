"""The markdown summary (`advise report --format markdown`, and $GITHUB_STEP_SUMMARY in CI).

Same view model as the HTML page, a shorter story: the verdict, findings with their measured
gains, the recommended configuration and the top ops. Escaping works like jinja's autoescape:
every ``{{ value }}`` is escaped for markdown (and for the HTML that GitHub's markdown allows)
unless a filter below made it into code on purpose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import re
from collections.abc import Mapping
from functools import lru_cache

import jinja2

from advisor.report import Report

from .page import NO_DOCS, Page, build_page
from .templates import TEMPLATES

if TYPE_CHECKING:
    from advisor.profile import Profile

_SPECIAL = re.compile(r"([\\`*_\[\]|#~])")


class Raw(str):
    """Markdown already made safe by a filter (code spans, fenced blocks)."""


def escape(value: object) -> str:
    """Plain text for a markdown line or table cell: no markup, no HTML, no line breaks."""
    if isinstance(value, Raw):
        return value
    text = "" if value is None else str(value)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _SPECIAL.sub(r"\\\1", text)
    return " ".join(text.splitlines())


def code(value: object, table: bool = True) -> Raw:
    """An inline code span that survives any backticks inside it and, in a table cell, pipes."""
    text = " ".join(str(value).splitlines())
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    if table:
        text = text.replace("|", "\\|")  # GFM reads \| inside a table cell's code span as |
    return Raw(f"{fence}{pad}{text}{pad}{fence}")


def fence(value: object, lang: str = "") -> Raw:
    """A fenced code block, its fence longer than any backtick run inside."""
    text = str(value).rstrip("\n")
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return Raw(f"{ticks}{lang}\n{text}\n{ticks}")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=False,  # markdown, not HTML: `finalize` escapes instead
        finalize=escape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(code=code, fence=fence)
    return env


def render_markdown(page: Page) -> str:
    """The markdown text of `page`."""
    text = environment().get_template("summary.md.j2").render(page=page)
    return re.sub(r"\n{3,}", "\n\n", text)


def markdown_for(report: Report, profile: Profile | None = None, rule_docs: Mapping[str, str] = NO_DOCS) -> str:
    """The markdown summary of `report` (with the run's Profile, or None)."""
    return render_markdown(build_page(report, profile, rule_docs))
