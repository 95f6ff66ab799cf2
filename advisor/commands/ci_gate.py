"""The CI gate's commands: `advise ab`, `advise compare` (of two report.json or two Kineto traces), and
`advise profile --baseline`'s comparison.

Command code (prints and exits); the work is in :mod:`advisor.gate.ab` (rounds and decision) and
:mod:`advisor.gate.opdiff` (where the time went).
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import click

from advisor.reports import format as fmt, terminal
from advisor.reports.render import Renderer
from advisor.reports.renderers import (AB_JSON, AB_PAGE, AB_RENDERERS, COMPARE_RENDERERS, JUNIT, TRACE_DIFF_RENDERERS,
                                       ABOutcome, TraceDiff)

from ..gate import ab, compare, opdiff
from ..history import store
from ..analysis import steptime
from ..run_dir.atomic import write_json_atomic
from ..run_dir.layout import COMPARE_JSON, report_json
from .cli_exit import fail
from ..exit_codes import EXIT_OK, EXIT_SCRIPT, EXIT_USAGE, signal_exit
from ..run_dir.interrupt import describe
from .outputs import append_step_summary, render_report
from ..report import Report
from ..profile import Profile
from ..trace import TraceError


def _append_summary(document: object, renderer: Renderer) -> None:
    """The markdown in $GITHUB_STEP_SUMMARY when set; a summary that cannot be appended is a warning."""
    try:
        append_step_summary(document, renderer)
    except OSError as exc:
        click.echo(f"advise: warning: cannot append to $GITHUB_STEP_SUMMARY ({exc.filename}): {exc.strerror}", err=True)


def run_ab(base: str, candidate: str, script: str, args: list[str], options: ab.ABOptions, out: Path,
           renderer: Renderer = AB_RENDERERS["terminal"], mode: str = "duet", history: str | None = None) -> int:
    """`advise ab`: the exit code (0 pass, 3 regression, 4 inconclusive, 1 a round's script failed, 2 via fail()).
    `mode`: "duet" (both sides alive, taking turns: :mod:`advisor.gate.duets`) or "sequential" (whole runs
    in turn: :func:`advisor.gate.ab.run_ab`); ranks of a launched job cannot take turns: sequential."""
    con = terminal.console(stderr=renderer.filename.endswith(".json"))  # JSON on stdout is a program's: progress to stderr

    def progress(side: str, index: int, report: Report) -> None:
        show(side, index, ab.fast_step(report), f"step (p{ab.FAST_QUANTILE * 100:.0f})")

    def show(side: str, index: int, step: float | None, what: str = "step (turns)") -> None:
        con.print(f"round {index:>2} {side:<9} {what} {fmt.in_unit(step, 's'):>9}" if step else f"round {index} {side}",
                  style="dim", highlight=False)

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create the output dir {out}: {exc.strerror}")
    notes = []
    if mode == "duet" and options.nproc > 1:
        mode = "sequential"
        notes.append(f"sequential mode: the {options.nproc} ranks of a launched job cannot take turns with another job")
    try:
        if mode == "duet":
            from ..gate.duets import DoesNotFit, run_duets  # the probe's session, only for a duet
            try:
                result = run_duets(base, candidate, script, args, options, out, on_run=show)
            except DoesNotFit as exc:
                mode = "sequential"
                notes.append(f"sequential mode: the two sides at once ran out of memory ({exc}); each ran alone")
                for side in ("base", "candidate"):
                    shutil.rmtree(ab.round_dir(out, side, 1), ignore_errors=True)
        if mode == "sequential":
            result = ab.run_ab(base, candidate, script, args, options, out, on_run=progress)
            result.warnings[:0] = notes
    except ab.ABError as exc:
        fail(str(exc), EXIT_USAGE)
    except ab.RoundFailed as exc:
        fail(str(exc), EXIT_SCRIPT)
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", None)
        click.echo(f"advise: interrupted ({describe(signum)}): nothing decided; the rounds so far are in {out}", err=True)
        return signal_exit(signum)
    outcome = ABOutcome(result, out)
    summary = AB_RENDERERS["markdown"]
    try:
        write_json_atomic(out / AB_JSON, result.to_dict())
        render_report(outcome, summary, out / summary.filename)
        render_report(outcome, AB_PAGE, out / AB_PAGE.filename)
    except OSError as exc:
        fail(f"cannot write the decision into {out}: {exc.strerror or exc}")
    render_report(outcome, renderer)
    _append_summary(outcome, summary)
    if history:
        try:
            store.append(history, store.gate_record(result.to_dict(), candidate, base))
        except store.HistoryError as exc:
            fail(str(exc))
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


def compare_traces(a: str, b: str, renderer: Renderer = TRACE_DIFF_RENDERERS["terminal"]) -> int:
    """`advise compare A.json.gz B.json.gz`: the step time and the ops whose time per step grew (exit 0)."""
    try:
        pa, pb = Profile.from_trace(a), Profile.from_trace(b)
    except TraceError as exc:
        fail(str(exc), EXIT_USAGE)
    if pa.trace is None or pb.trace is None:  # (from_trace keeps the trace it read)
        fail(f"{a if pa.trace is None else b}: no trace was read", EXIT_USAGE)
    diff = TraceDiff(a, b, opdiff.slower_ops([pa.trace], [pb.trace]),
                     (steptime.median_step(pa.steps), steptime.median_step(pb.steps)), (len(pa.steps), len(pb.steps)))
    render_report(diff, renderer)
    _append_summary(diff, TRACE_DIFF_RENDERERS["markdown"])
    return EXIT_OK


# --- advise compare of two report.json (and profile --baseline) -------------------------------

def emit_comparison(result: compare.Comparison, renderer: Renderer = COMPARE_RENDERERS["terminal"], *,
                    junit: str | Path | None = None, err: bool = False) -> None:
    """Print the comparison (on stderr with `err`); write JUnit XML; append markdown to $GITHUB_STEP_SUMMARY when set."""
    render_report(result, renderer, err=err)
    _append_summary(result, COMPARE_RENDERERS["markdown"])
    if junit:
        try:
            render_report(result, JUNIT, junit)
        except OSError as exc:
            fail(f"cannot write the JUnit file {junit}: {exc.strerror}")


def run_compare(baseline: str, current: str, *, max_regression: float = compare.DEFAULT_MAX_REGRESSION,
                max_memory_regression: float = compare.DEFAULT_MAX_MEMORY_REGRESSION, alpha: float = compare.DEFAULT_ALPHA,
                renderer: Renderer = COMPARE_RENDERERS["terminal"], junit: str | None = None, fail_on_new_findings: bool = False,
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
    emit_comparison(result, renderer, junit=junit)
    return result.exit_code


def _slower_ops(baseline: str, base: Report, current: str, cur: Report) -> list[dict] | None:
    """The slower ops between two run dirs' traces, None when either has none."""
    ta, tb = opdiff.run_dir_trace(report_json(baseline).parent, base), opdiff.run_dir_trace(report_json(current).parent, cur)
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
        write_json_atomic(run_dir / COMPARE_JSON, result.to_dict())
    except OSError:
        pass
    click.echo("", err=as_json)
    emit_comparison(result, err=as_json)
    return result.exit_code
