"""Shared fixtures: run the real `advise` CLI in a subprocess, locate workloads and real traces.

Real Kineto traces come from two places, looked up in this order by `trace_path()`:

1. tests/data/traces: a small licensed subset (BSD-3-Clause / MIT, see its README.md),
   shipped with the repo, so a fresh clone runs the GPU-rule tests on real traces;
2. the shared traces folder: $ADVISE_SHARED_TRACES, else ../shared/traces next to the repo.
   It also holds traces that may not be redistributed (no licence), so it is not in the repo.

A test whose trace is only in the shared folder skips, saying loudly that the folder is
missing; with $CI set (`.ci/run` sets it) a missing shared folder fails the whole session.
"""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import signal
import tempfile
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

WORKLOADS = Path(__file__).parent / "workloads"
REPO = Path(__file__).resolve().parents[1]

# pytest-xdist's workers run with COLUMNS=80 (and LINES=24) set, and the readline pytest imports
# early exports them into the process's own environment, under os.environ's snapshot, where only
# the children see them: advise reads that as a user asking for its output wrapped at 80 columns
# (`COLUMNS=80 advise ...`), so every advise these tests start would wrap, and the in-process
# summaries too. The tests that want a width set it themselves.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
    os.unsetenv(_name)
SHIPPED_TRACES = Path(__file__).parent / "data" / "traces"
SHARED_TRACES = Path(os.environ.get("ADVISE_SHARED_TRACES") or REPO.parent / "shared" / "traces")
# Files in a traces folder that are not traces.
_NOT_TRACES = {"README.md", "SHA256SUMS", "LICENSE", "result_check_file.txt"}
MISSING_SHARED = "SHARED TRACES MISSING"  # starts every skip reason for a trace that is only in the shared folder

# Fast probe settings for tests: the numbers only need to exist, not to be precise.
FAST = ["--steps", "6", "--warmup", "2", "--profile-steps", "2", "--no-experiments"]
# EXP001 screens the compute's fixes (torch.compile among them) once the loader's share of a step
# falls under its bar, as it does while the other xdist worker loads the CPU: a test that needs only
# the loader fix leaves it out, so its cost does not depend on its neighbour.
NO_SCREENS = ["--ignore", "EXP001"]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    out: Path

    @property
    def report(self) -> dict:
        return json.loads((self.out / "report.json").read_text())


def advise_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "advisor", *args]


def alive_with(marker: str, cwd: Path | None = None) -> list[str]:
    """Live processes (zombies left out) whose command line names `marker`, and, given `cwd`, that run
    in it: a test's own folder, so that the other xdist worker's runs of the same script are not
    taken for this test's leftovers."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status", "cwd"]):
        try:
            if (p.info["status"] != psutil.STATUS_ZOMBIE and any(marker in part for part in p.info["cmdline"] or [])
                    and (cwd is None or p.info["cwd"] == str(cwd))):
                found.append(f"{p.info['pid']}: {' '.join(p.info['cmdline'])}")
        except psutil.Error:
            pass
    return found


def _burn(until: float) -> None:
    while time.time() < until:
        pass


def profile_beside_busy_loops(tmp_path: Path, budget_s: int, loops: int, seconds: float) -> tuple[subprocess.CompletedProcess, Path]:
    """`advise profile --time-budget budget_s` of train_basic.py's long run in `tmp_path`, with `loops`
    busy loops started once its profiled window is done and running `seconds`, reaped after (a zombie
    left under the test's process reads as a leftover of its own). The window's steps.csv says it is
    done: the runner writes it when the window ends, and it stays (the plan the child reads it
    deletes within a few ms, and a poll of it missed both rounds' plans in CI)."""
    out = tmp_path / "run"
    proc = subprocess.Popen(advise_cmd("profile", "--time-budget", str(budget_s), "--out", "run",
                                       str(WORKLOADS / "train_basic.py"), "--epochs", "1000"),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / "steps.csv").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    assert (out / "steps.csv").exists(), "the profiled window never ended"
    burners = [multiprocessing.Process(target=_burn, args=(time.time() + seconds,)) for _ in range(loops)]
    for b in burners:
        b.start()
    try:
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        for b in burners:
            b.terminate()
        for b in burners:
            b.join()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), out


@pytest.fixture
def advise(tmp_path):
    """Run `advise ARGS...` for real in `tmp_path` (or `cwd`); the run dir is tmp_path/run."""

    def run(*args: str, cwd: Path | None = None, timeout: float = 180) -> Result:
        proc = subprocess.run(advise_cmd(*args), cwd=cwd or tmp_path, capture_output=True, text=True, timeout=timeout)
        return Result(proc.returncode, proc.stdout, proc.stderr, (cwd or tmp_path) / "run")

    return run


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _shared_missing_text() -> str:
    return (f"the shared traces folder {SHARED_TRACES} does not exist; check out shared/traces next to the "
            f"repo or set ADVISE_SHARED_TRACES=/path/to/shared/traces")


def find_trace(relative: str) -> Path | None:
    """The trace `relative` (e.g. "kineto/.../x.json.gz"): shipped copy first, then the shared folder."""
    for root in (SHIPPED_TRACES, SHARED_TRACES):
        path = root / relative
        if path.is_file():
            return path
    return None


def trace_path(relative: str) -> Path:
    """`find_trace`, or skip loudly when only the (missing) shared folder could have it."""
    path = find_trace(relative)
    if path is not None:
        return path
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"{MISSING_SHARED}: {relative} is not shipped in tests/data/traces and {_shared_missing_text()}")
    pytest.fail(f"trace {relative} is in neither {SHIPPED_TRACES} nor {SHARED_TRACES}")


