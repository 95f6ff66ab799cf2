"""The gate's premise, measured: how much of an A/A comparison's spread taking turns cancels.

The same script as both sides, run as a duet (:mod:`advisor.gate.duet`: both children alive, taking
turns in windows of `--window-s`), restarted `--restarts` times, quiet and beside one CPU burner
(on 1-4 s, off 0-3 s, as benchmarks/gate_quality.py's). From each duet:

- the window pairs' log ratios (a candidate window against the base windows either side of it):
  their sd within a duet is the time-varying part a duet leaves (what more windows average);
- the duet's mean log ratio: its sd across restarts, less what the windows explain, is the level
  of a process (a fresh process's layout, its threads' placement), which only more restarts average.

And beside them the sequential design (today's gate): `--sequential` pairs of whole runs, one
after the other, each read at its median step. From the two parts, the restarts and windows a gate
needs for a minimum detectable change of 5% (two-sided alpha 0.05, power 0.8):
MDC = (1.96 + 0.84) * sqrt(level^2 / R + window^2 / (R * K)).

    python benchmarks/duet_premise.py --restarts 6 --windows 12 --window-s 0.5 --sequential 6

Prints one table; --json writes the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from advisor.gate.duet import Duet, log_ratios  # noqa: E402
from advisor.probe.config import ProbeConfig  # noqa: E402
from gate_quality import NEIGHBOUR  # noqa: E402  # the gate benchmark's CPU burner

SCRIPT = ROOT / "tests" / "workloads" / "slowdown_knob.py"
Z = 1.959964 + 0.841621  # two-sided alpha 0.05, power 0.8


def duet(work: Path, args: list[str], window_s: float, windows: int, first: str) -> dict:
    def config(side: str) -> ProbeConfig:
        return ProbeConfig(script=str(SCRIPT), args=list(args), out=work / side, warmup=3, steps=3, profile_steps=0,
                           timeout_s=180)
    t0 = time.monotonic()
    turns, runs = Duet({"base": config("base"), "cand": config("cand")}, window_s=window_s, windows=windows,
                       first=first).run()
    ratios = log_ratios(turns, "base", "cand")
    waits = [t.wait for t in turns if t.wait is not None]
    return {"wall_s": time.monotonic() - t0, "status": {k: r.status for k, r in runs.items()}, "ratios": ratios,
            "mean": statistics.fmean(ratios) if ratios else math.nan,
            "sd": statistics.stdev(ratios) if len(ratios) > 1 else math.nan,
            "disturbed": sum(w >= 0.05 for w in waits) / len(waits) if waits else math.nan,
            "medians_ms": [round(t.median_s * 1e3, 3) for t in turns if t.median_s]}


def whole_run(work: Path, args: list[str], steps: int) -> float:
    """One whole run's median step, seconds (advise profile --no-experiments, as the gate's rounds)."""
    out = work / f"seq-{time.monotonic_ns()}"
    subprocess.run([sys.executable, "-m", "advisor", "profile", "--no-experiments", "--steps", str(steps),
                    "--profile-steps", "0", "--out", str(out), str(SCRIPT), *args],
                   cwd=work, capture_output=True, check=True)
    report = json.loads((out / "report.json").read_text())
    return statistics.median(s["duration_s"] for s in report["steps"])


def summary(duets: list[dict], seq: list[float], windows: int) -> dict:
    means = [d["mean"] for d in duets if not math.isnan(d["mean"])]
    within = statistics.fmean([d["sd"] ** 2 for d in duets if not math.isnan(d["sd"])]) ** 0.5 if duets else math.nan
    between = statistics.stdev(means) if len(means) > 1 else math.nan
    n = statistics.fmean([len(d["ratios"]) for d in duets]) if duets else 1
    level = math.sqrt(max(0.0, between ** 2 - within ** 2 / n)) if not math.isnan(between) else math.nan
    out = {"duets": len(duets), "window_sd": within, "duet_mean_sd": between, "level_sd": level,
           "duet_wall_s": statistics.fmean([d["wall_s"] for d in duets]) if duets else math.nan,
           "disturbed_share": statistics.fmean([d["disturbed"] for d in duets]) if duets else math.nan,
           "sequential_sd": statistics.stdev(seq) if len(seq) > 1 else math.nan, "sequential_pairs": len(seq)}
    for restarts in (1, 2, 3, 4, 6, 8):
        out[f"mdc_R{restarts}"] = math.expm1(Z * math.sqrt(level ** 2 / restarts + within ** 2 / (restarts * windows)))
    out["mdc_sequential_R10"] = math.expm1(Z * out["sequential_sd"] / math.sqrt(10)) if len(seq) > 1 else math.nan
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--restarts", type=int, default=6)
    parser.add_argument("--windows", type=int, default=12, help="windows per side and duet")
    parser.add_argument("--window-s", type=float, default=0.5)
    parser.add_argument("--sequential", type=int, default=6, help="pairs of whole runs, one after the other")
    parser.add_argument("--steps", type=int, default=150, help="a whole run's measured steps")
    parser.add_argument("--modes", default="quiet,burner")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("workload", nargs="*", default=["--step-ms", "0", "--width", "4096", "--batch-size", "512"])
    args = parser.parse_args()
    figures = {}
    with tempfile.TemporaryDirectory(prefix="duet-premise-") as tmp:
        work = Path(tmp)
        for mode in args.modes.split(","):
            burner = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, "7", "1,4", "0,3"]) if mode == "burner" else None
            try:
                duets, seq = [], []
                for r in range(args.restarts):  # a duet, then a sequential pair: both designs see the same hour
                    duets.append(duet(work / f"{mode}-{r}", args.workload, args.window_s, args.windows,
                                      "base" if r % 2 == 0 else "cand"))  # who opens: alternated
                    if r < args.sequential:
                        a, b = whole_run(work, args.workload, args.steps), whole_run(work, args.workload, args.steps)
                        seq.append(math.log(b / a))
                    print(f"{mode} {r}: duet mean {math.exp(duets[-1]['mean']):.4f} sd {duets[-1]['sd']:.4f} "
                          f"({len(duets[-1]['ratios'])} pairs, {duets[-1]['wall_s']:.1f} s)"
                          + (f"; sequential {math.exp(seq[-1]):.4f}" if r < args.sequential else ""), flush=True)
            finally:
                if burner is not None:
                    burner.kill()
            figures[mode] = {**summary(duets, seq, args.windows), "raw": duets, "sequential": seq}
    print(f"\n{'mode':8} {'window sd':>10} {'duet sd':>8} {'level sd':>9} {'seq sd':>7} {'disturbed':>9} "
          f"{'MDC R=1':>8} {'R=3':>6} {'R=6':>6} {'seq R=10':>9} {'duet s':>7}")
    for mode, f in figures.items():
        print(f"{mode:8} {f['window_sd']:10.4f} {f['duet_mean_sd']:8.4f} {f['level_sd']:9.4f} {f['sequential_sd']:7.4f} "
              f"{f['disturbed_share']:9.0%} {f['mdc_R1']:8.1%} {f['mdc_R3']:6.1%} {f['mdc_R6']:6.1%} "
              f"{f['mdc_sequential_R10']:9.1%} {f['duet_wall_s']:7.1f}")
    print(f"(workload: {' '.join(args.workload)}; {args.windows} windows of {args.window_s} s per side; "
          f"{os.cpu_count()} cores)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
