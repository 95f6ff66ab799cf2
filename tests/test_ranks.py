"""Cross-rank analysis: a multi-rank job as one JobProfile, the PAR rules, `advise analyze` of several traces.

Real data only: the HTA pair (ranks 0 and 1 of a 128-rank NCCL job) for GPU evidence, and a
real two-rank gloo DDP job on CPU (tests/workloads/ddp_straggler.py, started with torchrun once)
whose cases make rank 1 sleep 30 ms more per step, take a bigger batch, or neither.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from advisor.commands.cli import main
from advisor.engine import Settings, run_rules
from advisor.intervals import merge, subtract
from advisor.profile import Profile
from advisor.rules.registry import load_rules
from conftest import FAST, WORKLOADS, advise_cmd, trace_path

PAIR = ("hta/trace_filter/sampled_rank-0.json.gz", "hta/trace_filter/sampled_rank-1.json.gz")
SINGLE_RANK_COMM = "hta/negative_queue_length_values_check/rank0.json.gz"  # rank 0 of 16, TorchRec all2all
CATALOGUE = load_rules()


@lru_cache(maxsize=None)
def _pair() -> Profile:
    profiles = [Profile.from_trace(trace_path(p)) for p in PAIR]
    primary = profiles[0]
    primary.ranks = profiles
    return primary


def by_code(profile: Profile, select: str = "PAR") -> dict[str, dict]:
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


def test_nccl_pair_has_exposed_communication_and_no_straggler():
    found = by_code(_pair())
    assert "PAR001" not in found  # the ranks' own work differs by ~3%: no straggler
    assert "PAR004" not in found  # FLOPs per step differ by ~4%
    exposed = found["PAR002"]["evidence"]
    assert exposed["n_ranks"] == 2 and exposed["ddp"] is True
    assert 0.15 < exposed["exposed_comm_frac"] < 0.35
    assert set(exposed["comm_comp_overlap_by_rank"]) == {"0", "1"}
    assert all(0.0 < v < 0.5 for v in exposed["comm_comp_overlap_by_rank"].values())
    assert "gradient_as_bucket_view=True" in found["PAR002"]["fix"]["snippet"]
    assert found["PAR002"]["fix"]["kind"] == "manual"


def test_overlap_agrees_with_holistic_trace_analysis():
    """HTA 0.5.0's get_comm_comp_overlap on these two files (benchmarks/cross_rank_vs_hta.py): 0.149 and 0.199."""
    overlap = by_code(_pair())["PAR002"]["evidence"]["comm_comp_overlap_by_rank"]
    assert overlap["0"] == pytest.approx(0.149, abs=0.002) and overlap["1"] == pytest.approx(0.199, abs=0.002)


def test_one_rank_alone_gets_no_cross_rank_findings_but_is_told_its_exposure():
    one = Profile.from_trace(trace_path(SINGLE_RANK_COMM))
    found = by_code(one)
    assert "PAR001" not in found and "PAR004" not in found
    assert "With one rank's trace" in found["PAR002"]["summary"]


DDP_TRACES = [*PAIR, SINGLE_RANK_COMM, "hta/nccl_parser_config/nccl_data.json.gz",
              "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
              "tracelens/mi300/resnet_act_checkpoint.json.gz"]


@pytest.mark.parametrize("relative", DDP_TRACES)
def test_data_parallel_is_not_flagged_on_distributed_data_parallel_traces(relative):
    """One GPU per process, `DistributedDataParallel.forward` in every one: not nn.DataParallel."""
    profile = Profile.from_trace(trace_path(relative))
    assert profile.annotations["name"].str.contains("DistributedDataParallel").any()
    assert "PAR003" not in by_code(profile, "PAR003")


