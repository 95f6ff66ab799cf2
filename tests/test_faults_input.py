"""Bad input and bad places, through the real `advise` CLI in real subprocesses: a fault matrix.

Every case asserts what a user (or a CI log) sees: the exit code; exactly one line on stderr
that starts `advise: error:` (progress lines may come before it when the script already ran),
or the documented warning; no `Traceback` anywhere; and nothing half-written left in the run
dir (no `.tmp-*`, `.probe-config*`, `steps*.jsonl`; report.json either absent or listing only
files that exist).

The full-disk cases use the real thing where they can: a 1 MiB tmpfs mounted for the test
(needs root, as in this project's sandbox and CI containers; skipped loudly otherwise). One
simulation works everywhere, without root: RLIMIT_FSIZE (every write past the limit fails with
EFBIG, a disk that takes no more bytes). (A symlink to /dev/full no longer simulates one: advise
replaces a link in its run dir instead of writing through it; see test_faults_security.py.)
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import WORKLOADS, advise_cmd, trace_path
from test_rules import _fake_distribution

FAST = ["--steps", "6", "--warmup", "2", "--profile-steps", "2", "--no-experiments"]
TINY = ["--steps", "2", "--warmup", "0", "--profile-steps", "0", "--no-experiments", "--timeout", "60"]
SCRATCH = (".tmp-*", ".probe-config*", "steps*.jsonl")
# The script that writes where it must not: it proves a run never started.
MARKER_SCRIPT = """\
import json, sys
from pathlib import Path

import advisor

Path(__file__).with_suffix(".argv.json").write_text(json.dumps(sys.argv[1:]))
for _ in range(50):
    advisor.step()
"""


def advise(*args: str, cwd: Path, env: dict | None = None, python_flags: tuple[str, ...] = (),
           preexec_fn=None, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = advise_cmd(*args)
    cmd[1:1] = python_flags  # python [flags] -m advisor ...
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=preexec_fn)


def one_error_line(r: subprocess.CompletedProcess, code: int = 2, *, alone: bool = True) -> str:
    """The one `advise: error:` line; with `alone`, the only line on stderr (nothing ran before it)."""
    assert r.returncode == code, (r.returncode, r.stdout[-1500:], r.stderr[-1500:])
    assert "Traceback" not in r.stdout + r.stderr, r.stderr[-3000:]
    lines = r.stderr.rstrip("\n").splitlines()
    errors = [line for line in lines if line.startswith("advise: error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], r.stderr
    if alone:
        assert lines == errors, r.stderr
    return errors[0]


def assert_nothing_half_written(run_dir: Path) -> None:
    if not run_dir.exists():
        return
    leftovers = sorted(str(p.relative_to(run_dir)) for pattern in SCRATCH for p in run_dir.rglob(pattern))
    assert leftovers == [], leftovers
    report = run_dir / "report.json"
    if report.exists():
        artifacts = json.loads(report.read_text())["artifacts"]
        assert all((run_dir / name).exists() for name in artifacts.values()), artifacts


@pytest.fixture
def marker_script(tmp_path) -> Path:
    script = tmp_path / "train.py"
    script.write_text(MARKER_SCRIPT)
    return script


def ran(script: Path) -> list[str] | None:
    """The arguments the script saw, or None when it never ran."""
    argv = script.with_suffix(".argv.json")
    return json.loads(argv.read_text()) if argv.exists() else None


# --------------------------------------------------------------------------- places to write


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size, ro): a fresh tmpfs of that size; skipped, loudly, where tmpfs cannot be mounted."""
    mounted: list[Path] = []

    def mount(size: str = "1m", ro: bool = False) -> Path:
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("NO TMPFS: mounting a small tmpfs needs root (the /dev/full and RLIMIT_FSIZE cases "
                        "still cover full disks)")
        point = tmp_path / f"mnt{len(mounted)}"
        point.mkdir()
        options = f"size={size},mode=0777" + (",ro" if ro else "")
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"NO TMPFS: `mount -t tmpfs` failed here ({proc.stderr.strip() or proc.returncode}); the "
                        "/dev/full and RLIMIT_FSIZE cases still cover full disks")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def fill(folder: Path, leave: int) -> None:
    """Fill `folder`'s filesystem until about `leave` bytes are free."""
    st = os.statvfs(folder)
    room = st.f_bavail * st.f_frsize - leave
    with open(folder / "filler", "wb") as f:
        try:
            while room > 0:
                f.write(bytes(min(room, 65536)))
                room -= 65536
            f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def test_full_disk_is_refused_before_the_script_runs(tmpfs, tmp_path, marker_script):
    """A really full filesystem (tmpfs, no byte left): exit 2 at once, the script never starts."""
    disk = tmpfs()
    fill(disk, 0)
    run = disk / "run"
    r = advise("profile", *TINY, "--out", str(run), str(marker_script), cwd=tmp_path)
    assert one_error_line(r) == f"advise: error: no space left on device writing {run}"
    assert ran(marker_script) is None
    assert_nothing_half_written(run)


