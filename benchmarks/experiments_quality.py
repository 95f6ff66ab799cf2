"""Experiments: is the recommended configuration near the best, and what does advising cost?

1. Runs `advise profile` on a starved workload (tests/workloads/starved_io.py) as a user
   would, and reads the recommended configuration it measured.
2. Exhaustive sweep: every DataLoader setting in a grid (num_workers x prefetch_factor),
   each a fresh probe run, with the recommended configuration measured again in the same
   loop (side by side, same machine state). Reports recommended / best throughput
   (goal >= 0.80).
3. Time-to-report: the wall time of `advise profile` against the sum of the child runs it
   needed (main probe + every experiment); the rest is the advisor's own overhead
   (goal <= 1.3x).

    python benchmarks/experiments_quality.py [--steps 15]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from advisor.analysis import steptime
from advisor.overrides import merge as merge_overrides
from advisor.probe.runner import ProbeConfig, run_probe
from advisor.profile import Profile

WORKLOAD = Path(__file__).resolve().parents[1] / "tests" / "workloads" / "starved_io.py"


def throughput(config: ProbeConfig) -> float:
    run = run_probe(config)
    if run.status != "ok":
        return 0.0
    return steptime.throughput(Profile.from_run_dir(config.out).steps)["samples_per_s"] or 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="advise-bench-"))

    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "advisor", "profile", "--steps", str(args.steps),
                           "--warmup", str(args.warmup), "--out", str(tmp / "advise"), str(WORKLOAD)],
                          capture_output=True, text=True)
    total_s = time.monotonic() - t0
    report = json.loads((tmp / "advise" / "report.json").read_text())
    rec = report.get("recommended")
    if not rec:
        sys.exit(f"no recommended configuration (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    child_s = report["wall_s"] + report["experiments"]["child_wall_s"]
    print(f"advise profile: {total_s:.1f} s total, {len(report['experiments']['runs']) + 1} child runs took {child_s:.1f} s "
          f"-> time-to-report / child runs = {total_s / child_s:.2f}x (goal <= 1.3x)")
    print(f"recommended: {json.dumps(rec['overrides'])}  measured speedup {rec['speedup']:.2f}x "
          f"[{rec['ci_low']:.2f}, {rec['ci_high']:.2f}] verified={rec['verified']}")

    grid = [{}] + [{"dataloader": {"num_workers": w, "prefetch_factor": p}} for w in (1, 2, 3, 4, 6, 8, 12, 16) for p in (2, 4)]
    base = ProbeConfig(script=str(WORKLOAD), steps=args.steps, warmup=args.warmup, profile_steps=0)
    results, rec_rates = [], []
    for i, overrides in enumerate(grid):
        rate = throughput(ProbeConfig(**{**base.__dict__, "out": tmp / f"grid{i}", "overrides": overrides}))
        results.append((rate, overrides))
        if i % 4 == 0:  # the recommended config, measured again beside the grid
            rec_rates.append(throughput(ProbeConfig(**{**base.__dict__, "out": tmp / f"rec{i}",
                                                       "overrides": merge_overrides(rec["overrides"])})))
    best_rate, best = max(results, key=lambda r: r[0])
    rec_rate = sorted(rec_rates)[len(rec_rates) // 2]
    print(f"exhaustive sweep: {len(grid)} configurations; best {best_rate:,.0f} samples/s with {json.dumps(best)}; "
          f"baseline {results[0][0]:,.0f} samples/s")
    print(f"recommended, re-measured x{len(rec_rates)}: median {rec_rate:,.0f} samples/s "
          f"-> {rec_rate / best_rate:.0%} of the best (goal >= 80%)")


if __name__ == "__main__":
    main()
