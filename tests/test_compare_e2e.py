"""The regression gate end to end: real runs of a workload with a slowdown knob, real `advise`.

Runs that are compared with each other run side by side, their measured steps starting
together: on a shared 2-core machine whatever else is running then slows both alike, so the
tests see the planted slowdown and not the neighbours. Each step is ~40 ms (mostly a calibrated sleep) and 30 are
measured: enough for the test, short enough for the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import WORKLOADS, advise_cmd

pytestmark = pytest.mark.slow

KNOB = str(WORKLOADS / "slowdown_knob.py")
RUN = ["--steps", "30", "--warmup", "3", "--profile-steps", "0", "--no-experiments"]
ENV = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}


def start(tmp_path: Path, name: str, slowdown: float, *extra: str, script_args: tuple[str, ...] = ()) -> subprocess.Popen:
    cmd = advise_cmd("profile", *RUN, "--out", name, *extra, KNOB, "--slowdown", str(slowdown), *script_args)
    return subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def side_by_side(tmp_path: Path, slowdowns: dict[str, float]) -> dict[str, Path]:
    """Both runs at once, their steps starting together (the workload's --barrier)."""
    barrier = ("--barrier", str(tmp_path / "barrier"), "--parties", str(len(slowdowns)))
    procs = {name: start(tmp_path, name, s, script_args=barrier) for name, s in slowdowns.items()}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"{name}: {err}"
    return {name: tmp_path / name / "report.json" for name in procs}


def compare(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(advise_cmd("compare", *args), cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)


def gated(result: subprocess.CompletedProcess) -> dict[str, dict]:
    return {m["name"]: m for m in json.loads(result.stdout)["metrics"] if m["gated"]}


def test_identical_reruns_pass_and_ten_percent_slower_fails_at_5_percent(tmp_path):
    runs = side_by_side(tmp_path, {"base": 1.0, "same": 1.0, "slow": 1.1})
    why = {name: [round(s["duration_s"] * 1e3, 1) for s in json.loads(path.read_text())["steps"]] for name, path in runs.items()}

    same = compare(tmp_path, str(runs["base"]), str(runs["same"]), "--max-regression", "5%", "--json")
    assert same.returncode == 0, (same.stdout, why)
    assert json.loads(same.stdout)["n_steps"] == {"baseline": 30, "current": 30}
    assert {m["verdict"] for m in gated(same).values()} <= {"ok", "not-significant"}

    slow = compare(tmp_path, str(runs["base"]), str(runs["slow"]), "--max-regression", "5%", "--json")
    assert slow.returncode == 3, (slow.stdout, why)
    step = gated(slow)["step_time_median"]
    assert step["verdict"] == "regression" and step["change"] > 0.05 and step["p_value"] < 0.01


def test_twice_as_slow_fails_in_one_command(tmp_path):
    base = start(tmp_path, "base", 1.0)
    _, err = base.communicate(timeout=180)
    assert base.returncode == 0, err
    slow = start(tmp_path, "slow", 2.0, "--baseline", "base/report.json")
    out, err = slow.communicate(timeout=180)
    assert slow.returncode == 3, out + err
    assert "advise compare REGRESSION" in out and "samples/s" in out  # the profile summary, then the comparison
    saved = json.loads((tmp_path / "slow" / "compare.json").read_text())
    assert saved["regressions"] == ["throughput", "step_time_median"]

    # The same two reports through `advise compare`, as a CI job would, with JUnit for its dashboard.
    result = compare(tmp_path, "base", "slow", "--junit", "junit.xml")
    assert result.returncode == 3 and "REGRESSION" in result.stdout
    failed = {c.get("name") for c in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase") if c.find("failure") is not None}
    assert failed == {"throughput", "step_time_median"}