def test_data_parallel_is_flagged_when_one_process_drives_two_gpus():
    """No two-GPU DataParallel trace exists in the shared set (nor a second GPU here): a real
    one-GPU ResNet-50 trace with every other kernel moved to GPU 1, as DataParallel's replicas
    would run, and no process group. The same move on a DDP rank's trace (NCCL kernels) is not
    DataParallel's signature."""
    profile = Profile.from_trace(trace_path("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"))
    profile.kernels.loc[profile.kernels.index[1::2], "device"] = 1
    found = by_code(profile, "PAR003")["PAR003"]
    assert found["evidence"]["devices"] == [0, 1] and not found["evidence"]["module_seen"]
    assert found["fix"]["kind"] == "manual" and "DistributedDataParallel" in found["fix"]["snippet"]
    ddp = Profile.from_trace(trace_path(SINGLE_RANK_COMM))
    ddp.kernels.loc[ddp.kernels.index[1::2], "device"] = 1
    assert "PAR003" not in by_code(ddp, "PAR003")


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


CASES = {"slow": "slow:30:32", "even": "even:0:32", "uneven": "uneven:0:128"}  # NAME:SLEEP_MS:BATCH_RANK1


@pytest.fixture(scope="module")
def ddp_traces(tmp_path_factory):
    """One launch of two gloo ranks (tests/workloads/ddp_straggler.py) running three cases, each case's
    traces in its own folder: rank 1 sleeps 30 ms more per step / nothing differs / rank 1 gets 4x the batch."""
    root = tmp_path_factory.mktemp("ddp")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(WORKLOADS / "ddp_straggler.py"), str(root), *[a for c in CASES.values() for a in ("--case", c)]]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def analyze_case(root, case: str) -> dict:
    """`advise analyze` of the case's two traces, as a user runs it."""
    folder = root / case
    proc = analyze(root, "--json", str(folder / "trace_rank0.json"), str(folder / "trace_rank1.json"))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def case_findings(root, case: str) -> dict[str, dict]:
    """The same analysis in-process (the CLI's path is covered above): a job of the case's two ranks."""
    profiles = [Profile.from_trace(root / case / f"trace_rank{r}.json") for r in (0, 1)]
    profiles[0].ranks = profiles
    assert profiles[0].job.ranks == [0, 1]
    return by_code(profiles[0])


@pytest.mark.slow
def test_rank_that_sleeps_30ms_more_is_named_straggler_with_the_wait_it_causes(ddp_traces):
    report = analyze_case(ddp_traces, "slow")
    found = {f["code"]: f for f in report["findings"]}
    straggler = found["PAR001"]["evidence"]
    assert straggler["straggler_rank"] == 1
    assert 0.02 < straggler["extra_s_per_step"] < 0.045  # 30 ms of sleep, give or take a loaded machine
    assert 0.02 < straggler["wait_caused_by_rank_s"]["0"] < 0.045  # rank 0 waits in gloo:all_reduce for it
    assert "Rank 1" in found["PAR001"]["title"] and "rank 0 waits" in found["PAR001"]["summary"]
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    # The wait is the straggler's, not the network's: whatever PAR002 reports (gloo's own all-reduce
    # can pass its 10% on a loaded 2-core machine) leaves the 30 ms wait out.
    exposed = found.get("PAR002", {}).get("evidence", {}).get("exposed_comm_s_per_step", 0.0)
    assert exposed < 0.5 * straggler["wait_caused_s_per_step"], found.get("PAR002")


@pytest.mark.slow
def test_the_same_job_without_the_sleep_has_no_straggler(ddp_traces):
    assert "PAR001" not in case_findings(ddp_traces, "even")


@pytest.mark.slow
def test_a_rank_with_four_times_the_batch_is_load_imbalance(ddp_traces):
    imbalance = case_findings(ddp_traces, "uneven")["PAR004"]["evidence"]
    assert imbalance["heaviest_rank"] == 1 and imbalance["measure"] == "flops"
    assert 2.9 < imbalance["imbalance"] < 3.1  # 128 against 32 samples: 4x the FLOPs


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
