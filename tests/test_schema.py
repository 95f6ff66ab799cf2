"""report.json, compare.json and the agent summary against their published JSON Schemas.

The schemas are generated from the types in advisor/schema.py (the model's dataclasses included)
and shipped as files in advisor/schemas/; `advise schema` prints them. Each kind of run a user can
make (ok, failed, interrupted, two ranks, a trace, traces of a job, a gated run) writes a report
here for real, validated against the strict schema (every described object closed). tests/conftest.py
validates every other report the suite leaves behind the same way.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import jsonschema
import pytest

from advisor import schema
from conftest import FAST, NO_SCREENS, WORKLOADS, advise_cmd, schema_problems, trace_path

SCHEMAS = Path(schema.__file__).parent / "schemas"
EXAMPLE = WORKLOADS.parent.parent / "examples" / "train_mnist_like.py"
RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def strict_errors(kind: str, doc: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
            for e in schema.checker(kind, strict=True).iter_errors(doc)]


@pytest.mark.parametrize("name", ["report", "compare", "summary"])
def test_the_shipped_schema_is_the_one_the_code_generates(name):
    out = subprocess.run(advise_cmd("schema", name), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    shipped = SCHEMAS / f"{name}.v1.schema.json"
    assert shipped.read_text() == out.stdout, f"regenerate: advise schema {name} > {shipped}"
    doc = json.loads(out.stdout)
    jsonschema.Draft202012Validator.check_schema(doc)
    assert doc["$id"].endswith(f"/{name}.v1.schema.json")


def test_the_schema_versions_are_the_writers():
    from advisor.report import SCHEMA_VERSION

    assert schema.schema("report")["$defs"]["Report"]["properties"]["schema_version"]["enum"] == [SCHEMA_VERSION]
    assert schema.schema("compare")["$defs"]["Compare"]["properties"]["schema_version"]["enum"] == [schema.COMPARE_SCHEMA_VERSION]


def test_the_published_schema_accepts_added_fields_and_the_strict_one_does_not(tmp_path, advise):
    """Within schema_version 1 fields are only added: a consumer's schema must accept a newer
    report; the suite's strict one must not, so a field added without its description fails."""
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "train_basic.py"))
    assert r.returncode == 0, r.stderr
    newer = {**r.report, "a_field_from_the_future": 1}
    newer["throughput"] = {**newer["throughput"], "another": 2.0}
    assert not list(schema.checker("report").iter_errors(newer))
    errors = strict_errors("report", newer)
    assert any("a_field_from_the_future" in e for e in errors) and any("another" in e for e in errors), errors
    # ... and the suite's own check (tests/conftest.py) names the file and the field
    planted = tmp_path / "planted" / "report.json"
    planted.parent.mkdir()
    planted.write_text(json.dumps(newer))
    problems = schema_problems(planted.parent)
    assert len(problems) == 1 and str(planted) in problems[0] and "a_field_from_the_future" in problems[0]
    planted.unlink()  # not a report advise wrote: keep it out of this test's own teardown check
    wrong = {**r.report, "status": "fine"}
    assert any("status" in e for e in strict_errors("report", wrong))


def _interrupted(tmp_path: Path) -> tuple[int, dict]:
    proc = subprocess.Popen(advise_cmd("profile", "--steps", "100000", "--no-experiments", "--out", "run",
                                       str(WORKLOADS / "slow_forever.py")),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    steps = tmp_path / "run" / "steps.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if steps.is_file() and '"measure"' in steps.read_text():
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=90)
    return proc.returncode, json.loads((tmp_path / "run" / "report.json").read_text())


def _ok_and_gated(tmp_path, advise) -> dict:
    """ok with experiments (DL001 fires, its fix is measured), then gated against itself: compare.json."""
    ok = advise("profile", "--steps", "6", "--warmup", "2", "--profile-steps", "2", "--max-experiments", "1",
                *NO_SCREENS, "--out", "run", str(EXAMPLE), "--epochs", "1")
    assert ok.returncode == 0, ok.stderr
    assert any(f["experiment"] for f in ok.report["findings"]) and ok.report["experiments"] is not None
    (tmp_path / "base.json").write_text(json.dumps(ok.report))
    gated = advise("profile", *FAST, "--baseline", "base.json", "--out", "gated", str(EXAMPLE), "--epochs", "1")
    assert gated.returncode in (0, 3), gated.stderr
    compared = json.loads((tmp_path / "gated" / "compare.json").read_text())
    assert compared["metrics"]
    return {"report": ok.report, "compare": compared}


