"""Never lose a run: real signals, concurrent runs and escaping processes against the real CLI.

Each end-to-end case runs `advise profile` as a subprocess on tests/workloads/lifecycle.py (a
script that starts a helper in its own session, registers an atexit handler and sleeps in
every step), waits until the run is where the fault should land (a measured step written, an
experiment child started), sends a real signal, and checks what a user relies on:

- the exit code (Ctrl-C 130, SIGTERM 143, SIGHUP 129) and one line on stderr, no traceback;
- no process left behind: neither the process tree seen before the signal, nor anything whose
  command line names the test's folder (the helper's does);
- report.json with status `interrupted` and exactly the files beside it that its `artifacts`
  list: nothing listed is missing, nothing from the previous run is left;
- the script's atexit handler ran;
- a second run into the same --out meanwhile exits 2, names the first run's pid, touches nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from advisor.run_dir import layout
from advisor.run_dir.protocol import ArmStepLine, read_lines
from conftest import WORKLOADS, advise_cmd, alive_with

SCRIPT = str(WORKLOADS / "lifecycle.py")
LOCK = layout.lock_name()
STALE = ["report.json", "report.html", "trace.json.gz", "steps.csv", "samples.csv", "probe.json", "script.log",
         "steps.jsonl", "compare.json", ".probe-config.json", ".tmp-report.json.0123456789ab",
         "experiments/01-baseline/steps.csv", "experiments/01-baseline/probe.json",
         "experiments/01-baseline/script.log", "experiments/07-old/samples.csv"]
NOT_OURS = ["notes.txt", "report.rank1.json", "trace.rank1.json.gz", "experiments/07-old/mine.txt"]


# --- helpers -----------------------------------------------------------------------------------

def plant_previous_run(run: Path) -> None:
    """What an earlier run left (its report pointing at its files), plus files advise never wrote."""
    for name in STALE + NOT_OURS:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("from before\n")
    (run / "report.json").write_text(json.dumps({"schema_version": 1, "status": "ok", "artifacts": {
        "report_json": "report.json", "trace": "trace.json.gz", "steps_csv": "steps.csv"}}))


def profile_cmd(*args: str) -> list[str]:
    """`advise profile OPTIONS SCRIPT SCRIPT-ARGS` from `OPTIONS -- SCRIPT-ARGS` (advise's options come first)."""
    cut = args.index("--") if "--" in args else len(args)
    return advise_cmd("profile", *args[:cut], SCRIPT, *args[cut + 1:])


def start(tmp_path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(profile_cmd(*args), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def stop_with(proc: subprocess.Popen, sig: int, code: int, name: str, before: list, tmp_path: Path) -> dict:
    """Send `sig`; advise exits `code` with one line, leaves no process behind, and writes its report."""
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert_one_line_no_traceback(out, err, f"advise: interrupted ({name})")
    assert not still_running(before)
    assert not alive_with(str(tmp_path))
    return json.loads((tmp_path / "run" / "report.json").read_text())


def wait_for(condition, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"advise exited ({proc.returncode}) before {what}:\n{out[-2000:]}\n{err[-2000:]}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}")


def lines(path: Path, word: str) -> int:
    try:
        return path.read_text().count(word)
    except FileNotFoundError:
        return 0


def tree_of(pid: int) -> list[psutil.Process]:
    """advise and every process under it now (the probe child, workers), as psutil handles (pid + start time)."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def helpers_in(run: Path) -> list[psutil.Process]:
    """The helpers the script started in sessions of their own (it prints HELPER=<pid> to its log)."""
    found = []
    for log in [run / "script.log", *run.glob("experiments/*/script.log")]:
        for line in (log.read_text() if log.is_file() else "").splitlines():
            if line.startswith("HELPER="):
                try:
                    found.append(psutil.Process(int(line.split("=")[1])))
                except psutil.NoSuchProcess:
                    pass
    return found


def still_running(procs: list[psutil.Process]) -> list[psutil.Process]:
    deadline = time.monotonic() + 5  # a process killed a moment ago may still be on its way out
    while True:
        left = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(p)
            except psutil.NoSuchProcess:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def files_in(run: Path) -> set[str]:
    return {p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file()}


def assert_report_is_the_run_dir(run: Path, report: dict, others=tuple(NOT_OURS)) -> None:
    """Every artifact exists; every other file is the user's (`others`) or in a listed experiment's run dir."""
    listed = set(report["artifacts"].values())
    assert all((run / name).is_file() for name in listed), listed - files_in(run)
    experiments = {f for f in files_in(run) if f.startswith("experiments/") and not f.startswith("experiments/07-old/")}
    run_dirs = {Path(r["run_dir"]).name for r in (report.get("experiments") or {}).get("runs", [])}
    assert {f.split("/")[1] for f in experiments} <= run_dirs, (experiments, run_dirs)
    assert files_in(run) - experiments == listed | set(others)


def assert_one_line_no_traceback(out: str, err: str, starts: str) -> None:
    assert "Traceback" not in err and "Traceback" not in out, err
    err_lines = [line for line in err.splitlines() if line.strip()]
    assert len(err_lines) == 1 and err_lines[0].startswith(starts), err


# --- signals -----------------------------------------------------------------------------------

PROBING = [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGHUP, 129, "SIGHUP"), (signal.SIGINT, 130, "Ctrl-C")]


@pytest.mark.slow
@pytest.mark.parametrize("sig, code, name", PROBING, ids=[p[2] for p in PROBING])
def test_signal_while_probing_stops_everything_and_reports(tmp_path, sig, code, name):
    run, marker = tmp_path / "run", tmp_path / "marker"
    plant_previous_run(run)
    proc = start(tmp_path, "--steps", "400", "--warmup", "1", "--profile-steps", "2", "--no-experiments",
                 "--out", "run", "--", "--marker", str(marker), "--step-ms", "30")
    wait_for(lambda: lines(run / "steps.jsonl", '"measure"') >= 3, proc, "three measured steps")
    assert not (run / "report.json").exists()  # the last run's report went before its files did
    assert not (run / "experiments" / "01-baseline").exists()
    before = tree_of(proc.pid) + helpers_in(run)
    assert len(helpers_in(run)) == 1

    if sig == signal.SIGTERM:  # meanwhile a second run into the same --out: refused, nothing touched
        names = {p.name for p in run.iterdir()}
        second = subprocess.run(profile_cmd("--no-experiments", "--out", "run", "--",
                                           "--marker", str(marker)), cwd=tmp_path, capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 2
        assert_one_line_no_traceback(second.stdout, second.stderr, "advise: error: the run dir run is in use")
        assert f"(pid {proc.pid})" in second.stderr
        assert {p.name for p in run.iterdir()} == names and (run / LOCK).read_text().strip() == str(proc.pid)

    report = stop_with(proc, sig, code, name, before, tmp_path)
    assert report["status"] == "interrupted" and report["error"] == f"interrupted ({name})"
    assert len(report["steps"]) >= 3
    assert "trace" not in report["artifacts"]  # the profiled steps were never reached: no trace, old one gone
    assert_report_is_the_run_dir(run, report)
    assert not (run / LOCK).exists()
    assert any("1 process the script started outside its process group" in w for w in report["warnings"])
    assert (marker / "atexit.txt").read_text().startswith("atexit ")


EXPERIMENTING = [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")]


@pytest.mark.slow
@pytest.mark.parametrize("sig, code, name", EXPERIMENTING, ids=[p[2] for p in EXPERIMENTING])
def test_signal_during_the_experiments_stops_the_experiment_child(tmp_path, sig, code, name):
    run, marker = tmp_path / "run", tmp_path / "marker"
    plant_previous_run(run)
    # 60 of every 80 ms in the DataLoader: DL001 fires, so its fix is measured in a new child
    proc = start(tmp_path, "--steps", "8", "--warmup", "1", "--profile-steps", "2", "--max-experiments", "2",
                 "--fresh-runs", "--out", "run", "--", "--marker", str(marker), "--data-ms", "60", "--step-ms", "80")
    child_steps = run / "experiments" / "01-baseline" / "steps.jsonl"
    wait_for(lambda: lines(child_steps, "\n") >= 1, proc, "the first experiment's first step")
    before = tree_of(proc.pid) + helpers_in(run)
    assert len(before) >= 3  # advise, the experiment's child, the helpers

    report = stop_with(proc, sig, code, name, before, tmp_path)
    assert report["status"] == "interrupted" and report["error"].startswith(f"interrupted ({name}) after the measurements")
    assert len(report["steps"]) == 8 and report["artifacts"]["trace"] == "trace.json.gz"  # the measurements are whole
    dl001 = next(f for f in report["findings"] if f["code"] == "DL001")
    assert dl001["experiment"]["verdict"] == "not-measured" and "interrupted" in dl001["experiment"]["reason"]
    last = report["experiments"]["runs"][-1]
    assert last["status"] == "interrupted"
    assert json.loads((Path(tmp_path / last["run_dir"]) / "probe.json").read_text())["status"] == "interrupted"
    assert any(w.startswith(f"experiments interrupted ({name})") for w in report["warnings"])
    assert_report_is_the_run_dir(run, report)
    assert lines(marker / "atexit.txt", "atexit ") == 2  # the profiled run's and the experiment child's


@pytest.mark.slow
def test_a_second_signal_kills_a_script_that_ignores_the_first(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "marker"
    proc = start(tmp_path, "--steps", "400", "--warmup", "1", "--no-experiments", "--out", "run", "--",
                 "--marker", str(marker), "--step-ms", "30", "--ignore-interrupts")
    wait_for(lambda: lines(run / "steps.jsonl", '"measure"') >= 3, proc, "three measured steps")
    before = tree_of(proc.pid) + helpers_in(run)
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: lines(run / "script.log", "ignored") >= 1, proc, "the script to ignore the stop")
    assert proc.poll() is None  # still inside its grace period
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 8  # not the 10 s grace period
    assert proc.returncode == 143
    assert_one_line_no_traceback(out, err, "advise: interrupted (SIGTERM)")
    assert not still_running(before) and not alive_with(str(tmp_path))
    report = json.loads((run / "report.json").read_text())
    assert report["status"] == "interrupted" and len(report["steps"]) >= 3
    assert_report_is_the_run_dir(run, report, others=())


# --- a run that ends by itself ----------------------------------------------------------------

ENDINGS = [  # how the script's run ends, the status and exit code, the script's own arguments
    ("window-end", "ok", 0, ["--steps", "6"], []),
    ("crash", "failed", 1, ["--steps", "50"], ["--crash-at", "5"]),
    ("timeout", "timeout", 1, ["--steps", "400", "--timeout", "5"], []),
]


@pytest.mark.slow
@pytest.mark.parametrize("how, status, code, options, script_args", ENDINGS, ids=[e[0] for e in ENDINGS])
def test_a_reused_run_dir_holds_only_this_runs_files_however_it_ends(tmp_path, how, status, code, options, script_args):
    run, marker = tmp_path / "run", tmp_path / "marker"
    plant_previous_run(run)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / LOCK).write_text(f"{dead.pid}\n")  # left by a run that was killed: stale, taken over
    proc = start(tmp_path, *options, "--warmup", "1", "--profile-steps", "2", "--no-experiments",
                 "--out", "run", "--", "--marker", str(marker), *script_args)
    wait_for(lambda: bool(helpers_in(run)), proc, "the helper to start")
    before = tree_of(proc.pid) + helpers_in(run)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "advisor/" not in err  # a crash shows the script's traceback, never advise's
    report = json.loads((run / "report.json").read_text())
    assert report["status"] == status
    assert_report_is_the_run_dir(run, report)
    assert (run / "notes.txt").read_text() == "from before\n"
    assert not (run / LOCK).exists()
    # However it ended, atexit ran as at any exit, and the helper outside the group was killed and counted.
    assert (marker / "atexit.txt").read_text().startswith("atexit ")
    assert any("1 process the script started outside its process group" in w for w in report["warnings"])
    assert not still_running(before) and not alive_with(str(tmp_path))



@pytest.mark.slow
def test_a_signal_during_the_in_process_arms_keeps_the_window(tmp_path):
    """The arms run in the profiled child: SIGTERM there stops it as anywhere else; the window stays whole."""
    run, marker = tmp_path / "run", tmp_path / "marker"
    proc = start(tmp_path, "--steps", "8", "--warmup", "1", "--profile-steps", "2", "--max-experiments", "2",
                 "--out", "run", "--", "--marker", str(marker), "--data-ms", "60", "--step-ms", "80")
    wait_for(lambda: any(isinstance(x, ArmStepLine) for x in read_lines(run / "steps.jsonl")[0]), proc, "the first arm step")
    before = tree_of(proc.pid) + helpers_in(run)
    report = stop_with(proc, signal.SIGTERM, 143, "SIGTERM", before, tmp_path)
    assert report["status"] == "interrupted" and len(report["steps"]) == 8  # the measured window is whole
    assert report["artifacts"]["trace"] == "trace.json.gz"
    dl001 = next(f for f in report["findings"] if f["code"] == "DL001")
    assert dl001["experiment"]["verdict"] == "not-measured", dl001["experiment"]
    assert not any((run / name).exists() for name in ("steps.jsonl", "arms.jsonl", "plan.json", "stop"))
    assert_report_is_the_run_dir(run, report, others=())
    assert lines(marker / "atexit.txt", "atexit ") == 1  # one child: the profiled run measured the arms


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""

@pytest.mark.slow
def test_a_signal_after_the_measurements_still_writes_the_report(tmp_path):
    """SIGTERM while the run is analysed (or the experiments are about to start): nothing is half-written."""
    run, marker = tmp_path / "run", tmp_path / "marker"
    proc = start(tmp_path, "--steps", "6", "--warmup", "1", "--profile-steps", "2", "--fresh-runs", "--out", "run", "--",
                 "--marker", str(marker), "--data-ms", "60", "--step-ms", "80")
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    wait_for(lambda: any("analysing" in line for line in seen), proc, "the analysis")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    reader.join(timeout=10)
    err = proc.stderr.read()
    assert proc.returncode == 143, err
    assert_one_line_no_traceback("".join(seen), err, "advise: interrupted (SIGTERM)")
    report = json.loads((run / "report.json").read_text())
    assert report["status"] == "interrupted" and len(report["steps"]) == 6  # the measurements are whole
    assert report["error"].startswith("interrupted (SIGTERM) after the measurements")
    runs = (report.get("experiments") or {}).get("runs") or []  # none, or the first one, stopped as it started
    assert len(runs) <= 1 and all(r["status"] == "interrupted" for r in runs)
    assert_report_is_the_run_dir(run, report, others=())
    assert not alive_with(str(tmp_path))


@pytest.mark.slow
def test_three_fast_ctrl_cs_leave_no_process_behind(tmp_path):
    """The third signal gives up on the report, not on the script's tree: the helper in a session of
    its own that ignores SIGTERM is killed too (it used to outlive advise)."""
    run, marker = tmp_path / "run", tmp_path / "marker"
    proc = start(tmp_path, "--steps", "400", "--warmup", "1", "--no-experiments", "--out", "run", "--",
                 "--marker", str(marker), "--step-ms", "30", "--stubborn-helper")
    wait_for(lambda: lines(run / "steps.jsonl", '"measure"') >= 3, proc, "three measured steps")
    wait_for(lambda: helpers_in(run), proc, "the helper")
    before = tree_of(proc.pid) + helpers_in(run)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.02)
    proc.send_signal(signal.SIGINT)  # the script is killed; advise now ends the helper, which ignores SIGTERM
    time.sleep(1.0)
    if proc.poll() is None:  # the third lands while advise waits on the helper: it used to leave it running
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("advise: interrupted (Ctrl-C)"), err
    assert not still_running(before) and not alive_with(str(tmp_path))


# A rule plugin that hangs at import (its module), or takes 3 s in its check (a rule), after leaving a mark.
HANGING_PLUGIN = """
import os, time
from pathlib import Path
from advisor.rules.registry import rule

if os.environ.get("HANG_AT") == "import":
    Path(os.environ["MARK"]).write_text("importing")
    time.sleep(60)


@rule(code="HNG001", name="hangs-in-check")
def check(profile):
    \"\"\"## What it does
    Hangs.

    ## Why is this bad?
    A test.

    ## Example
    ```python
    pass
    ```

    Use instead:
    ```python
    pass
    ```

    ## Fix safety
    Display-only.
    \"\"\"
    Path(os.environ["MARK"]).write_text("checking")
    time.sleep(3)  # the rules are not cut short: the signal is seen when they end
    return []
"""


def hanging_plugin(tmp_path: Path, at: str) -> dict:
    """The environment of an advise that loads HANGING_PLUGIN (hanging `at` import or check)."""
    from test_rules import _fake_distribution

    site = tmp_path / "site"
    site.mkdir()
    _fake_distribution(site, "advise-hangs", "advise_hangs", HANGING_PLUGIN, "hangs = advise_hangs")
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, MARK=str(tmp_path / "mark"), HANG_AT=at)


def interrupted_at_the_mark(cmd: list[str], tmp_path: Path, env: dict | None, mark: Path | None) -> subprocess.CompletedProcess:
    """Run `cmd`, Ctrl-C it once `mark` exists (or after 1.5 s of a blocked command), return how it ended."""
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if mark is not None:
        wait_for(mark.exists, proc, "the plugin's mark")
    else:
        time.sleep(1.5)
        assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


COMMANDS = ["profile", "analyze", "report", "rules", "compare"]


@pytest.mark.parametrize("command", COMMANDS)
def test_ctrl_c_in_any_command_is_130_not_aborted(tmp_path, command):
    """Ctrl-C while a command starts (a rule plugin still importing; `compare` reading a FIFO):
    exit 130 and one line, never click's "Aborted!" and exit 1; for `profile` the script never runs
    (a plugin that hung at import used to be skipped, and the run went on)."""
    from test_faults_input import _absurd_trace

    trace = _absurd_trace(tmp_path)
    analysed = subprocess.run(advise_cmd("analyze", str(trace), "--out", "done"), cwd=tmp_path, capture_output=True)
    assert analysed.returncode == 0
    script = tmp_path / "train.py"
    script.write_text("from pathlib import Path\nPath(__file__).with_suffix('.ran').write_text('ran')\n")
    env, mark = hanging_plugin(tmp_path, "import"), tmp_path / "mark"
    if command == "compare":
        os.mkfifo(tmp_path / "fifo.json")
        env, mark = None, None
    args = {"profile": ["profile", *FAST_ARGS, "--out", "run", str(script)], "analyze": ["analyze", str(trace)],
            "report": ["report", "done"], "rules": ["rules"], "compare": ["compare", "fifo.json", "done/report.json"]}
    r = interrupted_at_the_mark(advise_cmd(*args[command]), tmp_path, env, mark)
    assert r.returncode == 130, (r.returncode, r.stderr[-2000:])
    assert r.stderr.strip().splitlines() == ["advise: interrupted (Ctrl-C)"], r.stderr
    assert not script.with_suffix(".ran").exists()


FAST_ARGS = ["--steps", "4", "--warmup", "1", "--profile-steps", "2", "--no-experiments"]


@pytest.mark.slow
def test_ctrl_c_while_the_run_is_analysed_reports_interrupted(tmp_path):
    """Ctrl-C while the rules run on the finished measurements: report.json says `interrupted` and
    advise exits 130 (it used to exit by the raw signal, -2, with report.json saying `ok`)."""
    env = hanging_plugin(tmp_path, "check")
    cmd = advise_cmd("profile", *FAST_ARGS, "--out", "run", str(WORKLOADS / "train_basic.py"))
    r = interrupted_at_the_mark(cmd, tmp_path, env, tmp_path / "mark")
    assert r.returncode == 130, (r.returncode, r.stderr[-2000:])
    assert_one_line_no_traceback(r.stdout, r.stderr, "advise: interrupted (Ctrl-C)")
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["status"] == "interrupted" and report["error"].startswith("interrupted (Ctrl-C) after the measurements")
    assert_report_is_the_run_dir(tmp_path / "run", report, others=())


@pytest.mark.slow
def test_ctrl_c_at_any_moment_after_the_measurements_agrees_with_the_report(tmp_path):
    """Ctrl-C a moment after "analysing" (rules, page, report.json, the exit): the exit code and the
    report agree, 130 with `interrupted` or 0 with `ok`. It used to be -2 (the raw signal, during the
    interpreter's teardown, which restores the default handlers) with report.json saying `ok`."""
    for delay in (0.0, 0.05, 0.1, 0.2, 0.3, 0.5):
        run = tmp_path / f"run{delay}"
        proc = subprocess.Popen(advise_cmd("profile", *FAST_ARGS, "--out", str(run), str(WORKLOADS / "train_basic.py")),
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen: list[str] = []
        reader = threading.Thread(target=seen.extend, args=(iter(proc.stdout.readline, ""),), daemon=True)
        reader.start()
        wait_for(lambda seen=seen: any("analysing" in line for line in seen), proc, "the analysis")
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        reader.join(timeout=10)
        err = proc.stderr.read()
        assert proc.returncode in (0, 130) and "Traceback" not in err, (delay, proc.returncode, err)
        status = json.loads((run / "report.json").read_text())["status"]
        assert status == ("interrupted" if proc.returncode == 130 else "ok"), (delay, proc.returncode, status)


@pytest.mark.slow
def test_a_closed_stdout_costs_nothing(tmp_path):
    """`advise profile ... | head -1`: the reader goes after one line; the run goes on, its report is
    written and advise exits with the run's code (it used to exit 1 with steps.jsonl left behind)."""
    run = tmp_path / "run"
    proc = subprocess.Popen(advise_cmd("profile", *FAST_ARGS, "--out", "run", str(WORKLOADS / "train_basic.py")),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err
    report = json.loads((run / "report.json").read_text())
    assert report["status"] == "ok"
    assert_report_is_the_run_dir(run, report, others=())


# --- the lock and the clearing, in process ----------------------------------------------------

def test_the_lock_is_per_run_dir_and_rank_and_names_its_holder(tmp_path):
    with layout.RunDirLock(tmp_path).acquire():
        assert (tmp_path / LOCK).read_text().strip() == str(os.getpid())
        with pytest.raises(layout.RunDirBusy, match=rf"in use by another advise run \(pid {os.getpid()}\)"):
            layout.RunDirLock(tmp_path).acquire()
        with layout.RunDirLock(tmp_path, ".rank1").acquire():  # torchrun: each rank holds its own
            assert (tmp_path / layout.lock_name(".rank1")).exists()
    assert not (tmp_path / LOCK).exists()
    with layout.RunDirLock(tmp_path).acquire():  # released: free again
        pass


def test_clearing_takes_only_this_ranks_files(tmp_path):
    mine = [*layout.own_files(".rank1"), "experiments/02-x/steps.rank1.csv"]
    theirs = [*layout.own_files(".rank0"), "experiments/02-x/steps.rank0.csv", "experiments/02-x/notes.md", "report.json"]
    for name in mine + theirs:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    (tmp_path / ".inductor-cache.rank1" / "pch").mkdir(parents=True)  # a killed run's compile cache
    (tmp_path / ".inductor-cache.rank0").mkdir()
    removed = layout.clear_previous(tmp_path, ".rank1")
    assert {p.relative_to(tmp_path).as_posix() for p in removed} == set(mine)
    assert files_in(tmp_path) == set(theirs)
    assert not (tmp_path / ".inductor-cache.rank1").exists() and (tmp_path / ".inductor-cache.rank0").is_dir()


@pytest.mark.parametrize("closed", [1, 2], ids=["stdout", "stderr"])
def test_a_closed_output_stream_is_not_an_error(tmp_path, closed):
    """`advise profile ... >&-` in a script or a cron job: the run finished and its report says ok,
    so the exit code says ok too (it ended with a traceback through cli._leave, exit 1)."""
    cmd = advise_cmd("profile", "--no-experiments", "--steps", "4", "--warmup", "1", "--profile-steps", "0",
                     "--out", "run", str(WORKLOADS / "train_basic.py"))
    keep = subprocess.PIPE if closed == 1 else subprocess.DEVNULL
    proc = subprocess.run(cmd, cwd=tmp_path, stdout=keep if closed == 2 else None, stderr=keep if closed == 1 else None,
                          preexec_fn=lambda: os.close(closed), timeout=180)
    assert proc.returncode == 0
    assert json.loads((tmp_path / "run" / "report.json").read_text())["status"] == "ok"
    if closed == 1:
        assert b"Traceback" not in proc.stderr, proc.stderr[-2000:]
