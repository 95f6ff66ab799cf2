"""The `advise` executable (and `python -m advisor`).

`advise analyze TRACE` starts reading the trace in a second process before the CLI (click, the
rules, pandas) is imported, so the read overlaps all of it (see :mod:`advisor.trace_prefetch`).
"""

import sys


def main() -> None:
    from .trace_prefetch import prefetch_argv

    prefetch_argv(sys.argv[1:])
    from .cli import entry

    entry()