def _failed(tmp_path, advise) -> dict:
    failed = advise("profile", *FAST, "--out", "failed", str(WORKLOADS / "crash_at_step3.py"))
    assert failed.returncode == 1, failed.stderr
    report = json.loads((tmp_path / "failed" / "report.json").read_text())
    assert report["status"] == "failed"
    return {"report": report}


def _stopped(tmp_path, advise) -> dict:
    (tmp_path / "stop").mkdir()
    code, report = _interrupted(tmp_path / "stop")
    assert code == 130 and report["status"] == "interrupted"
    return {"report": report}


def _two_ranks(tmp_path, advise) -> dict:
    job = advise("profile", *FAST, "--nproc-per-node", "2", "--out", "job", str(WORKLOADS / "ddp_gloo.py"), timeout=300)
    assert job.returncode == 0, job.stderr
    report = json.loads((tmp_path / "job" / "report.json").read_text())
    assert len(report["ranks"]) == 2
    return {"report": report}


def _traces(tmp_path, advise) -> dict:
    """One trace, then a job's traces (two ranks)."""
    trace = advise("analyze", "--out", "trace", str(trace_path(RESNET)))
    assert trace.returncode == 0, trace.stderr
    one = json.loads((tmp_path / "trace" / "report.json").read_text())
    assert one["findings"]
    two = [trace_path(RESNET), trace_path(RESNET.replace("_0/worker0.1623143089861", "_4/worker0.1623212756351"))]
    ranks = advise("analyze", "--out", "traces", *map(str, two))
    assert ranks.returncode == 0, ranks.stderr
    job = json.loads((tmp_path / "traces" / "report.json").read_text())
    assert len(job["ranks"]) == 2
    return {"report": one, "report-of-ranks": job}


@pytest.mark.slow
@pytest.mark.parametrize("make", [pytest.param(_ok_and_gated, marks=pytest.mark.timing), _failed, _stopped, _two_ranks,
                                  _traces], ids=["ok-and-gated", "failed", "interrupted", "two-ranks", "traces"])
def test_every_kind_of_run_writes_a_report_the_schema_describes(tmp_path, advise, make):
    """ok (with experiments, then gated against itself: compare.json), failed, interrupted, two
    ranks, one trace and a job's traces: each report and compare.json validates, strictly."""
    for kind, doc in make(tmp_path, advise).items():
        errors = strict_errors("compare" if kind == "compare" else "report", doc)
        assert not errors, (kind, errors)


def test_the_agent_summary_is_short_stable_and_matches_the_report(advise, tmp_path):
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "pin_memory_on_cpu.py"))
    assert r.returncode == 0, r.stderr
    out = subprocess.run(advise_cmd("report", "run", "--format", "json"), cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert not strict_errors("summary", doc)
    report = r.report
    assert doc["status"] == report["status"] and doc["report"] == "run/report.json"
    assert [f["code"] for f in doc["findings"]] == [f["code"] for f in report["findings"]]
    assert doc["verdict"].startswith("recommended: ")
    assert doc["recommended"] is None and report["recommended"] is None  # --no-experiments: nothing measured
    assert len(out.stdout) < len((tmp_path / "run" / "report.json").read_text())
    bad = subprocess.run(advise_cmd("report", "nowhere", "--format", "json"), cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_every_field_the_probe_writes_into_memory_is_in_the_published_memory_block():
    """report.json's memory block is the probe's account copied over: a field only a CUDA run
    writes (device_free_bytes) must be declared too, or every GPU report leaves the strict schema
    (the H200 run's five teardown errors), which no CPU run would show."""
    import msgspec

    from advisor.report_blocks import Memory
    from advisor.run_dir.seen import MemoryAccount

    written = {f.encode_name for f in msgspec.structs.fields(MemoryAccount)}
    declared = {f.encode_name for f in msgspec.structs.fields(Memory)}
    assert written <= declared, sorted(written - declared)
