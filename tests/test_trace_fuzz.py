"""Mutated real traces: every read ends in frames or one TraceError line, and the read-ahead (forked,
split in two halves) gives what the in-process read gives. Seeded, so a failure replays.

Found so far: invalid UTF-8 raised msgspec's UnicodeDecodeError (a traceback); a read-ahead whose
halves did not join named no file in its error.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from conftest import trace_path

_FUZZ = """
import gzip, random, sys, traceback
from advisor.trace import ReadAhead, TraceError, ahead as read_ahead, load_trace

read_ahead.SPLIT_MIN = 0  # every read-ahead is split: the asker decodes half
source = gzip.decompress(open(sys.argv[1], "rb").read())
rng = random.Random(int(sys.argv[2]))
path = sys.argv[4]


def outcome(ahead):
    try:
        if ahead:
            reads = ReadAhead().start([path])
            reads.ask(path)
            t = reads.frames(path)
        else:
            t = load_trace(path)
    except TraceError as exc:
        return "error", str(exc)
    return ("frames", len(t.ops), len(t.kernels), len(t.runtime), len(t.annotations), t.meta["n_events"],
            t.meta["skipped_events"], round(float(t.ops["dur_us"].sum()), 3), sorted(set(t.ops["name"].astype(str)))[:5])


kinds = {}
for _ in range(int(sys.argv[3])):
    b = bytearray(source)
    for _ in range(rng.randint(1, 3)):
        i, op = rng.randrange(len(b)), rng.random()
        if op < 0.3:  # a digit for a digit: mostly still JSON (other times, durations)
            j = b.find(b"1", i)
            b[j] = rng.choice(b"023456789")
        elif op < 0.5:  # a byte that is not UTF-8 inside the next string; a NaN or huge number for the next 0
            j = b.find(b'"', i) + 1
            b[j:j] = b"\\xff"
            j = b.find(b" 0", i) + 1
            b[j:j + 1] = rng.choice([b"NaN", b"-1e400", b"1e400", b"null", b'"7"'])
        elif op < 0.7:
            b[i:i] = rng.choice([b"},{", b'"},', b"}]", b'{"ph":"X"}', b"null"])
        elif op < 0.9:
            del b[i:i + rng.randint(1, 200)]
        else:
            del b[i:]
    open(path, "wb").write(b)
    try:
        alone, ahead = outcome(False), outcome(True)
    except Exception:
        print("TRACEBACK", traceback.format_exc().splitlines()[-1])
        continue
    if alone != ahead:
        print("DIFFERENT", alone, ahead)
    kinds[alone[0]] = kinds.get(alone[0], 0) + 1
    if alone[0] == "error" and "\\n" in alone[1]:
        print("NOT ONE LINE", alone[1])
print("kinds", sorted(kinds.items()))
"""


@pytest.mark.skipif(not hasattr(os, "fork") or len(os.sched_getaffinity(0)) < 2, reason="the read-ahead needs fork and two cores")
@pytest.mark.parametrize("rel, seed", [("hta/trace_filter/sampled_rank-0.json.gz", 1),
                                       # 15 s: the whole suite's, not the inner loop's
                                       pytest.param("kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz", 2,
                                                    marks=pytest.mark.slow)])
def test_mutated_traces_read_the_same_ahead_and_in_process_and_fail_in_one_line(tmp_path, rel, seed):
    out = subprocess.run([sys.executable, "-c", _FUZZ, str(trace_path(rel)), str(seed), "24", str(tmp_path / "t.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[-1].startswith("kinds") and lines[:-1] == [], out.stdout[-3000:]
    kinds = dict(ast.literal_eval(lines[-1][len("kinds "):]))
    assert kinds.get("frames", 0) >= 4 and kinds.get("error", 0) >= 4, kinds  # both outcomes exercised
