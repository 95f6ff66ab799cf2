"""Read a trace ahead in a forked process, while ``advise analyze`` imports the rules and pandas.

The read (:func:`advisor.trace_read.read_file`, ~0.4 s for a 50 MB trace) and the imports
(~0.35 s) then overlap on two cores. The reader's own imports (numpy, msgspec) happen before
the fork, once: importing them in both processes at once was measured slower (the child's
imports took 80-130 ms instead of ~30 ms). Whatever goes wrong in the child, :func:`collect` returns None and
the caller reads the file itself; a child still running when the parent exits (a bad
``--select``, say) is killed then, never left behind.
"""

from __future__ import annotations

import atexit
import os
import pickle

PREFETCH_MAX_BYTES = 64 << 20  # bigger files are read in-process: the hand-over would double their columns
_PENDING: dict = {}  # absolute path -> (pid, read end of the pipe)


def prefetch(path: str | os.PathLike) -> None:
    """Start reading `path` in a forked process, for :func:`collect` to pick up.

    A no-op where :func:`can_fork` says no (no fork, one core, other threads running: a test
    runner's) or for a file over ``PREFETCH_MAX_BYTES``.
    """
    src = os.fspath(path)
    key = os.path.abspath(src)  # collect finds it by this, however the path was spelled
    try:
        small = os.path.isfile(src) and os.path.getsize(src) <= PREFETCH_MAX_BYTES
    except OSError:
        small = False
    if not small or key in _PENDING or not can_fork():
        return
    from .trace_read import TraceError, read_file

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: read, hand the columns over, leave without running any exit handler
        code = 1
        try:
            import gc

            os.close(r)
            gc.disable()
            with os.fdopen(w, "wb") as out:
                try:
                    result = ("ok", read_file(src))
                except TraceError as exc:
                    result = ("error", str(exc))
                pickle.dump(result, out, protocol=pickle.HIGHEST_PROTOCOL)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    if not _PENDING:
        atexit.register(_abandon)
    _PENDING[key] = (pid, r)


def collect(src: str | os.PathLike):
    """The prefetched result for `src`: None when none is pending or the child failed.

    A TraceError the child met is raised here, as reading in-process would have.
    """
    pending = _PENDING.pop(os.path.abspath(os.fspath(src)), None)
    if pending is None:
        return None
    pid, r = pending
    try:
        with os.fdopen(r, "rb") as fh:
            kind, value = pickle.load(fh)
    except Exception:  # noqa: BLE001 - a child that died or wrote half: read it here instead
        kind, value = None, None
    finally:
        _reap(pid)
    if kind == "error":
        from .trace_read import TraceError

        raise TraceError(value)
    return value if kind == "ok" else None


def read_trace(src: str) -> tuple[dict, dict, int]:
    """:func:`advisor.trace_read.read_file`'s answer, from the read ahead when one was started."""
    from .trace_read import read_file

    result = collect(src)
    return result if result is not None else read_file(src)


def can_fork() -> bool:
    """A second core to read on, and no other thread whose locks a forked child could inherit held."""
    import threading

    return hasattr(os, "fork") and threading.active_count() == 1 and _cores() >= 2


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _abandon() -> None:
    """At exit: kill and reap the reads nobody collected."""
    import signal

    while _PENDING:
        _, (pid, r) = _PENDING.popitem()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(r)
        _reap(pid)
