"""Source locations: the probe records the user's lines, the rules' findings carry them to
report.json, the terminal and the HTML card; a trace with Python stacks gives them without a probe."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from advisor.engine import Settings, run_rules
from advisor.model import Finding
from advisor.profile import Profile
from advisor.report import Report
from advisor.reports import terminal
from advisor.reports.html import render_html
from advisor.reports.markdown import markdown_for
from advisor.reports.page import build_page
from advisor.rules.registry import load_rules
from conftest import FAST, WORKLOADS, advise_cmd, trace_path

SCRIPT = WORKLOADS / "planted_sites.py"
NW4_V100 = "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"  # FP32, pageable input copies
EVENT_SYNC = "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz"  # a real draining sync on a GPU
QWEN_H100 = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"  # with_stack=True: python_function events


def site(marker: str) -> int:
    """The line of SCRIPT marked ``# site: <marker>``."""
    for number, text in enumerate(SCRIPT.read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# site: {marker}"):
            return number
    raise AssertionError(marker)


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> Path:
    """The planted script, profiled for real on this CPU."""
    out = tmp_path_factory.mktemp("sites") / "run"
    proc = subprocess.run(advise_cmd("profile", *FAST, "--out", str(out), str(SCRIPT)), capture_output=True, text=True,
                          timeout=180, cwd=out.parent)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.mark.slow
def test_the_probe_records_the_exact_lines_of_the_planted_calls(probed):
    recorded = json.loads((probed / "sources.json").read_text())
    assert recorded["precision"] == "line" and recorded["skipped"] is None
    sites = {c: [(Path(r["file"]).name, r["line"], r["function"], r.get("op")) for r in rows]
             for c, rows in recorded["sites"].items()}
    assert ("planted_sites.py", site("item"), "train_step", ".item()") in sites["host-sync"]
    assert ("planted_sites.py", site("matmul"), "train_step", "matmul") in sites["matmul"]
    fp32 = [r for r in recorded["sites"]["matmul"] if r["dtype"] == "float32"]
    assert {r["line"] for r in fp32} >= {site("matmul"), site("matmul") + 1}  # x @ proj, and model(h) in F.linear
    copy = recorded["sites"]["h2d-copy"][0]
    assert (copy["line"], copy["pinned"], copy["device"]) == (site("copy"), False, "meta")
    # one batch of 16 fetched in the step: __getitem__ called 16 times
    assert [(r["line"], r["function"], r["count"]) for r in recorded["sites"]["dataloader"]] == \
        [(site("getitem"), "__getitem__", 16)]
    # nothing of torch's, the stdlib's or advise's own
    files = {r["file"] for rows in recorded["sites"].values() for r in rows}
    assert files == {str(SCRIPT.resolve())}
    assert json.loads((probed / "report.json").read_text())["artifacts"]["sources_json"] == "sources.json"


def _gpu_run_dir(tmp_path: Path, probed: Path, trace: str, env: dict) -> Path:
    """A run dir from a real GPU trace and the CPU probe's real sources.json.

    FABRICATED, the GPU parts only (this machine has no GPU): probe.json's env says the trace's
    own device, and the recorded sites' device becomes "cuda", as the probe records it for
    tensors on a GPU. Files, lines, functions, ops, dtypes and pin state are what the probe saw.
    """
    run = tmp_path / "gpu-run"
    run.mkdir(parents=True)
    shutil.copy(trace_path(trace), run / "trace.json.gz")
    (run / "probe.json").write_text(json.dumps({"env": {"device": "cuda", **env}, "step_source": "optimizer"}))
    sources = json.loads((probed / "sources.json").read_text())
    for rows in sources["sites"].values():
        for r in rows:
            r["device"] = "cuda" if "device" in r else None
    (run / "sources.json").write_text(json.dumps(sources))
    return run


def _findings(profile: Profile, select: str) -> dict[str, Finding]:
    found, warnings = run_rules(profile, Settings(select=[select]), load_rules())
    assert warnings == []
    return {f.code: f for f in found}


@pytest.mark.slow
def test_gpu_findings_name_the_planted_lines_in_report_json_and_the_terminal(tmp_path, probed):
    run = _gpu_run_dir(tmp_path, probed, NW4_V100, {"device_name": "Tesla V100-SXM2-16GB", "device_capability": "7.0"})
    found = _findings(Profile.from_run_dir(run), "ALL")
    pr001, dl002 = found["PR001"], found["DL002"]
    assert [(Path(loc.file).name, loc.line, loc.function) for loc in pr001.locations][:2] == \
        [("planted_sites.py", site("matmul"), "train_step"), ("planted_sites.py", site("matmul") + 1, "train_step")]
    assert [(loc.line, loc.op) for loc in dl002.locations] == [(site("copy"), ".to()")]

    sync = _findings(Profile.from_run_dir(_gpu_run_dir(tmp_path / "sync", probed, EVENT_SYNC, {})), "GPU003")["GPU003"]
    assert [(loc.short, loc.op) for loc in sync.locations] == [(f"planted_sites.py:{site('item')}", ".item()")]

    stored = json.loads(json.dumps(sync.to_dict()))  # as report.json has it: schema 1 only gains the field
    assert stored["locations"] == [{"file": str(SCRIPT.resolve()), "line": site("item"), "function": "train_step",
                                    "count": 1, "op": ".item()"}]
    assert Finding.from_dict(stored).locations == sync.locations

    con = Console(record=True, width=200)
    for line in terminal.finding_lines(Finding.from_dict(stored)):
        con.print(line)
    assert f"at planted_sites.py:{site('item')} in train_step (.item(), 1 call)" in con.export_text()


def test_a_trace_with_python_stacks_gives_locations_without_a_probe():
    """`advise analyze` of a real H100 trace recorded with with_stack=True: the sync that drained
    the GPU is named by the frame around it (the function's first line: the tracer records calls)."""
    profile = Profile.from_trace(trace_path(QWEN_H100))
    options = {"host-sync": {"min_idle_frac": 0.0, "min_syncs_per_step": 0.0}}
    found, _ = run_rules(profile, Settings(select=["GPU003"], options=options), load_rules())
    (sync,) = found
    assert [(loc.file, loc.line, loc.function) for loc in sync.locations] == \
        [("moca/library/profiling/profile.py", 34, "run_torch_profiler")]
    assert "torch/" not in json.dumps(sync.to_dict()["locations"])
    matmuls = profile.locations("matmul", dtype="bfloat16")
    assert matmuls and all("torch/" not in loc.file for loc in matmuls)


def test_a_report_without_locations_still_reads_and_the_card_and_summary_list_them():
    gold = Path(__file__).parent / "gold" / "rundir"
    report = json.loads((gold / "report.json").read_text())
    assert all("locations" not in f for f in report["findings"])  # an older report.json
    assert all(Finding.from_dict(f).locations == [] for f in report["findings"])
    report["findings"][0]["locations"] = [{"file": "/home/u/train.py", "line": 42, "function": "step", "count": 3,
                                           "op": ".item()"}]
    html = render_html(build_page(Report.of(report), Profile.from_run_dir(gold), {}))
    assert '<code title="/home/u/train.py">train.py:42</code> in <code>step</code>' in html
    assert "(.item(), 3 calls)" in html
    assert "at `train.py:42` in `step`" in markdown_for(Report.of(report), Profile.from_run_dir(gold)).splitlines()
