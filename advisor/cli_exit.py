"""Exit codes and the one-line error exit, shared by every command."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

EXIT_OK, EXIT_SCRIPT, EXIT_USAGE, EXIT_REGRESSION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
STATUS_EXIT = {"ok": EXIT_OK, "failed": EXIT_SCRIPT, "timeout": EXIT_SCRIPT, "no-steps": EXIT_SCRIPT,
               "interrupted": EXIT_INTERRUPTED}


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """One clear line on stderr and a non-zero exit; never a traceback from our code."""
    click.echo(f"advise: error: {message}", err=True)
    sys.exit(code)
