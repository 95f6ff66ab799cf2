"""advise from Python: profile a script and get its typed report back.

    import advisor.api as advise

    report = advise.profile("train.py", ["--epochs", "1"], steps=30)
    report.recommended            # the typed report (report.json's contract: advisor.report.Report)
    report                        # in Jupyter: the report's page, inline

The script still runs in a child process, as on the command line; `profile` is the
`advise profile` command itself (the same options, checks, run dir and report), called in this
process. Where the command would print one line and exit non-zero, `AdviseError` is raised
with that line and the command's exit code: it never calls ``sys.exit``. A script that fails is an
error too, with its report attached (``exc.report``).
"""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from .exit_codes import EXIT_OK
from .report import SHOWN_AS
from .reports import inline

SHOWN_AS.update(html=inline.iframe, text=inline.text)  # a report returned here shows itself inline

if TYPE_CHECKING:
    from .report import Report

ERROR_PREFIX = "advise: error: "


class AdviseError(Exception):
    """What `advise` would say in one line on stderr, and the exit code it would leave with."""

    def __init__(self, message: str, exit_code: int, report: Report | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.report = report


def profile(script: str | os.PathLike, args: Sequence[str] = (), *, module: bool = False,
            out: str | os.PathLike = "advise-report", steps: int = 20, warmup: int = 5, profile_steps: int = 5,
            experiments: bool = True, time_budget: float | None = None, max_experiments: int = 12,
            safe_only: bool = False, fresh_runs: bool = False, confirm: bool = False, nproc: int = 1,
            timeout: float = 600.0, memory_budget: str | None = None, select: Sequence[str] = (),
            ignore: Sequence[str] = (), quiet: bool = False) -> Report:
    """`advise profile [options] SCRIPT ARGS`: run `script` (a path, or a module name with `module`)
    under the probe with `args`, write the run dir `out`, and return its report.

    The options are the command's (``advise profile --help``): `experiments=False` is
    ``--no-experiments``, `time_budget` is ``--time-budget`` in seconds, `memory_budget` a size such
    as ``"20GiB"``. `quiet` keeps the command's progress and summary off this process's output.
    Raises `AdviseError` where the command exits non-zero."""
    argv = ["profile", "--out", os.fspath(out), "--steps", str(steps), "--warmup", str(warmup),
            "--profile-steps", str(profile_steps), "--max-experiments", str(max_experiments),
            "--nproc-per-node", str(nproc), "--timeout", str(timeout)]
    argv += [flag for flag, on in (("-m", module), ("--no-experiments", not experiments), ("--safe-only", safe_only),
                                   ("--fresh-runs", fresh_runs), ("--confirm", confirm)) if on]
    argv += ["--time-budget", str(time_budget)] if time_budget is not None else []
    argv += ["--memory-budget", memory_budget] if memory_budget is not None else []
    argv += [w for code in select for w in ("--select", code)] + [w for code in ignore for w in ("--ignore", code)]
    code, said = _command([*argv, os.fspath(script), *map(str, args)], quiet)
    report_path = Path(out) / "report.json"
    report = load(out) if report_path.is_file() and code != 2 else None
    if code != EXIT_OK:
        raise AdviseError(said or f"advise profile exited {code}", code, report)
    if report is None:
        raise AdviseError(f"advise profile wrote no report in {out}", 1)
    return report


def load(run_dir: str | os.PathLike) -> Report:
    """The report of an existing run dir (or a report.json path); AdviseError when it cannot be read."""
    from .report import ReportError, load_report

    path = Path(run_dir)
    try:
        return load_report(path / "report.json" if path.is_dir() else path)
    except ReportError as exc:
        raise AdviseError(str(exc), 2) from None


def _command(argv: list[str], quiet: bool) -> tuple[int, str]:
    """Run the `advise` command `argv` in this process: (its exit code, its one-line error, if any)."""
    import click

    from .commands.cli import Invocation, main

    err = _Tee(None if quiet else sys.stderr)
    out = io.StringIO() if quiet else sys.stdout
    try:
        with redirect_stderr(err), redirect_stdout(out):
            main.main(args=argv, prog_name="advise", standalone_mode=False, obj=Invocation())
        code = EXIT_OK
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else EXIT_OK if exc.code is None else 1
    except click.ClickException as exc:  # click's own usage errors (a bad option value)
        return exc.exit_code, exc.format_message()
    return code, err.error()


class _Tee(io.StringIO):
    """stderr as the command writes it, passed on to `to` (None: kept only), its error line kept."""

    def __init__(self, to: object) -> None:
        super().__init__()
        self.to = to

    def write(self, text: str) -> int:
        if self.to is not None:
            self.to.write(text)  # type: ignore[attr-defined]
        return super().write(text)

    def error(self) -> str:
        lines = [line for line in self.getvalue().splitlines() if line.startswith(ERROR_PREFIX)]
        return lines[-1][len(ERROR_PREFIX):] if lines else ""
