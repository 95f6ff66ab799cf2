"""The CI gate's commands beside `compare`: `advise ab` and `advise compare` of two Kineto traces.

Command code (prints and exits); the work is in :mod:`advisor.ab` (rounds and decision) and
:mod:`advisor.opdiff` (where the time went).
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import click

from advisor.reports import terminal

from . import ab, opdiff
from .atomic import write_json_atomic, write_text_atomic
from .cli_exit import EXIT_SCRIPT, EXIT_USAGE, fail
from .report import EXIT_INTERRUPTED, EXIT_OK


def _append_summary(markdown: str) -> None:
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if not summary:
        return
    try:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")
    except OSError as exc:
        click.echo(f"advise: warning: cannot append to $GITHUB_STEP_SUMMARY ({summary}): {exc.strerror}", err=True)


def run_ab(base: str, candidate: str, script: str, args: list[str], options: ab.ABOptions, out: Path,
           fmt: str = "terminal") -> int:
    """`advise ab`: the exit code (0 pass, 3 regression, 1 a round's script failed, 2 via fail())."""
    from advisor.reports import ab_output

    con = terminal.console(stderr=fmt == "json")

    def progress(side: str, index: int, report: dict) -> None:
        step = ab.fast_step(report)
        con.print(f"round {index:>2} {side:<9} step (p{ab.FAST_QUANTILE * 100:.0f}) {step * 1e3:8.2f} ms" if step
                  else f"round {index} {side}",
                  style="dim", highlight=False)

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create the output dir {out}: {exc.strerror}")
    try:
        result = ab.run_ab(base, candidate, script, args, options, out, on_run=progress)
    except ab.ABError as exc:
        fail(str(exc), EXIT_USAGE)
    except ab.RoundFailed as exc:
        fail(str(exc), EXIT_SCRIPT)
    except KeyboardInterrupt:
        click.echo(f"advise: interrupted; the rounds measured so far are in {out}", err=True)
        return EXIT_INTERRUPTED
    markdown = ab_output.markdown(result)
    try:
        write_json_atomic(out / "ab.json", result.to_dict())
        write_text_atomic(out / "summary.md", markdown)
        write_text_atomic(out / "ab.html", ab_output.page(result))
    except OSError as exc:
        fail(f"cannot write the decision into {out}: {exc.strerror or exc}")
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2))
    elif fmt == "markdown":
        click.echo(markdown)
    else:
        ab_output.print_table(result, con)
        con.print(f"decision: {out / 'ab.json'}, page: {out / 'ab.html'}", style="dim", highlight=False)
    _append_summary(markdown)
    return result.exit_code


def is_trace(path: str) -> bool:
    """A Kineto trace rather than a report.json: its first KiB names traceEvents or deviceProperties."""
    p = Path(path)
    if p.is_dir():
        return False
    try:
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rb") as fh:
            head = fh.read(4096)
    except (OSError, EOFError):
        return False
    return b'"schema_version"' not in head and any(k in head for k in (b'"traceEvents"', b'"deviceProperties"',
                                                                        b'"schemaVersion"', b'"distributedInfo"'))


def compare_traces(a: str, b: str, fmt: str = "terminal") -> int:
    """`advise compare A.json.gz B.json.gz`: the step time and the ops whose time per step grew (exit 0)."""
    from advisor.reports import slower_ops as view

    from .profile import Profile
    from .trace import TraceError

    try:
        pa, pb = Profile.from_trace(a), Profile.from_trace(b)
    except TraceError as exc:
        fail(str(exc), EXIT_USAGE)
    rows = opdiff.slower_ops([pa.trace], [pb.trace])
    step_a = float(pa.steps["duration_s"].median()) if len(pa.steps) else None
    step_b = float(pb.steps["duration_s"].median()) if len(pb.steps) else None
    change = (step_b / step_a - 1) if step_a and step_b else None
    step = (f"median ProfilerStep {step_a * 1e3:.2f} ms → {step_b * 1e3:.2f} ms ({change:+.1%}) over "
            f"{len(pa.steps)} and {len(pb.steps)} steps" if change is not None
            else "the traces have no ProfilerStep#N spans: times are per trace, not per step")
    note = f"{a} → {b}; {step}"
    if fmt == "json":
        click.echo(json.dumps({"a": a, "b": b, "step_time_median_s": [step_a, step_b], "step_time_change": change,
                               "slower_ops": [r.to_dict() for r in rows]}, indent=2))
    elif fmt == "markdown":
        click.echo("\n".join(["### advise compare: two traces", ""] + view.markdown(rows, note)))
    else:
        view.print_table(rows, note, terminal.console())
    _append_summary("\n".join(["### advise compare: two traces", ""] + view.markdown(rows, note)))
    return EXIT_OK
