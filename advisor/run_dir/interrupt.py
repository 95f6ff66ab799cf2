"""Stop requests from outside: Ctrl-C, a cancelled CI job (SIGTERM), a closed terminal (SIGHUP).

All three mean the same thing to advise: stop the script politely, keep what was measured,
write report.json with status ``interrupted``, and exit with the signal's code
(:mod:`advisor.exit_codes`). The handlers only *record* the signal; the code that waits on the script polls
:class:`StopRequest` and stops it (see ``advisor.probe.runner``). No exception lands in the
middle of a file write or a child's reaping, so whatever moment the signal arrives, the run
dir is left consistent.

A second signal means "hurry": the script is killed instead of waiting out its grace period,
and the report is still written. A third gives up on writing anything, for when advise itself
hangs: whatever is registered with :meth:`StopRequest.on_give_up` runs (the runner kills the
script's whole tree with it) and advise exits at once with the signal's code.

One path from launch to exit: :func:`install_at_launch` gives the process one StopRequest before
anything else is imported. Commands with nothing to save (analyze, compare, report, rules) leave
it *raising*: the first signal raises :class:`Interrupted` wherever the command is, and the CLI
turns that into one line and the signal's exit code (130, 143, 129), never click's "Aborted!".
`advise profile` switches it to *deferred* (:func:`deferred`) for the rest of the process, so a
signal at any moment, the analysis and the report included, is seen by the code that decides the
report's status.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager
from types import FrameType
from typing import Callable, Iterator, NoReturn

from ..exit_codes import signal_exit

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_NAMES: dict[int, str] = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
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

    def __init__(self, signum: int | None = None) -> None:
        super().__init__(describe(signum))
        self.signum = signum if signum is not None else signal.SIGINT


class StopRequest:
    """The stop signals received so far, in order; falsy until the first one.

    `raising`: the first signal raises :class:`Interrupted` at once instead of being only recorded.
    """

    def __init__(self, raising: bool = False) -> None:
        self.received: list[int] = []
        self.raising = raising
        self._give_up: list[Callable[[], None]] = []

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

    def record(self, signum: int, frame: FrameType | None = None) -> None:
        self.received.append(signum)
        if self.raising:
            raise Interrupted(signum)
        if len(self.received) >= GIVE_UP_AFTER:
            self.give_up()

    @contextmanager
    def on_give_up(self, action: Callable[[], None]) -> Iterator[None]:
        """While inside, `action` runs if advise gives up (the third signal): what must not outlive it."""
        self._give_up.append(action)
        try:
            yield
        finally:
            self._give_up.remove(action)

    def give_up(self) -> NoReturn:
        """Run the give-up actions (never raising), say so in one line, exit with the first signal's code."""
        for action in reversed(self._give_up):
            try:
                action()
            except BaseException:  # noqa: BLE001 - leaving is all that is left to do
                pass
        try:
            sys.stderr.write(f"advise: interrupted ({describe(self.signum)}) {len(self.received)} times: "
                             "stopped at once, the report was not written\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os._exit(signal_exit(self.signum))

    @contextmanager
    def installed(self) -> Iterator["StopRequest"]:
        """Record SIGINT/SIGTERM/SIGHUP while inside; the previous handlers come back after.

        A signal the process was started ignoring (``nohup`` ignores SIGHUP; a background job
        of a non-interactive shell ignores SIGINT) stays ignored, as python itself leaves it.
        Only the main thread can set handlers; elsewhere this records nothing.
        """
        previous = _install(self)
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


_PROCESS: StopRequest | None = None  # the process's own, from install_at_launch


def install_at_launch() -> StopRequest:
    """The process's StopRequest, raising, installed for SIGINT, SIGTERM and SIGHUP: call first thing."""
    global _PROCESS
    _PROCESS = StopRequest(raising=True)
    _install(_PROCESS)
    return _PROCESS


@contextmanager
def deferred() -> Iterator[StopRequest]:
    """Signals are recorded, not raised, while inside (the code that waits on the script polls them).

    In the launched process this is the process's StopRequest, and it stays deferred after the
    block, to the process's end: a signal after the last look at it is one that came after the
    command's work, not one that lands in the middle of its exit. Called from elsewhere (tests
    calling the pipeline), a StopRequest of its own is installed for the block and removed after.
    """
    if _PROCESS is not None:
        _PROCESS.raising = False
        yield _PROCESS
        return
    stop = StopRequest()
    with stop.installed():
        yield stop


def hold() -> None:
    """From here to the process's exit, signals are only recorded: its exit code is decided."""
    if _PROCESS is not None:
        _PROCESS.raising = False
        _PROCESS.received.clear()  # not a third signal counted from before: that one would exit at once


def _install(stop: StopRequest) -> dict:
    """`stop.record` for each stop signal not ignored since start; the handlers it replaced."""
    previous = {}
    for signum in STOP_SIGNALS:
        try:
            if signal.getsignal(signum) is signal.SIG_IGN:
                continue
            previous[signum] = signal.signal(signum, stop.record)
        except ValueError:  # not the main thread
            break
    return previous
