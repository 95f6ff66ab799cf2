"""The whole `advise analyze` command against a whole Holistic Trace Analysis run, as processes.

Each side is one fresh process, timed from launch to exit (interpreter start, imports, the
work, writing its output), with its CPU time (``os.wait4``'s rusage, children included: a figure
a busy machine moves less than wall time) and its peak RSS summed over its process tree
(advise reads the trace ahead in a second process):

- advise: ``advise analyze TRACE --out DIR`` (report.json and report.html written);
- HTA: ``python -c`` loading the same trace alone in a folder with ``TraceAnalysis`` and running
  ``get_temporal_breakdown``.

The two alternate, ``--repeat`` times (>= 3), so machine noise hits both alike; the ratios come
from this one run. Peak RSS comes from two more runs of each side, watched and not timed. ``--big-gb N`` then builds an N GB trace in /tmp (the chosen trace's events
copied end to end, timestamps, step numbers and ids shifted; deleted afterwards) and measures
advise alone on it (HTA needs several times the file in memory). ``--ranks N`` times both sides on
a job of N ranks: N copies of the trace as ranks 0..N-1 in one folder.

    pip install -e ".[bench]"
    python benchmarks/analyze_whole.py [--trace PATH] [--repeat 5] [--ranks 4] [--big-gb 1]

The default trace is the largest one in shared/traces (by uncompressed size).
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = Path(os.environ.get("ADVISE_SHARED_TRACES", REPO.parent / "shared" / "traces"))

HTA_SCRIPT = """
import logging, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
print(analyzer.get_temporal_breakdown(visualize=False).to_json())
"""


from analyze_speed import largest_trace, uncompressed_size  # noqa: E402  (the same trace choice as the in-process benchmark)


@dataclass
class Run:
    wall: float  # seconds, launch to exit
    cpu: float  # user + system seconds, the process and the children it waited for
    peak: int  # bytes: the highest RSS summed over the process and its children, polled every 5 ms


def tree_rss(root) -> int | None:
    """RSS summed over a psutil process and its children (a child gone meanwhile counts 0), None
    once the process itself is gone."""
    import psutil

    total = 0
    try:
        for p in [root, *root.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
    except psutil.Error:
        return None
    return total


def run(cmd: list[str], watch: bool = False, env: dict | None = None) -> Run:
    """One process, which must succeed; `watch`: poll its tree's RSS (peak stays 0 otherwise).

    Timed runs are not watched: the poller's own CPU (a psutil walk every 5 ms) competes with the
    process on a small machine, and more so with a process that reads on a second core.
    """
    import psutil

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    peak, done = [0], threading.Event()

    def poll():
        try:
            root = psutil.Process(proc.pid)
        except psutil.Error:
            return
        while not done.is_set():
            total = tree_rss(root)
            if total is None:
                break
            peak[0] = max(peak[0], total)
            done.wait(0.005)

    watcher = threading.Thread(target=poll, daemon=True)
    if watch:
        watcher.start()
    err = proc.stderr.read().decode(errors="replace")  # until it exits (stderr closes)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    if watch:
        watcher.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} ... failed ({proc.returncode}):\n{err[-2000:]}")
    # ru_maxrss (KiB on Linux) is the largest single process; the poll sums the tree
    return Run(wall, usage.ru_utime + usage.ru_stime, max(peak[0], usage.ru_maxrss * 1024) if watch else 0)


def advise_cmd(trace: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "advisor", "analyze", str(trace), "--out", str(out)]


def make_big(trace: Path, target: int, path: Path) -> int:
    """Copy `trace`'s events end to end until the JSON is about `target` bytes; returns its size."""
    import json

    import msgspec

    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rb") as fh:
        doc = json.loads(fh.read())
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    lo = min(e["ts"] for e in timed)
    hi = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    period = hi - lo + 1000
    one = len(msgspec.json.encode(events))
    copies = max(1, round(target / one))
    head = msgspec.json.encode(doc)[:-1]  # the other keys; the events go last
    with open(path, "wb") as out:
        out.write(head + (b', "traceEvents": [' if len(doc) else b'"traceEvents": ['))
        for k in range(copies):
            shifted = []
            for e in events:
                e = dict(e)
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] = e["ts"] + k * period
                name = e.get("name")
                if isinstance(name, str) and name.startswith("ProfilerStep#") and name[13:].isdigit():
                    e["name"] = f"ProfilerStep#{int(name[13:]) + k * 1000}"
                args = e.get("args")
                if isinstance(args, dict):
                    args = dict(args)
                    for key in ("correlation", "External id"):
                        if isinstance(args.get(key), int) and args[key] >= 0:
                            args[key] += k * 10_000_000
                    e["args"] = args
                if isinstance(e.get("id"), int):
                    e["id"] += k * 10_000_000
                shifted.append(e)
            blob = msgspec.json.encode(shifted)[1:-1]
            out.write(blob if k == 0 else b"," + blob)
        out.write(b"]}")
    return path.stat().st_size


