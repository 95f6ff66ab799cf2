"""The parent's sampler: what one tick costs and how soon stop() returns, on a real child.

The sampler runs in advise's process, not the script's, but a slow tick (reading smaps, scanning
/proc for every child) thins the samples and a slow stop() holds up the report. Targets: a mean
tick under 50 ms (a few ms is normal: psutil scans /proc for the script's children) and stop()
under 0.5 s from the middle of an interval, every time.

    python benchmarks/sampler_cost.py [--seconds 3] [--stops 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from advisor.probe.sampler import Sampler

CHILD = "import time, torch\nx = torch.randn(512, 512)\nend = time.monotonic() + {s}\nwhile time.monotonic() < end:\n    x @ x\n"
TICK_MS, STOP_S = 50.0, 0.5


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--stops", type=int, default=5)
    args = p.parse_args()
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(s=args.seconds + 5 * args.stops)])
    try:
        with Sampler(child.pid, interval_s=0.1) as sampler:
            time.sleep(args.seconds)
        tick = sampler.mean_tick_cost_ms
        stops = []
        for _ in range(args.stops):
            sampler = Sampler(child.pid, interval_s=1.0)
            sampler.start()
            time.sleep(0.3)  # inside an interval
            t0 = time.monotonic()
            sampler.stop()
            stops.append(time.monotonic() - t0)
    finally:
        child.kill()
        child.wait()
    print(f"mean tick {tick:.2f} ms (target < {TICK_MS:g}); stop() median {statistics.median(stops) * 1e3:.1f} ms, "
          f"max {max(stops) * 1e3:.1f} ms (target < {STOP_S * 1e3:g})")
    return 0 if tick < TICK_MS and max(stops) < STOP_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
