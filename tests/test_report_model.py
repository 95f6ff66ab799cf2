"""The typed Report the renderers read: the same fields as report.json's schema, read once from the dict."""

from __future__ import annotations

import io
import json
from pathlib import Path

import msgspec
import pytest
from rich.console import Console

from advisor import schema
from advisor.profile import Profile
from advisor.model import Finding, Recommendation
from advisor.report import Report, ReportError, as_json, build_report, load_report, now_iso, write_report
from advisor.report_blocks import (STATUSES, Breakdown, Experiments, HtaBreakdown, HtaRank, HtaStep, Memory, Mfu, Rank, Step,
                                   Throughput, Tool)
from advisor.reports import terminal
from advisor.reports.page import build_page

GOLD_REPORT = Path(__file__).parent / "gold" / "rundir" / "report.json"


def test_the_schema_describes_the_top_level_from_the_one_typed_report():
    """The top level is declared once, as the typed Report the renderers read: the schema's is
    published from it (alphabetical, as since schema 1), each field a report.json holds described."""
    doc = schema.schema("report")
    assert list(doc["$defs"]["Report"]["properties"]) == sorted(Report.__struct_fields__)
    assert doc["$defs"]["Report"]["description"] == Report.__doc__
    assert doc["$defs"]["Report"]["properties"]["status"]["enum"] == sorted(STATUSES)  # the Published type, not `str`
    assert doc["$defs"]["Report"]["properties"]["env"] == {"$ref": "#/$defs/Env"}
    assert doc["$defs"]["Report"]["properties"]["findings"]["items"] == {"$ref": "#/$defs/Finding"}


def test_the_schema_describes_each_typed_block_from_its_class():
    doc = schema.schema("report")
    for block in (Throughput, Breakdown, Step, Rank, Tool, Memory, Mfu, Experiments, HtaBreakdown, HtaRank, HtaStep):
        assert list(doc["$defs"][block.__name__]["properties"]) == list(block.__struct_fields__), block.__name__
    assert doc["$defs"]["Tool"]["required"] == ["name", "version"] and "required" not in doc["$defs"]["Step"]
    assert doc["$defs"]["Throughput"]["properties"]["basis"]["description"] == "which steps the rates come from"


def test_a_report_dict_reads_as_its_typed_report():
    data = json.loads(GOLD_REPORT.read_text())
    report = Report.of(data)
    assert report.status == data["status"] and report.script == data["script"]
    assert {k: v for k, v in msgspec.to_builtins(report.env).items() if k in data["env"]} == data["env"]
    assert report.throughput.samples_per_s == data["throughput"]["samples_per_s"]
    assert report.breakdown.data_wait_frac == data["breakdown"]["data_wait_frac"]
    assert [s.index for s in report.steps] == [s["index"] for s in data["steps"]]
    assert report.findings == [Finding.from_dict(d) for d in data["findings"]] 
    assert dict(report.artifacts.listed()) == data["artifacts"]
    assert report.recommended == Recommendation.from_dict(data["recommended"])
    assert Report.of(report) is report
    assert load_report(GOLD_REPORT) == report


def test_a_report_written_reads_back_as_itself_and_writes_the_same_bytes(tmp_path):
    """Typed on both sides: what build_report returns, written and read back by load_report, is the
    same Report (the findings and the recommendation the model's objects), and writes the same file."""
    gold = Report.of(json.loads(GOLD_REPORT.read_text()))
    built = _built(findings=gold.findings, recommended=gold.recommended, wall_s=1.5)
    write_report(built, tmp_path / "a.json")
    again = load_report(tmp_path / "a.json")
    assert again == built and all(isinstance(f, Finding) for f in again.findings)
    assert isinstance(again.recommended, Recommendation) and again.findings and again.findings[0] is not gold.findings[0]
    write_report(again, tmp_path / "b.json")
    assert (tmp_path / "b.json").read_bytes() == (tmp_path / "a.json").read_bytes()


def test_a_report_whose_values_do_not_fit_is_one_line_from_load_report(tmp_path):
    data = json.loads(GOLD_REPORT.read_text())
    data["findings"][0]["severity"] = "urgent"
    (tmp_path / "planted.json").write_text(json.dumps(data))  # not report*.json: no schema check at teardown
    with pytest.raises(ReportError, match=r"planted\.json: severity 'urgent' is not one of high, medium, low"):
        load_report(tmp_path / "planted.json")


def test_a_missing_or_null_field_reads_as_its_default():
    report = Report.of({"status": "failed", "throughput": None, "steps": None, "ranks": [{"rank": 1, "duration_s": 0.5}],
                        "experiments": None, "warnings": None})
    assert report.throughput == Throughput() and report.steps == [] and report.warnings == []
    assert report.experiments is None and not report.ok
    assert report.ranks[0].step_s == 0.5 and report.ranks[0].status is None  # an analysed trace's rank
    assert Report.of({}).ok  # no status said: nothing went wrong


def test_the_renderers_read_the_typed_report_and_a_dict_read_as_one_renders_alike():
    data = json.loads(GOLD_REPORT.read_text())
    con = Console(file=io.StringIO(), width=200, color_system=None, force_terminal=False)
    terminal.print_summary(load_report(GOLD_REPORT), con)
    assert "advise ok" in con.file.getvalue()
    assert build_page(Report.of(data)) == build_page(load_report(GOLD_REPORT))


def _built(**parts) -> Report:
    profile = Profile.from_run_dir(GOLD_REPORT.parent)
    return build_report(profile, status="ok", script="train.py", argv=[], started_at=now_iso(), **parts)


def test_the_report_is_built_typed_and_written_with_every_key_of_its_schema():
    """build_report returns the typed Report; report.json keeps each key its schema requires, null
    where there is no value (a reader of schema version 1 finds `error`, `recommended`...)."""
    report = _built(ranks=[{"rank": 0, "status": "done", "samples_per_s": 10.0}], wall_s=1.5)
    assert isinstance(report, Report) and isinstance(report.ranks[0], Rank) and report.ranks[0].samples_per_s == 10.0
    data = as_json(report)
    assert data["error"] is None and data["recommended"] is None and data["wall_s"] == 1.5
    assert "fingerprint" not in data  # advise analyze has none: left out, not null
    assert data["steps"] and set(data["steps"][0]) == set(Step.__struct_fields__)
    schema.checker(strict=True).validate(json.loads(json.dumps(data)))


def test_a_key_no_block_names_fails_the_build_not_a_reader():
    """The published schema lets readers take unknown keys, so a writer's typo would be dropped in
    silence by the typed Report: the build refuses it instead."""
    with pytest.raises(ValueError, match=r"report\.ranks\[0\]\.samples_per_sec is not a field"):
        _built(ranks=[{"rank": 0, "samples_per_sec": 10.0}])