def test_disk_that_fills_up_during_the_run_is_exit_2_and_leaves_no_temp_files(tmpfs, tmp_path):
    """A real tmpfs with ~40 KB free: the up-front check passes, then the trace (or report.html,
    or report.json, whichever comes first) finds no room. Exit 2, one line naming the run dir's
    file, no temp files; report.json never claims files that are not there."""
    disk = tmpfs()
    run = disk / "run"
    run.mkdir()
    fill(disk, 40_000)
    r = advise("profile", *FAST, "--out", str(run), str(WORKLOADS / "train_basic.py"), cwd=tmp_path)
    line = one_error_line(r, alone=False)
    assert line.startswith(f"advise: error: no space left on device writing {run}"), line
    assert_nothing_half_written(run)


def test_read_only_run_dir_is_refused_before_the_script_runs(tmpfs, tmp_path, marker_script):
    """A read-only filesystem (tmpfs mounted ro; as root, chmod would not stop a write)."""
    disk = tmpfs(ro=True)
    for out in (disk, disk / "run"):  # the run dir itself, or one to be created there
        r = advise("profile", *TINY, "--out", str(out), str(marker_script), cwd=tmp_path)
        assert one_error_line(r) == f"advise: error: read-only file system writing {out}"
    assert ran(marker_script) is None


def test_unwritable_run_dir_is_refused_before_the_script_runs(tmp_path, marker_script):
    """Without root (or as root without CAP_DAC_OVERRIDE): a folder without write permission."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        (locked / "probe").write_text("")
    except PermissionError:
        pass
    else:
        pytest.skip("file modes do not stop this user (root); the tmpfs-ro case covers read-only run dirs")
    r = advise("profile", *TINY, "--out", str(locked), str(marker_script), cwd=tmp_path)
    assert one_error_line(r) == f"advise: error: permission denied writing {locked}"
    assert ran(marker_script) is None


def test_file_size_limit_during_the_run_is_exit_2(tmp_path):
    """Works everywhere, no root: RLIMIT_FSIZE of 20 KiB (SIGXFSZ ignored), so any write past
    20 KiB fails with EFBIG, a disk that takes no more bytes. Without a trace (--profile-steps 0)
    the first file over the limit is report.html (~33 KB), written after the run, before
    report.json: the run ends with exit 2, one line, no temp file, no report.json. The temp dir is
    fresh, so the template cache's own write fails first (its file is over the limit too): that
    failure must cost nothing (CI once caught it swallowing the run dir's error)."""
    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20 * 1024, 20 * 1024))

    run = tmp_path / "run"
    r = advise("profile", "--steps", "6", "--warmup", "2", "--profile-steps", "0", "--no-experiments",
               "--out", str(run), str(WORKLOADS / "train_basic.py"), cwd=tmp_path, preexec_fn=limit_file_size,
               env={**os.environ, "TMPDIR": str(tmp_path)})
    line = one_error_line(r, alone=False)
    assert line == f"advise: error: file too large writing {run / 'report.html'}", line
    assert not (run / "report.json").exists()
    assert_nothing_half_written(run)