def known_traces() -> list[str]:
    """Relative paths of every trace in the shipped and shared folders (each once)."""
    found = set()
    for root in (SHIPPED_TRACES, SHARED_TRACES):
        if root.is_dir():
            found.update(p.relative_to(root).as_posix() for p in root.glob("**/*.json*")
                         if p.is_file() and p.name not in _NOT_TRACES)
    return sorted(found)


# --------------------------------------------------------------------------- session hooks


def pytest_configure(config):
    # A suite started as a background job of a non-interactive shell inherits SIGINT ignored, and so
    # would every advise the tests start (advise keeps a signal ignored since start, as python does):
    # the Ctrl-C tests would hang to their timeouts. The tests' children get the terminal's default.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Every test checks the reports it leaves against the published schema (_reports_match_the_schema):
    # without jsonschema each one would error at its teardown, so the session does not start.
    try:
        import jsonschema  # noqa: F401
    except ImportError as exc:
        raise pytest.UsageError(
            f"jsonschema cannot be imported ({exc}): every test checks the reports it writes against advise's "
            "published schema with it. Install the test extra (pip install -e '.[test]') or jsonschema>=4.18 with "
            "its dependencies; on a GPU machine, the wheels benchmarks/truth/bundle.sh gathers "
            "(benchmarks/truth/README.md, 'On a GPU').") from None
    # Under CI a missing shared folder is an error, not dozens of skips (checked once, not in xdist workers).
    if in_ci() and not SHARED_TRACES.is_dir() and not hasattr(config, "workerinput"):
        raise pytest.UsageError(
            f"CI is set but {_shared_missing_text()}. The tests on traces that are not shipped in "
            f"tests/data/traces would all skip (unset CI to run without them).")


def pytest_report_header(config):
    shipped = len(list(SHIPPED_TRACES.glob("**/*.json*")))
    shared = "found" if SHARED_TRACES.is_dir() else f"MISSING: tests on unshipped traces skip ({MISSING_SHARED})"
    return [f"traces: {shipped} shipped in {SHIPPED_TRACES}; shared folder {SHARED_TRACES}: {shared}"]


def pytest_terminal_summary(terminalreporter):
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if MISSING_SHARED in str(getattr(r, "longrepr", ""))]
    if skipped:
        terminalreporter.section(MISSING_SHARED, sep="!", red=True, bold=True)
        terminalreporter.line(f"{len(skipped)} tests skipped: {_shared_missing_text()}.", red=True, bold=True)


RERUNS = 1  # a real run judged on its measured speed, on a shared runner: it fails when two runs in a row fail


