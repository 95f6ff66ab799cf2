"""False alarms of the regression gate: rerun one unchanged workload N times, one after the
other as CI runs are, and compare every run against the first with `advise compare`'s rule.
Every regression it reports is a false alarm (goal: 0).

For contrast it also counts what two simpler gates would have said about the same runs: the
threshold alone (a fixed-percentage gate) and the significance test alone.

    python benchmarks/compare_false_alarms.py [--runs 10] [--max-regression 10%] [-- SCRIPT ARGS]

The default workload is tests/workloads/slowdown_knob.py at --slowdown 1 (~40 ms steps, mostly
sleep); `-- --step-ms 0` makes it pure CPU work, the noisier case.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from advisor.gate import compare as cmp  # noqa: E402

WORKLOAD = REPO / "tests" / "workloads" / "slowdown_knob.py"


def profile(script: Path, out: Path, steps: int, warmup: int, script_args: list[str]) -> dict:
    cmd = [sys.executable, "-m", "advisor", "profile", "--steps", str(steps), "--warmup", str(warmup),
           "--profile-steps", "0", "--no-experiments", "--out", str(out), str(script), *script_args]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return cmp.load(out / "report.json", "run")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--script", type=Path, default=WORKLOAD)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--max-regression", default="10%", help="the gate's threshold (advise compare's default: 10%%)")
    parser.add_argument("--alpha", type=float, default=cmp.DEFAULT_ALPHA)
    parser.add_argument("script_args", nargs="*", help="after --: the workload's own arguments")
    args = parser.parse_args()
    threshold = cmp.parse_percent(args.max_regression)

    reports = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            reports.append(profile(args.script, Path(tmp) / f"run{i}", args.steps, args.warmup, args.script_args))
            print(f"run {i}: median step {reports[-1]['throughput']['step_time_median_s'] * 1e3:.2f} ms", flush=True)

    print(f"\nthreshold: --max-regression {threshold:.0%}, alpha {args.alpha:g} (one-sided Mann-Whitney U), "
          f"{args.steps} steps per run, {args.script.name} {' '.join(args.script_args)}".rstrip())
    print(f"{'run':>4} {'throughput':>11} {'median step':>12} {'p':>9}  verdict")
    alarms = improvements = ratio_only = test_only = 0
    for i, report in enumerate(reports[1:], start=1):
        result = cmp.compare(reports[0], report, max_regression=threshold, alpha=args.alpha)
        gated = [m for m in result.metrics if m.name in ("throughput", "step_time_median")]
        tput, step = gated
        alarms += result.failed
        improvements += any(m.verdict == cmp.IMPROVEMENT for m in gated)
        slower = [(1 / (1 + m.change) if m.higher_is_better else 1 + m.change) - 1 for m in gated]
        ratio_only += any(s > threshold for s in slower)
        test_only += any(m.p_value is not None and m.p_value < args.alpha for m in gated)
        verdicts = ", ".join(f"{m.name}: {m.verdict}" for m in gated)
        print(f"{i:>4} {tput.change:>+11.1%} {step.change:>+12.1%} {step.p_value:>9.2g}  {verdicts}")

    # Every ordered pair, for a steadier rate than the 9 comparisons against run 0.
    pairs = [(i, j) for i in range(len(reports)) for j in range(len(reports)) if i != j]
    pair_alarms = sum(cmp.compare(reports[i], reports[j], max_regression=threshold, alpha=args.alpha).failed
                      for i, j in pairs)
    medians = [r["throughput"]["step_time_median_s"] for r in reports]

    n = len(reports) - 1
    print(f"\nfalse alarms: {alarms} of {n} comparisons against run 0 "
          f"(advise compare, --max-regression {threshold:.0%}, alpha {args.alpha:g})")
    print(f"  spurious improvements: {improvements} of {n}; "
          f"threshold alone would have flagged {ratio_only} of {n}; the test alone (p < {args.alpha:g}) {test_only} of {n}")
    print(f"  all ordered pairs: {pair_alarms} false alarms of {len(pairs)}; "
          f"run medians spread {max(medians) / min(medians):.2f}x (slowest / fastest)")


if __name__ == "__main__":
    main()
