"""Terminal output: a live progress line while probing, then the summary table.

On a TTY the progress is a rich live line; elsewhere (CI logs, pipes) it falls back to plain
lines, one per phase change and every few steps, so logs stay readable.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from advisor.overrides import describe

PLAIN_EVERY = 5  # plain mode: print every Nth step


def console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


class ProbeProgress:
    """Shows `phase, step k of N`; use as a context manager around the probe."""

    def __init__(self, con: Console, label: str):
        self.con = con
        self.label = label
        self.live = con.is_terminal and sys.stdout.isatty()
        self._status = None
        self._last: tuple[str, int] | None = None
        self._quiet_steps = False  # plain logs: no per-step lines for experiment runs

    def __enter__(self) -> "ProbeProgress":
        if self.live:
            self._status = self.con.status(f"{self.label}: starting the script")
            self._status.__enter__()
        else:
            self.con.print(f"{self.label}: starting the script")
        return self

    def phase(self, text: str) -> None:
        if self._status is not None:
            self._status.update(f"{self.label}: {text}")
        else:
            self.con.print(f"{self.label}: {text}")

    def update(self, phase: str, done: int, total: int) -> None:
        key = (phase, done)
        if key == self._last:
            return
        self._last = key
        text = f"{'warm-up' if phase == 'warmup' else 'measuring'} step {done} of {total}"
        if self._status is not None:
            self._status.update(f"{self.label}: {text}")
        elif not self._quiet_steps and (done in (1, total) or done % PLAIN_EVERY == 0):
            self.con.print(f"{self.label}: {text}")

    def experiment(self, label: str, index: int, total: int) -> None:
        """An experiment starts: name it (with how many remain); plain logs get one line per run."""
        self.label = f"experiment: {label}"
        self._last = None
        self._quiet_steps = True
        self.phase("starting")

    def __exit__(self, *exc) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)


def _fmt_time(seconds) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _fmt_frac(frac) -> str:
    return "-" if frac is None else f"{frac:.0%}"


def _fmt_bytes(n) -> str:
    if n is None:
        return "-"
    return f"{n / 2**30:.2f} GiB"


def measured_text(result: dict) -> str:
    """'3.10x faster [2.4x, 3.9x], verified' - the wording every renderer uses for a measurement."""
    speedup, lo, hi = result.get("speedup"), result.get("ci_low"), result.get("ci_high")
    if speedup is None:
        return "not measured"
    verdict = "verified" if result.get("verified") else "not verified"
    return f"{speedup:.2f}x throughput [{lo:.2f}x, {hi:.2f}x 95% CI], {verdict}"


def experiment_line(finding: dict) -> str:
    """One line on how a finding's fix fared when it was re-measured (or why it was not)."""
    exp = finding.get("experiment")
    if not exp:
        gain = (finding.get("evidence") or {}).get("estimated_gain_frac")
        return f"estimate (not measured): up to {gain:.0%} faster" if gain else "not measured (manual fix)"
    if exp.get("speedup") is None:
        return f"not measured: {exp.get('reason') or exp.get('error') or exp.get('verdict')}"
    text = f"measured: {measured_text(exp)} ({exp.get('verdict', '').replace('-', ' ')})"
    if exp.get("sweep"):
        text += f"; best of {len(exp['sweep'])} swept values: {describe(exp.get('overrides') or {})}"
    loss = exp.get("loss_check") or {}
    if loss.get("checked"):
        text += ", loss check " + ("passed" if loss.get("passed") else "FAILED")
    return text


def _result_style(exp: dict | None) -> str:
    if not exp or exp.get("speedup") is None:
        return "dim"
    return "green" if exp.get("verified") else ("red" if exp.get("verdict") == "slower" else "yellow")


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


STATUS_STYLE = {"ok": "bold green", "failed": "bold red", "timeout": "bold red", "no-steps": "bold yellow", "interrupted": "bold yellow"}


def print_summary(report: dict, con: Console, run_dir: str | None = None) -> None:
    """The summary a user reads after `advise profile`."""
    env, tp, bd = report.get("env") or {}, report.get("throughput") or {}, report.get("breakdown") or {}
    status = report["status"]
    title = Text.assemble(("advise ", "bold"), (status, STATUS_STYLE.get(status, "bold")), f"  {report.get('script', '')}")
    table = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column(style="dim")
    table.add_column()
    device = env.get("device", "cpu")
    name = env.get("device_name")
    table.add_row("device", f"{device}" + (f" ({name})" if name else ""))
    table.add_row("steps", f"{len(report.get('steps', []))} measured, boundaries from {report.get('step_source') or '-'}")
    if tp.get("samples_per_s") is not None:
        table.add_row("throughput", f"{tp['samples_per_s']:,.1f} samples/s")
    elif tp.get("steps_per_s") is not None:
        table.add_row("throughput", f"{tp['steps_per_s']:,.2f} steps/s (batch size unknown)")
    table.add_row("step time", f"median {_fmt_time(tp.get('step_time_median_s'))}, p90 {_fmt_time(tp.get('step_time_p90_s'))}")
    if bd.get("data_wait_frac") is not None:
        table.add_row(
            "step breakdown",
            f"data wait {_fmt_frac(bd['data_wait_frac'])} · forward/backward {_fmt_frac(bd['compute_frac'])} · optimizer {_fmt_frac(bd['optimizer_frac'])}",
        )
    mem = report.get("memory") or {}
    if mem.get("peak_allocated_bytes") is not None:
        table.add_row("peak memory", f"{_fmt_bytes(mem['peak_allocated_bytes'])} of {_fmt_bytes(mem.get('device_total_bytes'))}")
    if report.get("error"):
        table.add_row("error", Text(report["error"], style="red"))
    con.print(table)
    findings = report.get("findings", [])
    if findings:
        con.print(Text("findings", style="bold"))
    for finding in findings:
        con.print(Text.assemble(("  " + finding.get("code", ""), "bold"), f" [{finding.get('severity', '')}] ", finding.get("title", "")))
        fix = finding.get("fix") or {}
        if fix.get("title"):
            con.print(Text.assemble("      fix: ", fix["title"], (f" ({fix.get('kind', '')}, {fix.get('applicability', '')})", "dim")))
        con.print(Text("      " + experiment_line(finding), style=_result_style(finding.get("experiment"))))
    rec = report.get("recommended")
    if rec:
        con.print(Text.assemble(("recommended: ", "bold"), " + ".join(rec.get("fixes", [])), "  ",
                                (measured_text(rec), "bold green" if rec.get("verified") else "yellow")))
        for item in rec.get("snippets", []):
            con.print(Text(_indent(item["snippet"], "      "), style="dim"))
    for warning in report.get("warnings", []):
        con.print(Text("warning: " + warning, style="yellow"))
    if run_dir:
        con.print(Text(f"report: {run_dir}/report.json", style="dim"))
