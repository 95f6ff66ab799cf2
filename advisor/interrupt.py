"""Stop requests from outside: Ctrl-C, a cancelled CI job (SIGTERM), a closed terminal (SIGHUP).

All three mean the same thing to advise: stop the script politely, keep what was measured,
write report.json with status ``interrupted``, and exit with the signal's code (README "Exit
codes"). The handlers only *record* the signal; the code that waits on the script polls
:class:`StopRequest` and stops it (see ``advisor.probe.runner``). No exception lands in the
middle of a file write or a child's reaping, so whatever moment the signal arrives, the run
dir is left consistent.

A second signal means "hurry": the script is killed instead of waiting out its grace period,
and the report is still written. A third gives up on writing anything: the signal's default
action ends advise at once (Ctrl-C raises ``KeyboardInterrupt``), for when advise itself hangs.
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from typing import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
GIVE_UP_AFTER = 3  # signals: the third one is not deferred


def describe(signum: int | None) -> str:
    """'Ctrl-C', 'SIGTERM', 'SIGHUP' (or the signal's own name)."""
    if signum is None:
        return "Ctrl-C"
    try:
        return _NAMES.get(signum) or signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Interrupted(KeyboardInterrupt):
    """A stage gave up on its work because advise was asked to stop (by `signum`)."""

    def __init__(self, signum: int | None = None):
        super().__init__(describe(signum))
        self.signum = signum if signum is not None else signal.SIGINT


class StopRequest:
    """The stop signals received so far, in order; falsy until the first one."""

    def __init__(self) -> None:
        self.received: list[int] = []

    @property
    def signum(self) -> int | None:
        """The first signal: it decides the exit code and the wording."""
        return self.received[0] if self.received else None

    @property
    def hurry(self) -> bool:
        """A second signal came: kill the script now rather than after its grace period."""
        return len(self.received) >= 2

    def __bool__(self) -> bool:
        return bool(self.received)

    def record(self, signum: int, frame=None) -> None:
        self.received.append(signum)
        if len(self.received) >= GIVE_UP_AFTER:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    @contextmanager
    def installed(self) -> Iterator["StopRequest"]:
        """Record SIGINT/SIGTERM/SIGHUP while inside; the previous handlers come back after.

        A signal the process was started ignoring (``nohup`` ignores SIGHUP; a background job
        of a non-interactive shell ignores SIGINT) stays ignored, as python itself leaves it.
        Only the main thread can set handlers; elsewhere this records nothing.
        """
        previous = {}
        for signum in STOP_SIGNALS:
            try:
                if signal.getsignal(signum) is signal.SIG_IGN:
                    continue
                previous[signum] = signal.signal(signum, self.record)
            except ValueError:  # not the main thread
                break
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