def pytest_collection_modifyitems(config, items):
    """The `timing` tests first, in their order (xdist deals them out in collection order): run
    back to back, each waits for the other timing test, not for whatever test the other worker
    happens to be in the middle of (see pytest_runtest_protocol).

    The tests that run real scripts and judge what they measured (`slow`, `timing`) get one rerun
    (pytest-rerunfailures): a CI runner's neighbour can slow one run's windows unevenly and turn
    a 3x verified fix into "not confirmed" (the machine's load changed), which is the product
    working. A defect fails both runs; `-r R` lists what was rerun."""
    items.sort(key=lambda item: item.get_closest_marker("timing") is None)
    for item in items:
        if (item.get_closest_marker("slow") or item.get_closest_marker("timing")) and not item.get_closest_marker("flaky"):
            item.add_marker(pytest.mark.flaky(reruns=RERUNS))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Tests marked `timing` judge what a run measured: a neighbour test hogging the CPU in the other
    xdist worker could make a no-op look 4x faster, and advise, seeing it, waits for it, sets windows
    aside and measures them again (such a test took 3-5x its time alone beside the other worker,
    2026-12-01), or leaves a fix unmeasured. They take an exclusive lock, every other test
    a shared one, so a timing test runs while no other test does (one lock per test run). The lock
    wraps the whole protocol, so a module- or session-scoped fixture that profiles a script (set up
    with the first test that uses it) holds it too."""
    run_id = getattr(item.config, "workerinput", {}).get("testrunuid", f"solo-{os.getpid()}")
    fd = os.open(Path(tempfile.gettempdir()) / f"advise-tests-{run_id}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    exclusive = item.get_closest_marker("timing") is not None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


# --------------------------------------------------------------------------- the published schema
# Every report.json (report.rankN.json) and compare.json a test leaves behind, written by a real
# `advise` or by the library, is validated against the schema generated from advisor/schema.py,
# closed (strict): a field the code writes and the schema does not describe, a type or an enum
# value it does not allow, fails the test that wrote it. Files under tmp_path are checked after
# each test; the rest of the session's temp folder (module- and session-scoped fixtures) at the end.

_CHECKED: set[Path] = set()


def _written_by_advise(path: Path) -> tuple[str, dict] | None:
    """("report" | "compare", the document) for a file advise wrote; None for anything else (a test's
    own hand-made or deliberately broken file)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    if path.name.startswith("report") and (doc.get("tool") or {}).get("name") == "advise":
        return "report", doc
    if path.name == "compare.json" and doc.get("verdict") in ("pass", "regression") and "metrics" in doc:
        return "compare", doc
    return None


def schema_problems(root: Path) -> list[str]:
    """Each advise report under `root` that breaks the strict schema: the file and its first errors."""
    from advisor import schema

    problems = []
    for path in sorted([*root.rglob("report*.json"), *root.rglob("compare.json")]):
        if path in _CHECKED or not path.is_file():
            continue
        _CHECKED.add(path)
        found = _written_by_advise(path)
        if found is None:
            continue
        kind, doc = found
        errors = sorted(schema.checker(kind, strict=True).iter_errors(doc), key=lambda e: list(e.absolute_path))
        if errors:
            problems.append(f"{path}: " + "; ".join(
                f"at {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}" for e in errors[:5]))
    return problems


def _fail_on(problems: list[str]) -> None:
    if problems:
        pytest.fail("report outside the published schema (describe the field in advisor/schema.py, then "
                    "regenerate advisor/schemas/ with `advise schema`):\n" + "\n".join(problems), pytrace=False)


@pytest.fixture(autouse=True)
def _reports_match_the_schema(request):
    folder = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if folder is not None:
        _fail_on(schema_problems(folder))


@pytest.fixture(scope="session", autouse=True)
def _one_inductor_cache(tmp_path_factory):
    """The scripts the tests run share one Inductor cache, as a user's own TORCHINDUCTOR_CACHE_DIR
    is shared (advise keeps it): a compile arm otherwise compiles from cold in its run dir, 15 to
    20 s a test on 2 cores. The test of that cold path takes the variable out
    (test_inprocess.py's screened fixes). No precompiled header: Inductor would write it (150 MB)
    to $TMPDIR/torchinductor_$USER, outside the session's folder."""
    base = tmp_path_factory.getbasetemp()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str((base.parent if base.name.startswith("popen-gw") else base) / "inductor")
    os.environ["TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"] = "0"
    yield


@pytest.fixture(scope="session", autouse=True)
def _session_reports_match_the_schema(tmp_path_factory):
    yield
    _fail_on(schema_problems(tmp_path_factory.getbasetemp()))
