"""The profiler's trace, written into the run dir only once it is known to parse.

torch's ``export_chrome_trace`` cannot be trusted to write valid JSON: Kineto writes names as
they are, so a script named ``it's "quoted".py`` puts a bare quote into every frame of it (torch
2.13's frame names; 2.14 writes those with ``'`` but the file name again in each frame's
``CallFrom``, several fields to a line); and
its C++ writer does not report a failed write, so a file-size limit or a full disk leaves a
silently truncated file. Given a ``.gz`` name it also writes the whole trace to ``$TMPDIR`` first
and leaves it there when anything fails. So the trace is exported as plain JSON to a temp file in
the run dir, parsed, repaired where only a name's quoting is wrong, then compressed and written
with :func:`advisor.run_dir.atomic.write_bytes_atomic`. A trace that still does not parse is reported as
lost (:class:`TraceLost`), never left behind as an artifact that looks usable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import errno
import gzip
import json
import os
import re
import resource
from pathlib import Path

import msgspec

from advisor.run_dir.atomic import check_writable, write_bytes_atomic

if TYPE_CHECKING:
    import torch

# One ``"key": "value"`` string field: its value ends at the quote before the line's end or before the
# next ``, "key": `` on the same line. Kineto writes most fields on a line of their own (torch 2.13's
# ``"name"``), some several to a line (torch 2.14's ``"CallFrom": "it's "quoted".py:4", "Python id": 1``).
_FIELD = re.compile(rb'("[^"\\\n]*": ")(.*?)("(?=[ \t]*,[ \t]*"[^"\\\n]*": |[ \t]*,?[ \t]*$))', re.MULTILINE)


class TraceLost(Exception):
    """The profiler's trace could not be kept; `errno` is set when the disk is the cause."""

    def __init__(self, message: str, errno_: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno_


def export_trace(prof: torch.profiler.profile, trace_path: Path) -> None:
    """Export `prof`'s trace to `trace_path` (gzipped when it ends in ``.gz``), checked; :class:`TraceLost`
    or an OSError."""
    raw = trace_path.with_name(f".tmp-{trace_path.name}.export.json")  # a run dir scratch name (rundir.SCRATCH)
    partial = raw.with_name(raw.name + ".tmp")  # Kineto's own temp name: left behind when its write failed
    try:
        prof.export_chrome_trace(str(raw))
        data = raw.read_bytes() if raw.exists() else partial.read_bytes() if partial.exists() else b""
        for path in (raw, partial):
            path.unlink(missing_ok=True)
        data = _parsed(data, raw.parent)
        write_bytes_atomic(trace_path, gzip.compress(data, compresslevel=6) if trace_path.suffix == ".gz" else data)
    finally:
        for path in (raw, partial):
            path.unlink(missing_ok=True)


def _parsed(data: bytes, folder: Path) -> bytes:
    """`data` if it parses as JSON, else its names re-quoted if that makes it parse, else TraceLost."""
    if (first := _parse_error(data)) is None:
        return data
    repaired = _requote(data)
    if _parse_error(repaired) is None:
        return repaired
    code = _disk_errno(len(data), folder)
    cause = os.strerror(code).lower() if code else f"{type(first).__name__}: {first}"
    raise TraceLost(f"the profiler wrote a trace that is not valid JSON ({cause}); the trace is lost", code)


def _parse_error(data: bytes) -> ValueError | None:
    """Why `data` is not a document the trace reader takes (None: it is). msgspec checks it without
    building it (15 ms for a 23 MB CPU trace; ``json.loads`` took 1.2 s of the window's end, in the
    script's own process, and five times the trace in memory); what msgspec refuses, the reader's
    tolerant path may still take (NaN literals), so that is asked of the standard library."""
    try:
        msgspec.json.decode(data, type=msgspec.Raw)
        return None
    except msgspec.DecodeError:
        pass
    try:
        json.loads(data)
        return None
    except ValueError as exc:
        return exc


def _requote(data: bytes) -> bytes:
    """Each ``"key": "value"`` field whose value is not a valid JSON string, with the value escaped."""
    def escape(match: re.Match[bytes]) -> bytes:
        head, value, tail = match.groups()
        try:
            json.loads(b'"' + value + b'"')
            return match.group(0)
        except ValueError:
            text = value.decode("utf-8", "surrogateescape")
            return head + json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8", "surrogateescape") + tail

    return _FIELD.sub(escape, data)


def _disk_errno(size: int, folder: Path) -> int | None:
    """Why a write may have stopped short: a file-size limit reached (EFBIG), or a full disk."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY and size >= soft:
        return errno.EFBIG
    try:
        check_writable(folder)
    except OSError as exc:
        return exc.errno
    return None
