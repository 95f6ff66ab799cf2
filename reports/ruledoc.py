"""A rule's own documentation (ruff-style markdown: `## What it does`, `## Example`, ...) as HTML.

The text comes from the caller, keyed by rule name and/or code (the pipeline reads it from the
rules registry): the report never imports the rules. It is rendered with markdown-it-py's
CommonMark, raw HTML off, so whatever a rule's docstring says stays text. Headings drop to
``<h5>`` / ``<h6>`` (the doc sits inside a finding) and code blocks get the page's code style.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markupsafe import Markup

from advisor.model import Finding

HEADING_TAGS = {"h1": "h5", "h2": "h5", "h3": "h6", "h4": "h6", "h5": "h6", "h6": "h6"}


def docs_by_key(rules: Iterable) -> dict[str, str]:
    """{name: doc, code: doc} for each rule of a catalogue (anything with `name`, `code` and `doc`)."""
    return {key: r.doc for r in rules for key in (r.name, r.code) if key}


def doc_for(finding: Finding, rule_docs: Mapping[str, str]) -> str:
    """`finding`'s rule documentation from `rule_docs` (by rule name, then code); '' when there is none."""
    for key in (finding.rule, finding.code):
        if key and isinstance(rule_docs.get(key), str):
            return rule_docs[key]
    return ""


def _code(self, tokens, idx, options, env) -> str:
    return f'<pre class="code">{escapeHtml(tokens[idx].content.rstrip(chr(10)))}</pre>\n'


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False})
    md.add_render_rule("fence", _code)
    md.add_render_rule("code_block", _code)
    return md


def doc_html(doc: str) -> Markup:
    """`doc` (markdown) as HTML safe to put in the page as is; empty when there is no doc."""
    if not doc or not doc.strip():
        return Markup("")
    md = _markdown()
    tokens = md.parse(textwrap.dedent(doc))
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = HEADING_TAGS.get(token.tag, token.tag)
    return Markup(md.renderer.render(tokens, md.options, {}).rstrip("\n"))  # noqa: S704 - escaped by markdown-it, raw HTML off
