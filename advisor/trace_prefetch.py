"""Read a trace ahead in a forked process, while ``advise analyze`` imports the rules and pandas.

The read (:func:`advisor.trace_read.read_file`, ~0.4 s for a 50 MB trace) and the imports
(~0.35 s) then overlap on two cores (:mod:`advisor.forked`). The reader's own imports (numpy,
msgspec) happen before the fork, once: importing them in both processes at once was measured
slower (the child's imports took 80-130 ms instead of ~30 ms). Whatever goes wrong in the child,
:func:`collect` returns None and the caller reads the file itself.
"""

from __future__ import annotations

import os

from . import forked

PREFETCH_MAX_BYTES = 64 << 20  # bigger files are read in-process: the hand-over would double their columns
_PENDING: dict = {}  # absolute path -> forked.Ahead


def prefetch(path: str | os.PathLike) -> None:
    """Start reading `path` in a forked process, for :func:`collect` to pick up.

    A no-op where :func:`advisor.forked.can_fork` says no (no fork, one core, other threads
    running: a test runner's) or for a file over ``PREFETCH_MAX_BYTES``.
    """
    src = os.fspath(path)
    key = os.path.abspath(src)  # collect finds it by this, however the path was spelled
    try:
        small = os.path.isfile(src) and os.path.getsize(src) <= PREFETCH_MAX_BYTES
    except OSError:
        small = False
    if not small or key in _PENDING or not forked.can_fork():
        return
    from .trace_read import read_file

    ahead = forked.start(read_file, src)
    if ahead is not None:
        _PENDING[key] = ahead


def prefetch_argv(argv: list[str]) -> None:
    """Start the read of the one trace `advise analyze ...` names, from argv, before click and the
    CLI are imported (:mod:`advisor.launch`: the read starts ~45 ms sooner). Anything else, or
    an option this does not know, starts nothing; a wrong guess costs nothing (reads are
    collected by their path, and an uncollected one is killed at exit)."""
    if argv[:1] != ["analyze"]:
        return
    found, words = [], iter(argv[1:])
    for word in words:
        if word in _VALUED:
            next(words, None)
        elif word.startswith("-"):
            if word != "--json" and word.split("=", 1)[0] not in _VALUED:
                return  # --help, or an option not known here: click decides
        else:
            found.append(word)
    if len(found) == 1:
        prefetch(found[0])


_VALUED = ("--out", "--select", "--ignore", "--config")  # `advise analyze`'s options that take a value


def collect(src: str | os.PathLike):
    """The prefetched result for `src`: None when none is pending or the child failed.

    A TraceError the child met is raised here, as reading in-process would have.
    """
    ahead = _PENDING.pop(os.path.abspath(os.fspath(src)), None)
    if ahead is None:
        return None
    try:
        return ahead.result()
    except forked.Failed:
        return None


def read_trace(src: str) -> tuple[dict, dict, int]:
    """:func:`advisor.trace_read.read_file`'s answer, from the read ahead when one was started."""
    from .trace_read import read_file

    result = collect(src)
    return result if result is not None else read_file(src)
