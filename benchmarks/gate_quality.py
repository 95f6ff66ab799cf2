"""Does the CI gate cry wolf, and does it catch real slowdowns? Whole `advise` commands, a noisy neighbour.

A shared runner's neighbour switches on and off: here CPU-burning processes (``--burners``, each
seeded) that stay on for a random 1-5 s and off for a random 1-5 s in turn (``--period``, or ``--on``
and ``--off`` apart) run beside every command. Each trial makes two checkouts of
tests/workloads/slowdown_knob.py (pure CPU work, ``--step-ms 0``); the candidate's copy plants a
slowdown by changing a default in its code (1.05, 1.10, 1.20), the base's is unchanged: with
``--plant wait`` the knob's (the step waits that much longer: a sleep), with ``--plant work`` the
hidden width's (that much more arithmetic per step, as a wider layer in a pull request is).

- **interleaved**: ``advise ab --base B --candidate C`` (its own defaults: 5% threshold, alpha 0.05
  over all metrics and looks, 6 rounds then up to 20 when suspected; 150 steps a run here, so a
  run's fast steps (its 5th percentile) are there to read); exit 3 is a regression.
- **saved baseline**: ``advise compare`` of the previous trial's first base run (a baseline saved
  minutes earlier, as a main-branch artifact is) against this trial's first candidate run.
- beside them, on the same report pairs: a fixed 10% threshold on the mean step
  (pytest-benchmark's ``--benchmark-compare-fail=mean:10%``), and asv's rule (ratio of medians
  above 1.1 and a Mann-Whitney U p < 0.05 over the steps), on the saved pair and on the same job's
  first pair of runs.

    python benchmarks/gate_quality.py [--aa-trials 40] [--trials 20] [--slowdowns 5,10,20] [--log F [--resume]]

Issue 53's noisy neighbour, `advise ab` as a new user runs it (its own defaults: a 6 s window a run,
a 300 s budget), an unchanged candidate and one a wider layer makes about 20% slower:

    python benchmarks/gate_quality.py --gate-defaults --plant work --burners 1 --on 1,4 --off 0,3 \
        --aa-trials 5 --trials 3 --slowdowns 20

Prints a markdown table: false alarms over the A/A trials, detections per planted slowdown, and
the median time one decision took. Full size (the defaults) takes hours on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from advisor.analysis import stats  # noqa: E402
from advisor.gate import ab, compare, sequential  # noqa: E402
from neighbours import start_trainer, stop_trainer  # noqa: E402  (benchmarks/neighbours.py)

WORKLOAD = REPO / "tests" / "workloads" / "slowdown_knob.py"
KNOBS = {"wait": 'parser.add_argument("--slowdown", type=float, default=1.0,',
         "work": 'parser.add_argument("--widen", type=float, default=1.0,'}
NEIGHBOUR = """
import os, random, sys, time
rng = random.Random(int(sys.argv[1]))
on = tuple(map(float, sys.argv[2].split(",")))
off = tuple(map(float, sys.argv[3].split(",")))
parent = os.getppid()
burning = rng.random() < 0.5
while os.getppid() == parent:  # the benchmark killed (SIGKILL, SIGTERM): its neighbour goes too
    until = time.monotonic() + rng.uniform(*(on if burning else off))
    if burning:
        while time.monotonic() < until:
            sum(i * i for i in range(2000))
    else:
        time.sleep(max(0.0, until - time.monotonic()))
    burning = not burning
