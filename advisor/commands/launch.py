"""The `advise` executable (and `python -m advisor`).

First the stop signals (:func:`advisor.run_dir.interrupt.install_at_launch`: Ctrl-C at any moment is
exit 130, never a traceback or click's "Aborted!") and a stdout that a closed pipe cannot break.
Then `advise analyze TRACE` starts reading the trace in a second process before the CLI (click,
the rules, pandas) is imported, so the read overlaps all of it (:func:`advisor.trace.start_reading`);
the command collects it (:mod:`advisor.commands.analyze`).
"""

import os
import sys
from typing import TextIO

from ..exit_codes import signal_exit
from ..run_dir.interrupt import describe, install_at_launch


def main() -> None:
    install_at_launch()
    _survive_a_closed_stdout()
    try:
        reads = None
        paths = analyze_paths(sys.argv[1:])
        if paths:
            from ..trace import start_reading  # trace: 10 ms, only for analyze

            reads = start_reading(paths)
        from .cli import entry  # the CLI (click, 70 ms) after the read has started

        entry(reads)
    except KeyboardInterrupt as exc:  # before click runs (its commands turn it into the same line)
        signum = getattr(exc, "signum", None)
        sys.stderr.write(f"advise: interrupted ({describe(signum)})\n")
        sys.exit(signal_exit(signum))


ANALYZE_VALUED = ("--out", "--select", "--ignore", "--config")  # `advise analyze`'s options that take a value


def analyze_paths(argv: list[str]) -> list[str] | None:
    """The traces `advise analyze ...` names (files, folders of rank traces), read from argv before
    click and the CLI are imported (the read then starts sooner: benchmarks/README.md). Anything
    else, or an option this does not know, is None; a wrong guess costs nothing (reads are
    collected by their path, and an uncollected one is killed at exit). `ANALYZE_VALUED` is
    checked against the command's click options by a test."""
    if argv[:1] != ["analyze"]:
        return None
    found, words = [], iter(argv[1:])
    for word in words:
        if word in ANALYZE_VALUED:
            next(words, None)
        elif word.startswith("-"):
            if word != "--json" and word.split("=", 1)[0] not in ANALYZE_VALUED:
                return None  # --help, or an option not known here: click decides
        else:
            found.append(word)
    return found


class _PipeSafe:
    """sys.stdout whose reader went away (`advise profile ... | head -1`): the rest of the output
    goes to /dev/null instead of raising BrokenPipeError into the run. The run is the user's; a
    closed terminal or pipe is no reason to lose it (click would exit 1 on the first EPIPE)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def _survive_a_closed_stdout() -> None:
    if sys.stdout is not None and not isinstance(sys.stdout, _PipeSafe):
        sys.stdout = _PipeSafe(sys.stdout)
