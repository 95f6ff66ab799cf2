"""An answer in minutes: advise's default run against `--no-experiments` on the same script, whole
processes, alternating (N D N D ...), each wall time from the command's start to its exit; then
one run with `--time-budget 900`, whose top verified claim the default run's should match (the
same fix, the default's figure within the long run's interval for the same values: a sweep whose
leaders tie may settle on either), and the default's recommendation never below a verified single
fix of its own run.

    python benchmarks/time_to_advice.py [--cases wlm-lstm,rl-reinforce,...] [--pairs 2]

Goal (issue 49): every default/--no-experiments ratio at most 2.5x, no top claim lost. Needs a
quiet machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "truth"))

from fetch import prepare_base
from run import corpus_args, BY_NAME, family, read_advise, run_advise

DEFAULT_CASES = "wlm-lstm,nanogpt-char,mingpt-adder,rl-reinforce,loader-starved"
GOAL = 2.5
DEFAULT_ONLY = "default's only"  # the default run verified a fix the long one did not: nothing lost


def top(report: dict) -> dict | None:
    """The run's top verified claim (a finding's own fix, not a sweep's other rung)."""
    claims = [c for c in report.get("claims") or [] if c["verified"] and "[" not in (c.get("title") or "")]
    return max(claims, key=lambda c: c["speedup"], default=None)


def reading_of(report: dict, overrides: dict) -> dict | None:
    """`report`'s reading of exactly `overrides` (a finding's own fix or a sweep's rung), if it has one."""
    key = json.dumps(overrides, sort_keys=True)
    return next((c for c in report.get("claims") or [] if c.get("speedup") is not None
                 and json.dumps(c["overrides"], sort_keys=True) == key), None)


def kept(mine: dict | None, theirs: dict | None, long: dict) -> bool:
    """The default's top claim is the long run's: both none, or the same fix whose figure lies within
    the long run's interval for the same values (else its top claim's)."""
    if mine is None or theirs is None:
        return mine is None and theirs is None
    if family(mine["overrides"]) != family(theirs["overrides"]):
        return False
    same = reading_of(long, mine["overrides"]) or theirs
    return same["ci_low"] <= mine["speedup"] <= same["ci_high"]


def named(theirs: dict | None, run_dir: Path) -> bool:
    """The long run's top claim is one the default run measured, left without a verdict when its
    budget ended, and named with what it read and the command that decides it (report.json's
    `experiments.left_out`)."""
    if theirs is None:
        return False
    left = (json.loads((run_dir / "report.json").read_text()).get("experiments") or {}).get("left_out") or []
    return any(family(x.get("overrides")) == family(theirs["overrides"]) and x.get("command") and x.get("speedup")
               for x in left)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=DEFAULT_CASES)
    p.add_argument("--pairs", type=int, default=2)
    corpus_args(p, advise_timeout=1800.0)
    args = p.parse_args()
    args.advise_args = []
    work = args.work.expanduser().resolve()
    rows = []
    for name in args.cases.split(","):
        case = BY_NAME[name]
        base = prepare_base(case, work, args.datasets.resolve())
        walls: dict[str, list[float]] = {"diagnose": [], "default": []}
        last = {}
        for i in range(args.pairs):
            for kind, extra in (("diagnose", ("--no-experiments",)), ("default", ())):
                out = work / "tta" / name / f"{kind}-{i}"
                meta = run_advise(case, base, work, args, out_dir=out, extra=extra)
                walls[kind].append(meta["wall_s"])
                last[kind] = read_advise(case, work, out)
                print(f"  {name} {kind} {i}: {meta['wall_s']} s (exit {meta['exit']})", flush=True)
        long_out = work / "tta" / name / "budget-900"
        meta = run_advise(case, base, work, args, out_dir=long_out, extra=("--time-budget", "900"))
        long = read_advise(case, work, long_out)
        ratio = statistics.median(walls["default"]) / statistics.median(walls["diagnose"])
        mine, theirs = top(last["default"]), top(long)
        same = "same" if kept(mine, theirs, long) else \
            "named, undecided" if named(theirs, work / "tta" / name / f"default-{args.pairs - 1}") else \
            DEFAULT_ONLY if theirs is None else "LOST"
        rec = last["default"].get("recommended") or {}
        singles = [c["speedup"] for c in last["default"].get("claims") or [] if c["verified"]]
        rec_ok = not singles or (rec.get("verified") and (rec.get("speedup") or 0) >= max(singles) * 0.97)
        fmt = lambda c: "none" if c is None else f"{c['code']} {family(c['overrides'])} {c['speedup']:.2f}x ({c['ci_low']:.2f}-{c['ci_high']:.2f})"  # noqa: E731
        rows.append((name, f"{statistics.median(walls['diagnose']):.1f}", f"{statistics.median(walls['default']):.1f}",
                     f"{ratio:.2f}x", f"{meta['wall_s']:.0f}", fmt(mine), fmt(theirs), same,
                     "ok" if rec_ok else "BELOW A SINGLE FIX"))
        print(" | ".join(rows[-1]), flush=True)
    print("\n| script | --no-experiments s | default s | ratio | --time-budget 900 s | default's top claim | 900's top claim | | recommendation |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    ratios = [float(r[3][:-1]) for r in rows]
    print(f"\nratios at most {GOAL}x: {sum(x <= GOAL for x in ratios)} of {len(ratios)}; "
          f"top claim kept: {sum(r[7] == 'same' for r in rows)} of {len(rows)}, "
          f"named undecided with its command: {sum(r[7] == 'named, undecided' for r in rows)}, "
          f"verified by the default run alone: {sum(r[7] == DEFAULT_ONLY for r in rows)}, "
          f"lost: {sum(r[7] == 'LOST' for r in rows)}")


if __name__ == "__main__":
    main()
