"""`advise history FILE`: the trend of a history file, written as a page and markdown, its change points printed.

Command code (prints and exits); the records are :mod:`advisor.history.store`'s, the trend
:mod:`advisor.history.trend`'s, the page and markdown :mod:`advisor.reports.history_page`'s.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..exit_codes import EXIT_OK
from ..history import store
from ..reports import history_page
from ..run_dir.atomic import write_text_atomic
from .cli_exit import fail, writing_error

PAGE, MARKDOWN = "history.html", "history.md"


def show_history(file: str, out: Path, fmt: str) -> int:
    try:
        read = store.read(file)
    except store.HistoryError as exc:
        fail(str(exc))
    if not read.records:
        fail(f"{file}: no record this advise can read" + (f" ({len(read.skipped)} lines skipped)" if read.skipped else ""))
    view = history_page.view(file, read.records, read.skipped)
    text = history_page.markdown(view)
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out / PAGE, history_page.page(view))
        write_text_atomic(out / MARKDOWN, text)
    except OSError as exc:
        fail(writing_error(exc, out))
    if fmt == "markdown":
        click.echo(text, nl=False)
        return EXIT_OK
    changes = history_page.change_lines(view)
    click.echo(f"advise history: {len(read.records)} records in {file}")
    for line in changes or ["no change point: " + "one stretch of steady step times per fingerprint"]:
        click.echo(f"  {line}")
    for line in history_page.fingerprint_lines(view) + [f"skipped {s}" for s in read.skipped]:
        click.echo(f"  note: {line}")
    click.echo(f"page: {out / PAGE}, markdown: {out / MARKDOWN}")
    return EXIT_OK
