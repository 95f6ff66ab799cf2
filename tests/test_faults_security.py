"""Nothing written where it should not be: links and paths planted in a run dir, through the real CLI.

A run dir is advise's own (README "The run dir"): every file advise writes goes inside it and
is created without following a symlink, and a path read from a report.json (data that travels:
CI artifacts, a teammate's upload) is resolved against the run dir and refused if it leaves it.
Each case plants the trap, runs the real `advise` in a subprocess and checks that the file
outside is untouched, byte for byte, and that advise either did its work inside the run dir or
refused with one line and exit 2 before running anything.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from test_faults_input import MARKER_SCRIPT, TINY, _absurd_trace, advise, one_error_line, ran

PRECIOUS = "someone else's file: advise must never write here\n"


@pytest.fixture
def outside(tmp_path) -> Path:
    """A file outside every run dir, with known content."""
    path = tmp_path / "elsewhere" / "precious.txt"
    path.parent.mkdir()
    path.write_text(PRECIOUS)
    return path


@pytest.fixture
def marker(tmp_path) -> Path:
    script = tmp_path / "train.py"
    script.write_text(MARKER_SCRIPT)
    return script


def analysed(tmp_path: Path, run: Path) -> None:
    """`advise analyze TRACE --out run`: a run dir with report.json and report.html."""
    r = advise("analyze", str(_absurd_trace(tmp_path)), "--out", str(run), cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_a_linked_lock_file_is_replaced_not_written_through(tmp_path, outside, marker):
    run = tmp_path / "run"
    run.mkdir()
    (run / ".advise.lock").symlink_to(outside)
    r = advise("profile", *TINY, "--out", str(run), str(marker), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert outside.read_text() == PRECIOUS
    assert not (run / ".advise.lock").exists()  # released: the run's own lock file, not the link


def test_analyze_out_with_a_linked_report_json_replaces_the_link(tmp_path, outside):
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").symlink_to(outside)
    analysed(tmp_path, run)
    assert outside.read_text() == PRECIOUS
    assert not (run / "report.json").is_symlink()
    assert json.loads((run / "report.json").read_text())["status"] == "ok"


def test_report_with_a_linked_report_html_replaces_the_link(tmp_path, outside):
    run = tmp_path / "run"
    analysed(tmp_path, run)
    (run / "report.html").unlink()
    (run / "report.html").symlink_to(outside)
    r = advise("report", str(run), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert outside.read_text() == PRECIOUS
    assert not (run / "report.html").is_symlink() and "<html" in (run / "report.html").read_text()


@pytest.mark.parametrize("where", ["absolute", "relative"])
def test_a_report_html_path_leaving_the_run_dir_is_refused(tmp_path, outside, where):
    run = tmp_path / "a" / "run"
    analysed(tmp_path, run)
    target = tmp_path / "outside.html"
    report = json.loads((run / "report.json").read_text())
    report["artifacts"]["report_html"] = str(target) if where == "absolute" else "../../outside.html"
    (run / "report.json").write_text(json.dumps(report))
    r = advise("report", str(run), cwd=tmp_path)
    line = one_error_line(r)
    assert "leads outside its run dir" in line and "refused" in line, line
    assert not target.exists()


def test_a_linked_experiments_folder_is_refused_before_the_script_runs(tmp_path, marker):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "experiments").symlink_to(elsewhere, target_is_directory=True)
    r = advise("profile", "--steps", "2", "--warmup", "0", "--profile-steps", "0", "--fresh-runs",
               "--out", str(run), str(marker), cwd=tmp_path)
    line = one_error_line(r)
    assert line == (f"advise: error: {run / 'experiments'} is a symlink; advise writes only inside its run dir: "
                    "remove it or choose another --out"), line
    assert ran(marker) is None
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_folder_or_fifo_named_report_json_is_refused_before_the_script_runs(tmp_path, marker, kind):
    """A folder used to end the whole run in a traceback from atomic.py; a FIFO hung advise forever."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").mkdir() if kind == "folder" else os.mkfifo(run / "report.json")
    r = advise("profile", *TINY, "--out", str(run), str(marker), cwd=tmp_path, timeout=60)
    what = "a folder" if kind == "folder" else "a FIFO"
    assert one_error_line(r) == (f"advise: error: {run / 'report.json'} is {what}, not a file advise can replace; "
                                 "remove it or choose another run dir")
    assert ran(marker) is None


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_analyze_out_with_a_folder_or_fifo_named_report_json_is_one_line(tmp_path, kind):
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").mkdir() if kind == "folder" else os.mkfifo(run / "report.json")
    r = advise("analyze", str(_absurd_trace(tmp_path)), "--out", str(run), cwd=tmp_path, timeout=60)
    what = "a folder" if kind == "folder" else "a FIFO"
    assert one_error_line(r, alone=False) == (f"advise: error: {run / 'report.json'} is {what}, not a file advise "
                                              "can replace; remove it or choose another run dir")
