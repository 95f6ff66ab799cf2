"""`advise apply`: a run's recommended configuration as a patch of the user's own code.

Prints the patch, saves it (``-o``), writes it into the files (``--write``) or times the patched
script against the unpatched one in fresh runs (``--check``); a value the script takes from its own
flag is said as the command line to run it with instead (stdout where it is the whole change, else
one line on stderr); each change it could not make is one line on stderr naming the file:line and why. Exit 0 when something was written, 2 (one line) when
the run dir has no report, no recommendation or nothing that could be written; ``--check``: 3 when
the patched script was slower than the arm's interval, 1 when a run of it failed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .. import apply
from ..model import Recommendation, findings_of
from ..report import Report, ReportError, load_report
from ..reports import format as fmt
from .. import units
from ..run_dir.atomic import write_text_atomic
from ..run_dir.layout import NoRunDir, names, report_json
from ..run_dir.seen import Sources
from .cli_exit import fail
from ..exit_codes import EXIT_OK, EXIT_REGRESSION, EXIT_SCRIPT

if TYPE_CHECKING:
    from ..apply.check import Checked

MIN_CHECK_STEPS = 20  # --check's runs measure at least this many steps: a loader's prefetched queue is a few of them


def apply_run(run_dir: Path, *, write: bool, output: str | None, check: bool, rounds: int, steps: int | None,
              warmup: int | None) -> int:
    """`advise apply RUN_DIR`: the exit code (0 written or printed, 3 a check that did not hold; 2 and 1 via fail())."""
    try:
        report_path = report_json(run_dir)
    except NoRunDir as exc:
        fail(str(exc))
    run_dir = report_path.parent
    try:
        report = load_report(report_path)
    except ReportError as exc:
        fail(str(exc))
    rec = report.recommended
    if rec is None or not rec.overrides:
        fail(f"{report_path}: no recommended configuration to apply (no automatic fix was measured faster)")
    expected = {os.path.realpath(Path(rec.patch.root) / f.path): f.sha256 for f in rec.patch.files} if rec.patch else {}
    sources = Sources.load(run_dir / names().sources)
    # where the profiled run's patch started (the script's checkout then): the script's relative
    # path is found there, and the patch's paths start there, wherever `advise apply` runs from
    made_at = Path(rec.patch.root) if rec.patch and rec.patch.root and Path(rec.patch.root).is_dir() else None
    sites = apply.read_sites(report.observed, sources, report.script, [*([made_at] if made_at else []), run_dir.resolve().parent])
    patched = apply.build(rec.overrides, sites, expected=expected, command=apply.command_for(run_dir), root=made_at,
                          script=str(report.script or ""), argv=list(report.argv))
    for part in patched.patch.parts:
        for line in part.told:
            click.echo(f"advise: {part.title}: {line}", err=True)
        for line in part.refused:
            click.echo(f"advise: not written ({part.title}): {line}", err=True)
    if not patched.applied:
        fail("nothing in the recommendation could be written into the code (the lines above say why)")
    run_with = patched.patch.run_with
    if run_with and (patched.changed or write or output or check):
        click.echo(f"advise: run it with: {run_with}", err=True)
    if output:
        try:
            write_text_atomic(output, patched.patch.diff)
        except OSError as exc:
            fail(f"cannot write {output}: {exc.strerror or exc}")
        click.echo(f"advise: patch saved to {output} (git apply it from {patched.patch.root})", err=True)
    code = EXIT_OK
    if check:
        code = _check(patched, rec, report, sites, run_dir, rounds, steps, warmup)
    if (write or output) and not patched.changed:
        click.echo("advise: no file to change: the command line above is the whole change", err=True)
    if write and code != EXIT_OK:
        click.echo("advise: nothing written: the patched script did not hold the arm's speed-up", err=True)
    elif write:
        try:
            written = apply.write(patched.changed)
        except OSError as exc:
            fail(f"cannot write the patch: {exc.strerror or exc}")
        for path in written:
            click.echo(f"advise: wrote {os.path.relpath(path, patched.patch.root)}", err=True)
    if not (write or output or check):
        click.echo(patched.patch.diff, nl=False)
        if run_with and not patched.changed:
            click.echo(run_with)  # the whole advice: the script's own flags, no code to change
    return code


def _check(patched: apply.Patched, rec: Recommendation, report: Report, sites: apply.Sites, run_dir: Path, rounds: int,
           steps: int | None, warmup: int | None) -> int:
    from ..apply import check as checking  # the gate's A/B: 210 ms (pandas, scipy), only for --check
    from ..gate import ab  # with the check: the A/B it runs

    if not sites.main:
        fail("--check runs the script, and its file is not known (a module run, or it moved)")
    measured = len(report.steps)

    def progress(side: str, index: int, round_report: Report) -> None:
        label = "patched" if side == "candidate" else "unpatched"
        click.echo(f"advise: check round {index} {label}: median step "
                   f"{units.time_s(round_report.throughput.step_time_median_s)}", err=True)

    try:
        checked = checking.run(patched, rec, script=str(report.script or ""), argv=list(report.argv),
                               main=sites.main, run_dir=run_dir, rounds=rounds,
                               steps=steps or max(measured, MIN_CHECK_STEPS), warmup=warmup if warmup is not None else 5,
                               on_run=progress, findings=findings_of(report))
    except checking.CheckError as exc:
        fail(f"--check: {exc}")
    except ab.RoundFailed as exc:
        fail(f"--check: {exc}", EXIT_SCRIPT)
    except OSError as exc:  # the copies: a file that cannot be read, a temp folder that is full
        fail(f"--check: cannot copy the checkout: {str(exc).splitlines()[0][:300]}")
    click.echo(verdict(checked))
    return EXIT_OK if checked.held else EXIT_REGRESSION


def verdict(checked: Checked) -> str:
    """``applied: 3.40× faster in fresh runs (95% CI 3.21–3.60×, 3 pairs of runs; arm: 3.66×, 95% CI
    3.51–3.84×): held``."""
    fresh = f"{fmt.interval(checked.ci_low, checked.ci_high, ci=True)}, {checked.rounds} pairs of runs"
    arm = f"arm{' of ' + checked.arm_of if checked.arm_of else ''}: {units.speedup(checked.arm)}" if checked.arm is not None \
        else "arm: not measured"
    if checked.arm_low is not None:
        arm += f", {fmt.interval(checked.arm_low, checked.arm_high, ci=True)}"
    return (f"applied: {fmt.speedup_words(checked.speedup)} in fresh runs ({fresh}; {arm}): "
            + ("held" if checked.held else "did not hold"))
