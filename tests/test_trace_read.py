"""The streamed trace reader (advisor/trace/read.py): same frames as a plain json.load would give, bad files one line.

Figures are checked against the raw JSON read with the standard library and plain Python, on
real shipped traces; the stream is also cut into tiny blocks so that every way an event list
can be split is taken, and compared with the whole-document path.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from advisor.trace import TraceError, load_trace, read as trace_read
from conftest import advise_cmd, trace_path

RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
SAMPLED = "hta/trace_filter/sampled_rank-0.json.gz"  # current layout, two ranks' sample
BIG = "hta/df_index_resolver/df_index_resolver.json.gz"  # 51 MiB of JSON: over advisor.trace.ahead.SPLIT_MIN
FRAMES = ("ops", "kernels", "memcpy", "runtime", "annotations", "python", "memory", "steps")


def _raw(path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


@pytest.mark.parametrize("rel", [RESNET, SAMPLED])
def test_figures_match_the_raw_json(rel):
    """Kernel count and time, op and runtime counts, steps: as counted from json.load by hand."""
    path = trace_path(rel)
    raw = _raw(path)["traceEvents"]
    events = [e for e in raw if e.get("ph") == "X"]

    def of(*cats):
        return [e for e in events if e.get("cat") in cats]

    kernels = of("kernel", "Kernel")
    steps = {e["name"] for e in of("user_annotation", "Operator") if e["name"].startswith("ProfilerStep#")}
    t = load_trace(path)
    assert len(t.kernels) == len(kernels) > 0
    assert t.kernels["dur_us"].sum() == pytest.approx(sum(e["dur"] for e in kernels))
    assert t.steps["index"].tolist() == sorted(int(s.split("#")[1]) for s in steps)
    assert len(t.runtime) == len(of("cuda_runtime", "Runtime", "cuda_driver"))
    assert len(t.ops) == len(of("cpu_op", "Operator")) - sum(
        1 for e in of("Operator") if e["name"].startswith(("ProfilerStep#", "enumerate(DataLoader)", "Optimizer.", "##")))
    assert len(t.memcpy) == len(of("gpu_memcpy", "Memcpy", "gpu_memset", "Memset"))
    assert t.meta["n_events"] == len(raw)


def _frames_equal(a, b):
    for name in FRAMES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))
    assert {k: v for k, v in a.meta.items()} == {k: v for k, v in b.meta.items()}


def test_tiny_blocks_and_the_whole_document_give_the_same_frames(monkeypatch):
    """Cut into 4 KiB blocks (hundreds of cuts) or decoded whole: one answer."""
    path = trace_path(SAMPLED)
    normal = load_trace(path)
    monkeypatch.setattr(trace_read, "BLOCK", 4096)
    _frames_equal(load_trace(path), normal)
    monkeypatch.setattr(trace_read, "_HEAD_RE", trace_read.re.compile(rb"(?!)"))  # never found: the tolerant path
    _frames_equal(load_trace(path), normal)


def test_cuts_that_look_like_event_ends(tmp_path, monkeypatch):
    """'},' and '}]' inside strings and nested args, and keys after the events with ']' in them."""
    tricky = "x},{\"ph\": \"X\"}] [},"
    events = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i} {tricky}", "pid": 1, "tid": 1, "ts": 10 * i,
               "dur": 5, "args": {"nested": {"a": [{"b": "},"}], "c": "}]"}, "Input Dims": [[2, 3]]}}
              for i in range(300)]
    doc = {"schemaVersion": 1, "traceEvents": events, "traceName": "a ] b }] c", "logs": ["x]", "}]"]}
    path = tmp_path / "tricky.json"
    path.write_text(json.dumps(doc, indent=1))
    monkeypatch.setattr(trace_read, "BLOCK", 512)
    t = load_trace(path)
    assert t.ops["name"].tolist() == [f"aten::op{i} {tricky}" for i in range(300)]
    assert t.ops["input_dims"].iloc[0] == [[2, 3]] and t.meta["n_events"] == 300


_READ_AHEAD = """
import os, pickle, sys
from advisor.trace import start_reading
path = sys.argv[1]
reads = start_reading([path])
forked = os.path.abspath(path) in reads.pending
frames = reads.frames(path)
print(forked, not reads.pending)
sys.stdout.flush()
with open(sys.argv[2], "wb") as out:
    pickle.dump(frames, out)
