"""The CI gate's commands: `advise ab`, `advise compare` (of two report.json or two Kineto traces), and
`advise profile --baseline`'s comparison.

Command code (prints and exits); the work is in :mod:`advisor.gate.ab` (rounds and decision) and
:mod:`advisor.gate.opdiff` (where the time went).
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import click

from advisor.reports import ab_output, compare_output, slower_ops as slower_ops_view, terminal

from ..gate import ab, compare, opdiff
from ..analysis import steptime
from ..run_dir.atomic import write_json_atomic, write_text_atomic
from .cli_exit import EXIT_SCRIPT, EXIT_USAGE, fail
from ..report import EXIT_INTERRUPTED, EXIT_OK, Report
from ..profile import Profile
from ..trace import TraceError


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
    """`advise ab`: the exit code (0 pass, 3 regression, 4 inconclusive, 1 a round's script failed, 2 via fail())."""
    con = terminal.console(stderr=fmt == "json")

    def progress(side: str, index: int, report) -> None:
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
    try:
        pa, pb = Profile.from_trace(a), Profile.from_trace(b)
    except TraceError as exc:
        fail(str(exc), EXIT_USAGE)
    rows = opdiff.slower_ops([pa.trace], [pb.trace])
    step_a, step_b = steptime.median_step(pa.steps), steptime.median_step(pb.steps)
    change = (step_b / step_a - 1) if step_a and step_b else None
    step = (f"median ProfilerStep {step_a * 1e3:.2f} ms → {step_b * 1e3:.2f} ms ({change:+.1%}) over "
            f"{len(pa.steps)} and {len(pb.steps)} steps" if change is not None
            else "the traces have no ProfilerStep#N spans: times are per trace, not per step")
    note = f"{a} → {b}; {step}"
    if fmt == "json":
        click.echo(json.dumps({"a": a, "b": b, "step_time_median_s": [step_a, step_b], "step_time_change": change,
                               "slower_ops": [r.to_dict() for r in rows]}, indent=2))
    elif fmt == "markdown":
        click.echo("\n".join(["### advise compare: two traces", ""] + slower_ops_view.markdown(rows, note)))
    else:
        slower_ops_view.print_table(rows, note, terminal.console())
    _append_summary("\n".join(["### advise compare: two traces", ""] + slower_ops_view.markdown(rows, note)))
    return EXIT_OK


# --- advise compare of two report.json (and profile --baseline) -------------------------------

def emit_comparison(result: compare.Comparison, *, fmt: str = "terminal", junit: str | Path | None = None, stderr: bool = False) -> None:
    """Print the comparison; write JUnit XML; append markdown to $GITHUB_STEP_SUMMARY when set."""
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=2), err=stderr)
    elif fmt == "markdown":
        click.echo(compare_output.markdown(result), err=stderr)
    else:
        compare_output.print_table(result, terminal.console(stderr=stderr))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(compare_output.markdown(result) + "\n")
        except OSError as exc:
            click.echo(f"advise: warning: cannot append to $GITHUB_STEP_SUMMARY ({summary}): {exc.strerror}", err=True)
    if junit:
        try:
            write_text_atomic(junit, compare_output.junit(result))
        except OSError as exc:
            fail(f"cannot write the JUnit file {junit}: {exc.strerror}")


def run_compare(baseline: str, current: str, *, max_regression: float = compare.DEFAULT_MAX_REGRESSION,
                max_memory_regression: float = compare.DEFAULT_MAX_MEMORY_REGRESSION, alpha: float = compare.DEFAULT_ALPHA,
                fmt: str = "terminal", junit: str | None = None, fail_on_new_findings: bool = False,
                force: bool = False, ops: bool = False, inconclusive: str = "fail") -> int:
    """`advise compare BASELINE CURRENT`: the exit code (0 pass, 3 regression, 4 inconclusive; 2 via fail()).

    On a regression (or with `ops`) the slower ops of the two runs' traces are named (advisor.gate.opdiff)."""
    try:
        base, warn_b = compare.load(baseline, "baseline", force=force)
        cur, warn_c = compare.load(current, "current", force=force)
        result = compare.compare(base, cur, max_regression=max_regression, max_memory_regression=max_memory_regression,
                         alpha=alpha, fail_on_new_findings=fail_on_new_findings, force=force,
                         baseline_path=baseline, current_path=current)
    except compare.CompareError as exc:
        fail(str(exc), EXIT_USAGE)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a hand-edited or --force'd odd report
        fail(f"cannot compare {baseline} with {current}: {type(exc).__name__}: {exc}", EXIT_USAGE)
    result.warnings[:0] = warn_b + warn_c
    result.inconclusive_policy = inconclusive
    if result.failed or ops:
        result.slower_ops = _slower_ops(baseline, base, current, cur)
    emit_comparison(result, fmt=fmt, junit=junit)
    return result.exit_code


def _slower_ops(baseline: str, base: dict, current: str, cur: dict) -> list[dict] | None:
    """The slower ops between two run dirs' traces, None when either has none."""
    def folder(path: str) -> Path:
        return Path(path) if Path(path).is_dir() else Path(path).parent

    ta, tb = opdiff.run_dir_trace(folder(baseline), base), opdiff.run_dir_trace(folder(current), cur)
    return [r.to_dict() for r in opdiff.slower_ops([ta], [tb])] if ta is not None and tb is not None else None


def check_baseline(path: str) -> Report:
    """For `advise profile --baseline`: load and check the baseline before spending a run on it."""
    try:
        report, _ = compare.load(path, "baseline")
    except compare.CompareError as exc:
        fail(str(exc), EXIT_USAGE)
    return report


def compare_after_profile(baseline: Report, baseline_path: str, current: Report, current_path: str, run_dir: Path, *,
                          max_regression: float, as_json: bool) -> int:
    """`advise profile --baseline`: compare the fresh report with the baseline; write compare.json."""
    try:
        result = compare.compare(baseline, current, max_regression=max_regression,
                         baseline_path=baseline_path, current_path=current_path)
    except compare.CompareError as exc:
        fail(str(exc), EXIT_USAGE)
    try:
        write_json_atomic(run_dir / "compare.json", result.to_dict())
    except OSError:
        pass
    click.echo("", err=as_json)
    emit_comparison(result, stderr=as_json)
    return result.exit_code
