"""`advise ab --mode duet` (the default) on real children: two checkouts of tests/workloads/ab_matmul.py,
both scripts alive at once taking turns, the pair restarted each round (advisor/gate/duets.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import psutil
import pytest

from conftest import WORKLOADS, advise_cmd

ENV = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
QUICK = ["--rounds", "2", "--max-rounds", "2", "--turn", "0.2", "--turns", "4", "--warmup", "2"]


def checkouts(tmp_path, base_code: str, cand_code: str):
    for name, code in (("base", base_code), ("cand", cand_code)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.py").write_text(code)


def ab(tmp_path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(advise_cmd("ab", "--base", "base", "--candidate", "cand", *args), cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=240)


def _ours_left() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()]


@pytest.mark.slow
@pytest.mark.timing  # two rounds decide it only while their ratios agree: beside the other worker's test (7 of 16
# windows disturbed) they read 4.9x and 3.4x, p = 0.04 over 2 rounds, and both runs were inconclusive (CI, 2026-12-02)
def test_a_larger_matmul_fails_a_duet_and_each_side_ran_once_a_restart(tmp_path):
    code = (WORKLOADS / "ab_matmul.py").read_text()
    checkouts(tmp_path, code, code.replace("HIDDEN = 128\n", "HIDDEN = 1024\n"))
    run = ab(tmp_path, *QUICK, "--out", "gate", "--json", "--history", "runs.jsonl", "train.py", "--batch-size", "256")
    assert run.returncode == 3, run.stdout[-2000:] + run.stderr[-3000:]
    [record] = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert record["kind"] == "gate" and record["verdict"] == "regression" and record["ratio"] > 1.5
    assert record["commit"] is None and record["mode"] == "duet"  # the checkouts are not git repos
    decision = json.loads(run.stdout)
    assert decision["mode"] == "duet" and "step_time" in decision["regressions"]
    step = next(m for m in decision["metrics"] if m["name"] == "step_time")
    assert step["slowdown"] > 1.0 and step["mdc"] is not None and step["label"] == "step time (turns' median)"
    runs = decision["runs"]
    assert [(r["side"], r["round"]) for r in runs] == [(s, i) for i in (1, 2) for s in ("base", "candidate")]
    assert all(r["windows"] == 4 and r["steps"] >= 12 for r in runs)
    assert [r["first"] for r in runs if r["side"] == "base"] == [True, False]  # the opener alternates
    assert decision["time"]["disturbed"]["windows"] == 16
    for side in ("base", "candidate"):  # each side's run dir: its steps, its log
        assert (tmp_path / "gate" / side / "round-02" / "steps.csv").is_file()
    top = decision["slower_ops"][0]  # from each side's traces of its first window
    assert top["name"] in ("aten::mm", "aten::addmm") and "1024" in top["current_shapes"]
    assert "could see" in (tmp_path / "gate" / "summary.md").read_text()
    assert "taking turns" in (tmp_path / "gate" / "ab.html").read_text()


@pytest.mark.slow
def test_sides_of_different_batch_sizes_are_compared_per_sample(tmp_path):
    code = (WORKLOADS / "ab_matmul.py").read_text()
    assert 'default=128)' in code
    checkouts(tmp_path, code, code.replace('default=128)', 'default=256)'))
    run = ab(tmp_path, *QUICK, "--max-regression", "500%", "--out", "gate", "--json", "train.py")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    decision = json.loads(run.stdout)
    tput = next(m for m in decision["metrics"] if m["name"] == "throughput")
    step = next(m for m in decision["metrics"] if m["name"] == "step_time")
    assert tput["unit"] == "samples/s" and -0.6 < step["slowdown"] < 0.5  # twice the batch, not twice the time
    assert decision["decided_by"].startswith("equivalence decided") and "could see" in decision["decided_by"]


def test_a_candidate_that_crashes_ends_the_other_side_and_is_exit_1(tmp_path):
    code = (WORKLOADS / "ab_matmul.py").read_text()
    checkouts(tmp_path, code, "raise SystemExit('the candidate is broken')\n")
    run = ab(tmp_path, *QUICK, "--out", "gate", "train.py")
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith("advise: error: candidate restart 1:") and "the candidate is broken" in run.stderr
    assert (tmp_path / "gate" / "base" / "round-01").is_dir() and (tmp_path / "gate" / "candidate" / "round-01").is_dir()
    assert not _ours_left()


def test_a_script_that_runs_out_of_steps_is_exit_2_and_says_so(tmp_path):
    code = (WORKLOADS / "ab_matmul.py").read_text()
    checkouts(tmp_path, code, code)
    run = ab(tmp_path, *QUICK, "--out", "gate", "train.py", "--steps", "6")
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "ran out of steps" in run.stderr and "--mode sequential" in run.stderr
    assert not _ours_left()


def test_a_step_longer_than_a_turn_and_the_disturbed_windows_are_said():
    from advisor.gate.duet import Turn
    from advisor.gate.duets import Restart, disturbed, long_turns

    slow = [Turn(side, k, 2.0 * k, ended=2.0 * k + 1.6, step_s=[0.52, 0.55, 0.53], wait=0.3 if k == 1 else 0.0)
            for k, side in enumerate(("base", "candidate") * 2)]
    restart = Restart(1, "base", slow, 8.0, {"step_time": (0.53, 0.53)}, None, None)
    said = long_turns([restart], 0.5)
    assert said and said[0].startswith("a step (0.53 s) is longer than a turn (0.5 s): each turn ran 1.6 s")
    hit = disturbed([restart])
    assert hit["windows"] == 4 and hit["disturbed"] == 1 and hit["share_of_time"] == pytest.approx(0.25)
    quick = [Turn(t.side, t.round, t.started, ended=t.started + 0.55, step_s=[0.01] * 50) for t in slow]
    assert long_turns([Restart(1, "base", quick, 3.0, {}, None, None)], 0.5) == []


STOPS = [("duet", signal.SIGINT, 130, "Ctrl-C"), ("sequential", signal.SIGTERM, 143, "SIGTERM")]


@pytest.mark.parametrize("mode, sig, code, name", STOPS, ids=[s[0] for s in STOPS])
def test_a_signal_stops_both_sides_and_leaves_nothing_running(tmp_path, mode, sig, code, name):
    """A gate's Ctrl-C (or a cancelled CI job's SIGTERM) mid-round: both sides' scripts and their
    DataLoader workers end (the duet's held side is stopped with SIGSTOP: it is continued first),
    one line, the signal's exit code, and the run dirs so far kept."""
    loader = (WORKLOADS / "workers_loader.py").read_text()  # two persistent DataLoader workers
    checkouts(tmp_path, loader, loader)
    cmd = advise_cmd("ab", "--base", "base", "--candidate", "cand", "--mode", mode, *QUICK[:4], "--turns", "200",
                     "--steps", "100000", "--out", "gate", "train.py")
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = tmp_path / "gate" / "base" / ("round-01" if mode == "duet" else "round-00")  # (a sequential gate's pilot)
    deadline = time.monotonic() + 60
    while not ((first / "steps.jsonl").is_file() and (first / "steps.jsonl").read_text().count('"measure"') >= 5):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no measured steps in {first} within 60 s: {proc.communicate()}")
        time.sleep(0.1)
    time.sleep(1.0)  # the duet's turns under way: one side held, its worker stopped
    tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    assert len(tree) >= (5 if mode == "duet" else 4)  # advise, each side's script and its worker
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err[-3000:]
    assert err.strip().splitlines() == [f"advise: interrupted ({name}): nothing decided; the rounds so far are in gate"]
    assert not [p for p in tree[1:] if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not (tmp_path / "gate" / "ab.json").exists()
    for kept in (first, tmp_path / "gate" / "candidate" / "round-01") if mode == "duet" else (first,):
        assert (kept / "steps.csv").is_file() and (kept / "probe.json").is_file()
    if mode == "sequential":  # the round's own `advise profile` was stopped as a profile is
        assert json.loads((first / "report.json").read_text())["status"] == "interrupted"


def test_a_gpu_job_is_never_gated_on_its_cpu_time():
    """A CPU-bound-looking GPU job (its host thread busy in every step) is gated on its step clock."""
    from advisor.gate.duet import Turn
    from advisor.gate.duets import Restart, cpu_gates

    busy = [Turn(side, k, float(k), ended=k + 0.5, step_s=[0.01] * 20, cpu_s=[0.0099] * 20)
            for k, side in enumerate(("base", "candidate") * 2)]
    on_cpu = Restart(1, "base", busy, 3.0, {}, None, None)
    assert cpu_gates([on_cpu])[0] is True
    on_gpu = Restart(2, "candidate", busy, 3.0, {}, None, None, devices=("cuda", "cuda"))
    assert cpu_gates([on_cpu, on_gpu]) == (False, "reported: a GPU job is gated on its step clock (the device's)")


ONE_AT_A_TIME = """import fcntl, os
import torch

held = open(os.environ["DEVICE_LOCK"], "w")  # the device: one process holds it at a time
try:
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (the other process holds 79 GiB)")
"""


def test_two_sides_that_do_not_fit_at_once_are_gated_one_at_a_time(tmp_path):
    """The first duet runs out of memory (the two sides cannot share the device): the gate runs the
    sides sequentially, says why, and decides."""
    code = ONE_AT_A_TIME + (WORKLOADS / "ab_matmul.py").read_text()
    checkouts(tmp_path, code, code)
    run = subprocess.run(advise_cmd("ab", "--base", "base", "--candidate", "cand", "--rounds", "2", "--max-rounds", "2",
                                    "--steps", "10", "--warmup", "2", "--window", "0", "--profile-steps", "0", "--out", "gate", "--json",
                                    "train.py"),
                         cwd=tmp_path, env={**ENV, "DEVICE_LOCK": str(tmp_path / "device.lock")},
                         capture_output=True, text=True, timeout=240)
    assert run.returncode in (0, 4), run.stderr[-3000:]  # unchanged: passed, or too few rounds to say
    decision = json.loads(run.stdout)
    assert decision["mode"] == "interleaved"
    assert decision["warnings"][0].startswith("sequential mode: the two sides at once ran out of memory (")
    assert "CUDA out of memory" in decision["warnings"][0]
    # two rounds of both sides, and one more for each round a neighbour's load set aside (the other test worker's)
    assert len(decision["runs"]) == 2 * (2 + len(decision["set_aside"])) and not _ours_left()
