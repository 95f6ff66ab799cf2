"""Probe overhead: a script's own step time run plainly vs under `advise profile`, side by side.

The workload times its own steps with the same clock in both runs. Under the probe it runs
with the hooks and the parent's sampler on but outside the profiler window
(`--profile-steps 0`, and more steps asked than the script makes, so the probe never cuts it
short). Runs alternate plain/probed to cancel machine drift; the figure is the ratio of
medians of per-run step medians. Target: <= 1.03x.

    python benchmarks/probe_overhead.py [--pairs 5] [--width 512] [--width 64]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
WORKLOAD = HERE / "overhead_workload.py"


def step_median(cmd: list[str], cwd: str) -> float:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    text = proc.stdout + proc.stderr
    for path in Path(cwd).glob("run*/script.log"):
        text += path.read_text()
    values = [float(line.split("=")[1]) for line in text.splitlines() if line.startswith("STEP_MEDIAN_S=")]
    if not values:
        raise SystemExit(f"no timing from {' '.join(cmd)}:\n{text[-2000:]}")
    return values[-1]


def measure(width: int, iters: int, pairs: int) -> tuple[float, float]:
    plain, probed = [], []
    script_args = ["--iters", str(iters), "--width", str(width)]
    for i in range(pairs):
        with tempfile.TemporaryDirectory() as tmp:
            plain.append(step_median([sys.executable, str(WORKLOAD), *script_args], tmp))
            probed.append(step_median([sys.executable, "-m", "advisor", "profile", str(WORKLOAD), "--steps", str(iters * 2),
                                       "--warmup", "0", "--profile-steps", "0", "--no-experiments", "--out", f"run{i}",
                                       "--", *script_args], tmp))
    return statistics.median(plain), statistics.median(probed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--width", type=int, action="append")
    args = parser.parse_args()
    print(f"{'width':>6} {'plain step':>12} {'probed step':>12} {'ratio':>7} {'overhead/step':>14}")
    for width in args.width or [512, 64]:
        plain, probed = measure(width, args.iters, args.pairs)
        print(f"{width:>6} {plain * 1e3:>10.3f}ms {probed * 1e3:>10.3f}ms {probed / plain:>6.3f}x {(probed - plain) * 1e6:>11.1f} us")


if __name__ == "__main__":
    main()
