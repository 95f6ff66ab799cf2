"""The renderers' contract: one table per kind of document, `render(document) -> str`, and one way out.

Every renderer renders a real document (the gold run dir, two real reports compared, two shipped
Kineto traces, a real sequential decision); the `--format` choices are the tables' names; and
:func:`render_report` owns ``-`` and the file: a renderer that raises prints nothing, leaves no file
(an older one as it was), and the command says so in one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.commands.cli import main
from advisor.commands.outputs import RenderError, append_step_summary, render_report, saved_report
from advisor.gate import compare, opdiff, sequential
from advisor.gate.ab import ABResult
from advisor.profile import Profile
from advisor.report import load_report
from advisor.reports import compare_output, markdown as markdown_module
from advisor.reports.renderers import (AB_PAGE, AB_RENDERERS, COMPARE_RENDERERS, JUNIT, MARKDOWN, REPORT_JSON,
                                       REPORT_RENDERERS, TERMINAL, TRACE_DIFF_RENDERERS, ABOutcome, TraceDiff)
from advisor.analysis import steptime
from conftest import trace_path

GOLD = Path(__file__).parent / "gold" / "rundir"
TRACES = ("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
          "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz")


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """The gold run dir, and beside it the same run 40% slower."""
    shutil.copytree(GOLD, tmp_path / "run")
    report = json.loads((GOLD / "report.json").read_text())
    for step in report["steps"]:
        step["duration_s"] *= 1.4
    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / "report.json").write_text(json.dumps(report))
    return tmp_path / "run"


def comparison(run_dir: Path) -> compare.Comparison:
    base, _ = compare.load(run_dir / "report.json", "baseline")
    slow, _ = compare.load(run_dir.parent / "slow" / "report.json", "current")
    return compare.compare(base, slow, baseline_path="run", current_path="slow")


def trace_diff() -> TraceDiff:
    a, b = (str(trace_path(t)) for t in TRACES)
    pa, pb = Profile.from_trace(a), Profile.from_trace(b)
    return TraceDiff(a, b, opdiff.slower_ops([pa.trace], [pb.trace]),
                     (steptime.median_step(pa.steps), steptime.median_step(pb.steps)), (len(pa.steps), len(pb.steps)))


def ab_outcome(out: Path) -> ABOutcome:
    base = [0.040, 0.041, 0.040, 0.042, 0.040, 0.041]
    decision = sequential.decide({"step_time": (base, [b * 1.2 for b in base])},
                                 [sequential.MetricSpec("step_time", "step time", "s", False, 0.05)], alpha=0.05, plan=[6])
    return ABOutcome(ABResult("base", "cand", "train.py", decision, []), out)


def test_every_renderer_renders_a_real_document(run_dir, tmp_path):
    run = saved_report(load_report(run_dir / "report.json"), run_dir / "report.json")
    documents = [(run, [*REPORT_RENDERERS.values(), TERMINAL, REPORT_JSON]),
                 (comparison(run_dir), [*COMPARE_RENDERERS.values(), JUNIT]),
                 (trace_diff(), list(TRACE_DIFF_RENDERERS.values())),
                 (ab_outcome(tmp_path / "gate"), [*AB_RENDERERS.values(), AB_PAGE])]
    for document, renderers in documents:
        for renderer in renderers:
            text = renderer.render(document)
            assert text.endswith("\n") and len(text) > 200, (renderer.name, text)
            if renderer.filename.endswith(".json"):
                json.loads(text)
            written = render_report(document, renderer, tmp_path / renderer.filename)
            assert written.read_text() == text, renderer.name
    assert "recommended configuration" in REPORT_RENDERERS["html"].render(run)  # the Profile and docs were read
    assert "REGRESSION" in COMPARE_RENDERERS["terminal"].render(comparison(run_dir))


def test_the_format_choices_are_the_tables():
    def choices(command: str) -> list[str]:
        return next(p.type.choices for p in main.commands[command].params if p.name == "fmt")

    assert list(choices("report")) == list(REPORT_RENDERERS) == ["html", "markdown", "json"]
    assert list(choices("compare")) == list(COMPARE_RENDERERS) == list(TRACE_DIFF_RENDERERS)  # one --format, both kinds
    assert list(choices("ab")) == list(AB_RENDERERS)


def test_stdout_gets_the_text_as_rendered(run_dir, capsys):
    document = comparison(run_dir)
    for renderer in COMPARE_RENDERERS.values():
        assert render_report(document, renderer) is None
        out, err = capsys.readouterr()
        assert out == renderer.render(document) and err == ""
    render_report(document, COMPARE_RENDERERS["terminal"], err=True)  # `advise profile --baseline --json`
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("advise compare REGRESSION")


def test_the_agents_summary_reads_no_profile(run_dir):
    document = saved_report(load_report(run_dir / "report.json"), run_dir / "report.json")
    summary = json.loads(REPORT_RENDERERS["json"].render(document))
    assert summary["report"] == str(run_dir / "report.json")
    assert "profile" not in vars(document) and "rule_docs" not in vars(document)  # never read: no pandas for it


def test_a_renderer_that_raises_leaves_no_file_and_no_output(run_dir, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(markdown_module, "markdown_for", broken)
    document = saved_report(load_report(run_dir / "report.json"), run_dir / "report.json")
    new, old = run_dir / "new.md", run_dir / "old.md"
    old.write_text("the last summary\n")
    for target in (new, old, "-"):
        with pytest.raises(RenderError, match="the markdown rendering failed: RuntimeError: boom"):
            render_report(document, MARKDOWN, target)
    assert not new.exists() and old.read_text() == "the last summary\n"
    assert capsys.readouterr() == ("", "")
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".tmp-")) == []


@pytest.mark.parametrize("fmt, module, function", [("html", "advisor.reports.html", "render_html"),
                                                   ("markdown", "advisor.reports.markdown", "markdown_for"),
                                                   ("json", "advisor.reports.agent", "summary")])
def test_advise_report_with_a_failing_renderer_is_one_line(run_dir, monkeypatch, fmt, module, function):
    monkeypatch.setattr(f"{module}.{function}", lambda *a, **k: 1 / 0)
    result = CliRunner().invoke(main, ["report", str(run_dir), "--format", fmt])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (f"advise: error: {run_dir / 'report.json'}: the {fmt} rendering failed: "
                             "ZeroDivisionError: division by zero\n")
    assert not (run_dir / "report.html").exists()


def test_advise_compare_with_a_failing_renderer_is_one_line(run_dir, monkeypatch):
    monkeypatch.setattr(compare_output, "markdown", lambda result: 1 / 0)
    result = CliRunner().invoke(main, ["compare", str(run_dir), str(run_dir.parent / "slow"), "--format", "markdown"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == "advise: error: the markdown rendering failed: ZeroDivisionError: division by zero\n"


def test_the_step_summary_is_appended_only_when_asked_with_a_blank_line_after(run_dir, tmp_path, monkeypatch):
    document = saved_report(load_report(run_dir / "report.json"), run_dir / "report.json")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert append_step_summary(document, MARKDOWN) is None
    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    assert append_step_summary(document, MARKDOWN) == target
    assert append_step_summary(trace_diff(), TRACE_DIFF_RENDERERS["markdown"]) == target
    text = target.read_text()
    assert text.startswith("earlier step\n## advise: ok") and text.endswith("|\n\n")
    assert "\n\n### advise compare: two traces\n" in text  # each step's summary a block of its own
