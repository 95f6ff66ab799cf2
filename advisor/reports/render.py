"""The renderers' one contract: a name, a file, and `render(document) -> str`.

As pyinstrument's ``Renderer.render(session)``: a renderer only turns a document into text; where
the text goes (stdout, a file written atomically) is the command's business, in one place
(:func:`advisor.commands.outputs.render_report`, after coverage.py's ``render_report``). Rendering
the whole text before anything is written is what lets a failing renderer leave no file behind.

Nothing here imports a renderer's own module: the tables of :mod:`advisor.reports.renderers` are read
when the CLI starts (its ``--format`` choices), and the page's renderers cost 290 ms to import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from rich.console import Console

D = TypeVar("D")
D_contra = TypeVar("D_contra", contravariant=True)


class Renderer(Protocol[D_contra]):
    """One output format of one kind of document."""

    @property
    def name(self) -> str:
        """Its --format value."""
        ...

    @property
    def filename(self) -> str:
        """The file it is written to by default (in a run dir, or `advise ab`'s --out)."""
        ...

    @property
    def page(self) -> bool:
        """A page for a browser: `advise report` writes it to its file and prints the path."""
        ...

    def render(self, document: D_contra) -> str:
        """The whole text of `document`."""
        ...


@dataclass(frozen=True)
class Plain(Generic[D]):
    """A renderer whose text is the same wherever it goes (markdown, JSON, a page)."""

    name: str
    filename: str
    text: Callable[[D], str]
    page: bool = False

    def render(self, document: D) -> str:
        return self.text(document)


@dataclass(frozen=True)
class Drawn(Generic[D]):
    """A renderer for a terminal: rich draws the text for the stream it will be printed on, stdout
    or (`stderr`) stderr, so its colours and width are that stream's and it is written as drawn.

    `draw(document, console)` returns the text as that console writes it."""

    name: str
    filename: str
    draw: Callable[[D, Console], str]
    stderr: bool = False
    page: bool = False

    def render(self, document: D) -> str:
        from .terminal import console  # rich: only when something is drawn

        return self.draw(document, console(stderr=self.stderr))

    def on_stderr(self) -> Drawn[D]:
        return replace(self, stderr=True)


def table(*renderers: Renderer) -> Mapping[str, Renderer]:
    """The renderers of one kind of document by name: the `--format` choices of its commands."""
    names = [r.name for r in renderers]
    if len(set(names)) != len(names):
        raise ValueError(f"two renderers share a name: {names}")
    return MappingProxyType({r.name: r for r in renderers})
