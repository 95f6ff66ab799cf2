"""The terminal: plain progress that stays short, and a summary that says what happened in one line each."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from advisor.model import Experiment, Finding, Fix, Severity, Verdict
from advisor.reports import terminal
from advisor.report import Report

GOLD_RUN = Path(__file__).parent / "gold" / "rundir"


def plain_console() -> Console:
    return Console(file=io.StringIO(), width=300, color_system=None, force_terminal=False)


def lines_of(con: Console) -> list[str]:
    return con.file.getvalue().splitlines()


def test_plain_progress_prints_a_few_lines_per_phase_however_many_steps():
    con = plain_console()
    with terminal.ProbeProgress(con, "profiling t.py") as progress:
        progress.update("warmup", 0, 5)  # the start-up step is not a warm-up step
        for done in range(1, 6):
            progress.update("warmup", done, 5)
        for done in range(1, 2001):
            progress.update("measure", done, 2000)
            if done == 1500:
                progress.update("warmup", 5, 5)  # the profiler's own warm-up step, between measured ones
    out = lines_of(con)
    warmup = [line for line in out if "warm-up" in line]
    measuring = [line for line in out if "measuring" in line]
    assert warmup == [f"profiling t.py: warm-up step {n} of 5" for n in range(1, 6)]
    assert measuring[0].endswith("measuring step 1 of 2000") and measuring[-1].endswith("measuring step 2000 of 2000")
    assert len(measuring) <= 7, measuring


def test_plain_progress_skipping_steps_still_shows_each_fifth():
    con = plain_console()
    with terminal.ProbeProgress(con, "p") as progress:
        for done in (3, 250, 401, 777, 1203, 1999, 2000):  # the runner polls: it sees only some steps
            progress.update("measure", done, 2000)
    assert [line.rsplit(" ", 3)[1] for line in lines_of(con) if "measuring" in line] == \
        ["3", "401", "1203", "1999", "2000"]  # each fifth crossed (400, 800 | 1200 | 1600), then the last


def summary(report: dict) -> str:
    con = Console(file=io.StringIO(), width=300, record=True, color_system=None)
    terminal.print_summary(Report.of(report), con)
    return con.export_text()


def base_report(**kw) -> dict:
    report = json.loads((GOLD_RUN / "report.json").read_text())
    report.update(kw)
    return report


def test_no_bottleneck_is_said_in_one_line():
    text = summary(base_report(findings=[], recommended=None))
    assert "findings: none: no bottleneck found" in text and "recommended" not in text


def test_measured_fixes_none_faster_is_said_in_one_line():
    report = base_report(recommended=None)
    for f in report["findings"]:
        if f["experiment"] and f["experiment"].get("verified"):
            f["experiment"].update(verified=False, verdict="no-significant-change", ci_low=0.99)
    assert "recommended: none: 4 fixes measured, none faster (3 no clear gain, 1 slower)" in summary(report)


def test_a_manual_fix_reads_manual_once():
    manual = Finding("Oversubscribed", "s", Severity.MEDIUM, {}, Fix.manual("Cut threads", "torch.set_num_threads(1)"),
                     rule="cpu-oversubscription", code="DL003")
    report = base_report(findings=[manual.to_dict()], recommended=None)
    text = summary(report)
    assert "fix: Cut threads (manual: a code change to make by hand)" in text
    fix_line = next(line for line in text.splitlines() if "fix: Cut threads" in line)
    assert "automatic" not in fix_line and "safe" not in fix_line
    assert "not measured: a manual fix (the experiments re-run only automatic ones)" in text


def test_an_automatic_fix_without_experiments_says_they_were_off():
    auto = Finding("Starved", "s", Severity.HIGH, {}, Fix.safe("Workers", {"dataloader": {"num_workers": 2}}),
                   estimated_gain_frac=0.72, rule="dataloader-starvation", code="DL001")
    text = summary(base_report(findings=[auto.to_dict()], recommended=None, experiments=None))
    assert "fix: Workers (automatic; safe: numerics unchanged)" in text
    assert "about 3.6× faster, by the rule's estimate (not measured)" in text
    assert "recommended: none: experiments were off (--no-experiments)" in text
    budget = Finding("Starved", "s", Severity.HIGH, {}, auto.fix, rule="dataloader-starvation", code="DL001",
                     experiment=Experiment(Verdict.NOT_MEASURED, reason="--safe-only: this fix may change numerics"))
    assert "not measured: --safe-only: this fix may change numerics" in summary(base_report(findings=[budget.to_dict()],
                                                                                          recommended=None))


def test_cpu_peak_memory_is_on_the_summary():
    text = summary(base_report(memory={"peak_rss_bytes": 900 * 2**20, "peak_pss_bytes": 400 * 2**20, "basis": "pss"}))
    assert "peak memory     400.0 MiB (PSS of the script's processes; RSS summed 900.0 MiB)" in text


def test_the_ranks_line_sits_below_the_figures_it_says_are_rank_0s():
    ranks = [{"rank": 0, "status": "done", "step_time_median_s": 0.012}, {"rank": 1, "status": "done", "step_time_median_s": 0.043}]
    lines = summary(base_report(ranks=ranks)).splitlines()
    at = {line.split()[0]: i for i, line in enumerate(lines) if line.strip()}
    assert "figures above are rank 0's" in lines[at["ranks"]]
    assert at["ranks"] > max(at["throughput"], at["step"], at["peak"]), lines
