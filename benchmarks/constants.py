"""The constants that choose what advise measures, each at its chosen value and at one alternative,
on the truth corpus's cases it acts on (issue 65): per case and value, what the default run
recommended, its by-hand figure against the best by hand, whether it was verified, and the time to
advice. Runs alternate chosen, alternative, chosen, ... so a machine's drift hits both.

    python benchmarks/constants.py [--only budget,window-floor,...] [--runs 2] [--cases a,b]

A constant is set in the advise process by a wrapper that assigns it before the CLI starts (every
module that holds it by name, listed below): advise itself has no switch for them. The by-hand
figures are the truth harness's cache (benchmarks/truth/run.py; run it first). Needs a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "truth"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fetch import prepare_base
from reproducibility import NEAR_BEST, hand_speedups
from run import corpus_args, BY_NAME, cached_hand, match, read_advise, run_advise

LOADERS = ("loader-io-workers", "loader-cpu-workers", "loader-starved")
# name -> (the places that hold it, chosen, alternative, the cases it acts on)
CONSTANTS: dict[str, tuple[tuple[str, ...], object, object, tuple[str, ...]]] = {
    "budget": (("advisor.probe.config:AUTO_BUDGET_FACTOR",), 1.35, 1.0,
               ("loader-io-workers", "loader-cpu-workers", "tiny-gpt", "conv-mnist", "loader-starved")),
    "budget-floor": (("advisor.probe.config:AUTO_BUDGET_MIN_S",), 10.0, 5.0,
                     ("nanogpt-char-eval", "tiny-gpt", "loader-io-workers", "conv-mnist")),
    "window-floor": (("advisor.experiments.sizing:MIN_WINDOW_S", "advisor.experiments.spend:MIN_WINDOW_S"), 0.5, 0.25,
                     ("tiny-gpt", "loader-io-workers", "conv-mnist")),
    "bursts": (("advisor.experiments.sizing:BURSTS",), 10, 5, LOADERS),
    "one-thread-extra": (("advisor.overrides:ONE_THREAD_EXTRA_UP_TO",), 4, 0, ("loader-cpu-workers", "loader-starved")),
    "drain": (("advisor.experiments.sizing:IDLE_LOADER_WAIT",), 0.05, 0.0, ("mingpt-chargpt",)),
    # beside the burner (--burner): the wait that sets a window aside
    "disturbed-wait": (("advisor.analysis.metrics:DISTURBED_WAIT",), 0.05, 0.15, ("loader-io-workers", "tiny-gpt")),
}
WRAPPER = ("import importlib, json, sys\n"
           "for place, value in json.loads(sys.argv.pop(1)):\n"
           "    module, name = place.split(':')\n"
           "    setattr(importlib.import_module(module), name, value)\n"
           "from advisor.commands.launch import main\n"
           "sys.argv[0] = 'advise'\n"
           "main()\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="comma-separated constants: " + ", ".join(CONSTANTS))
    p.add_argument("--cases", help="comma-separated cases: only these of each constant's own")
    p.add_argument("--runs", type=int, default=2, help="runs per value")
    p.add_argument("--burner", action="store_true", help="beside the reproducibility benchmark's burner")
    corpus_args(p, advise_timeout=900.0)
    args = p.parse_args()
    unknown = [c for c in (args.only.split(",") if args.only else []) if c not in CONSTANTS]
    if unknown:
        p.error(f"unknown constant {', '.join(unknown)} (constants: {', '.join(CONSTANTS)})")
    args.advise_args = []
    from reproducibility import burner

    work = args.work.expanduser().resolve()
    rows = []
    for const in (args.only.split(",") if args.only else CONSTANTS):
        places, chosen, alternative, cases = CONSTANTS[const]
        for name in [c for c in cases if not args.cases or c in args.cases.split(",")]:
            case = BY_NAME[name]
            base = prepare_base(case, work, args.datasets.resolve())
            truth = hand_speedups(cached_hand(case, work, None))
            best = max([1.0, *truth.values()])
            for i in range(args.runs):
                for value in (chosen, alternative):
                    out = work / "constants" / const / name / f"{value}-{i}"
                    setting = json.dumps([[place, value] for place in places])
                    launcher = ("-c", WRAPPER, setting)
                    with burner(args.burner):
                        meta = run_advise(case, base, work, args, out_dir=out, launcher=launcher)
                    rec = (read_advise(case, work, out).get("recommended") or {})
                    v, _ = match({"overrides": rec.get("overrides")}, case) if rec.get("overrides") else (None, False)
                    rec_truth = (truth.get(v.name) if v else None) if rec.get("overrides") else 1.0
                    near = rec_truth is not None and rec_truth >= NEAR_BEST * best
                    said = f"{rec['speedup']:.2f}{' V' if rec.get('verified') else ''}" if rec.get("speedup") else "-"
                    row = (const, name, value, i, v.name if v else ("nothing" if not rec.get("overrides") else "?"),
                           said, f"{rec_truth:.2f}" if rec_truth else "-", f"{best:.2f}", "near" if near else "",
                           meta["wall_s"], meta["exit"])
                    rows.append(row)
                    print(" | ".join(str(c) for c in row), flush=True)
    print("\nconstant | case | value | run | recommended | claimed | by hand | best by hand | within 10% | wall s | exit")
    for row in rows:
        print(" | ".join(str(c) for c in row))
    (work / "constants.json").write_text(json.dumps({"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
