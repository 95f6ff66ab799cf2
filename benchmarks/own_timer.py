"""advise's throughput against the script's own per-step timer, over the same steps (issue 66).

Each case of the truth harness named runs once under `advise profile --no-experiments` with its
timing patches applied (the lines by-hand runs read: nanoGPT's own `iter N: loss L, time T ms`,
vision's log_every times as `truth-step`). advise's measured steps are matched to the script's
lines by their loss, then over the unprofiled steps advise's rate is held against the script's:

- **own, the phases out**: the script's times over those steps, with no evaluation, checkpoint or
  loader shutdown in them. nanoGPT's own timer holds an evaluation and a save in the iteration that
  runs them: less the time advise timed for them; vision's holds none of the three (they come
  after log_every's last step and before its next first one).
- **steps without a phase**: both figures over the steps that held none.

    python benchmarks/own_timer.py [--cases nanogpt-char-eval,vision-classification] [--datasets DIR]

vision needs torchvision: run it from a venv that has it. Needs a quiet machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "truth"))

from cases import BY_NAME, Case
from fetch import case_env, prepare_base, working_copy

WINDOW = ("--no-experiments", "--steps", "30")
PHASES = ("eval_s", "checkpoint_s", "loader_end_s")
BAR = 0.05
# whether the script's own step time holds the loop's phases that fall in it
OWN_HOLDS_PHASES = {"nanogpt-char-eval": True, "vision-classification": False}


def own_steps(case: Case, log: str) -> list[tuple[float, float]]:
    """The script's own (loss, seconds) per training step, in order."""
    return [(float(m["loss"]), float(m["ms"]) / 1e3) for m in re.finditer(case.timing, log, re.M)]


def compare(case: Case, run_dir: Path) -> dict:
    rows = list(csv.DictReader(open(run_dir / "steps.csv")))
    own = own_steps(case, (run_dir / "script.log").read_text())
    losses = [float(r["loss"]) for r in rows]
    start = next((i for i in range(len(own) - 2) if all(abs(own[i + k][0] - losses[k]) < 2e-4 for k in range(3))), None)
    if start is None:
        raise SystemExit(f"{case.name}: advise's steps not found among the script's own lines (by their loss)")
    phase = [sum(float(r.get(c) or 0.0) for c in PHASES) for r in rows]
    kept = [k for k, r in enumerate(rows) if r["profiled"] == "False"]
    plain = [k for k in kept if phase[k] == 0.0]
    samples = lambda ks: sum(int(rows[k]["samples"]) for k in ks)  # noqa: E731
    advise = json.loads((run_dir / "report.json").read_text())["throughput"]["samples_per_s"]
    held = OWN_HOLDS_PHASES[case.name]
    own_less = samples(kept) / sum(own[start + k][1] - (phase[k] if held else 0.0) for k in kept)
    advise_plain = samples(plain) / sum(float(rows[k]["duration_s"]) for k in plain)
    own_plain = samples(plain) / sum(own[start + k][1] for k in plain)
    return {"case": case.name, "steps": len(kept), "with_phase": len(kept) - len(plain), "advise": advise,
            "own_less_phases": own_less, "ratio": advise / own_less, "advise_plain": advise_plain,
            "own_plain": own_plain, "ratio_plain": advise_plain / own_plain}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="nanogpt-char-eval,vision-classification")
    p.add_argument("--work", type=Path, default=Path.home() / ".cache" / "advise-truth")
    p.add_argument("--datasets", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "datasets")
    args = p.parse_args()
    worst = 0.0
    print("| case | steps (with a phase) | advise samples/s | own, the phases out | ratio | "
          "steps without a phase: advise / own | ratio |\n|---|---|---|---|---|---|---|")
    for name in args.cases.split(","):
        case = BY_NAME[name]
        base = prepare_base(case, args.work, args.datasets)
        root = working_copy(base, "own-timer", case.timing_patches)
        out = args.work / "own-timer" / case.name
        cmd = [sys.executable, "-m", "advisor", "profile", "--out", str(out), *WINDOW, case.script, *case.argv]
        proc = subprocess.run(cmd, cwd=root / case.cwd, env=case_env(case, root, args.work), capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"{name}: advise exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
        r = compare(case, out)
        worst = max(worst, abs(r["ratio"] - 1), abs(r["ratio_plain"] - 1))
        print(f"| {name} | {r['steps']} ({r['with_phase']}) | {r['advise']:.1f} | {r['own_less_phases']:.1f} | "
              f"{r['ratio']:.3f} | {r['advise_plain']:.1f} / {r['own_plain']:.1f} | {r['ratio_plain']:.3f} |")
    print(f"\nworst: {worst:.1%} apart (bar {BAR:.0%}): {'met' if worst <= BAR else 'NOT met'}")
    sys.exit(0 if worst <= BAR else 1)


if __name__ == "__main__":
    main()
