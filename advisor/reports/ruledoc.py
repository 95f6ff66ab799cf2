"""A rule's own documentation (ruff-style markdown: `## What it does`, `## Example`, ...) as HTML.

The text comes from the caller, keyed by rule name and/or code (the pipeline reads it from the
rules registry): the report never imports the rules. It is rendered with markdown-it-py's
CommonMark, raw HTML off, so whatever a rule's docstring says stays text. Headings drop to
``<h5>`` / ``<h6>`` (the doc sits inside a finding) and code blocks get the page's code style.

A rendered doc is kept in Jinja's private bytecode-cache folder, keyed by its text, this module
and markdown-it's install: the next report reads it back instead of importing markdown-it and
rendering (together ~35 ms of every `advise analyze` with findings).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import hashlib
import importlib.util
import os
import textwrap
from collections.abc import Iterable, Mapping
from functools import lru_cache

from markupsafe import Markup

from advisor.model import Finding

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.renderer import RendererHTML
    from markdown_it.token import Token
    from markdown_it.utils import EnvType, OptionsDict

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


def _code(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    from markdown_it.common.utils import escapeHtml  # markdown-it: 35 ms with rendering, only for a doc not kept yet

    return f'<pre class="code">{escapeHtml(tokens[idx].content.rstrip(chr(10)))}</pre>\n'


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    from markdown_it import MarkdownIt  # markdown-it: 35 ms with rendering, only for a doc not kept yet

    md = MarkdownIt("commonmark", {"html": False})
    md.add_render_rule("fence", _code)
    md.add_render_rule("code_block", _code)
    return md


def doc_html(doc: str) -> Markup:
    """`doc` (markdown) as HTML safe to put in the page as is; empty when there is none."""
    if not doc or not doc.strip():
        return Markup("")
    text = textwrap.dedent(doc)
    path = _cached(text)
    if path is not None:
        try:
            with open(path, encoding="utf-8") as fh:
                return Markup(fh.read())  # noqa: S704 - rendered below by this module, in a folder only this user writes
        except (OSError, ValueError):  # not kept yet (or unreadable): render it
            pass
    html = _render(text)
    if path is not None:
        _keep(path, html)
    return Markup(html)  # noqa: S704 - escaped by markdown-it, raw HTML off


def _render(text: str) -> str:
    md = _markdown()
    tokens = md.parse(text)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = HEADING_TAGS.get(token.tag, token.tag)
    return md.renderer.render(tokens, md.options, {}).rstrip("\n")


def _cached(text: str) -> str | None:
    """Where `text`'s HTML is kept (None: no private cache folder to be had)."""
    folder, renderer = _cache()
    if folder is None:
        return None
    key = hashlib.sha256(f"{renderer}\0{text}".encode()).hexdigest()[:32]
    return os.path.join(folder, f"advise-ruledoc-{key}.html")


@lru_cache(maxsize=1)
def _cache() -> tuple[str | None, str]:
    """(Jinja's private bytecode-cache folder (0700, this user's), what the rendering depends on:
    this module and markdown-it's install, by their files' times)."""
    try:
        import jinja2  # jinja2: 25 ms; the terminal imports this module without the page

        folder = jinja2.FileSystemBytecodeCache().directory
        spec = importlib.util.find_spec("markdown_it")
        origin = spec.origin if spec is not None else None
        renderer = f"{os.stat(__file__).st_mtime_ns}:{origin}:{os.stat(origin).st_mtime_ns if origin else 0}"
        return folder, renderer
    except (OSError, RuntimeError, ImportError, ValueError):
        return None, ""


def _keep(path: str, html: str) -> None:
    """Write the rendering for the next report; a full or read-only folder only means rendering again."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(html)
        os.replace(tmp, path)  # whole or not at all: a reader never sees half a doc
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