"""


def advise(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    return subprocess.run([sys.executable, "-P", "-m", "advisor", *args], cwd=cwd, env=env, capture_output=True, text=True)


def checkout(root: Path, slowdown: float, plant: str = "wait") -> Path:
    """A folder holding train.py: the knob's workload, the slowdown planted in its code (a knob's default)."""
    root.mkdir(parents=True)
    text, knob = WORKLOAD.read_text(), KNOBS[plant]
    assert knob in text, "the workload's knob line changed: update KNOBS"
    (root / "train.py").write_text(text.replace(knob, knob.replace("default=1.0", f"default={slowdown}")))
    return root


def steps_of(report: dict) -> np.ndarray:
    return np.array([s["duration_s"] for s in report["steps"] if not s.get("profiled")], float)


def fixed_threshold(base: dict, cur: dict) -> bool:
    """pytest-benchmark: the mean step more than 10% slower."""
    return bool(steps_of(cur).mean() > 1.10 * steps_of(base).mean())


def asv_rule(base: dict, cur: dict) -> bool:
    """asv: the ratio of medians above 1.1, and the samples differ (Mann-Whitney U, p < 0.05)."""
    a, b = steps_of(base), steps_of(cur)
    return bool(np.median(b) / np.median(a) > 1.1 and stats.mann_whitney(a, b, "two-sided") < 0.05)


def trial(tmp: Path, name: str, slowdown: float, args: argparse.Namespace, saved: dict | None) -> dict:
    base, cand = checkout(tmp / name / "base", 1.0), checkout(tmp / name / "cand", slowdown, args.plant)
    out = tmp / name / "ab"
    started = time.monotonic()
    sized = [] if args.gate_defaults else ["--steps", str(args.steps), "--warmup", str(args.warmup), "--profile-steps", "0",
                                           "--rounds", str(args.rounds), "--max-rounds", str(args.max_rounds)]
    proc = advise("ab", "--mode", args.mode, "--base", str(base), "--candidate", str(cand), *sized, "--out", str(out),
                  "--json", "train.py", *args.workload)
    wall = time.monotonic() - started
    if proc.returncode not in (0, 3, 4):  # a failed round: said, counted, and the benchmark goes on
        logs = sorted(out.glob("*/round-*/script*.log"), key=lambda p: p.stat().st_mtime)
        tail = logs[-1].read_text(errors="replace")[-1500:] if logs else ""
        print(f"{name}: advise ab exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}\n{tail}", flush=True)
        return {"slowdown": slowdown, "error": True, "first_base": saved}
    decision = json.loads(proc.stdout)
    if args.mode == "duet":
        return duet_row(name, slowdown, proc.returncode, wall, decision)
    decision["runs"] = [r for r in decision["runs"] if not r.get("set_aside")]  # the rounds judged
    first_b = json.loads((out / "base" / "round-01" / "report.json").read_text())
    first_c = json.loads((out / "candidate" / "round-01" / "report.json").read_text())
    step = next((m for m in decision["metrics"] if m["name"] == "step_time"), {})
    cpu = next((m for m in decision["metrics"] if m["name"] == "cpu_time"), {})
    fast = {side: [r["step_time_fast_s"] for r in decision["runs"] if r["side"] == side] for side in ("base", "candidate")}
    cpu_steps = {side: [r.get("cpu_step_s") for r in decision["runs"] if r["side"] == side] for side in ("base", "candidate")}
    lengths = [r["steps"] for r in decision["runs"] if r["side"] == "base"]
    memory = {side: [r.get("memory") or {} for r in decision["runs"] if r["side"] == side] for side in ("base", "candidate")}
    row = {"trial": name, "slowdown": slowdown, "ab": proc.returncode == 3, "ab_inconclusive": proc.returncode == 4,
           "ab_pass": proc.returncode == 0, "ab_s": wall, "exit": proc.returncode,
           "decided_by": decision.get("decided_by"), "time": decision.get("time"), "set_aside": len(decision.get("set_aside") or []),
           "rounds": decision["statistics"]["rounds"], "fast_steps": fast, "memory": memory,
           "cpu_steps": cpu_steps, "cpu_gated": bool(cpu.get("gated")), "lengths": lengths,
           "ab_step": {k: step.get(k) for k in ("slowdown", "p_value", "floor", "verdict")},
           "ab_cpu": {k: cpu.get(k) for k in ("slowdown", "p_value", "floor", "verdict")},
           "job_fixed": fixed_threshold(first_b, first_c), "job_asv": asv_rule(first_b, first_c), "first_base": first_b}
    if saved is not None:
        saved_path, cur_path = tmp / name / "saved.json", out / "candidate" / "round-01" / "report.json"
        saved_path.write_text(json.dumps(saved))
        cmp = advise("compare", str(saved_path), str(cur_path), "--json")
        if cmp.returncode not in (0, 3, 4):
            raise SystemExit(f"advise compare exited {cmp.returncode}: {cmp.stderr[-2000:]}")
        row.update(saved=cmp.returncode == 3, saved_fixed=fixed_threshold(saved, first_c), saved_asv=asv_rule(saved, first_c),
                   saved_s=first_c.get("total_wall_s"))
    return row


def duet_row(name: str, slowdown: float, code: int, wall: float, decision: dict) -> dict:
    """A duet gate's trial: its verdict, figures and the smallest change it could see (no run's
    report.json: the sides' children write steps, not reports, so no saved-baseline comparison)."""
    metric = {m["name"]: m for m in decision["metrics"]}
    step, cpu = metric.get("step_time", {}), metric.get("cpu_time", {})
    return {"trial": name, "slowdown": slowdown, "ab": code == 3, "ab_inconclusive": code == 4, "ab_pass": code == 0,
            "ab_s": wall, "exit": code, "decided_by": decision.get("decided_by"), "time": decision.get("time"),
            "set_aside": 0, "rounds": decision["statistics"]["rounds"], "cpu_gated": bool(cpu.get("gated")),
            "disturbed": (decision.get("time") or {}).get("disturbed"),
            "ab_step": {k: step.get(k) for k in ("slowdown", "p_value", "floor", "verdict", "upper", "mdc")},
            "ab_cpu": {k: cpu.get(k) for k in ("slowdown", "p_value", "floor", "verdict", "upper", "mdc")},
            "first_base": None}


