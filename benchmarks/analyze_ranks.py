"""`advise analyze` on a folder of many ranks' traces, beside Holistic Trace Analysis on the same folders.

N copies of one trace become ranks 0..N-1 of one job (their ``distributedInfo`` rewritten, one
gzip file each, in /tmp; deleted afterwards). Each side is the whole command as a fresh process,
timed from launch to exit, its peak RSS summed over its process tree (psutil, every 5 ms: advise
reads ahead in forked readers, HTA parses in a process pool):

- advise: ``advise analyze FOLDER --out DIR`` (report.json and report.html written);
- HTA: ``TraceAnalysis(trace_dir=FOLDER)`` and ``get_temporal_breakdown`` (as benchmarks/analyze_whole.py).

advise reduces each rank to its per-rank summary as it is read and keeps the lowest rank's frames
alone, so its memory should stay flat with N and its time grow linearly; HTA holds every rank's
frames. HTA is given ``--hta-limit`` seconds and ``--hta-max-gib`` of RSS per run (stopped past
either, reported as "> N s") and is skipped above ``--hta-max-ranks``.

    pip install -e ".[bench]"
    python benchmarks/analyze_ranks.py [--ranks 8 32 64] [--trace PATH] [--repeat 1]

The default trace is the largest one in shared/traces (by uncompressed size: the 51 MB
hta/df_index_resolver trace). Results: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyze_speed import largest_trace, uncompressed_size
from analyze_whole import HTA_SCRIPT, advise_cmd, make_ranks, run, tree_rss




def hta_run(folder: Path, limit: float, max_bytes: int):
    """HTA on `folder`, watched: (seconds, peak RSS bytes); seconds None past `limit` seconds or
    `max_bytes` of RSS (its process tree killed: the machine would swap). $ADVISE_HTA_PATH: a folder
    HTA is installed in (`pip install --target`), put on the HTA process's PYTHONPATH."""
    import os

    import psutil

    cmd = [sys.executable, "-c", HTA_SCRIPT, str(folder)]
    env = dict(os.environ)
    if os.environ.get("ADVISE_HTA_PATH"):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ["ADVISE_HTA_PATH"], env.get("PYTHONPATH")]))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(root) or 0)
        if time.perf_counter() - t0 > limit or peak > max_bytes:
            import signal

            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, peak
        time.sleep(0.005)
    if proc.returncode != 0:
        raise SystemExit(f"HTA failed on {folder} ({proc.returncode})")
    return time.perf_counter() - t0, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=None, help="Kineto trace (default: the largest shared one).")
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--repeat", type=int, default=1, help="advise runs per size (the fastest wall time is kept).")
    parser.add_argument("--hta-limit", type=float, default=600.0, help="Seconds HTA is given per run.")
    parser.add_argument("--hta-max-ranks", type=int, default=64, help="HTA is not run on more ranks than this.")
    parser.add_argument("--hta-max-gib", type=float, default=16.0, help="HTA is stopped past this much RSS (GiB).")
    parser.add_argument("--no-hta", action="store_true")
    args = parser.parse_args()
    trace = args.trace or largest_trace()
    print(f"trace  {trace.name}: {uncompressed_size(trace) / 2**20:.1f} MiB of JSON, "
          f"{trace.stat().st_size / 2**20:.1f} MiB on disk")
    print(f"{'ranks':>5} | {'advise s':>8} {'s/rank':>6} {'peak MiB':>8} | {'HTA s':>8} {'s/rank':>6} {'peak MiB':>8} | ratio")
    with tempfile.TemporaryDirectory(prefix="advise-ranks-", dir="/tmp") as tmp:
        tmp = Path(tmp)
        run(advise_cmd(trace, tmp / "warm"))  # .pyc files and the page cache
        for n in args.ranks:
            job = tmp / f"job{n}"
            make_ranks(trace, n, job, level=1)  # quick to write
            timed = min((run(advise_cmd(job, tmp / f"out{n}")) for _ in range(args.repeat)), key=lambda r: r.wall)
            peak = run(advise_cmd(job, tmp / f"mem{n}"), watch=True).peak
            report = json.loads((tmp / f"out{n}" / "report.json").read_text())
            assert len(report["ranks"]) == n, len(report["ranks"])
            line = f"{n:5d} | {timed.wall:8.1f} {timed.wall / n:6.2f} {peak / 2**20:8.0f} |"
            if args.no_hta or n > args.hta_max_ranks:
                line += f" {'not run':>8} {'':>6} {'':>8} |"
            else:
                t0 = time.perf_counter()
                wall, hta_peak = hta_run(job, args.hta_limit, int(args.hta_max_gib * 2**30))
                if wall is None:  # stopped: by time, or by memory before the limit
                    spent = time.perf_counter() - t0
                    line += f" {'> %.0f' % spent:>8} {'':>6} {hta_peak / 2**20:7.0f}+ | > {spent / timed.wall:.1f}x (stopped)"
                else:
                    line += f" {wall:8.1f} {wall / n:6.2f} {hta_peak / 2**20:8.0f} | {wall / timed.wall:.1f}x"
            print(line, flush=True)
            shutil.rmtree(job)
            for d in (f"out{n}", f"mem{n}"):
                shutil.rmtree(tmp / d, ignore_errors=True)


if __name__ == "__main__":
    main()
