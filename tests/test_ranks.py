"""Cross-rank analysis: a multi-rank job as one JobProfile, `advise analyze` of several traces.

Real data only: the HTA pair (ranks 0 and 1 of a 128-rank NCCL job) for GPU evidence. The PAR
rules' own tests, on that pair and on a real two-rank gloo DDP job, are in tests/rules/test_par00N.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from advisor.commands.cli import main
from advisor.engine import Settings, run_rules
from advisor.trace.intervals import merge, subtract
from advisor.profile import Profile
from advisor.rules.registry import load_rules
from conftest import FAST, WORKLOADS, advise_cmd, trace_path
from rules.rule_inputs import PAIR, pair as _pair

CATALOGUE = load_rules()


def by_code(profile: Profile, select: str = "PAR") -> dict[str, dict]:
    """The PAR findings by code (test_launchers compares the pair's, whole and from a rank's summary)."""
    found, warnings = run_rules(profile, Settings(select=[select]), CATALOGUE)
    assert warnings == []
    return {f.code: f.to_dict() for f in found}


# --------------------------------------------------------------------------- exposed time


def test_subtract_leaves_exactly_what_compute_does_not_cover():
    """Against a brute-force count on an integer grid, over random overlapping intervals."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        a0, b0 = rng.integers(0, 90, 6), rng.integers(0, 90, 6)
        cs, ce = merge(a0, a0 + rng.integers(0, 15, 6))
        ks, ke = merge(b0, b0 + rng.integers(0, 15, 6))
        es, ee = subtract(cs, ce, ks, ke)
        grid = np.arange(0, 110) + 0.5
        assert (ee - es).sum() == (_covers(grid, cs, ce) & ~_covers(grid, ks, ke)).sum()


def _covers(points, starts, ends):
    return ((points[:, None] > starts) & (points[:, None] < ends)).any(axis=1)


# --------------------------------------------------------------------------- real NCCL pair


def test_job_reads_each_rank_from_its_trace():
    job = _pair().job
    assert job.ranks == [0, 1]  # distributedInfo, not the order given
    table = job.per_rank()
    assert list(table["rank"]) == [0, 1]
    assert (table["exposed_comm_s"] <= table["comm_s"]).all() and (table["comm_s"] > 0.1).all()  # ~0.19 s of NCCL a step
    assert ((table["busy_s"] + table["exposed_comm_s"] - table["duration_s"]).abs() < 1e-9).all()


# --------------------------------------------------------------------------- advise analyze


def analyze(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """`advise analyze ARGS` as a user runs it: a process."""
    return subprocess.run(advise_cmd("analyze", *args), cwd=tmp_path, capture_output=True, text=True, timeout=120)


def analyze_here(*args: str):
    """The same command in this process (no interpreter and torch start-up): exit_code, stdout, stderr."""
    return CliRunner().invoke(main, ["analyze", *args], env={"GITHUB_STEP_SUMMARY": None})


def test_analyze_a_folder_of_rank_traces(tmp_path):
    folder = trace_path(PAIR[0]).parent
    proc = analyze(tmp_path, "--json", str(folder))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["script"] == "2 traces, ranks 0, 1"
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert len(report["artifacts"]["rank_traces"]) == 2
    assert "PAR002" in {f["code"] for f in report["findings"]}


def test_analyze_a_run_dir_reads_its_rank_traces_not_its_reports(tmp_path):
    run = tmp_path / "run"  # as torchrun + advise profile leave it: trace.rankN.json.gz beside report/probe JSON
    run.mkdir()
    for rank, relative in enumerate(PAIR):
        shutil.copy(trace_path(relative), run / f"trace.rank{rank}.json.gz")
        (run / f"report.rank{rank}.json").write_text("{}")
    (run / "probe.rank0.json").write_text("{}")
    result = analyze_here("--json", str(run))
    assert result.exit_code == 0, result.stderr
    assert [Path(p).name for p in json.loads(result.stdout)["artifacts"]["rank_traces"]] == [
        "trace.rank0.json.gz", "trace.rank1.json.gz"]


def test_analyze_refuses_two_traces_of_one_rank(tmp_path):
    path = str(trace_path(PAIR[0]))
    result = analyze_here(path, path)
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0 and "both rank 0" in result.stderr


def test_analyze_warns_when_the_traces_come_from_different_jobs(tmp_path):
    other_job = trace_path("hta/df_index_resolver/df_index_resolver.json.gz")  # rank 1 of a 2-rank job
    result = analyze_here("--json", str(trace_path(PAIR[0])), str(other_job))  # rank 0 of 128
    assert result.exit_code == 0, result.stderr
    assert any("world_size 2, 128" in w for w in json.loads(result.stdout)["warnings"])


def test_analyze_an_empty_folder_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = analyze(tmp_path, "empty")
    assert proc.returncode == 2 and "no .json or .json.gz trace" in proc.stderr and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- real gloo DDP jobs on CPU


# --------------------------------------------------------------------------- step(closure)


@pytest.mark.slow
def test_forward_backward_inside_lbfgs_closure_count_as_compute_not_optimizer(advise):
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "lbfgs_closure.py"))
    assert r.returncode == 0, r.stderr
    breakdown = r.report["breakdown"]
    steps = r.report["steps"]
    assert all(s["backward_s"] > 0 for s in steps)  # backward ran, inside the closure
    assert breakdown["compute_frac"] > 0.5 and breakdown["optimizer_frac"] < 0.4, breakdown
    # the same run's trace alone: the closure spans inside Optimizer.step#LBFGS.step are read off the trace
    proc = subprocess.run(advise_cmd("analyze", "--json", str(r.out / "trace.json.gz")), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    from_trace = json.loads(proc.stdout)["breakdown"]
    assert from_trace["compute_frac"] > 0.5 and from_trace["optimizer_frac"] < 0.4, from_trace
