"""In-process arms against fresh-run experiments, whole commands side by side.

For each workload, alternating the order over `--repeats` rounds:
  A. `advise profile --no-experiments` (the diagnosis alone),
  B. `advise profile` (fixes measured as arms of the profiled run),
  C. `advise profile --fresh-runs` (each arm a re-run of the script),
each the whole command as a process (interpreter start, imports, the report). Then an oracle:
every DataLoader setting of a grid, each a fresh probe run, with B's and C's recommended
configurations re-measured beside it. Reports B/A and C/A wall time (goal for B: <= 2.5x), the
speedups each mode found, and each recommendation's share of the oracle's best (goal >= 80%).

    python benchmarks/experiments_modes.py [--repeats 2] [--steps 20] [--modes no-experiments,in-process]
                                           [--no-oracle]

`--modes` runs only those modes (the time-to-report check needs the first two); `--no-oracle`
skips the grid.
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

from advisor.analysis import steptime
from advisor.overrides import merge
from advisor.probe.runner import ProbeConfig, run_probe
from advisor.profile import Profile

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = [ROOT / "tests" / "workloads" / "starved_io.py", ROOT / "examples" / "train_mnist_like.py"]
MODES = {"no-experiments": ["--no-experiments"], "in-process": [], "fresh-runs": ["--fresh-runs"]}


def advise(mode: str, workload: Path, out: Path, steps: int) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "advisor", "profile", "--steps", str(steps), "--out", str(out), *MODES[mode],
           str(workload)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"{mode} on {workload.name} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall, json.loads((out / "report.json").read_text())


def throughput(workload: Path, out: Path, overrides: dict, steps: int) -> float:
    config = ProbeConfig(script=str(workload), out=out, steps=steps, warmup=5, profile_steps=0, overrides=overrides)
    run = run_probe(config)
    return (steptime.throughput(Profile.from_run_dir(out).steps)["samples_per_s"] or 0.0) if run.status == "ok" else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, from: " + ", ".join(MODES))
    parser.add_argument("--no-oracle", action="store_true", help="skip the DataLoader grid")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if "no-experiments" not in modes or set(modes) - set(MODES):
        parser.error(f"--modes: no-experiments (the reference) and any of {', '.join(MODES)}")
    tmp = Path(tempfile.mkdtemp(prefix="advise-modes-"))
    for workload in WORKLOADS:
        walls: dict[str, list[float]] = {m: [] for m in modes}
        recs: dict[str, list[dict]] = {m: [] for m in modes}
        for r in range(args.repeats):
            order = list(modes) if r % 2 == 0 else list(reversed(modes))
            for mode in order:
                wall, report = advise(mode, workload, tmp / f"{workload.stem}-{mode}-{r}", args.steps)
                walls[mode].append(wall)
                if report.get("recommended"):
                    recs[mode].append(report["recommended"])
        base = statistics.median(walls["no-experiments"])
        print(f"\n{workload.name}")
        for mode in modes:
            w = statistics.median(walls[mode])
            ratios = ", ".join(f"{a / b:.2f}" for a, b in zip(walls[mode], walls["no-experiments"]))
            found = ", ".join(f"{rec['speedup']:.2f}x {json.dumps(rec['overrides'])}" for rec in recs[mode]) or "-"
            print(f"  {mode:15s} wall median {w:6.1f} s ({w / base:4.2f}x of --no-experiments; per round {ratios}); "
                  f"recommended: {found}")
        if args.no_oracle:
            continue
        grid = [{}] + [{"dataloader": {"num_workers": w}} for w in (1, 2, 4, 8, 16)]
        rates, rec_rates = [], {m: [] for m in ("in-process", "fresh-runs") if m in modes}
        for i, overrides in enumerate(grid):
            rates.append((throughput(workload, tmp / f"{workload.stem}-grid{i}", overrides, args.steps), overrides))
            for mode in rec_rates:
                if recs[mode]:
                    rec_rates[mode].append(throughput(workload, tmp / f"{workload.stem}-{mode}-rec{i}",
                                                      merge(recs[mode][0]["overrides"]), args.steps))
        best, best_overrides = max(rates, key=lambda r: r[0])
        print(f"  oracle: best {best:,.0f} samples/s with {json.dumps(best_overrides)} (baseline {rates[0][0]:,.0f})")
        for mode, measured in rec_rates.items():
            if measured:
                share = statistics.median(measured) / best
                print(f"  {mode:15s} recommendation re-measured x{len(measured)}: {statistics.median(measured):,.0f} "
                      f"samples/s = {share:.0%} of the oracle")


if __name__ == "__main__":
    main()
