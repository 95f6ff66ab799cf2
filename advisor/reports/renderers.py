"""What each command can render: one document per kind of output, one table of renderers per document.

- :class:`RunReport`: a run's report (`advise report`; `advise profile` and `advise analyze` write its
  page and print its terminal summary or report.json);
- a comparison of two reports (:class:`advisor.gate.compare.Comparison`, `advise compare`), or of two
  traces (:class:`TraceDiff`);
- :class:`ABOutcome`: `advise ab`'s decision.

Each table's names are its commands' ``--format`` choices. The renderers outside the tables write
what a command always writes or what a flag asks for: the terminal summary and report.json of a
run, ab.html, the JUnit file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from importlib import import_module
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from advisor.run_dir.layout import COMPARE_JSON

from .render import Drawn, Plain, table

if TYPE_CHECKING:
    from rich.console import Console

    from advisor.profile import Profile
    from advisor.report import Report
    from advisor.gate.ab import ABResult
    from advisor.gate.compare import Comparison

NO_DOCS: Mapping[str, str] = MappingProxyType({})


def _no_profile() -> Profile | None:
    return None


def _no_docs() -> Mapping[str, str]:
    return NO_DOCS


@dataclass
class RunReport:
    """A run's report, and what its page and markdown read besides report.json: the run's Profile
    (timeline, top ops, log tail) and the rules' documentation. Both are read the first time a
    renderer asks, so the agents' summary costs no pandas."""

    report: Report
    run_dir: str | None = None  # the run dir as the user named it: the terminal summary's last line
    source: str | None = None  # the report file as the user named it: the agents' summary says it
    profile_of: Callable[[], Profile | None] = field(default=_no_profile, repr=False)
    rule_docs_of: Callable[[], Mapping[str, str]] = field(default=_no_docs, repr=False)

    @cached_property
    def profile(self) -> Profile | None:
        return self.profile_of()

    @cached_property
    def rule_docs(self) -> Mapping[str, str]:
        return self.rule_docs_of()


@dataclass(frozen=True)
class TraceDiff:
    """Two Kineto traces compared (`advise compare A.json.gz B.json.gz`): the median step of each and
    the ops whose time per step grew (:class:`advisor.gate.opdiff.OpChange` rows)."""

    a: str
    b: str
    rows: list
    step_s: tuple[float | None, float | None]  # each trace's median ProfilerStep
    steps: tuple[int, int]  # how many ProfilerSteps each has

    @property
    def change(self) -> float | None:
        step_a, step_b = self.step_s
        return (step_b / step_a - 1) if step_a and step_b else None

    @property
    def note(self) -> str:
        step_a, step_b = self.step_s
        step = (f"median ProfilerStep {step_a * 1e3:.2f} ms → {step_b * 1e3:.2f} ms ({step_b / step_a - 1:+.1%}) over "
                f"{self.steps[0]} and {self.steps[1]} steps" if step_a and step_b
                else "the traces have no ProfilerStep#N spans: times are per trace, not per step")
        return f"{self.a} → {self.b}; {step}"

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "step_time_median_s": list(self.step_s), "step_time_change": self.change,
                "slower_ops": [r.to_dict() for r in self.rows]}


@dataclass(frozen=True)
class ABOutcome:
    """`advise ab`'s decision (an :class:`advisor.gate.ab.ABResult`) and the folder its files are in."""

    result: ABResult
    out: Path | None = None


def _lazy(module: str, name: str) -> Callable[..., Any]:
    """`name` of a renderer's own module, imported when its format is asked for: the CLI reads these
    tables at its start, and the modules cost 60-700 ms (rich, jinja2, markdown-it, pandas)."""
    return getattr(import_module(f"advisor.reports.{module}"), name)


def _json(value: object) -> str:
    return json.dumps(value, indent=2) + "\n"


# --- a run's report ---------------------------------------------------------------------------

def _page(doc: RunReport) -> str:
    return _lazy("html", "render_html")(_lazy("page", "build_page")(doc.report, doc.profile, doc.rule_docs))