def test_a_file_size_limit_that_cuts_the_trace_is_exit_2_and_keeps_no_half_trace(tmp_path):
    """`ulimit -f 40`: Kineto's C++ writer stops at 40 KiB without a word, and torch wrote the whole
    trace to $TMPDIR first and left it there. The export is checked: exit 2 naming the trace, no
    truncated trace.json.gz listed or left, nothing in $TMPDIR."""
    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (40 * 1024, 40 * 1024))

    run, tmp = tmp_path / "run", tmp_path / "tmp"
    tmp.mkdir()
    r = advise("profile", *FAST, "--out", str(run), str(WORKLOADS / "train_basic.py"), cwd=tmp_path,
               preexec_fn=limit_file_size, env={**os.environ, "TMPDIR": str(tmp)})
    assert one_error_line(r, alone=False) == f"advise: error: file too large writing {run / 'trace.json.gz'}"
    assert not (run / "trace.json.gz").exists() and not (run / "report.json").exists()
    assert_nothing_half_written(run)
    assert [p.name for p in tmp.iterdir() if p.suffix == ".json"] == []


def test_a_full_tmpdir_costs_the_trace_nothing(tmpfs, tmp_path):
    """A $TMPDIR with 64 KiB left (where torch wrote a .gz trace first: an empty trace.json.gz was
    listed and a 64 KiB `tmp*.json.tmp` left there): the trace is exported in the run dir, so it is
    whole, and no file of ours is left in $TMPDIR. (A $TMPDIR with no byte left is skipped by
    python's tempfile, which falls back to /tmp.)"""
    tmp = tmpfs()
    fill(tmp, 64 * 1024)
    run = tmp_path / "run"
    r = advise("profile", *FAST, "--out", str(run), str(WORKLOADS / "train_basic.py"), cwd=tmp_path,
               env={**os.environ, "TMPDIR": str(tmp)})
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((run / "report.json").read_text())
    assert report["artifacts"]["trace"] == "trace.json.gz"
    assert json.loads(gzip.decompress((run / "trace.json.gz").read_bytes()))["traceEvents"]
    assert [p.name for p in tmp.iterdir() if p.is_file() and p.name != "filler"] == []


def test_a_script_name_that_needs_quoting_keeps_its_trace(tmp_path):
    """Kineto writes a frame's file name unquoted: `it's "quoted".py` made every trace invalid JSON
    while the run said ok. The export is checked and its names re-quoted, on every torch CI tests:
    2.13 puts the bare quotes in each frame's name; 2.14 writes the name's `"` as `'` but the file
    name as it is in each frame's `CallFrom`, beside other fields on one line."""
    import torch

    script = tmp_path / 'it\'s "quoted".py'
    script.write_text((WORKLOADS / "train_basic.py").read_text())
    r = advise("profile", *FAST, "--out", "run", script.name, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["artifacts"]["trace"] == "trace.json.gz"
    assert not [w for w in report["warnings"] if "trace" in w], report["warnings"]
    events = json.loads(gzip.decompress((tmp_path / "run" / "trace.json.gz").read_bytes()))["traceEvents"]
    frames = [e for e in events if e.get("cat") == "python_function"]
    if any("CallFrom" in e.get("args", {}) for e in frames):  # torch 2.14's
        assert any(str(e.get("name", "")).startswith("it's 'quoted'.py(") for e in frames)
        assert any(str(e["args"].get("CallFrom", "")).startswith('it\'s "quoted".py:') for e in frames)
    else:
        assert tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 14), torch.__version__
        assert any(str(e.get("name", "")).startswith('it\'s "quoted".py(') for e in frames)