def replay(row: dict, rounds: int, max_rounds: int) -> bool | None:
    """Whether `advise ab --rounds R --max-rounds M` finds a regression on the same runs (:func:`replay_verdict`)."""
    verdict = replay_verdict(row, rounds, max_rounds)
    return None if verdict is None else verdict == "regression"


def replay_verdict(row: dict, rounds: int, max_rounds: int, wall_only: bool = False) -> str | None:
    """What `advise ab --rounds R --max-rounds M` decides on the same runs (the first rounds of this
    trial's, looked at as that budget looks): regression, inconclusive or pass; None where the trial
    stopped before that budget's decision. The same rule: step time, CPU time per step and peak
    memory, Holm, alpha spent per look; `wall_only` leaves the CPU time out (the gate before it)."""
    fast, memory = row.get("fast_steps"), row.get("memory")
    if not fast or not memory:
        return None
    plan = sequential.looks(rounds, max_rounds)
    common = [b for b, _, _ in compare.MEMORY_FIGURES if all(b in m for side in memory.values() for m in side)]
    options = ab.ABOptions(rounds=rounds, max_rounds=max_rounds)
    label = next(lab for b, lab, _ in compare.MEMORY_FIGURES if b == common[0]) if common else None
    cpu_steps, lengths = row.get("cpu_steps"), row.get("lengths")
    for at in plan:
        if at > min(len(fast["base"]), len(fast["candidate"])):
            return None
        if lengths and lengths[at - 1] != lengths[0]:
            return None  # this trial's rounds grew longer before that look: a smaller budget's rounds did not
        data = {"step_time": (fast["base"][:at], fast["candidate"][:at]),
                "throughput": ([1 / x for x in fast["base"][:at]], [1 / x for x in fast["candidate"][:at]])}
        if common:
            data["peak_memory"] = ([m[common[0]] for m in memory["base"][:at]], [m[common[0]] for m in memory["candidate"][:at]])
        cpu = None
        if not wall_only and cpu_steps and all(cpu_steps["base"][:at]) and all(cpu_steps["candidate"][:at]):
            data["cpu_time"] = (cpu_steps["base"][:at], cpu_steps["candidate"][:at])
            cpu = (row.get("cpu_gated", False), "")
        decision = sequential.decide(data, ab.specs(options, "steps/s", label, cpu), alpha=ab.DEFAULT_ALPHA, plan=plan,
                                     lengths=lengths[:at] if lengths else None)
        if decision.final:
            return decision.verdict
    return None


