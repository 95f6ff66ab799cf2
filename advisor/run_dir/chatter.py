"""The profiler's own log lines, told apart from the user's output.

torch.profiler (Kineto) and c10 write status lines straight to the process's stderr, which is
the script's log: ``STAGE:... Completed Stage: Warm Up``, ``USDT:... profiler_start``, CUPTI
notices, and c10's ``[W... CPUAllocator.cpp:245] Memory block of unknown size was allocated
before the profiling started``. They are advise's doing, not the script's: the probe silences
Kineto at the source (``KINETO_LOG_LEVEL``), and what still gets through is dropped by
:func:`without_chatter` from the script's log and from anything advise echoes of it.

The patterns are narrow on purpose: Kineto's own line prefix with its source file, and c10
log lines from the profiler's source files only. A user's own line never matches by accident.
"""

from __future__ import annotations

import re
from pathlib import Path

from .atomic import write_bytes_atomic

# Kineto's logger: "STAGE:2026-11-23 07:56:53 25105:25105 SyncActivityProfilerHandler.cpp:51] Completed Stage: Warm Up"
_KINETO = r"(?:STAGE|USDT|INFO|WARNING|ERROR|VERBOSE):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \w+\.cpp:\d+\] "
# c10's logger, from the profiler's own sources: "[W1123 07:52:49.911120993 CPUAllocator.cpp:245] Memory block of ..."
_C10 = (r"\[[WIE]\d{4} \d\d:\d\d:\d\d\.\d+ (?:\d+ )?(?:"
        r"CPUAllocator\.cpp:\d+\] Memory block of unknown size was allocated before the profiling started"
        r"|(?:\w*[Pp]rofiler\w*|\w*[Kk]ineto\w*|\w*[Cc]upti\w*)\.cpp:\d+\] )")
CHATTER = re.compile(rf"^(?:{_KINETO}|{_C10})")


def is_chatter(line: str) -> bool:
    """Is `line` one of the profiler's status lines (not the script's output)?"""
    return CHATTER.match(line) is not None


def without_chatter(text: str) -> str:
    """`text` minus the profiler's lines (line endings kept)."""
    return "".join(line for line in text.splitlines(keepends=True) if not is_chatter(line))


def strip_log(path: str | Path) -> int:
    """Drop the profiler's lines from a script log in place (atomically); how many were dropped.

    Works on bytes, so whatever encoding the script wrote stays as it was. A log that cannot be
    read or written is left alone: it is the user's, not worth an error.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return 0
    lines = raw.splitlines(keepends=True)
    kept = [line for line in lines if not is_chatter(line.decode("utf-8", errors="replace"))]
    if len(kept) == len(lines):
        return 0
    try:
        write_bytes_atomic(path, b"".join(kept))
    except OSError:
        return 0
    return len(lines) - len(kept)
