"""What every switch is: on and off at a step boundary, or on before the script starts (a fresh run)."""

from __future__ import annotations

from typing import Protocol


class NotSwitchable(Exception):
    """This key cannot be switched in this process (the reason is the message)."""


class Switch(Protocol):
    """One group of knobs: installed once (before the hooks, which must wrap what it patches), its
    keys switched on (``live``: at a step boundary of the running script; else before it starts,
    a fresh run) and off. A key it cannot switch live raises :class:`NotSwitchable`."""

    def install(self) -> None: ...

    def on(self, overrides: dict, applied: dict, *, live: bool = True) -> None: ...

    def off(self) -> None: ...
