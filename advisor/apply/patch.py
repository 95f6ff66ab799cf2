"""The planned edits as a unified diff, ``git apply``-able from the root, and written in place.

Paths are relative to the git checkout that holds the script (its root is where ``git apply``
runs), else to the working directory. Each fix gets its diff alone and the whole recommendation
one diff; a file outside the root is refused rather than named with ``..``. Writing replaces each
file through a temp file beside it (the file's mode kept), so a file is whole or untouched.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..model import Patch, PatchFile, PatchPart
from . import config_file
from .command_line import run_with
from .fixes import Files, Planned, plan
from .rewrite import SourceFile, render
from .sites import Sites


@dataclass
class Patched:
    """A patch and the files it changes: the text before and after, for writing or a check."""

    patch: Patch
    changed: dict[Path, tuple[bytes, bytes]] = field(default_factory=dict)  # real path -> (before, after)
    argv: list[str] | None = None  # the script's arguments with the flags set (None: no flag to set)
    env: dict[str, str] = field(default_factory=dict)  # the variables to run it with

    @property
    def applied(self) -> bool:
        """Something to do: a file to change, or a command line to run it with."""
        return bool(self.changed or self.patch.run_with)


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
          command: str = "", script: str = "", argv: Sequence[str] = (), files: Files | None = None) -> Patched:
    """The recommendation's `overrides` written into the user's files at `sites`, and said as the
    flags of the run's command (`script`, `argv`: the profiled run's) where a value comes from one;
    `expected`: each file's real path -> the sha256 of the text the report's patch was made against."""
    root = (root or root_for(sites)).resolve()
    plans = plan(overrides, sites, files if files is not None else Files(expected))
    for planned in plans:
        _within(planned, root)
        _unchanged(planned, expected or {})
    parts, changed = [], {}
    line = run_with(script or "train.py", list(argv), [f for p in plans for f in p.flags])
    for planned in plans:
        diff = "".join(_diff(source, edits, root) for source, edits in _by_file(planned.edits))
        diff += "".join(_unified_text(_relative_path(path, root), before, after)
                        for path, (before, after) in config_file.together(planned.configs).items())
        refused = planned.refused + [f"the run already passes {f.said}" for f in planned.flags if f in line.already]
        told = planned.told + [line.notes[f] for f in planned.flags if f in line.notes]
        parts.append(PatchPart(planned.key, planned.title, diff, refused, told, [f.said for f in planned.flags]))
    whole, patched = [], []
    for source, edits in _by_file([e for p in plans for e in p.edits]):
        after = render(source, edits)
        if after != source.data:
            changed[source.path] = (source.data, after)
            whole.append(_unified(_relative(source, root), source, after))
            patched.append(PatchFile(_relative(source, root), source.sha256))
    for path, (before, after) in config_file.together([c for p in plans for c in p.configs]).items():
        changed[path] = (before, after)
        whole.append(_unified_text(_relative_path(path, root), before, after))
        patched.append(PatchFile(_relative_path(path, root), hashlib.sha256(before).hexdigest()))
    fresh = any(f not in line.already for p in plans for f in p.flags)
    return Patched(Patch(str(root), "".join(whole), parts, patched, command if changed else "",
                         line.said if fresh else ""), changed, line.args if fresh else None, line.env if fresh else {})


def _within(planned: Planned, root: Path) -> None:
    """Edits of files outside `root` refused: their diff could not be applied from it."""
    for item in list(planned.configs):
        if _relative_path(item.path, root).startswith(".."):
            planned.refused.append(f"{item.path.name}: outside {root}, where the patch's paths start: set "
                                   f"{'.'.join(item.keys)} in it by hand")
            planned.configs.remove(item)
    kept = []
    for source, edit in planned.edits:
        if _relative(source, root).startswith(".."):
            line = f"{source.name}: outside {root}, where the patch's paths start (the script's checkout)"
            if line not in planned.refused:
                planned.refused.append(line)
        else:
            kept.append((source, edit))
    planned.edits = kept


def _unchanged(planned: Planned, expected: dict[str, str]) -> None:
    """Config changes of files that changed since the report's patch was made refused."""
    for item in list(planned.configs):
        if expected.get(os.path.realpath(item.path)) not in (None, hashlib.sha256(item.before).hexdigest()):
            planned.refused.append(f"{item.path.name}: changed since the run: profile it again")
            planned.configs.remove(item)


def _by_file(edits: list) -> list:
    grouped: dict[int, tuple[SourceFile, list]] = {}
    for source, edit in edits:
        grouped.setdefault(id(source), (source, []))[1].append(edit)
    return list(grouped.values())


def _relative(source: SourceFile, root: Path) -> str:
    return _relative_path(source.path, root)


def _relative_path(path: Path, root: Path) -> str:
    return Path(os.path.relpath(os.path.realpath(path), root)).as_posix()


def _diff(source: SourceFile, edits: list, root: Path) -> str:
    after = render(source, edits)
    return _unified(_relative(source, root), source, after) if after != source.data else ""


def _lines(text: str) -> list[str]:
    """`text` split after each newline only (str.splitlines also splits at form feeds and the like)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _unified(path: str, source: SourceFile, after: bytes) -> str:
    return _unified_text(path, source.data, after, source.module.encoding)


def _unified_text(path: str, before: bytes, after: bytes, encoding: str = "utf-8") -> str:
    before_lines, after_lines = _lines(before.decode(encoding)), _lines(after.decode(encoding))
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
