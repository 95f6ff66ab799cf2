"""Work done ahead in a forked process (advisor/trace/forked.py): the same answers as in-process, failures
handed back, nothing left running. Each case runs in a fresh single-threaded interpreter, as the
`advise` command does (xdist's workers run threads, where advise never forks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import advise_cmd, trace_path

HTA_TRACE = "hta/trace_filter/sampled_rank-0.json.gz"  # kernels, ops and runtime: every page table has rows

_CASES = """
import os, sys
from advisor.trace import forked

def double(x):
    return 2 * x

def boom():
    raise ValueError("planted in the child")

def die():
    os._exit(9)

print(forked.start(double, 21).result())
try:
    forked.start(boom).result()
except ValueError as exc:
    print("raised", exc)
try:
    forked.start(die).result()
except forked.Failed:
    print("failed")
"""


def test_a_result_an_exception_and_a_dead_child():
    out = subprocess.run([sys.executable, "-c", _CASES], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:3] == ["42", "raised planted in the child", "failed"], out.stdout + out.stderr


@pytest.mark.parametrize("ranks", [1, 2])
def test_the_page_tables_built_in_a_fork_equal_those_built_in_process(tmp_path, ranks):
    """`advise analyze` reads its traces ahead in forks (a job's ranks two at a time) and builds the
    roofline and top-table rows in a fork while the rules run: the page and report.json are those
    of a run that never forks."""
    trace = str(trace_path(HTA_TRACE))
    if ranks == 2:  # a folder of a job's two rank traces
        (tmp_path / "job").mkdir()
        for rank in (0, 1):
            src = trace_path(HTA_TRACE.replace("rank-0", f"rank-{rank}"))
            (tmp_path / "job" / src.name).write_bytes(src.read_bytes())
        trace = str(tmp_path / "job")
    subprocess.run(advise_cmd("analyze", trace, "--out", str(tmp_path / "forked")), check=True, capture_output=True)
    alone = ("import sys; from advisor.trace import forked; forked.can_fork = lambda: False; "
             "sys.argv = ['advise', 'analyze', sys.argv[1], '--out', sys.argv[2]]; "
             "from advisor.commands.launch import main; main()")
    subprocess.run([sys.executable, "-c", alone, trace, str(tmp_path / "alone")], check=True, capture_output=True)
    reports = [json.loads((tmp_path / d / "report.json").read_text()) for d in ("forked", "alone")]
    for r in reports:
        r.pop("started_at")
    assert reports[0] == reports[1]
    pages = [(tmp_path / d / "report.html").read_text() for d in ("forked", "alone")]
    assert "GPU kernels on the roofline" in pages[0] and "CPU operators" in pages[0]
    assert len(reports[0]["ranks"]) == (ranks if ranks > 1 else 0)  # one trace: no job, no ranks (empty, as the schema says)
    assert _without_start(pages[0]) == _without_start(pages[1])  # each page names its own start time


def _without_start(page: str) -> str:
    import re

    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+\-]\d\d:\d\d", "", page)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_child_nobody_collects_is_killed_at_exit():
    code = ("import sys, time; from advisor.trace import forked; "
            "a = forked.start(time.sleep, 60); print(a.pid); sys.exit(3)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 3
    with pytest.raises(ProcessLookupError):  # reaped at exit, not an orphan sleeping on
        os.kill(int(out.stdout), 0)


_READ_MANY = """
import os, sys
from advisor.trace import ReadAhead, read
paths = sys.argv[1:]
reads = ReadAhead().start(paths)
print(len(reads.pending), len(reads.waiting))
for path in paths:
    doc, columns, n = reads.collect(path)
    alone = read.read_file(path)
    print(doc == alone[0] and n == alone[2] and len(columns["ops"]) == len(alone[1]["ops"]),
          len(reads.pending), len(reads.waiting))
"""


@pytest.mark.skipif(not hasattr(os, "fork") or len(os.sched_getaffinity(0)) < 2, reason="one core: nothing is forked")
def test_a_jobs_traces_are_all_read_ahead_and_each_answer_is_the_in_process_read():
    paths = [str(trace_path(HTA_TRACE.replace("rank-0", f"rank-{r}"))) for r in (0, 1)] + [
        str(trace_path("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"))]
    out = subprocess.run([sys.executable, "-c", _READ_MANY, *paths], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:4] == ["3 0", "True 2 0", "True 1 0", "True 0 0"], out.stdout + out.stderr


_LANE = """
import os, select, sys
from advisor.trace import ReadAhead
first, second = sys.argv[1:]
reads = ReadAhead()
gate_r, gate_w = os.pipe()
done = reads.read_one(first, after=gate_r)  # held at the gate
os.close(gate_r)
after_first = reads.read_one(second, after=done)
os.close(done)
data = reads.pending[os.path.abspath(second)][2]
print(select.select([data], [], [], 1.0)[0] == [])  # the second has not read: the first has not ended
os.write(gate_w, b"1")  # (a write: the second reader holds a copy of gate_w, forked after it) the first reads, then the second
print(reads.collect(second) is not None, reads.collect(first) is not None)
gate_r, gate_w = os.pipe()
done = reads.read_one(first, after=gate_r)
os.close(gate_r)
reads.read_one(second, after=done)
os.close(done)
reads.pending.pop(os.path.abspath(first))[0].cancel()  # the first reader dies at the gate
print(reads.collect(second) is not None)  # the second reads all the same
"""


@pytest.mark.skipif(not hasattr(os, "fork") or len(os.sched_getaffinity(0)) < 2, reason="one core: nothing is forked")
def test_a_reader_in_a_lane_starts_when_the_one_before_it_ends_or_dies():
    paths = [str(trace_path(HTA_TRACE.replace("rank-0", f"rank-{r}"))) for r in (0, 1)]
    out = subprocess.run([sys.executable, "-c", _LANE, *paths], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split("\n")[:3] == ["True", "True True", "True"], out.stdout + out.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_dies_with_its_parent_even_a_killed_one():
    """SIGKILL runs no exit handler: the kernel ends the child (PR_SET_PDEATHSIG), none is left running."""
    import signal
    import time

    code = ("import sys, time; from advisor.trace import forked; "
            "a = forked.start(time.sleep, 60); print(a.pid, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        try:
            with open(f"/proc/{child}/stat") as fh:  # a zombie waiting for init to reap it is gone too
                if fh.read().split(") ", 1)[1].startswith("Z"):
                    return
        except FileNotFoundError:
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    raise AssertionError("the child outlived its killed parent")


def test_the_early_argv_reader_knows_every_option_of_analyze():
    """launch reads `advise analyze`'s argv before click is imported (to start the trace read ~45 ms
    sooner) with its own list of the options that take a value: an option added to the command and
    not to the list would silently stop the read-ahead (or take its value for a trace)."""
    import click

    from advisor.commands.cli import main
    from advisor.commands.launch import ANALYZE_VALUED

    analyze = main.commands["analyze"]
    valued = {name for p in analyze.params if isinstance(p, click.Option) and not p.is_flag and not p.count
              for name in p.opts}
    flags = {name for p in analyze.params if isinstance(p, click.Option) and (p.is_flag or p.count) for name in p.opts}
    assert valued == set(ANALYZE_VALUED), (valued, ANALYZE_VALUED)
    assert flags - {"--help"} == {"--json"}, flags  # the one flag analyze_paths lets through
