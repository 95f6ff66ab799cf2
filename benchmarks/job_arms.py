"""Multi-rank jobs: fixes measured inside the profiled run on every rank, against fresh runs of the job.

For each job (two CPU ranks on gloo, every sample 1 ms to load, so DL001 fires), the whole
`advise profile` command as a process, in both modes, alternating which goes first over
`--repeats` rounds: the wall time and DL001's measured speedup with its interval, as the user
sees them. Jobs: one `advise` launches (`--nproc-per-node 2`), one the script spawns itself
(`torch.multiprocessing.spawn`), and one Lightning's `ddp` strategy re-runs (`lightning` is in the
test extra).

    python benchmarks/job_arms.py [--repeats 1] [--jobs launched,spawned,lightning]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOADS = Path(__file__).resolve().parents[1] / "tests" / "workloads"
OPTIONS = ["--steps", "10", "--warmup", "3", "--profile-steps", "3"]
JOBS = {
    "launched": ["--nproc-per-node", "2", *OPTIONS, str(WORKLOADS / "ddp_gloo.py"), "--item-ms", "1", "--steps", "100000"],
    "spawned": [*OPTIONS, str(WORKLOADS / "ddp_spawn.py"), "--item-ms", "1", "--steps", "100000"],
    "lightning": [*OPTIONS, str(WORKLOADS / "lit" / "lit_ddp.py"), "--item-ms", "1"],
}
MODES = {"in the profiled run": [], "fresh runs of the job": ["--fresh-runs"]}


def run(job: list[str], mode: list[str], out: Path) -> tuple[float, dict]:
    """One whole `advise profile`: its wall time and DL001's experiment."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "advisor", "profile", "--out", str(out), *mode, *job],
                          capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:  # what advise said, on either stream (a failed script's summary is on stdout)
        sys.exit(f"advise profile failed ({proc.returncode}) in {out}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    report = json.loads((out / "report.json").read_text())
    dl001 = next((f for f in report["findings"] if f["code"] == "DL001"), {})
    return wall, dl001.get("experiment") or {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--jobs", default=",".join(JOBS))
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="advise-job-arms-"))
    for name in args.jobs.split(","):
        walls: dict[str, list[float]] = {m: [] for m in MODES}
        found: dict[str, list[str]] = {m: [] for m in MODES}
        for i in range(args.repeats):
            order = list(MODES) if i % 2 == 0 else list(MODES)[::-1]
            for mode in order:
                wall, exp = run(JOBS[name], MODES[mode], tmp / f"{name}-{i}-{len(walls[mode])}-{mode[:5]}")
                walls[mode].append(wall)
                found[mode].append(f"{exp.get('speedup') or 0:.2f}x ({exp.get('ci_low') or 0:.2f}-{exp.get('ci_high') or 0:.2f}), "
                                   f"{'verified' if exp.get('verified') else exp.get('verdict')}")
        inside, fresh = (statistics.median(walls[m]) for m in MODES)
        for mode in MODES:
            print(f"{name:10} {mode:22} {statistics.median(walls[mode]):6.1f} s  DL001 {'; '.join(found[mode])}")
        print(f"{name:10} the job's fixes measured in the profiled run take {inside / fresh:.2f}x the time of fresh runs")


if __name__ == "__main__":
    main()
