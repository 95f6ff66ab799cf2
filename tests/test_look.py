"""A measured window a neighbour disturbed is measured again, and the findings read a quiet one
(advisor/experiments/look.py). The first test runs a real script beside a real neighbour that
leaves when the window ends; the second reads a recorded run beside a CPU burner."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from advisor.experiments import look
from advisor.profile import Profile
from advisor.rules import helpers as h
from advisor.rules.dl001_dataloader_starvation import check as dl001

from conftest import WORKLOADS, advise_cmd

RUN = Path(__file__).parent / "data" / "runs" / "loader_io_workers_beside_a_burner"

# A neighbour process outside the script's tree: it spins on one core until the run dir's steps.csv
# appears (the runner writes it when the measured window ends), then leaves.
NEIGHBOUR = """
import os, sys, time
done, end = sys.argv[1], time.monotonic() + 120
while not os.path.exists(done) and time.monotonic() < end:
    for _ in range(20000):
        pass
"""


@pytest.mark.timing
@pytest.mark.slow
def test_a_window_a_neighbour_disturbed_is_measured_again_and_the_findings_read_the_quiet_one(tmp_path):
    """A 4-worker I/O loader (4 ms a sample) and its 2-thread MLP on 2 cores, beside a neighbour that spins on a core
    through the measured window and leaves when it ends: the measured window is disturbed, a window
    measured after it is quiet, the report's steps and DL001 read that one (steps-quiet.csv, said
    in a warning), steps.csv keeps what the measured window measured, and the time the look took
    is given back to the arms' budget."""
    out = tmp_path / "run"
    out.mkdir()
    neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(out / "steps.csv")])
    try:
        proc = subprocess.run(advise_cmd("profile", "--out", str(out), "--time-budget", "8",
                                         str(WORKLOADS / "starved_io.py"), "--workers", "4", "--item-ms", "4"),
                              cwd=tmp_path, capture_output=True, text=True, timeout=180)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    quiet, measured = pd.read_csv(out / "steps-quiet.csv"), pd.read_csv(out / "steps.csv")
    assert len(measured) == 20 and len(quiet) >= 20 and not quiet["profiled"].any() and measured["profiled"].any()
    assert quiet["t_end"].max() - quiet["t_start"].min() >= 0.9 * look.LOOK_MIN_WINDOW_S
    assert any("a neighbour disturbed the measured window" in w and "steps-quiet.csv" in w for w in report["warnings"])
    assert [s["duration_s"] for s in report["steps"]] == pytest.approx(quiet["duration_s"].tolist())
    finding = next(f for f in report["findings"] if f["code"] == "DL001")
    assert finding["evidence"]["data_wait_frac"] > 0.5
    spent = report["experiments"]
    # the arms' windows the neighbour disturbed too, set aside, and any it held (probe/holds.py)
    added = (spent["disturbed_s"] or 0.0) + (spent["held_s"] or 0.0)
    assert spent["window_again_s"] > 0 and spent["budget_s"] == pytest.approx(8.0 + spent["window_again_s"] + added)
    # the arms' seconds start after the look: their windows and what ran between them fit the 8 s
    assert sum(a["seconds"] for a in spent["arms"]) + (spent["between_steps_s"] or 0) <= 8.0 + added + 1.5, spent
    assert "added to measure the disturbed profiled window again" in " ".join((proc.stdout + proc.stderr).split())
    assert report["steps_window"] == "quiet" and not any("no step ran under the profiler" in w for w in report["warnings"])
    # the page says which window its steps are, not "0 under the profiler"
    page = " ".join((out / "report.html").read_text().split())
    assert f"{len(quiet)} measured steps of a quiet window measured after the profiled one" in page


def test_the_recorded_look_reads_the_loader_wait_a_quiet_run_reads(tmp_path):
    """loader-io-workers beside a burner: in the measured window the burner's core stretched the
    MLP's 2-thread step, and the wait on the loader read 59% of the step; the window measured again
    after it was quiet and reads 94%, as a quiet run does (95%). Without steps-quiet.csv the same
    run dir reads the measured window, which the wait clock calls disturbed."""
    profile = Profile.from_run_dir(RUN)
    assert look.disturbed(profile) is None and h.data_wait_frac(profile) > 0.9
    (finding,) = dl001(profile)
    assert finding.evidence["data_wait_frac"] > 0.9
    assert any("steps-quiet.csv" in note for note in profile.meta.notes)

    measured_only = tmp_path / "run"
    shutil.copytree(RUN, measured_only)
    (measured_only / "steps-quiet.csv").unlink()
    measured = Profile.from_run_dir(measured_only)
    other, wait = look.disturbed(measured) or (0.0, 0.0)
    assert other > 0.5 and wait > 0.5
    assert 0.5 < h.data_wait_frac(measured) < 0.7 and not any("steps-quiet" in n for n in measured.meta.notes)
