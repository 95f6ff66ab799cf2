"""Work done ahead in a forked process, its result collected later.

``advise analyze`` is CPU-bound on a small machine: a second core is worth a third of its time
(benchmarks/README.md). The traces are read while the CLI, the rules and pandas import
(:mod:`advisor.trace.ahead`), and the page's trace tables are built while the rules run
(:mod:`advisor.commands.analyze`). :func:`start` forks (only where that is safe: a second core, no other
thread), the child runs ``fn(*args)`` and pickles the result down a pipe, then leaves without
running exit handlers; :meth:`Ahead.result` reads it. A child that fails or dies costs nothing but
the time: the caller does the work itself. A child nobody collects is killed at exit, never left
behind: each :class:`Ahead` holds its own exit handler until it is collected or cancelled.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import gc
import os
import pickle
import signal
import threading
from typing import Any, Callable


class Failed(Exception):
    """The child died or wrote half a result: do the work in this process instead."""


class Ahead:
    """A result being computed in a forked child."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid, self.fd = pid, fd
        atexit.register(self.cancel)  # killed at exit unless collected first

    def result(self) -> Any:
        """The child's return value; its exception re-raised (a picklable one); Failed otherwise."""
        atexit.unregister(self.cancel)
        try:
            with os.fdopen(self.fd, "rb") as fh:
                kind, value = pickle.load(fh)
        except Exception as exc:  # noqa: BLE001 - died, or wrote half: the caller does the work
            raise Failed(str(exc)) from None
        finally:
            _reap(self.pid)
        if kind == "error":
            raise value
        return value

    def cancel(self) -> None:
        atexit.unregister(self.cancel)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(self.fd)
        _reap(self.pid)


def start(fn: Callable, *args: object) -> Ahead | None:
    """Run ``fn(*args)`` in a forked child; None where forking is not safe (see :func:`can_fork`)."""
    if not can_fork():
        return None
    r, w = pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: compute, hand the result over, leave without running any exit handler
        code = 1
        try:
            os.close(r)
            _die_with(parent)
            gc.disable()  # a short life: collecting cycles is wasted time
            with os.fdopen(w, "wb") as out:
                try:
                    result = ("ok", fn(*args))
                except Exception as exc:  # noqa: BLE001 - handed to the parent, which decides
                    result = ("error", exc)
                try:
                    pickle.dump(result, out, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception:  # noqa: BLE001 - an exception that does not pickle: the parent redoes the work
                    pass
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return Ahead(pid, r)


def libc() -> ctypes.CDLL | None:
    """The C library (its functions looked up by name: AttributeError where absent), or None where it cannot be loaded."""
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def _die_with(parent: int) -> None:
    """Linux: the kernel kills this child when the parent dies, SIGKILL included (no exit handler
    of the parent's runs then to kill it); elsewhere the child ends at its next write to the parent."""
    c = libc()
    try:
        if c is None:
            return
        c.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except AttributeError:  # no prctl (not Linux)
        return
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


def pipe() -> tuple[int, int]:
    """os.pipe() with a 1 MiB buffer where Linux allows it: a result of several MB then crosses in
    a few writes, not one 64 KiB turn of each process at a time (benchmarks/README.md)."""
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError):  # not Linux, or over /proc/sys/fs/pipe-max-size: the default buffer
        pass
    return r, w


def can_fork() -> bool:
    """A second core to work on, and no other thread whose locks a forked child could inherit held."""
    return hasattr(os, "fork") and threading.active_count() == 1 and cores() >= 2


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass

