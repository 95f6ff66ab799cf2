"""A Jupyter notebook run as the script: its code cells in order, converted without a kernel.

``advise profile notebook.ipynb`` reads the notebook with nbformat (an nbformat it does not know,
invalid JSON, no code cell or a kernel that is not Python: :class:`NotebookError`, one line), turns
each code cell's IPython syntax into Python with IPython's own input transformer, and runs the
cells in the probed child one after another in one ``__main__`` namespace, as a kernel would.

Each cell is compiled under its own name, ``notebook.ipynb [cell 3, id 9a8b7c]`` (its place among
the notebook's cells, from 1, and its id where the notebook has ids), so a finding's location, a
traceback and the report name the cell and the line in it; the cells' text is put in linecache.

What a kernel would do outside the notebook is never done: shell lines (``!cmd``, ``x = !cmd``),
installs (``%pip``, ``%conda``), shell cell magics (``%%bash``, ``%%writefile``) and line magics
advise does not know are not run; :func:`never_run` lists them for the report. ``%time``,
``%timeit`` (once) and ``%%time``/``%%capture`` run their statement; ``%matplotlib``,
``%config``, ``%load_ext`` and ``%autoreload`` are dropped: they change nothing the loop does.
"""

from __future__ import annotations

import json
import linecache
import os
import re
from dataclasses import dataclass
from typing import Any

RUN = frozenset({"time", "timeit", "capture", "prun"})  # their statement runs, once
DROP = frozenset({"matplotlib", "config", "load_ext", "reload_ext", "autoreload", "aimport", "precision", "pylab"})
INSTALL_HINT = "pip install 'advise[notebook]'"


class NotebookError(ValueError):
    """A notebook that cannot be run as a script: one line."""


@dataclass(frozen=True)
class Cell:
    number: int  # its place among all the notebook's cells, from 1
    id: str | None
    source: str  # as written (IPython syntax)
    python: str  # as run

    def name(self, path: str) -> str:
        return f"{path} [cell {self.number}" + (f", id {self.id}" if self.id else "") + "]"


def is_notebook(path: str) -> bool:
    return path.endswith(".ipynb")


def read(path: str) -> list[Cell]:
    """The notebook's code cells, converted; NotebookError where it cannot run as a script."""
    try:
        import nbformat
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        raise NotebookError(f"{path}: profiling a notebook needs nbformat and IPython ({INSTALL_HINT})") from None
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except (OSError, UnicodeDecodeError) as exc:
        raise NotebookError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    except json.JSONDecodeError as exc:
        raise NotebookError(f"{path}: not a notebook (invalid JSON at line {exc.lineno}: {exc.msg})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("nbformat"), int):
        raise NotebookError(f"{path}: not a notebook (no nbformat version)")
    if raw["nbformat"] not in (3, 4):
        raise NotebookError(f"{path}: nbformat {raw['nbformat']} is not one this reader knows (3 or 4)")
    try:
        nb = nbformat.reads(json.dumps(raw), as_version=4)
    except (nbformat.ValidationError, nbformat.reader.NotJSONError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise NotebookError(f"{path}: not a valid notebook ({str(exc).splitlines()[0][:200]})") from None
    language = _language(nb.get("metadata", {}))
    if language and language.lower() != "python":
        raise NotebookError(f"{path}: its kernel runs {language}, not Python")
    transform = TransformerManager().transform_cell
    cells = [Cell(i, c.get("id"), c.source, _same_lines(c.source, transform(c.source)) if c.source.strip() else "")
             for i, c in enumerate(nb.cells, 1) if c.cell_type == "code"]
    if not any(c.source.strip() for c in cells):
        raise NotebookError(f"{path}: no code cell to run")
    return cells


def _same_lines(source: str, python: str) -> str:
    """The converted cell with the leading blank lines IPython's cleanup dropped put back, so a line
    number in it is the line in the cell."""
    lead = len(source) - len(source.lstrip("\n")) - (len(python) - len(python.lstrip("\n")))
    return "\n" * max(0, lead) + python


def _language(metadata: dict) -> str | None:
    info = metadata.get("language_info") or {}
    spec = metadata.get("kernelspec") or {}
    return info.get("name") or spec.get("language")


_SHELL = re.compile(r"^\s*(?:[\w.,\s]+=\s*)?(!|%%?)(\w*)")


def never_run(cells: list[Cell], path: str) -> list[str]:
    """The lines a kernel would run outside the notebook that advise does not: shell lines, installs,
    shell cell magics and unknown magics, each as ``cell N, line L: TEXT``."""
    out = []
    for cell in cells:
        for n, line in enumerate(cell.source.splitlines(), 1):
            m = _SHELL.match(line)
            if not m:
                continue
            kind, name = m.groups()
            if kind == "!" or name not in RUN | DROP:
                out.append(f"{cell.name(os.path.basename(path))}, line {n}: {line.strip()}")
            if kind == "%%":
                break  # a cell magic's body is its own, not lines of Python
    return out


class _Kernel:
    """``get_ipython()`` for the converted cells: what runs, runs here; nothing reaches a shell."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.user_ns = namespace

    def system(self, cmd: str) -> None:
        return None  # never run: listed in the report

    def getoutput(self, cmd: str, split: bool = True) -> list[str]:
        return []

    def run_line_magic(self, name: str, line: str, _stack_depth: int = 1) -> Any:
        if name in RUN and line.strip():
            exec(compile(line, f"<%{name}>", "exec"), self.user_ns)
        return None

    def run_cell_magic(self, name: str, line: str, cell: str) -> Any:
        if name in RUN:
            exec(compile(cell, f"<%%{name}>", "exec"), self.user_ns)
        return None


def run(path: str, namespace: dict[str, Any]) -> None:
    """Run the notebook's code cells in order in `namespace` (``__main__``'s)."""
    cells = read(path)
    kernel = _Kernel(namespace)
    namespace.setdefault("get_ipython", lambda: kernel)
    for cell in cells:
        if not cell.python.strip():
            continue
        name = cell.name(path)
        linecache.cache[name] = (len(cell.source), None, cell.python.splitlines(True), name)
        exec(compile(cell.python, name, "exec"), namespace)