"""

_ABANDONED = """
import os, sys
from advisor.trace import start_reading
reads = start_reading([sys.argv[1]])
(ahead, *_), = reads.pending.values()
print(ahead.pid)
sys.exit(2)  # as a bad --select does, before anything collects the read
"""


def test_read_ahead_in_a_forked_process_gives_the_same_frames(tmp_path):
    """In a fresh single-threaded process (the CLI's case; xdist's workers run threads, so no fork there)."""
    path = trace_path(SAMPLED)
    out = subprocess.run([sys.executable, "-c", _READ_AHEAD, str(path), str(tmp_path / "f.pkl")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"], out.stdout  # forked, and the fork's read collected
    _frames_equal(pd.read_pickle(tmp_path / "f.pkl"), load_trace(path))


def test_a_read_ahead_nobody_collects_is_killed_at_exit():
    """`advise analyze TRACE --select NOPE` fails after the fork: the reader must not outlive it."""
    out = subprocess.run([sys.executable, "-c", _ABANDONED, str(trace_path(RESNET))], capture_output=True, text=True)
    assert out.returncode == 2
    pid = int(out.stdout)
    with pytest.raises(ProcessLookupError):  # reaped, not an orphan still reading
        os.kill(pid, 0)


@pytest.mark.slow
@pytest.mark.parametrize("cut", ["plain", "gzip"])
def test_truncated_trace_is_one_line(tmp_path, cut):
    """A real trace cut in the middle of its events: `advise analyze` says so in one line, exit 2."""
    blob = gzip.decompress(trace_path(SAMPLED).read_bytes())
    if cut == "plain":
        bad = tmp_path / "cut.json"
        bad.write_bytes(blob[: len(blob) * 2 // 3])
    else:
        bad = tmp_path / "cut.json.gz"
        packed = gzip.compress(blob)
        bad.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(TraceError):
        load_trace(bad)
    r = subprocess.run(advise_cmd("analyze", str(bad), "--out", str(tmp_path / "out")), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("advise: error:") and str(bad) in r.stderr
    assert ("gzip" if cut == "gzip" else "not valid JSON") in r.stderr
    assert not (tmp_path / "out" / "report.json").exists()


@pytest.mark.slow
def test_analyze_imports_neither_torch_nor_scipy(tmp_path):
    """`advise analyze` loads what it uses: the CLI alone imports no pandas, the whole command no torch or scipy."""
    code = (
        "import sys\n"
        "import advisor.commands.cli\n"
        "light = 'pandas' not in sys.modules\n"
        f"sys.argv = ['advise', 'analyze', {str(trace_path(SAMPLED))!r}, '--out', {str(tmp_path / 'out')!r}]\n"
        "try:\n    advisor.commands.cli.main()\nexcept SystemExit as exc:\n    code = exc.code\n"
        "print(light, code, 'torch' in sys.modules, 'scipy' in sys.modules, file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stderr.strip().splitlines()[-1] == "True 0 False False", r.stderr[-2000:]
    assert (tmp_path / "out" / "report.json").is_file()


@pytest.mark.parametrize("argv, started", [
    (["analyze", "t.json"], ["t.json"]),
    (["analyze", "--out", "o", "--select", "DL", "t.json", "--json"], ["t.json"]),
    (["analyze", "--out=o", "t.json"], ["t.json"]),
    (["analyze", "a.json", "b.json"], ["a.json", "b.json"]),  # several ranks, read ahead together
    (["analyze", "job"], ["job/r0.json", "job/r1.json"]),  # a folder of them
    (["analyze", "missing.json"], None),  # the command says so
    (["analyze", "--help", "t.json"], None),  # click's business
    (["analyze", "--frobnicate", "t.json"], None),
    (["profile", "t.json"], None),
    ([], None),
])
def test_the_trace_read_ahead_is_found_on_argv_before_the_cli_loads(monkeypatch, tmp_path, argv, started):
    for name in ("t.json", "a.json", "b.json", "job/r0.json", "job/r1.json"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("{}")
    monkeypatch.chdir(tmp_path)
    from advisor.commands.launch import analyze_paths
    from advisor.trace import trace_files

    paths = analyze_paths(argv)  # launch's reading of argv, before click; then what start_reading reads
    try:
        files = [str(p) for p in trace_files(paths)] if paths else None
    except ValueError:  # a missing file: nothing is read ahead, the command says so
        files = None
    assert files == started


def test_gzip_members_padding_and_garbage_as_the_gzip_module_reads_them(tmp_path):
    """The inflater reads gzip as the standard library does: concatenated members and trailing
    zero padding are one file; trailing garbage is a corrupt file (one line, TraceError)."""
    head, event = b'{"traceEvents": [', b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2}]}'
    whole = gzip.compress(head + event)
    cases = {"members": gzip.compress(head) + gzip.compress(event), "padded": whole + b"\0" * 64,
             "garbage": whole + b"not gzip"}
    for name, blob in cases.items():
        path = tmp_path / f"{name}.json.gz"
        path.write_bytes(blob)
        if name == "garbage":
            with pytest.raises(TraceError, match="truncated or corrupt gzip"):
                trace_read.read_file(str(path))
        else:
            assert gzip.decompress(blob) == head + event  # the standard library agrees
            assert load_trace(path).ops["name"].tolist() == ["aten::mm"]


class _Asker:
    """A share that asks at the `when`-th poll between blocks and keeps what it is given."""

    def __init__(self, when: int):
        self.when, self.polls, self.given = when, 0, []

    def asked(self) -> bool:
        self.polls += 1
        return self.polls == self.when

    def give(self, data) -> None:
        self.given.append(bytes(data))


@pytest.mark.parametrize("when", [1, 3, 10_000])
def test_a_read_that_gives_half_of_what_is_left_joins_into_the_same_columns(tmp_path, monkeypatch, when):
    """The reader splits what is left when asked (at once, after a few blocks, never): its half and
    the half it gave, decoded apart and joined, are the whole read's document, columns and count."""
    path = tmp_path / "trace.json"  # plain JSON: read in blocks of BLOCK bytes (a gzip one, as it inflates)
    path.write_bytes(gzip.decompress(trace_path(SAMPLED).read_bytes()))
    path = str(path)
    whole = trace_read.read_file(path)
    monkeypatch.setattr(trace_read, "BLOCK", 64 << 10)  # 27 blocks: the ask lands mid-read
    asker = _Asker(when)
    doc, columns, n = trace_read.read_raw(path, asker)
    assert len(asker.given) == 1  # exactly one answer, asked or not
    if when == 10_000:
        assert asker.given == [b""] and doc == whole[0]
        return
    assert isinstance(doc, trace_read.Shared) and len(asker.given[0]) > 1000
    joined = trace_read.join(doc, trace_read.read_shared(asker.given[0]), columns, n)
    assert joined[0] == whole[0] and joined[2] == whole[2]
    for bucket in trace_read.BUCKETS:
        for key, value in whole[1][bucket].data.items():
            got = joined[1][bucket][key]
            if isinstance(value, np.ndarray):
                assert np.array_equal(got, value, equal_nan=value.dtype.kind == "f"), (bucket, key)
            elif isinstance(value, trace_read.Coded):  # codes differ (the halves' tables joined), values not
                assert got.tolist() == value.tolist(), (bucket, key)
            else:
                assert got == value, (bucket, key)