@pytest.mark.parametrize("written, kept", [
    # torch 2.13.0's python_function event: the frame's name on a line of its own
    (b'    "name": "it\'s "quoted".py(4): <module>",\n    "pid": 11604',
     {"name": 'it\'s "quoted".py(4): <module>', "pid": 11604}),
    # torch 2.14.1's args: the caller's file in CallFrom, the other fields on the same line
    (b'      "CallFrom": "it\'s "quoted".py:4", "Python parent id": 1, "Python id": 2, "Ev Idx": 111\n',
     {"CallFrom": 'it\'s "quoted".py:4', "Python parent id": 1, "Python id": 2, "Ev Idx": 111}),
], ids=["torch-2.13", "torch-2.14"])
def test_each_torchs_unquoted_field_is_requoted_and_nothing_else_changes(written, kept):
    """The lines as each torch wrote them for `it's "quoted".py` (tests/test_faults_input.py's script
    above, torch 2.13.0 and 2.14.1): re-quoted, they read as the fields that were meant."""
    from advisor.probe.trace_export import _requote

    with pytest.raises(ValueError):
        json.loads(b"{" + written + b"}")
    assert json.loads(b"{" + _requote(written) + b"}") == kept
    valid = json.dumps(kept, indent=2).encode()
    assert _requote(valid) == valid


def test_the_exports_check_keeps_every_trace_the_reader_takes_and_no_other(tmp_path):
    """The child keeps a trace only if it parses: what the reader's tolerant path takes (a NaN
    literal, invalid UTF-8 in a stack string) is kept as written; a cut-off trace is lost."""
    from advisor.probe.trace_export import TraceLost, _parsed
    from advisor.trace.read import read_file

    for i, kept in enumerate([b'{"traceEvents": [{"name": "aten::mm", "ph": "X", "ts": 1, "dur": NaN}]}',
                              b'{"traceEvents": [{"name": "fn \xff(1)", "ph": "X", "ts": 1, "dur": 2}]}']):
        assert _parsed(kept, tmp_path) == kept
        (tmp_path / f"t{i}.json").write_bytes(kept)
        read_file(str(tmp_path / f"t{i}.json"))  # raises TraceError if the reader refused it
    with pytest.raises(TraceLost, match="not valid JSON"):
        _parsed(b'{"traceEvents": [{"name": "aten::mm", "ph": "X", "ts"', tmp_path)


def test_a_script_that_clears_its_output_folder_given_as_out_is_exit_2(tmp_path):
    """The script empties its own output folder, which is also --out: the run's files went with it.
    That used to be "advise ok, 0 measured, no bottleneck found" and exit 0."""
    script = tmp_path / "train.py"
    script.write_text("import shutil, sys\nfrom pathlib import Path\n\nimport advisor\n\n"
                      "out = Path(sys.argv[1])\nfor i in range(60):\n    if i == 4:\n"
                      "        shutil.rmtree(out)\n        out.mkdir()\n    advisor.step()\n")
    r = advise("profile", *TINY, "--steps", "20", "--out", "out", str(script), "out", cwd=tmp_path)
    assert one_error_line(r, alone=False) == ("advise: error: the run dir out was removed or emptied while the "
                                              "script ran (does the script clear its own output folder?); give "
                                              "advise a --out of its own")
    assert not (tmp_path / "out" / "report.json").exists()