def make_ranks(trace: Path, n: int, folder: Path, level: int = 6) -> None:
    """`n` copies of `trace` in `folder`, as ranks 0..n-1 of one job (their distributedInfo; gzip `level`)."""
    import json

    import msgspec

    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rb") as fh:
        doc = json.loads(fh.read())
    folder.mkdir()
    info = doc.pop("distributedInfo", None) or {}
    rest = msgspec.json.encode(doc)
    for rank in range(n):  # HTA finds the rank as the first `"rank": N` (a space after the colon, as Kineto writes)
        head = json.dumps({"distributedInfo": {**info, "rank": rank, "world_size": n}}).encode()[:-1]
        (folder / f"rank{rank}.json.gz").write_bytes(gzip.compress(head + b", " + rest[1:], level))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=None, help="Kineto trace (default: the largest shared one).")
    parser.add_argument("--repeat", type=int, default=5, help="Runs of each side, alternating (>= 3).")
    parser.add_argument("--big-gb", type=float, default=0.0, help="Also analyze a trace of this many GB (advise only).")
    parser.add_argument("--no-hta", action="store_true", help="Skip HTA (with --big-gb: the big trace alone).")
    parser.add_argument("--ranks", type=int, default=0,
                        help="Also time a job of this many ranks: copies of the trace as ranks 0..N-1, one folder, both sides.")
    args = parser.parse_args()
    if args.repeat < 3:
        parser.error("--repeat must be at least 3")
    trace = args.trace or largest_trace()
    if not args.no_hta:
        try:
            import hta  # noqa: F401
        except ImportError:
            raise SystemExit("Holistic Trace Analysis is not installed: pip install -e '.[bench]'") from None

    with tempfile.TemporaryDirectory(prefix="advise-bench-") as tmp:
        tmp = Path(tmp)
        hta_dir = tmp / "hta"
        hta_dir.mkdir()
        shutil.copy(trace, hta_dir / trace.name)  # HTA reads every trace in a folder: this one alone
        size = uncompressed_size(trace)
        label = trace.relative_to(SHARED_TRACES) if trace.is_relative_to(SHARED_TRACES) else trace
        print(f"trace      {label} ({trace.stat().st_size / 2**20:.1f} MiB on disk, {size / 2**20:.1f} MiB of JSON)")
        if not args.no_hta:
            adv, hta_runs = [], []
            # Warm-up: the page cache, and .pyc files for both sides, as an installed package has them (the
            # timed runs otherwise compile advise's modules from source each time where PYTHONDONTWRITEBYTECODE is set)
            writes_pyc = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            run(advise_cmd(trace, tmp / "warm"), env=writes_pyc)
            run([sys.executable, "-c", HTA_SCRIPT, str(hta_dir)], env=writes_pyc)
            for i in range(args.repeat):  # alternate, so machine noise hits both sides alike
                adv.append(run(advise_cmd(trace, tmp / f"out{i}")))
                hta_runs.append(run([sys.executable, "-c", HTA_SCRIPT, str(hta_dir)]))
            for _ in range(2):  # memory: watched runs of their own, not timed
                adv[-1].peak = max(adv[-1].peak, run(advise_cmd(trace, tmp / "mem"), watch=True).peak)
                hta_runs[-1].peak = max(hta_runs[-1].peak, run([sys.executable, "-c", HTA_SCRIPT, str(hta_dir)], watch=True).peak)
            for name, runs, what in (("advise", adv, "whole `advise analyze --out`"),
                                     ("HTA", hta_runs, "whole process: load + temporal breakdown")):
                print(f"{name:10} {statistics.median(r.wall for r in runs):6.2f} s wall, "
                      f"{statistics.median(r.cpu for r in runs):6.2f} s CPU (medians of {args.repeat}), "
                      f"peak RSS {max(r.peak for r in runs) / 2**20:4.0f} MiB  ({what})  "
                      f"wall runs: {', '.join(f'{r.wall:.2f}' for r in runs)}")
            wall = sorted(h.wall / a.wall for a, h in zip(adv, hta_runs))
            cpu = statistics.median(h.cpu for h in hta_runs) / statistics.median(a.cpu for a in adv)
            print(f"ratio      advise is {statistics.median(h.wall for h in hta_runs) / statistics.median(a.wall for a in adv):.1f}x "
                  f"faster than HTA in wall time (per alternating pair: {', '.join(f'{r:.1f}' for r in wall)}), "
                  f"{cpu:.1f}x in CPU time; peak RSS {max(a.peak for a in adv) / max(h.peak for h in hta_runs):.2f}x HTA's")
        if args.ranks > 0 and not args.no_hta:
            job = tmp / "job"
            make_ranks(trace, args.ranks, job)
            adv, hta_runs = [], []
            run(advise_cmd(job, tmp / "job-warm"))
            for i in range(args.repeat):
                adv.append(run(advise_cmd(job, tmp / f"job-out{i}")))
                hta_runs.append(run([sys.executable, "-c", HTA_SCRIPT, str(job)]))
            a, h = statistics.median(r.wall for r in adv), statistics.median(r.wall for r in hta_runs)
            pairs = sorted(x.wall / y.wall for y, x in zip(adv, hta_runs))
            print(f"{args.ranks} ranks    advise {a:.2f} s, HTA {h:.2f} s (medians of {args.repeat}, alternating; HTA parses "
                  f"the ranks in a process pool): {h / a:.1f}x (pairs: {', '.join(f'{r:.1f}' for r in pairs)})")
        if args.big_gb > 0:
            big = tmp / "big.json"
            n = make_big(trace, int(args.big_gb * 2**30), big)
            r = run(advise_cmd(big, tmp / "big-out"), watch=True)
            print(f"big trace  {n / 2**30:.2f} GiB of JSON: advise {r.wall:.1f} s wall, {r.cpu:.1f} s CPU, "
                  f"peak RSS {r.peak / 2**20:.0f} MiB ({r.peak / n:.2f}x the file)")


if __name__ == "__main__":
    main()