def start_neighbours(seed: int, args: argparse.Namespace) -> list[subprocess.Popen]:
    """The CPU burners, each on its own seeded phases; with --trainer, the training script instead."""
    if args.trainer:
        return [start_trainer()]
    on, off = args.on or args.period, args.off or args.period
    return [subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(seed + 1000 * k), on, off]) for k in range(args.burners)]


def stop_neighbours(neighbours: list[subprocess.Popen], args: argparse.Namespace) -> None:
    """The neighbours killed and reaped (the trainer with the script it runs)."""
    for neighbour in neighbours:
        if args.trainer:
            stop_trainer(neighbour)
        else:
            neighbour.kill()
            neighbour.wait()


def plant_sizes(args: argparse.Namespace, widens: tuple[float, ...] = (1.02, 1.10, 1.20), pairs: int = 6,
                steps: int = 150) -> dict[float, float]:
    """Each plant's slowdown measured by hand, beside the same neighbour: the knob's own model and step
    (its width times `widen`, its batch, one thread) timed with perf_counter outside advise, the base
    and the plant built in one process and run in turn (A B A B ...), the median step of each run of
    `steps`, the ratio per pair, their median."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    width, batch = int(args.workload[args.workload.index("--width") + 1]), int(args.workload[args.workload.index("--batch-size") + 1])
    x, y = torch.randn(batch, 64), torch.randn(batch, 1)

    def built(widen: float):
        model = torch.nn.Sequential(torch.nn.Linear(64, round(width * widen)), torch.nn.ReLU(),
                                    torch.nn.Linear(round(width * widen), 1))
        return model, torch.optim.SGD(model.parameters(), lr=0.01)

    def median_step(model, opt) -> float:
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    base = built(1.0)
    out = {}
    for widen in widens:
        plant = built(widen)
        ratios = [median_step(*plant) / median_step(*base) for _ in range(pairs)]
        out[widen] = statistics.median(ratios)
        print(f"plant --widen {widen:g}: {out[widen] - 1:+.1%} by hand (pairs {min(ratios) - 1:+.1%} to {max(ratios) - 1:+.1%})",
              flush=True)
    return out


def rate(rows: list[dict], key: str) -> str:
    have = [r[key] for r in rows if key in r]
    return f"{sum(have)}/{len(have)}" if have else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aa-trials", type=int, default=40, help="A/A comparisons of the unchanged workload")
    parser.add_argument("--trials", type=int, default=20, help="trials per planted slowdown")
    parser.add_argument("--slowdowns", default="5,10,20", help="planted slowdowns, percent")
    parser.add_argument("--rounds", type=int, default=6, help="advise ab --rounds")
    parser.add_argument("--max-rounds", type=int, default=20, help="advise ab --max-rounds")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-neighbour", action="store_true", help="run without the CPU-burning neighbour")
    parser.add_argument("--period", default="1,5", help="the neighbour's on/off phases last LOW,HIGH seconds (uniform)")
    parser.add_argument("--on", default=None, help="the burners' on phases last LOW,HIGH seconds (default: --period)")
    parser.add_argument("--off", default=None, help="the burners' off phases last LOW,HIGH seconds (default: --period)")
    parser.add_argument("--burners", type=int, default=1, help="CPU-burning neighbours, each on and off at random")
    parser.add_argument("--trainer", action="store_true",
                        help="the neighbour is a second training script (conv_mnist.py, evaluating and saving), not burners")
    parser.add_argument("--gate-defaults", action="store_true",
                        help="run advise ab with its own defaults (window, budget, rounds, steps), as a new user does")
    parser.add_argument("--plant", choices=sorted(KNOBS), default="wait",
                        help="the candidate's slowdown: a longer wait in each step, or more work (a wider layer)")
    parser.add_argument("--mode", choices=("duet", "sequential"), default="duet", help="advise ab --mode")
    parser.add_argument("--plants", action="store_true",
                        help="measure each --plant work slowdown by hand beside the neighbour, then stop")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", type=Path, default=None, help="append each trial's outcome here (JSON lines) as it ends")
    parser.add_argument("--resume", action="store_true",
                        help="with --log: skip the trials the log already holds (a run cut short goes on where it stopped)")
    parser.add_argument("--from-log", type=Path, default=None,
                        help="print the table from a --log file (a run cut short) instead of running trials")
    parser.add_argument("workload", nargs="*", default=["--step-ms", "0", "--width", "4096", "--batch-size", "512"],
                        help="after --: the workload's own arguments")
    args = parser.parse_args()
    plan = [0.0] * args.aa_trials + [float(s) for s in args.slowdowns.split(",") for _ in range(args.trials)]
    random.Random(args.seed).shuffle(plan)  # the neighbour's phases and the machine's drift hit every kind alike

    if args.from_log is not None:
        logged = [json.loads(line) for line in args.from_log.read_text().splitlines() if line.strip()]
        rows = [r for r in logged if not r.get("error")]
        table(rows, len(logged) - len(rows), None, args)
        return
    logged = []
    if args.resume:
        if args.log is None:
            raise SystemExit("--resume needs --log")
        logged = [json.loads(line) for line in args.log.read_text().splitlines() if line.strip()] if args.log.exists() else []
    done = {r.get("trial") for r in logged}
    neighbours = [] if args.no_neighbour else start_neighbours(args.seed + len(logged), args)
    if args.plants:
        try:
            plant_sizes(args)
        finally:
            stop_neighbours(neighbours, args)
        return
    rows: list[dict] = [r for r in logged if not r.get("error")]
    saved, errors = None, len(logged) - len(rows)
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i, pct in enumerate(plan):
                if f"t{i:03d}" in done:
                    continue  # resumed: the first trial after them has no saved baseline to compare with
                row = trial(Path(tmp), f"t{i:03d}", 1 + pct / 100, args, saved)
                saved = row.pop("first_base")
                if args.log is not None:
                    with open(args.log, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(row) + "\n")
                if row.get("error"):
                    errors += 1
                    continue
                rows.append(row)
                verdict = "REGRESSION" if row["ab"] else "INCONCLUSIVE" if row["ab_inconclusive"] else "pass"
                print(f"trial {i + 1}/{len(plan)}: planted {pct:g}% ({args.plant}): ab {verdict} "
                      f"(step {row['ab_step']['slowdown'] or 0:+.1%} floor {row['ab_step']['floor'] or 0:.1%}; "
                      f"cpu {row['ab_cpu']['slowdown'] or 0:+.1%} floor {row['ab_cpu']['floor'] or 0:.1%} "
                      f"{'gated' if row['cpu_gated'] else 'reported'}) "
                      + (f"could see step {row['ab_step'].get('mdc') or 0:.1%} cpu {row['ab_cpu'].get('mdc') or 0:.1%}; "
                         if args.mode == "duet" else "")
                      + f"after {row['rounds']} rounds ({row['ab_s']:.0f} s; {row['set_aside']} set aside): "
                      f"exit {row['exit']}; {row['decided_by']}"
                      + (f"; saved-baseline compare {'REGRESSION' if row['saved'] else 'pass'}" if "saved" in row else ""),
                      flush=True)
    finally:
        stop_neighbours(neighbours, args)
    table(rows, errors, time.monotonic() - started, args)


def table(rows: list[dict], errors: int, elapsed: float | None, args: argparse.Namespace) -> None:
    kinds = [0.0] + [float(s) for s in args.slowdowns.split(",")]
    by = {k: [r for r in rows if abs(r["slowdown"] - (1 + k / 100)) < 1e-9] for k in kinds}
    head = ["gate", "A/A false alarms"] + [f"{k:g}% caught" for k in kinds[1:]] + ["time per decision (median)"]
    for r in rows:
        if "fast_steps" in r and "ab12" not in r:
            r["ab12"] = replay(r, args.rounds, 12)
            if r["ab12"] is None:
                del r["ab12"]

    gates = [
        (f"`advise ab --mode {args.mode}`: regression, exit 3", "ab",
         f"{statistics.median(r['ab_s'] for r in rows):.0f} s, {statistics.median(r['rounds'] for r in rows):g} rounds"),
        ("`advise ab`: inconclusive, exit 4", "ab_inconclusive", "same runs"),
        ("`advise ab`: pass, exit 0", "ab_pass", "same runs"),
        ("`advise ab --max-rounds 12`, replayed on the same rounds", "ab12", "at most 12 rounds"),
        ("`advise compare` (saved baseline)", "saved", "one run + compare"),
        ("fixed 10% on the mean (pytest-benchmark), saved baseline", "saved_fixed", "one run"),
        ("ratio > 1.1 + Mann-Whitney (asv), saved baseline", "saved_asv", "one run"),
        ("fixed 10% on the mean (pytest-benchmark), same job", "job_fixed", "two runs"),
        ("ratio > 1.1 + Mann-Whitney (asv), same job", "job_asv", "two runs"),
    ]
    replayed = [(replay(r, args.rounds, args.max_rounds), r["ab"]) for r in rows if "fast_steps" in r]
    faithful = [again == own for again, own in replayed if again is not None]  # None: its rounds grew longer
    print(f"the replay gives advise ab's own verdict on {sum(faithful)} of {len(faithful)} trials (its budget, its rounds)")
    for kind in kinds:
        walls = [replay_verdict(r, args.rounds, args.max_rounds, wall_only=True) for r in by[kind] if "fast_steps" in r]
        said = ", ".join(f"{v} {walls.count(v)}" for v in ("regression", "inconclusive", "pass") if walls.count(v))
        print(f"{'A/A' if kind == 0 else f'{kind:g}%'}: the wall clock alone (no CPU time), replayed: {said or 'none'}"
              f"{f'; {walls.count(None)} needed more rounds than were run' if None in walls else ''}")
    took = f" in {elapsed / 60:.0f} min" if elapsed is not None else f" (from {args.from_log})"
    print(f"\n{len(rows)} trials ({errors} failed to run){took}; planted: {args.plant}; neighbour "
          f"{'off' if args.no_neighbour else 'a second training script (conv_mnist.py)' if args.trainer else f'on ({args.burners} CPU burner(s), on {args.on or args.period} s, off {args.off or args.period} s at random)'}; "
          + ("advise ab with its own defaults; " if args.gate_defaults else
             f"advise ab --rounds {args.rounds} --max-rounds {args.max_rounds} --steps {args.steps}; ") +
          f"workload {WORKLOAD.name} {' '.join(args.workload)}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for label, key, cost in gates:
        cells = [rate(by[0.0], key)] + [rate(by[k], key) for k in kinds[1:]]
        print(f"| {label} | " + " | ".join(cells) + f" | {cost} |")
    spans = [f"{'A/A' if k == 0 else f'{k:g}%'} {statistics.median(r['ab_s'] for r in by[k]):.0f} s "
             f"(max {max(r['ab_s'] for r in by[k]):.0f} s, {statistics.median(r['rounds'] for r in by[k]):g} rounds)"
             for k in kinds if by[k]]
    print("\nadvise ab, time per decision (median) by planted change: " + "; ".join(spans), end="")
    for k in kinds[1:]:
        caught = [r["ab_s"] for r in by[k] if r["ab"]]
        if caught:
            print(f"\n{k:g}% slowdowns caught by advise ab: median {statistics.median(caught):.0f} s per decision", end="")
    print()
    for k in kinds:
        for r in by[k]:
            if r.get("decided_by"):
                print(f"{'A/A' if k == 0 else f'{k:g}%'} {r['trial']}: exit {r['exit']} in {r['ab_s']:.0f} s, "
                      f"{r['rounds']} rounds ({r.get('set_aside', 0)} set aside): {r['decided_by']}")


if __name__ == "__main__":
    main()