def test_the_cleanup_after_a_disk_error_removes_scratch_files_only(tmp_path):
    """What `advise` removes before its one-line exit: a failed writer's temp files, the probe's
    config and raw step lines, the compile arms' Inductor cache (a folder; a symlink under its name
    goes, not what it points at), in the run dir and its experiments; never the results."""
    from advisor.run_dir.layout import remove_scratch

    run = tmp_path / "run"
    (run / "experiments" / "dl001-1").mkdir(parents=True)
    scratch = [".tmp-trace.json.gz", ".tmp-report.json.a1b2c3", ".probe-config.json", ".probe-config.rank1.json",
               "steps.jsonl", "experiments/dl001-1/.tmp-samples.csv.d4e5f6", "experiments/dl001-1/steps.jsonl"]
    caches = [".inductor-cache", "experiments/dl001-1/.inductor-cache.rank1"]
    kept = ["trace.json.gz", "steps.csv", "samples.csv", "probe.json", "script.log", "experiments/dl001-1/probe.json"]
    for name in scratch + kept + [f"{c}/ab/kernel.so" for c in caches]:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("x")
    (elsewhere := tmp_path / "elsewhere").mkdir()
    (elsewhere / "theirs.so").write_text("x")
    (run / ".inductor-cache.rank2").symlink_to(elsewhere, target_is_directory=True)
    assert sorted(remove_scratch(run)) == sorted(str(run / name) for name in [*scratch, *caches, ".inductor-cache.rank2"])
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()) == sorted(kept)
    assert (elsewhere / "theirs.so").read_text() == "x"
    assert remove_scratch(tmp_path / "missing") == []


def test_out_under_a_regular_file(tmp_path, marker_script):
    (tmp_path / "afile").write_text("")
    r = advise("analyze", str(_absurd_trace(tmp_path)), "--out", "afile/sub", cwd=tmp_path)
    assert one_error_line(r) == "advise: error: cannot create the output dir afile/sub: Not a directory"
    r = advise("profile", *TINY, "--out", "afile/sub", str(marker_script), cwd=tmp_path)
    assert one_error_line(r) == "advise: error: cannot create the run dir afile/sub: Not a directory"
    assert ran(marker_script) is None


# --------------------------------------------------------------------------- configuration