def _markdown(doc: RunReport) -> str:
    return _lazy("markdown", "markdown_for")(doc.report, doc.profile, doc.rule_docs)


def _agent_summary(doc: RunReport) -> str:
    return json.dumps(_lazy("agent", "summary")(doc.report, doc.source or "report.json"), indent=2, ensure_ascii=False) + "\n"


def _summary(doc: RunReport, con: Console) -> str:
    return _lazy("terminal", "summary_text")(doc.report, con, doc.run_dir)


def _report_json(doc: RunReport) -> str:
    return _json(import_module("advisor.report").as_json(doc.report))


PAGE = Plain("html", "report.html", _page, page=True)
MARKDOWN = Plain("markdown", "summary.md", _markdown)
REPORT_RENDERERS = table(PAGE, MARKDOWN, Plain("json", "summary.json", _agent_summary))
TERMINAL = Drawn("terminal", "summary.txt", _summary)  # what `advise profile` and `advise analyze` print
REPORT_JSON = Plain("report.json", "report.json", _report_json)  # their --json


# --- two reports compared ----------------------------------------------------------------------

def _compare_table(result: Comparison, con: Console) -> str:
    print_table = _lazy("compare_output", "print_table")
    return _lazy("terminal", "captured")(con, lambda c: print_table(result, c))


def _compare_markdown(result: Comparison) -> str:
    return _lazy("compare_output", "markdown")(result) + "\n"  # a blank line after: what is appended next (`>> $GITHUB_STEP_SUMMARY`) is a block of its own


def _junit(result: Comparison) -> str:
    return _lazy("compare_output", "junit")(result)


COMPARE_RENDERERS = table(Drawn("terminal", "compare.txt", _compare_table),
                          Plain("markdown", "compare.md", _compare_markdown),
                          Plain("json", COMPARE_JSON, lambda result: _json(result.to_dict())))
JUNIT = Plain("junit", "junit.xml", _junit)  # compare's --junit


# --- two traces compared -----------------------------------------------------------------------

def _diff_table(diff: TraceDiff, con: Console) -> str:
    print_table = _lazy("slower_ops", "print_table")
    return _lazy("terminal", "captured")(con, lambda c: print_table(diff.rows, diff.note, c))


def _diff_markdown(diff: TraceDiff) -> str:
    markdown = _lazy("slower_ops", "markdown")
    return "\n".join(["### advise compare: two traces", ""] + markdown(diff.rows, diff.note)) + "\n"


TRACE_DIFF_RENDERERS = table(Drawn("terminal", "trace-diff.txt", _diff_table),
                             Plain("markdown", "trace-diff.md", _diff_markdown),
                             Plain("json", "trace-diff.json", lambda diff: _json(diff.to_dict())))


# --- advise ab ---------------------------------------------------------------------------------

def _ab_table(outcome: ABOutcome, con: Console) -> str:
    print_table = _lazy("ab_output", "print_table")

    def print_on(c: Console) -> None:
        print_table(outcome.result, c)
        if outcome.out is not None:
            c.print(f"decision: {outcome.out / AB_JSON}, page: {outcome.out / AB_PAGE.filename}", style="dim",
                    highlight=False)

    return _lazy("terminal", "captured")(con, print_on)


def _ab_markdown(outcome: ABOutcome) -> str:
    return _lazy("ab_output", "markdown")(outcome.result) + "\n"  # a blank line after, as compare's


def _ab_page(outcome: ABOutcome) -> str:
    return _lazy("ab_output", "page")(outcome.result)


AB_JSON = "ab.json"
AB_RENDERERS = table(Drawn("terminal", "ab.txt", _ab_table),
                     Plain("markdown", "summary.md", _ab_markdown),
                     Plain("json", AB_JSON, lambda outcome: _json(outcome.result.to_dict())))
AB_PAGE = Plain("html", "ab.html", _ab_page, page=True)  # written beside ab.json whatever the format
