"""advise's exit codes (docs/reference/exit-codes.md), in one place: every command, the gate, the
probe's child and the signal handling exit with these names. A leaf (stdlib only), so the CLI reads
them at `--version` time without pandas."""

from __future__ import annotations

import signal

EXIT_OK, EXIT_SCRIPT, EXIT_USAGE, EXIT_REGRESSION = 0, 1, 2, 3
EXIT_INCONCLUSIVE = 4  # a gate that could not tell: the threshold still inside its interval, or below the noise floor
EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_TERMINATED = 129, 130, 143  # 128 + the signal, as a shell reports a process it ended

# A report's status (report_blocks.STATUSES) and the exit code it follows from.
STATUS_EXIT = {"ok": EXIT_OK, "failed": EXIT_SCRIPT, "timeout": EXIT_SCRIPT, "no-steps": EXIT_SCRIPT,
               "interrupted": EXIT_INTERRUPTED}
EXIT_SIGNAL: dict[int, int] = {signal.SIGINT: EXIT_INTERRUPTED, signal.SIGHUP: EXIT_HANGUP, signal.SIGTERM: EXIT_TERMINATED}


def signal_exit(signum: int | None) -> int:
    """The exit code of a command a signal stopped: Ctrl-C 130, a closed terminal 129, SIGTERM 143
    (None: Ctrl-C)."""
    return EXIT_SIGNAL.get(signum, 128 + signum) if signum else EXIT_INTERRUPTED
