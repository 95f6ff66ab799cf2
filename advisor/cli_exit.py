"""The one-line error exit shared by every command (the exit codes live with the report contract)."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from .report import EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION, EXIT_SCRIPT, EXIT_USAGE, STATUS_EXIT  # noqa: F401


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """One clear line on stderr and a non-zero exit; never a traceback from our code."""
    click.echo(f"advise: error: {message}", err=True)
    sys.exit(code)
