"""The one-line error exit shared by every command (the exit codes: :mod:`advisor.exit_codes`)."""

from __future__ import annotations

import errno
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, NoReturn

import click

from ..exit_codes import EXIT_USAGE
from ..run_dir.atomic import NotAFile
from ..run_dir.layout import remove_scratch

# Errors that say the place is unusable (full, read-only, forbidden), not that advise failed.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM})


class OneLineError(click.ClickException):
    """An error as every advise error shows it: one line, exit 2 (click's own is four lines)."""

    exit_code = EXIT_USAGE

    def show(self, file: IO[str] | None = None) -> None:
        click.echo(f"advise: error: {self.format_message()}", err=True)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """One clear line on stderr and a non-zero exit; never a traceback from our code."""
    click.echo(f"advise: error: {message}", err=True)
    sys.exit(code)


def writing_error(exc: OSError, where: str | os.PathLike) -> str:
    """'no space left on device writing run/report.json': the reason, then the file (else `where`)."""
    if isinstance(exc, NotAFile):
        return f"{exc.filename} is {exc.strerror}; remove it or choose another run dir"
    reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
    return f"{reason[:1].lower()}{reason[1:]} writing {exc.filename or where}"


@contextmanager
def run_dir_errors(run_dir: Path | None) -> Iterator[None]:
    """Around a command that writes `run_dir`: a full, read-only or forbidden disk is bad input.

    Exit 2 with one line (exit codes: "a locked, read-only or full run dir" is 2), after removing
    the temp and scratch files a failed writer left in the run dir. Any other error passes.
    """
    try:
        yield
    except OSError as exc:
        if run_dir is None or not (exc.errno in DISK_ERRNOS or isinstance(exc, NotAFile)):
            raise
        remove_scratch(run_dir)
        fail(writing_error(exc, run_dir))
