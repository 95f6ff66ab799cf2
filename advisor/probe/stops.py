"""When and how the parent stops the probed child: advise's own stop signals, Ctrl-C, the
``--timeout`` deadline and the arms' time budget. Stopping is polite first (SIGINT, so the child
still writes its trace and ``probe.json``), forceful (SIGKILL) after a grace period or a second
signal; the budget's end first asks every rank to stop at its next step boundary."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from advisor.run_dir.interrupt import StopRequest

GRACE_S = 10.0  # after SIGINT, how long the child may take to export its trace
BUDGET_GRACE_S = 10.0  # the arms' time budget ended: how long the child may take to reach a step boundary


class Stops:
    """One run's stops. `send` signals the child's process group; `ask_ranks` touches every rank's
    stop file (the child stops at its next step boundary); `notes` are the run's own."""

    def __init__(self, stop: StopRequest | None, send: Callable[[int], None], ask_ranks: Callable[[], None],
                 notes: list[str]) -> None:
        self.stop, self.send, self.ask_ranks, self.notes = stop, send, ask_ranks, notes
        self.timed_out = self.interrupted = False
        self.signum: int | None = None
        self.deadline = float("inf")  # --timeout's end (set when the child starts)
        self.budget_at: float | None = None  # the arms' time budget ends then (set at the window's end)
        self.budget_ended_at: float | None = None  # ... and did: the child was asked to stop
        self.sent_at: float | None = None  # the polite stop (SIGINT) was sent then
        self.held_from: float | None = None  # the child holds a window's start since then: the budget's clock stops

    @property
    def stopped(self) -> bool:
        """advise stopped the script: a signal to advise, or --timeout."""
        return self.interrupted or self.timed_out

    @property
    def budget_ended(self) -> bool:
        """The arms' time budget ended the run (and nothing else stopped it)."""
        return self.budget_ended_at is not None and not self.interrupted

    def arms_budget(self, ends_at: float) -> None:
        """From the window's end on, the arms' budget bounds the run, not --timeout."""
        self.budget_at, self.deadline = ends_at, float("inf")

    def lengthen_budget(self, seconds: float) -> None:
        """The arms' budget ends `seconds` later."""
        if self.budget_at is not None:
            self.budget_at += seconds

    def hold(self, now: float) -> None:
        """The child waits for a neighbour to leave the cores (advisor.probe.holds): the budget's clock stops."""
        self.held_from = now

    def release(self, seconds: float) -> None:
        """... and waited `seconds`: the budget ends as much later."""
        self.held_from = None
        self.lengthen_budget(seconds)

    def politely(self, now: float) -> None:
        """SIGINT: the script stops as Ctrl-C would stop it."""
        self.sent_at = now
        self.send(signal.SIGINT)

    def ctrl_c(self, now: float) -> None:
        """Ctrl-C reached advise: the first stops the script politely, a second stops waiting for a clean exit."""
        if self.interrupted:
            self.send(signal.SIGKILL)
        else:
            self.interrupted, self.signum = True, self.signum or signal.SIGINT
            self.politely(now)

    def enforce(self, now: float) -> None:
        """advise's stop signals, the deadline, the arms' budget and the grace period after a polite stop."""
        stop = self.stop
        if stop and not self.interrupted:  # advise was asked to stop: stop the script as Ctrl-C would
            self.interrupted, self.signum = True, stop.signum
            self.sent_at = self.sent_at or now
            self.send(signal.SIGINT)
        if stop is not None and stop.hurry:
            self.send(signal.SIGKILL)
        elif self.sent_at is None and now >= self.deadline:
            self.timed_out = True
            self.politely(now)
        elif self.sent_at is None and self.budget_at is not None and self.held_from is None and now >= self.budget_at:
            self._end_budget(now)
        elif self.sent_at is not None and now - self.sent_at > GRACE_S:
            self.send(signal.SIGKILL)

    def _end_budget(self, now: float) -> None:
        """The arms' time budget is over: every rank is asked to stop at its next step boundary (the
        window it is in is left out); one that has not within BUDGET_GRACE_S is stopped as Ctrl-C
        would. Either way the run ends ok: the budget did what it was asked."""
        if self.budget_ended_at is None:
            self.budget_ended_at = now
            self.ask_ranks()
        elif now - self.budget_ended_at > BUDGET_GRACE_S:
            self.notes.append(f"the script did not reach a step boundary within {BUDGET_GRACE_S:g} s of the end of the "
                              "time budget and was stopped")
            self.politely(now)
