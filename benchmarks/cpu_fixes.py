"""CPU fixes checked outside advise's own arms: each fix as a fresh process against the plain script.

For each (script, override) pair: fresh probe runs of the script with no override and with the
override applied from the start, alternating (plain, fix, plain, fix, ...) `--repeats` times,
no profiler window. Per run the median step time of the measured steps; the figure is the
ratio of the medians over runs (plain / fix), with the spread of the per-run ratios. What the
in-process arms of `advise profile` report for the same fix should agree with it.

    python benchmarks/cpu_fixes.py [--repeats 3] [--steps 20] [--only NAME]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from advisor.analysis import steptime
from advisor.probe.runner import ProbeConfig, run_probe
from advisor.profile import Profile

WORKLOADS = Path(__file__).resolve().parents[1] / "tests" / "workloads"
CASES = {  # name: (script, script args, override)
    "zoo-adam-fused": (WORKLOADS / "zoo" / "cpu_single_tensor_adam.py", [], {"optimizer": {"fused": True}}),
    "zoo-small-ops-compile": (WORKLOADS / "zoo" / "cpu_many_small_ops.py", [], {"compile": True}),
    "zoo-one-thread": (WORKLOADS / "zoo" / "cpu_one_thread.py", [], {"torch_threads": 2}),
    "zoo-zero-grad": (WORKLOADS / "zoo" / "zero_grad_keeps_grads.py", [], {"zero_grad_set_to_none": True}),
    "nanogpt-compile": (WORKLOADS / "nanogpt" / "train_char_cpu.py", ["--eval_iters=2"], {"compile": True}),
    "nanogpt-fused": (WORKLOADS / "nanogpt" / "train_char_cpu.py", ["--eval_iters=2"], {"optimizer": {"fused": True}}),
    "word-lm-adamw-fused": (WORKLOADS / "word_lm" / "main.py",
                            ["--vocab", "10000", "--tokens", "60000", "--use-optimizer", "--lr", "1e-3"],
                            {"optimizer": {"fused": True}}),
}


def step_time(script: Path, args: list[str], overrides: dict, out: Path, steps: int, warmup: int) -> float | None:
    run = run_probe(ProbeConfig(script=str(script), args=args, out=out, warmup=warmup, steps=steps, profile_steps=0,
                                overrides=overrides, timeout_s=600))
    if run.status != "ok":
        return None
    return steptime.throughput(Profile.from_run_dir(out).steps)["step_time_median_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5, help="compile happens here: keep it above 2")
    parser.add_argument("--only", help="run one case (" + ", ".join(CASES) + ")")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="advise-cpu-fixes-"))
    for name, (script, script_args, overrides) in CASES.items():
        if args.only and name != args.only:
            continue
        plain, fixed = [], []
        for i in range(args.repeats):
            plain.append(step_time(script, script_args, {}, tmp / f"{name}-{i}-plain", args.steps, args.warmup))
            fixed.append(step_time(script, script_args, overrides, tmp / f"{name}-{i}-fix", args.steps, args.warmup))
        pairs = [(p, f) for p, f in zip(plain, fixed) if p and f]
        if not pairs:
            print(f"{name:24s} failed (see {tmp})")
            continue
        ratios = [p / f for p, f in pairs]
        p_med, f_med = statistics.median(p for p, _ in pairs), statistics.median(f for _, f in pairs)
        print(f"{name:24s} plain {p_med * 1e3:8.1f} ms  fix {f_med * 1e3:8.1f} ms  speedup {p_med / f_med:5.2f}x "
              f"(per-run {min(ratios):.2f}-{max(ratios):.2f}x, {len(pairs)} pairs)  {overrides}")


if __name__ == "__main__":
    main()