_SHARED_READ = """
import sys
from advisor.trace import ReadAhead, read as trace_read
joins = []
join = trace_read.join
trace_read.join = lambda *a: joins.append(1) or join(*a)
reads = ReadAhead().start([sys.argv[1]])
print(bool(reads.pending), reads.collect(sys.argv[1]) is not None, len(joins))
"""


def test_the_idle_parent_reads_half_of_the_rest_itself():
    """`advise analyze` collects the read as soon as its imports end: on a trace over SPLIT_MIN it
    asks the reader for half of what is left and decodes it itself (a fresh single-threaded process)."""
    path = trace_path(BIG)
    out = subprocess.run([sys.executable, "-c", _SHARED_READ, str(path)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "1"], out.stdout + out.stderr  # forked, collected, joined


_READ_WITHOUT_NUMPY = """
import sys
from advisor.trace import read as trace_read
doc, columns, n = trace_read.read_raw(sys.argv[1])
print("numpy" in sys.modules, n, len(columns["ops"]))
"""


def test_the_reader_needs_no_numpy():
    """The forked reader starts before numpy is imported (it would cost the read ~40 ms): a whole
    read of a real trace leaves numpy unimported."""
    out = subprocess.run([sys.executable, "-c", _READ_WITHOUT_NUMPY, str(trace_path(RESNET))],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False" and int(out[1]) > 1000 and int(out[2]) > 1000, out


@pytest.mark.parametrize("rel", [RESNET, BIG])
def test_names_are_the_categoricals_pandas_would_infer(rel):
    """Built from codes, a frame's names are what ``pd.Series(names, dtype="category")`` gives:
    the distinct names present, sorted, whatever the read's other columns hold."""
    t = load_trace(trace_path(rel))
    for frame in (t.ops, t.kernels, t.runtime, t.annotations):
        inferred = pd.Series(frame["name"].astype(object).tolist(), dtype="category")
        pd.testing.assert_series_equal(frame["name"], inferred, check_names=False)
        assert len(frame) > 0


@pytest.mark.parametrize("where", ["name", "shape"])
def test_invalid_utf8_goes_to_the_whole_document_path_not_a_traceback(tmp_path, monkeypatch, where):
    """A byte that is not UTF-8 (in a name, or inside a JSON text kept raw such as a shape) cannot be
    streamed: the tolerant path reads the file, as the standard library would (U+FFFD), in small
    blocks or large, before the bad event or after it. (Found by fuzzing: msgspec raised
    UnicodeDecodeError, a traceback.)"""
    bad = b"aten::\xffmm" if where == "name" else b"aten::mm"
    dims = b'[["\xff"]]' if where == "shape" else b"[[2, 3]]"
    events = [b'{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": %d, "dur": 5, '
              b'"args": {"Input Dims": [[4]]}}' % (10 * i) for i in range(400)]
    events.insert(200, b'{"ph": "X", "cat": "cpu_op", "name": "' + bad + b'", "pid": 1, "tid": 1, "ts": 2005, "dur": 3, '
                  b'"args": {"Input Dims": ' + dims + b'}}')
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"traceEvents": [' + b",\n".join(events) + b'], "traceName": "x"}')
    for block in (4096, 1 << 20):
        monkeypatch.setattr(trace_read, "BLOCK", block)
        t = load_trace(path)
        assert len(t.ops) == 401 and t.meta["n_events"] == 401
        names = set(t.ops["name"].astype(str))
        assert ("aten::\ufffdmm" in names) == (where == "name") and "aten::add" in names
