"""The planned edits as a unified diff, ``git apply``-able from the root, and written in place.

Paths are relative to the git checkout that holds the script (its root is where ``git apply``
runs), else to the working directory. Each fix gets its diff alone and the whole recommendation
one diff; a file outside the root is refused rather than named with ``..``. Writing replaces each
file through a temp file beside it (the file's mode kept), so a file is whole or untouched.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..model import Patch, PatchFile, PatchPart
from .fixes import Files, Planned, plan
from .rewrite import SourceFile, render
from .sites import Sites


@dataclass
class Patched:
    """A patch and the files it changes: the text before and after, for writing or a check."""

    patch: Patch
    changed: dict[Path, tuple[bytes, bytes]] = field(default_factory=dict)  # real path -> (before, after)

    @property
    def applied(self) -> bool:
        return bool(self.changed)


def git_root(path: str | os.PathLike) -> Path | None:
    """The checkout holding `path` (the folder with its ``.git``), None outside one."""
    here = Path(os.path.realpath(path))
    for folder in [here, *here.parents] if here.is_dir() else here.parents:
        if (folder / ".git").exists():
            return folder
    return None


def root_for(sites: Sites) -> Path:
    """Where the patch's paths start: the script's git checkout, else the working directory."""
    anchor = sites.main or next((s.file for s in sites.loaders + sites.model_calls + sites.optimizers), None)
    found = git_root(anchor) if anchor else None
    return found if found is not None else Path.cwd().resolve()


def build(overrides: dict, sites: Sites, *, expected: dict[str, str] | None = None, root: Path | None = None,
          command: str = "") -> Patched:
    """The recommendation's `overrides` written into the user's files at `sites`; `expected`:
    each file's real path -> the sha256 of the text the report's patch was made against."""
    root = (root or root_for(sites)).resolve()
    files = Files(expected)
    plans = plan(overrides, sites, files)
    for planned in plans:
        _within(planned, root)
    parts, changed = [], {}
    for planned in plans:
        diff = "".join(_diff(source, edits, root) for source, edits in _by_file(planned.edits))
        parts.append(PatchPart(planned.key, planned.title, diff, planned.refused, planned.told))
    whole, patched = [], []
    for source, edits in _by_file([e for p in plans for e in p.edits]):
        after = render(source, edits)
        if after != source.data:
            changed[source.path] = (source.data, after)
            whole.append(_unified(_relative(source, root), source, after))
            patched.append(PatchFile(_relative(source, root), source.sha256))
    return Patched(Patch(str(root), "".join(whole), parts, patched, command if changed else ""), changed)


def _within(planned: Planned, root: Path) -> None:
    """Edits of files outside `root` refused: their diff could not be applied from it."""
    kept = []
    for source, edit in planned.edits:
        if _relative(source, root).startswith(".."):
            line = f"{source.name}: outside {root}, where the patch's paths start (the script's checkout)"
            if line not in planned.refused:
                planned.refused.append(line)
        else:
            kept.append((source, edit))
    planned.edits = kept


def _by_file(edits: list) -> list:
    grouped: dict[int, tuple[SourceFile, list]] = {}
    for source, edit in edits:
        grouped.setdefault(id(source), (source, []))[1].append(edit)
    return list(grouped.values())


def _relative(source: SourceFile, root: Path) -> str:
    return Path(os.path.relpath(source.path, root)).as_posix()


def _diff(source: SourceFile, edits: list, root: Path) -> str:
    after = render(source, edits)
    return _unified(_relative(source, root), source, after) if after != source.data else ""


def _lines(text: str) -> list[str]:
    """`text` split after each newline only (str.splitlines also splits at form feeds and the like)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _unified(path: str, source: SourceFile, after: bytes) -> str:
    encoding = source.module.encoding
    before_lines, after_lines = _lines(source.data.decode(encoding)), _lines(after.decode(encoding))
    out = [f"diff --git a/{path} b/{path}\n"]
    for line in difflib.unified_diff(before_lines, after_lines, f"a/{path}", f"b/{path}"):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def write(changed: dict[Path, tuple[bytes, bytes]]) -> list[Path]:
    """Each changed file replaced whole (a temp file beside it, renamed over it, its mode kept);
    a file that is no longer what the patch was made against is left alone. Returns those written."""
    written = []
    for path, (before, after) in changed.items():
        if path.read_bytes() != before:
            raise OSError(f"{path} changed while the patch was made; nothing written to it")
        mode = os.stat(path).st_mode & 0o7777
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".advise", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(after)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        written.append(path)
    return written
