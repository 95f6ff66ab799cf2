"""Probe overhead: a script's own step time run plainly vs under `advise profile`, side by side.

Two figures:

1. End to end. The workload (overhead_workload.py) times its own steps with the same clock in
   both runs. Under the probe it runs with the hooks and the parent's sampler on but outside
   the profiler window (`--profile-steps 0`, and more steps asked than the script makes, so
   the probe never cuts it short). Plain and probed runs alternate; each adjacent pair gives
   one ratio of step-time medians (which one runs first alternates), and the figure is the median of those ratios (robust to
   machine drift). Target: <= 1.03x.
2. The probe's own bookkeeping per step (hooks + clock + one JSON line), timed directly in
   process: a floor on what any step pays, independent of machine noise.

    python benchmarks/probe_overhead.py [--pairs 8] [--iters 400] [--width 2048 --width 512 --width 64]
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tempfile
import time
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


def pair_ratios(width: int, iters: int, pairs: int) -> tuple[list[float], list[float]]:
    """(plain step medians, probed/plain ratio per adjacent pair)."""
    plain, ratios = [], []
    script_args = ["--iters", str(iters), "--width", str(width)]
    for i in range(pairs):
        plain_cmd = [sys.executable, str(WORKLOAD), *script_args]
        probed_cmd = [sys.executable, "-m", "advisor", "profile", "--steps", str(iters * 2),
                      "--warmup", "0", "--profile-steps", "0", "--no-experiments", "--out", f"run{i}", str(WORKLOAD),
                      *script_args]
        with tempfile.TemporaryDirectory() as tmp:
            if i % 2:  # alternate which goes first: the machine's order effects cancel out
                q = step_median(probed_cmd, tmp)
                p = step_median(plain_cmd, tmp)
            else:
                p = step_median(plain_cmd, tmp)
                q = step_median(probed_cmd, tmp)
        plain.append(p)
        ratios.append(q / p)
    return plain, ratios


def bookkeeping_us(n: int = 20000) -> float:
    """Per-step cost of the clock's hooks: one batch, one backward, one optimizer step, one boundary."""
    import torch

    from advisor.probe.clock import StepClock

    clock = StepClock(warmup=0, steps=10**9, profile_steps=0, sink=io.StringIO())
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    loss = torch.zeros(())
    t0 = time.perf_counter()
    for _ in range(n):
        clock.batch_fetched(0.0, 64)
        clock.backward_done(loss, 0.0)
        started = clock.optimizer_pre()
        clock.optimizer_post(opt, started)
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--iters", type=int, default=400)
    parser.add_argument("--width", type=int, action="append")
    args = parser.parse_args()
    print(f"probe bookkeeping: {bookkeeping_us():.1f} us per step (in process, no I/O wait)")
    print(f"{'width':>6} {'plain step':>11} {'ratio (median of pairs)':>24} {'pair ratios min..max':>22}")
    for width in args.width or [2048, 512, 64]:
        plain, ratios = pair_ratios(width, args.iters, args.pairs)
        print(f"{width:>6} {statistics.median(plain) * 1e3:>9.3f}ms {statistics.median(ratios):>23.3f}x "
              f"{min(ratios):>13.3f}..{max(ratios):.3f}x")


if __name__ == "__main__":
    main()