def test_malformed_advise_table_is_an_error_naming_the_file(tmp_path, marker_script):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.advise]\nselect = ["DL"\nignore = ["MEM001"]\n')
    trace = _absurd_trace(tmp_path)
    line = one_error_line(advise("analyze", str(trace), cwd=tmp_path))
    assert line.startswith(f"advise: error: {pyproject}: [tool.advise]: not valid TOML (")
    line = one_error_line(advise("profile", *TINY, "--out", "run", str(marker_script), cwd=tmp_path))
    assert line.startswith(f"advise: error: {pyproject}: [tool.advise]: not valid TOML (")
    assert ran(marker_script) is None and not (tmp_path / "run").exists()
    # Values where a table belongs: tests/test_rules.py::test_bad_selection_or_config_is_one_line_and_exit_2


def test_someone_elses_broken_pyproject_is_ignored(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.ruff\nselect = [\n")  # broken, and no advise table
    r = advise("analyze", str(_absurd_trace(tmp_path)), "--json", cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert json.loads(r.stdout)["status"] == "ok"


def test_plugins_that_exit_or_interrupt_at_import_are_contained(tmp_path):
    """A plugin raising SystemExit or KeyboardInterrupt while it is imported is one warning each;
    advise keeps its own exit code and rules."""
    plugins = tmp_path / "site"
    plugins.mkdir()
    _fake_distribution(plugins, "advise-exits", "advise_exits", "raise SystemExit(3)\n", "exits = advise_exits")
    _fake_distribution(plugins, "advise-interrupts", "advise_interrupts", "raise KeyboardInterrupt\n",
                       "interrupts = advise_interrupts")
    env = dict(os.environ, PYTHONPATH=str(plugins))
    r = advise("rules", cwd=tmp_path, env=env)
    assert r.returncode == 0 and "DL001" in r.stdout and "Traceback" not in r.stderr
    assert sorted(r.stderr.splitlines()) == [
        "advise: warning: rule plugin 'exits' from package advise-exits 1.0 failed to load: SystemExit: 3",
        "advise: warning: rule plugin 'interrupts' from package advise-interrupts 1.0 failed to load: KeyboardInterrupt",
    ]
    analyzed = advise("analyze", str(_absurd_trace(tmp_path)), "--json", cwd=tmp_path, env=env)
    assert analyzed.returncode == 0, analyzed.stderr
    warnings = json.loads(analyzed.stdout)["warnings"]
    assert any("advise-exits 1.0 failed to load: SystemExit: 3" in w for w in warnings)


# --------------------------------------------------------------------------- absurd traces


def _absurd_trace(folder: Path) -> Path:
    """Five sane steps plus 1 endless (1e12 s), 1 infinite, 2 negative and 1 far-off event."""
    def x(cat, name, ts, dur):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}

    events = []
    for i in range(5):
        events += [x("user_annotation", f"ProfilerStep#{i}", i * 1000, 900),
                   x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", i * 1000, 100),
                   x("cpu_op", "aten::mm", i * 1000 + 200, 500)]
    events += [x("cpu_op", "aten::add", 2200, 1e18), x("cpu_op", "aten::mul", 2300, float("inf")),
               x("cpu_op", "aten::sub", 2400, -50), x("user_annotation", "ProfilerStep#9", 9000, -5),
               x("cpu_op", "aten::div", 1e18, 10)]
    path = folder / "absurd.json"
    path.write_text(json.dumps({"traceEvents": events}))  # inf is written as Infinity, as json.dumps does
    return path


NO_RUNTIME_WARNINGS = ("-W", "error::RuntimeWarning")


def test_absurd_trace_events_are_skipped_with_a_warning(tmp_path):
    """The 1e12-second, infinite, negative and far-off events are dropped, and the report says so;
    with `-W error::RuntimeWarning` no numpy warning escapes (it used to, from the infinite one)."""
    r = advise("analyze", str(_absurd_trace(tmp_path)), "--out", "out", cwd=tmp_path, python_flags=NO_RUNTIME_WARNINGS)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    said = ("skipped 5 trace events with negative or absurd times (1 with a null, NaN or infinite time, 2 with a "
            "negative duration, 1 lasting over a day, 1 starting over a day away from the rest)")
    assert said in " ".join(r.stdout.split())  # the terminal may wrap it
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["warnings"] == [said]
    assert len(report["steps"]) == 5 and report["throughput"]["step_time_median_s"] == pytest.approx(900e-6)
    assert_nothing_half_written(tmp_path / "out")


def test_a_real_trace_with_a_few_absurd_events_keeps_its_analysis(tmp_path):
    """A real GPU trace, a kernel made to last 1e12 s and an op made negative: same findings, a warning."""
    import gzip

    source = trace_path("hta/trace_filter/sampled_rank-0.json.gz")
    doc = json.loads(gzip.decompress(source.read_bytes()))
    kernels = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") in ("kernel", "Kernel")]
    ops = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") in ("cpu_op", "Operator")]
    kernels[len(kernels) // 2]["dur"] = 1e18
    ops[len(ops) // 2]["dur"] = -1000
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc))
    plain = json.loads(advise("analyze", str(source), "--json", cwd=tmp_path).stdout)
    r = advise("analyze", str(broken), "--json", cwd=tmp_path, python_flags=NO_RUNTIME_WARNINGS)
    assert r.returncode == 0 and "Warning" not in r.stderr, r.stderr
    report = json.loads(r.stdout)
    assert report["warnings"][0] == ("skipped 2 trace events with negative or absurd times (1 with a negative "
                                     "duration, 1 lasting over a day)")
    assert {f["code"] for f in report["findings"]} == {f["code"] for f in plain["findings"]}
    assert report["throughput"]["step_time_median_s"] == pytest.approx(plain["throughput"]["step_time_median_s"])


def test_trace_with_nothing_sensible_left_is_one_line(tmp_path):
    path = tmp_path / "nonsense.json"
    steps = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": i, "dur": -1}
             for i in range(3)]
    endless = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 1e18}
    path.write_text(json.dumps({"traceEvents": [*steps, endless]}))
    r = advise("analyze", str(path), "--out", "out", cwd=tmp_path, python_flags=NO_RUNTIME_WARNINGS)
    assert one_error_line(r) == (f"advise: error: {path}: no usable events: all 4 timed events have negative or "
                                 "absurd times (3 with a negative duration, 1 lasting over a day)")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- arguments


def test_everything_after_the_script_is_the_scripts(tmp_path, marker_script):
    """Words that look like advise's options reach the script, as `python train.py ...` passes them;
    so does a `--` later on when the words before it are not all advise's options (--lr)."""
    theirs = ["--steps", "100", "--out", "elsewhere", "--config", "cfg.yaml", "--timeout", "5", "--json",
              "--lr", "0.1", "--", "--epochs", "1"]
    r = advise("profile", *TINY, "--out", "run", str(marker_script), *theirs, cwd=tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert ran(marker_script) == theirs
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["argv"] == theirs and len(report["steps"]) == 2  # advise's --steps 2, not the script's 100
    assert not (tmp_path / "elsewhere").exists()


def test_a_double_dash_right_after_the_script_is_dropped(tmp_path, marker_script):
    r = advise("profile", *TINY, "--out", "run", str(marker_script), "--", "--epochs", "1", "--", "x", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert ran(marker_script) == ["--epochs", "1", "--", "x"]


def test_the_old_form_with_advise_options_after_the_script_says_how_to_write_it(tmp_path, marker_script):
    r = advise("profile", str(marker_script), "--steps", "5", "--out=run", "--no-experiments", "--", "--epochs", "1",
               cwd=tmp_path)
    assert one_error_line(r) == (
        "advise: error: advise's options go before the script; everything after it is the script's: "
        f"advise profile --steps 5 --out=run --no-experiments {marker_script} --epochs 1")
    assert ran(marker_script) is None and not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- already good: kept so


@pytest.mark.parametrize("args, message", [
    (["profile", "missing.py"], "advise: error: Invalid value for 'SCRIPT': File 'missing.py' does not exist. "
                                "(see `advise profile --help`)"),
    (["profile", "."], "advise: error: Invalid value for 'SCRIPT': File '.' is a directory. (see `advise profile --help`)"),
    (["profile", "--bogus", "{script}"], "advise: error: No such option '--bogus'"),
    (["profile", "--select", "XX9", "{script}"], "advise: error: --select: unknown rule, code or prefix 'XX9' "
                                                 "(see `advise rules`)"),
    (["compare", "missing.json", "{trace}"], "advise: error: baseline: missing.json: no such run dir or report.json"),
    (["analyze", "{text}"], "advise: error: {text}: not valid JSON"),
    (["profile", "--timeout", "nan", "{script}"], "advise: error: Invalid value for '--timeout': 'nan' is not a number."),
    (["profile", "--time-budget", "nan", "{script}"],
     "advise: error: Invalid value for '--time-budget': 'nan' is not a number."),
    (["profile", "--out", "", "{script}"], "advise: error: Invalid value for '--out': an empty path is not a run dir"),
    (["analyze", "--out", " ", "{trace}"], "advise: error: Invalid value for '--out': an empty path is not a run dir"),
    (["analyze", "{junk_events}"], "advise: error: {junk_events}: no usable events: none of its 3 events is a timed "
                                   "trace event"),
    (["analyze", "{no_events}"], "advise: error: {no_events}: no usable events: it has none"),
])
def test_bad_input_is_one_line(tmp_path, marker_script, args, message):
    text = tmp_path / "notes.txt"
    text.write_text("not json at all\n")
    junk, empty = tmp_path / "junk.json", tmp_path / "empty.json"
    junk.write_text('{"traceEvents": [1, "x", null]}')
    empty.write_text('{"traceEvents": []}')
    mine = tmp_path / "steps.csv"  # the user's own file where an empty --out would have written
    mine.write_text("mine\n")
    fmt = {"script": marker_script, "trace": _absurd_trace(tmp_path), "text": text, "junk_events": junk,
           "no_events": empty}
    r = advise(*[a.format(**fmt) for a in args], cwd=tmp_path)
    assert one_error_line(r).startswith(message.format(**fmt))
    assert ran(marker_script) is None
    assert mine.read_text() == "mine\n" and not (tmp_path / "report.json").exists()
