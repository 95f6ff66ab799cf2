"""Do in-process arms and fresh-run experiments agree? Every zoo case, both modes, side by side.

For each workload, `advise profile` (arms in the profiled run) and `advise profile --fresh-runs`
(each fix a re-run of the script), alternating which goes first. For every finding both modes
measured, the two speedup intervals are compared: they agree when the intervals overlap. Prints
one row per finding and the count of agreements; exits 1 when any measured pair disagrees.

    python benchmarks/modes_agree.py [--steps 12] [--only starved_io,healthy_small_cnn]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = sorted(p for p in (ROOT / "tests" / "workloads" / "zoo").glob("*.py") if not p.name.startswith("_"))
CASES.append(ROOT / "tests" / "workloads" / "starved_io.py")


def run(workload: Path, out: Path, steps: int, fresh: bool) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "advisor", "profile", "--steps", str(steps), "--warmup", "3", "--profile-steps", "3",
           "--max-experiments", "4", "--out", str(out), *(["--fresh-runs"] if fresh else []), str(workload)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=workload.parent)
    wall = time.monotonic() - t0
    try:
        return wall, json.loads((out / "report.json").read_text())
    except (OSError, ValueError):
        print(f"  {workload.name}: no report ({proc.returncode}): {proc.stderr[-300:]}", file=sys.stderr)
        return wall, {}


def measured(report: dict) -> dict[str, dict]:
    return {f["code"]: f["experiment"] for f in report.get("findings", [])
            if (f.get("experiment") or {}).get("speedup") is not None and f["experiment"].get("ci_low") is not None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--only", default="", help="comma-separated workload names (no .py)")
    args = parser.parse_args()
    cases = [c for c in CASES if not args.only or c.stem in args.only.split(",")]
    rows, disagree = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for k, case in enumerate(cases):
            order = [False, True] if k % 2 == 0 else [True, False]
            got = {}
            for fresh in order:
                got[fresh] = run(case, Path(tmp) / f"{case.stem}-{'fresh' if fresh else 'arms'}", args.steps, fresh)
            (wall_a, arms), (wall_f, fresh) = got[False], got[True]
            a, f = measured(arms), measured(fresh)
            codes = sorted(set(a) | set(f))
            if not codes:
                rows.append((case.stem, "-", "-", "-", "no measured fix in either mode", wall_a, wall_f))
            for code in codes:
                ea, ef = a.get(code), f.get(code)
                if ea and ef:
                    ok = ea["ci_low"] <= ef["ci_high"] and ef["ci_low"] <= ea["ci_high"]
                    disagree += not ok
                    verdict = "agree" if ok else "DISAGREE"
                else:
                    verdict = "only one mode measured it"
                rows.append((case.stem, code, _x(ea), _x(ef), verdict, wall_a, wall_f))
    print(f"{'workload':28} {'code':7} {'in-process':26} {'fresh runs':26} {'verdict':28} {'wall arms/fresh'}")
    for name, code, xa, xf, verdict, wa, wf in rows:
        print(f"{name:28} {code:7} {xa:26} {xf:26} {verdict:28} {wa:5.1f} s / {wf:5.1f} s")
    pairs = sum(1 for r in rows if r[4] in ("agree", "DISAGREE"))
    print(f"\n{pairs - disagree} of {pairs} fixes measured by both modes agree (overlapping 95% intervals)")
    return 1 if disagree else 0


def _x(e: dict | None) -> str:
    if not e:
        return "-"
    return f"{e['speedup']:.2f}x ({e['ci_low']:.2f}-{e['ci_high']:.2f})"


if __name__ == "__main__":
    sys.exit(main())
