"""GPU time in HTA's temporal-breakdown terms (advisor/analysis/temporal.py, report.json's hta_breakdown, the HTML table).

Checked two ways: against the raw JSON counted by hand in plain Python (always), and against
Holistic Trace Analysis's own ``get_temporal_breakdown`` (when HTA is installed: the bench extra).
"""

from __future__ import annotations

import gzip
import json
import logging
import shutil
import subprocess

import pytest

from advisor.analysis.temporal import CATEGORIES, for_ranks, hta_breakdown
from advisor.trace import load_trace
from advisor.report import Report
from advisor.reports.hta_view import hta_tables
from conftest import advise_cmd, trace_path

RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
NCCL = "hta/df_index_resolver/df_index_resolver.json.gz"  # rank 1 of 2, NCCL kernels, 5 steps
SAMPLED = "hta/trace_filter/sampled_rank-0.json.gz"
CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def _union(intervals) -> float:
    total, start, end = 0.0, None, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            if end is not None:
                total += end - start
            start, end = s, e
        else:
            end = max(end, e)
    return total + (end - start if end is not None else 0.0)


def _is_compute(name: str) -> bool:
    nccl = name.startswith("nccl") and "Kernel" in name[4:]
    return not (nccl or "Memcpy" in name or name.startswith("Memset") or "Sync" in name)


def _by_hand(path) -> dict:
    """HTA's four numbers from the JSON: GPU events launched before the last step, their span, union, compute union."""
    with gzip.open(path, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset")]
    steps = [e for e in events if e.get("cat") in ("user_annotation", "Operator") and e["name"].startswith("ProfilerStep#")]
    if len({s["name"] for s in steps}) >= 2:
        last = max(s["ts"] for s in steps)
        launched = {e["args"]["correlation"] for e in events
                    if e.get("cat") in ("cuda_runtime", "Runtime", "cuda_driver") and e["ts"] < last
                    and "correlation" in (e.get("args") or {})}
        gpu = [e for e in gpu if (e.get("args") or {}).get("correlation") in launched]
    span = max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)
    busy = _union((e["ts"], e["ts"] + e["dur"]) for e in gpu)
    compute = _union((e["ts"], e["ts"] + e["dur"]) for e in gpu if _is_compute(e["name"]))
    return {"kernel_time_us": span, "idle_us": span - busy, "compute_us": compute, "non_compute_us": busy - compute}


@pytest.mark.parametrize("rel", [SAMPLED, "hta/trace_filter/sampled_rank-1.json.gz"])
def test_breakdown_matches_the_raw_json(rel):
    path = trace_path(rel)
    row = hta_breakdown(load_trace(path))["ranks"][0]
    expected = _by_hand(path)
    for key, value in expected.items():
        assert row[key] == pytest.approx(value, abs=1e-6), key
    assert row["non_compute_us"] == pytest.approx(row["communication_us"] + row["memory_us"] + row["other_us"])
    assert row["idle_us"] > 0 and row["compute_us"] > 0


def test_nccl_trace_splits_communication_and_steps_add_up():
    t = load_trace(trace_path(NCCL))
    row = hta_breakdown(t)["ranks"][0]
    assert row["rank"] == 1 and row["last_step_dropped"] is True
    assert row["communication_us"] > 0.1 * row["kernel_time_us"] and row["memory_us"] > 0
    assert [s["index"] for s in row["steps"]] == t.steps["index"].tolist()
    for s, dur in zip(row["steps"], t.steps["dur_us"].tolist()):
        assert sum(s[f"{c}_us"] for c in CATEGORIES) == pytest.approx(s["step_us"]) and s["step_us"] == dur


def test_no_gpu_no_breakdown():
    assert hta_breakdown(load_trace(trace_path(CPU_ONLY))) is None
    assert hta_breakdown(None) is None
    assert hta_tables(Report(hta_breakdown=None)) == []


@pytest.mark.parametrize("rel", [RESNET, SAMPLED])
def test_breakdown_equals_htas_own(rel, tmp_path):
    """The same four numbers as HTA's get_temporal_breakdown on the same trace (integer-µs traces: exactly)."""
    pytest.importorskip("hta", reason="HolisticTraceAnalysis is not installed (pip install -e '.[bench]'): "
                                      "the comparison with HTA's own numbers did not run")
    from hta.trace_analysis import TraceAnalysis

    path = trace_path(rel)
    shutil.copy(path, tmp_path / path.name)
    logging.getLogger("hta").setLevel(logging.ERROR)
    hta = TraceAnalysis(trace_dir=str(tmp_path)).get_temporal_breakdown(visualize=False).iloc[0]
    row = hta_breakdown(load_trace(path))["ranks"][0]
    assert row["idle_us"] == hta["idle_time(us)"]
    assert row["compute_us"] == hta["compute_time(us)"]
    assert row["non_compute_us"] == hta["non_compute_time(us)"]
    assert row["kernel_time_us"] == hta["kernel_time(us)"]


@pytest.mark.slow
def test_report_json_and_page_carry_the_table(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run(advise_cmd("analyze", str(trace_path(SAMPLED)), "--out", str(out)), capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    report = json.loads((out / "report.json").read_text())
    row = report["hta_breakdown"]["ranks"][0]
    # HTA's get_temporal_breakdown on this trace: idle 321378, compute 106252, non-compute 172428 of 600058 us
    assert (row["idle_us"], row["compute_us"], row["non_compute_us"]) == (321378.0, 106252.0, 172428.0)
    assert row["communication_us"] > 0.9 * row["non_compute_us"] and len(row["steps"]) == 2
    page = (out / "report.html").read_text()
    assert "GPU time, in HTA&#39;s terms" in page and "communication (NCCL)" in page
    # the percentages HTA's own table prints for it
    assert "idle_time_pctg 53.56, compute_time_pctg 17.71, non_compute_time_pctg 28.74" in page


def test_one_row_per_rank_of_a_job():
    """Two ranks' traces: a row each, in rank order, each its own trace's figures (HTA: 321378 and 328671 us idle)."""
    traces = [load_trace(trace_path(f"hta/trace_filter/sampled_rank-{r}.json.gz")) for r in (1, 0)]
    rows = for_ranks(traces)["ranks"]
    assert [r["rank"] for r in rows] == [0, 1]
    assert [r["idle_us"] for r in rows] == [321378.0, 328671.0]
    assert rows[1] == hta_breakdown(traces[0])["ranks"][0]
    assert for_ranks([load_trace(trace_path(CPU_ONLY))]) is None
