"""The script's whole process tree, including what escapes its process group.

One ``killpg`` ends the script and everything that stays in its group (DataLoader workers).
A helper the script starts with ``start_new_session=True`` (``setsid``, a daemonizing double
fork) leads a group of its own and would outlive the run. Two nets catch those:

- while the script runs, its tree is walked a few times a second (``/proc/<pid>/task/*/children``,
  as the sampler does), remembering each process with its start time (a pid can be reused);
- on Linux advise is a *child subreaper* for the run (``prctl(PR_SET_CHILD_SUBREAPER)``): a
  process orphaned anywhere under the script is re-parented to advise rather than to init, so
  a double fork too quick to be seen is still found among advise's own children.

After the script has exited and its group was killed, :meth:`ProcessTree.end_escaped` asks
every survivor to stop (SIGTERM, to its whole group when it leads one), waits a grace period,
kills what is left, and reaps the processes re-parented to advise.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Callable

import psutil

from .sampler import descendant_pids

PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
POLL_EVERY_S = 0.25
_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


def _prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError, TypeError):  # not Linux / no libc symbol
        return None


class ProcessTree:
    """Every process the script started; use as a context manager around the script's life."""

    roots: set[int] = set()  # every run's script this advise process started and watches now (a duet has two)

    def __init__(self) -> None:
        self.root: int | None = None
        self.seen: dict[int, float] = {}  # pid -> create_time
        self.me = os.getpid()
        self._before: set[int] = set()
        self._subreaper_was: int | None = None
        self._last_poll = 0.0

    # the run --------------------------------------------------------------------------------

    def __enter__(self) -> "ProcessTree":
        try:
            self._before = {p.pid for p in psutil.Process(self.me).children()}
        except _GONE:
            self._before = set()
        self._set_subreaper(True)
        return self

    def __exit__(self, *exc: object) -> None:
        self._set_subreaper(False)
        if self.root is not None:
            ProcessTree.roots.discard(self.root)

    def watch(self, root_pid: int) -> None:
        self.root = root_pid
        ProcessTree.roots.add(root_pid)

    def poll(self, force: bool = False) -> None:
        """Note the script's current descendants (rate-limited: call it from any wait loop)."""
        now = time.monotonic()
        if self.root is None or (not force and now - self._last_poll < POLL_EVERY_S):
            return
        self._last_poll = now
        try:
            pids = descendant_pids(self.root)
            if pids is None:
                pids = [c.pid for c in psutil.Process(self.root).children(recursive=True)]
        except _GONE:
            return
        for pid in pids:
            if pid not in self.seen:
                try:
                    self.seen[pid] = psutil.Process(pid).create_time()
                except _GONE:
                    pass

    # the end --------------------------------------------------------------------------------

    def escaped(self) -> list[psutil.Process]:
        """Live processes of the script's tree outside its process group (call once the script is gone)."""
        found: dict[int, psutil.Process] = {}
        for pid, created in self.seen.items():
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == created:
                    found[pid] = proc
            except _GONE:
                pass
        for proc in self._adopted():
            found.setdefault(proc.pid, proc)
        for proc in list(found.values()):  # and whatever those started since the last walk
            try:
                for pid in descendant_pids(proc.pid) or []:
                    if pid not in found:
                        found[pid] = psutil.Process(pid)
            except _GONE:
                pass
        ours = {os.getpgrp(), self.root}
        out = []
        for proc in found.values():
            try:
                if proc.status() == psutil.STATUS_ZOMBIE or os.getpgid(proc.pid) in ours or proc.pid == self.me:
                    continue
            except (*_GONE, ProcessLookupError):
                continue
            out.append(proc)
        return out

    def end_escaped(self, grace_s: float, hurry: Callable[[], bool] = lambda: False) -> int:
        """SIGTERM, `grace_s` (cut short once `hurry()`), SIGKILL to every escaped process; reap the
        adopted; how many there were."""
        procs = self.escaped()
        for proc in procs:
            self._signal(proc, signal.SIGTERM)
        alive = _wait_gone(procs, grace_s, hurry)
        for proc in alive:
            self._signal(proc, signal.SIGKILL)
        _wait_gone(alive, 2.0)
        self.reap()
        return len(procs)

    def kill_now(self) -> None:
        """SIGKILL to every escaped process at once, no grace: advise is giving up (a third signal)."""
        for proc in self.escaped():
            self._signal(proc, signal.SIGKILL)

    def reap(self, wait_s: float = 1.0) -> None:
        """Collect the exit status of processes re-parented to advise, so none stays a zombie."""
        _wait_gone(self._adopted(), wait_s)

    # helpers --------------------------------------------------------------------------------

    def _adopted(self) -> list[psutil.Process]:
        """advise's children that it did not start itself: orphans from the script's tree."""
        try:
            children = psutil.Process(self.me).children()
        except _GONE:
            return []
        return [c for c in children if c.pid not in self._before and c.pid != self.root and c.pid not in ProcessTree.roots]

    def _signal(self, proc: psutil.Process, sig: int) -> None:
        try:
            if not proc.is_running():
                return
            pgid = os.getpgid(proc.pid)
            if pgid == proc.pid and pgid not in (os.getpgrp(), self.root):
                os.killpg(pgid, sig)  # a session/group leader: its own helpers too
            else:
                proc.send_signal(sig)
        except (*_GONE, ProcessLookupError, PermissionError):
            pass

    def _set_subreaper(self, on: bool) -> None:
        prctl = _prctl()
        if prctl is None:
            return
        try:
            if on:
                was = ctypes.c_int(0)
                if prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0) == 0:
                    self._subreaper_was = was.value
                if not self._subreaper_was:
                    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            elif self._subreaper_was == 0:
                prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        except (OSError, ctypes.ArgumentError):
            pass


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie; a zombie child of advise is reaped on the way."""
    try:
        if proc.status() != psutil.STATUS_ZOMBIE:
            return proc.is_running()
    except _GONE:
        return False
    try:
        os.waitpid(proc.pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not ours: its own parent reaps it
    return False


def _wait_gone(procs: list[psutil.Process], timeout_s: float, hurry: Callable[[], bool] = lambda: False
               ) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    alive = [p for p in procs if _alive(p)]
    while alive and time.monotonic() < deadline and not hurry():
        time.sleep(0.05)
        alive = [p for p in alive if _alive(p)]
    return alive
