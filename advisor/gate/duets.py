"""`advise ab`'s default mode: both revisions alive at once, taking turns, and the pair restarted.

Each restart is one duet (:class:`advisor.gate.duet.Duet`): the base's and the candidate's scripts
start together as two probed children, each in its own checkout, and take turns in windows of
``ABOptions.turn_s`` (one side computes at a time, the held side's workers stopped). A neighbour's
burst falls on both sides alike, and each process pays its start-up once. A restart's figure for
the candidate is the base's (the geometric mean of its windows' median steps) times the mean log
ratio of each candidate window to the base windows either side of it (:func:`duet.log_ratios`), so
the drift of the machine over a few windows cancels; what is left is the level of a process,
which only more restarts average (benchmarks/README.md, the gate's premise: beside one CPU burner
a duet's window pairs spread 0.080, the same as quiet, a process's level 0.044).

The restarts are the rounds of :mod:`advisor.gate.sequential` (its test, looks, Holm and A/A floor:
the base's figures of restarts 2k and 2k+1, each a fresh process, against each other), and the
opener alternates over them (the second side of a turn read 2.8% slower, quiet). Windows a
neighbour disturbed (the side's run-queue wait, :func:`advisor.analysis.metrics.window_wait`) are
counted and said, not set aside: taking turns already cancels what the burner added to the pairs
(0.079 quiet, 0.080 beside it), so weighting them bought nothing measured.

Run dirs: ``base/round-NN/`` and ``candidate/round-NN/`` (each side's steps, samples and log).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from . import opdiff, sequential
from .ab import (ON_A_GPU, ABError, ABOptions, ABResult, RoundFailed, checkouts, cpu_share_gates, longer_budget, next_round_s,
                 quiet_share, round_dir, specs, time_line, time_spent)
from .duet import Duet, Turn, log_ratios
from ..probe.config import ProbeConfig
from ..run_dir.interrupt import Interrupted, StopRequest, deferred

SIDES = ("base", "candidate")
# ABOptions.turn_s (0.5 s: well under a burner's 1-4 s, long enough for a few steps) and .turns (12 a
# side and restart: the premise's 12 window pairs, 17 s a duet)
DISTURBED_CORES = 0.05  # a window whose side waited this many cores for a CPU on average is disturbed
MIN_PAIRS = 3  # a restart with fewer candidate windows read against the base is not a round
LABELS = {"step_time": "step time (turns' median)", "throughput": "throughput ({unit})",
          "cpu_time": "CPU time per step (turns' median)"}


class DoesNotFit(RoundFailed):
    """The first duet ran out of memory: the two sides do not fit on the machine at once."""


@dataclass
class Restart:
    """One duet's figures, per metric (base, candidate), and its windows."""

    index: int
    first: str
    turns: list[Turn]
    wall_s: float
    figures: dict[str, tuple[float, float]]
    memory: tuple[float, float] | None
    memory_label: str | None
    traces: dict[str, Path] = field(default_factory=dict)  # each side's trace of its first window, where written
    devices: tuple[str, ...] = ("cpu", "cpu")  # each side's, as its probe saw it


def configs(roots: Mapping[str, Path], script: str, args_of: Mapping[str, list[str]], env_of: Mapping[str, Mapping[str, str]],
            options: ABOptions, out: Path, index: int) -> dict[str, ProbeConfig]:
    """Each side's probed child: its checkout as the working directory, its own arguments and variables."""
    # The first window, both sides at once before their turns: its last `profile_steps` under the
    # profiler, so a regression's slower ops are named from the restarts' traces.
    return {side: ProbeConfig(script=script, args=list(args_of[side]), module=options.module,
                              out=round_dir(out, side, index), warmup=options.warmup,
                              steps=options.profile_steps + 2, profile_steps=options.profile_steps,
                              timeout_s=options.timeout_s, cwd=str(roots[side]), env=dict(env_of.get(side) or {}))
            for side in SIDES}


def restart(index: int, roots: Mapping[str, Path], script: str, args_of: Mapping[str, list[str]],
            env_of: Mapping[str, Mapping[str, str]], options: ABOptions, out: Path,
            stop: StopRequest | None = None) -> Restart:
    """One duet, its opener alternating with `index`; RoundFailed when a side's script failed,
    Interrupted when `stop` was signalled (both children stopped first)."""
    first = SIDES[(index - 1) % 2]
    started = time.monotonic()
    turns, runs = Duet(configs(roots, script, args_of, env_of, options, out, index), window_s=options.turn_s,
                       windows=options.turns, first=first, stop=stop).run()
    for side in SIDES:
        run = runs.get(side)
        if run is None or run.status not in ("ok", "no-steps") or (run.status == "no-steps" and not turns):
            why = run.probe.error if run is not None and run.probe.error else (run.status if run else "no result")
            if index == 1 and "out of memory" in str(why).lower():
                raise DoesNotFit(f"{side}: {str(why).splitlines()[0][:200]}")
            raise RoundFailed(f"{side} restart {index}: the script's run is {why!r}: see {round_dir(out, side, index)}"
                              " (both sides' run dirs are kept)")
    per_sample = _batches_differ(turns)
    figures = {}
    for name, what in (("step_time", "step_s"), ("cpu_time", "cpu_s")):
        pair = _figure(turns, what, per_sample)
        if pair is not None:
            figures[name] = pair
    if "step_time" not in figures:
        done = sum(t.side == "candidate" and bool(t.step_s) for t in turns)
        raise ABError(f"restart {index}: the script ran out of steps after {done} candidate windows of {options.turns} "
                      f"(a duet needs {MIN_PAIRS}): give it more steps or epochs, or run --mode sequential")
    memory, label = _memory(runs)
    traces = {side: path for side in SIDES for path in (round_dir(out, side, index) / runs[side].files.trace,)
              if path.is_file()}
    return Restart(index, first, turns, time.monotonic() - started, figures, memory, label, traces,
                   tuple(runs[side].probe.env.device for side in SIDES))


def _batches_differ(turns: list[Turn]) -> bool:
    """Whether the sides' batch sizes differ: the duet then compares seconds per sample."""
    sizes = {side: {n for t in turns if t.side == side for n in t.samples} for side in SIDES}
    return all(sizes.values()) and sizes["base"] != sizes["candidate"]


def _figure(turns: list[Turn], what: str, per_sample: bool) -> tuple[float, float] | None:
    """(base, candidate) for one restart: the base's geometric mean window, and it moved by the mean
    log ratio of the candidate's windows to their neighbours."""
    ratios = log_ratios(turns, "base", "candidate", what, per_sample)
    base = [m for t in turns if t.side == "base" for m in (t.median(what, per_sample),) if m and m > 0]
    if len(ratios) < MIN_PAIRS or not base:
        return None
    level = math.exp(float(np.mean(np.log(base))))
    return level, level * math.exp(float(np.mean(ratios)))


def _memory(runs: Mapping) -> tuple[tuple[float, float] | None, str | None]:
    peaks = [runs[s].probe.memory.peak_memory_bytes for s in SIDES]
    bases = {runs[s].probe.memory.memory_basis for s in SIDES}
    if not all(isinstance(p, int) and p > 0 for p in peaks) or len(bases) != 1:
        return None, None
    return (float(peaks[0]), float(peaks[1])), f"peak memory ({next(iter(bases)) or 'the window'})"


def cpu_gates(kept: list[Restart]) -> tuple[bool, str]:
    """Whether the job is CPU-bound enough for its CPU time per step to settle the wall clock: the
    99th percentile of its steps' CPU share, as the sequential mode's :func:`advisor.gate.ab.busy_share`;
    never a GPU job's, whose steps the device times."""
    if any(d != "cpu" for r in kept for d in r.devices):
        return False, ON_A_GPU
    share = quiet_share([c / d for r in kept for t in r.turns for c, d in zip(t.cpu_s, t.step_s) if d > 0])
    if share is None:
        return False, "reported: some windows have no CPU time per step"
    return cpu_share_gates(share)


def series(kept: list[Restart]) -> tuple[dict, str | None]:
    """Per metric, (base restarts, candidate restarts), and the memory figure's label."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for name in ("step_time", "cpu_time"):
        if all(name in r.figures for r in kept):
            out[name] = ([r.figures[name][0] for r in kept], [r.figures[name][1] for r in kept])
    out["throughput"] = tuple([1.0 / x for x in side] for side in out["step_time"])  # type: ignore[assignment]
    labels = {r.memory_label for r in kept}
    if all(r.memory for r in kept) and len(labels) == 1:
        out["peak_memory"] = ([r.memory[0] for r in kept if r.memory], [r.memory[1] for r in kept if r.memory])
        return out, next(iter(labels))
    return out, None


def disturbed(kept: list[Restart]) -> dict:
    """How many of the kept restarts' windows a neighbour disturbed, and their share of the windows' time."""
    spans = [(t.ended - t.started, t.wait is not None and t.wait >= DISTURBED_CORES)
             for r in kept for t in r.turns if t.ended is not None]
    total = sum(s for s, _ in spans)
    hit = [s for s, bad in spans if bad]
    return {"windows": len(spans), "disturbed": len(hit), "cores": DISTURBED_CORES,
            "share_of_time": sum(hit) / total if total > 0 else None}


def long_turns(kept: list[Restart], turn_s: float) -> list[str]:
    """A step longer than a turn: each turn held its 3 steps anyway, and the gate says so (its
    restarts take that much longer, so its budget holds fewer)."""
    spans = [t.ended - t.started for r in kept for t in r.turns if t.ended is not None]
    steps = [s for r in kept for t in r.turns for s in t.step_s]
    if not spans or not steps or float(np.median(spans)) < 2 * turn_s:
        return []
    return [f"a step ({float(np.median(steps)):.2f} s) is longer than a turn ({turn_s:g} s): each turn ran "
            f"{float(np.median(spans)):.1f} s (at least 3 steps); --turns fewer, or --mode sequential, fits more rounds"]


def _look(kept: list[Restart], options: ABOptions, plan: list[int], history: list[dict],
          last: bool = False) -> sequential.Decision:
    data, label = series(kept)
    cpu = cpu_gates(kept) if "cpu_time" in data else None
    per_sample = any(_batches_differ(r.turns) for r in kept)
    unit = "samples/s" if per_sample else "steps/s"
    gated = specs(options, unit, label, cpu, None)
    for spec in gated:
        spec.label = LABELS.get(spec.name, spec.label).format(unit=unit)
    decision = sequential.decide(data, gated, alpha=options.alpha, plan=plan, lengths=None, last=last)
    history.append({"rounds": len(kept), "look": decision.look, "final": decision.final,
                    "slowdowns": {m.name: m.slowdown for m in decision.metrics},
                    "upper": {m.name: m.upper for m in decision.metrics}, "mdc": {m.name: m.mdc for m in decision.metrics},
                    "regressions": [m.name for m in decision.regressions]})
    return decision


def _row(r: Restart, side: str, out: Path) -> dict:
    mine = [t for t in r.turns if t.side == side]
    return {"side": side, "round": r.index, "run_dir": os.path.relpath(round_dir(out, side, r.index), out),
            "first": r.first == side, "windows": len(mine), "steps": sum(len(t.step_s) for t in mine),
            "wall_s": r.wall_s, "step_time_s": r.figures["step_time"][SIDES.index(side)],
            "cpu_step_s": r.figures["cpu_time"][SIDES.index(side)] if "cpu_time" in r.figures else None}


def run_duets(base_dir: str, candidate_dir: str, script: str, args: list[str], options: ABOptions, out: Path,
              on_run: Callable[[str, int, float | None], None] | None = None,
              env_of: Mapping[str, Mapping[str, str]] | None = None,
              args_of: Mapping[str, list[str]] | None = None) -> ABResult:
    """Restart the duet of SCRIPT in both checkouts until the sequential decision is final (or the
    budget ends it); `on_run(side, restart, its figure)` after each restart. A stop signal stops both
    sides' children and raises Interrupted (:mod:`advisor.run_dir.interrupt`)."""
    roots = checkouts(base_dir, candidate_dir, script, options.module)
    out = Path(out).resolve()
    with deferred() as stop:
        kept, decision, history, stopped, started = _restarts(roots, script, args, options, out, on_run, env_of,
                                                              args_of, stop)
        if stop:  # (after the last restart, before the decision is written)
            raise Interrupted(stop.signum)
    return _result(kept, decision, history, stopped, started, options, out, base_dir, candidate_dir, script)


def _restarts(roots: Mapping[str, Path], script: str, args: list[str], options: ABOptions, out: Path,
              on_run: Callable[[str, int, float | None], None] | None, env_of: Mapping[str, Mapping[str, str]] | None,
              args_of: Mapping[str, list[str]] | None, stop: StopRequest
              ) -> tuple[list[Restart], sequential.Decision, list[dict], str, float]:
    args_of = {side: list((args_of or {}).get(side, args)) for side in SIDES}
    plan = sequential.looks(options.rounds, options.max_rounds)
    started = time.monotonic()
    kept: list[Restart] = []
    history: list[dict] = []
    decision, stopped = None, "max-rounds"
    while len(kept) < plan[-1]:
        if stop:
            raise Interrupted(stop.signum)
        if options.time_budget_s is not None and len(kept) >= 2 and \
                time.monotonic() - started + next_round_s([r.wall_s for r in kept], 0.0) > options.time_budget_s:
            stopped = "the time budget"
            break
        r = restart(len(kept) + 1, roots, script, args_of, env_of or {}, options, out, stop)
        kept.append(r)
        for side in SIDES:
            if on_run is not None:
                on_run(side, r.index, r.figures["step_time"][SIDES.index(side)])
        if len(kept) in plan:
            decision = _look(kept, options, plan, history)
            if decision.final:
                stopped = "the verdict" if decision.verdict != sequential.INCONCLUSIVE else "max-rounds"
                break
    if decision is None or not decision.final:
        if len(kept) < 2:
            raise ABError(f"the time budget ({options.time_budget_s:g} s) ended before two restarts: raise --time-budget")
        decision = _look(kept, options, plan, history, last=True)
    return kept, decision, history, stopped, started


def _result(kept: list[Restart], decision: sequential.Decision, history: list[dict], stopped: str, started: float,
            options: ABOptions, out: Path, base_dir: str, candidate_dir: str, script: str) -> ABResult:
    decision.history = history
    window = f"duets of {options.turns} turns of {options.turn_s:g} s a side, the opener alternating"
    spent = time_spent(started, 0.0, [r.wall_s for r in kept], [], stopped, options.time_budget_s, window)
    spent["disturbed"] = hit = disturbed(kept)
    decision.rule = f"{decision.decided_by()}. {time_line(spent)}. {decision.rule}"
    warnings = longer_budget(decision, spent)
    warnings += long_turns(kept, options.turn_s)
    if hit["disturbed"]:
        share = f", {hit['share_of_time']:.0%} of their time" if hit["share_of_time"] is not None else ""
        warnings.append(f"a neighbour disturbed {hit['disturbed']} of {hit['windows']} windows{share} (a side waited "
                        f"{DISTURBED_CORES:g} cores or more for a CPU): kept, since both sides took turns beside it")
    rows = [_row(r, side, out) for r in kept for side in SIDES]
    result = ABResult(str(base_dir), str(candidate_dir), script, decision, rows, warnings,
                      wall_s=time.monotonic() - started, inconclusive_policy=options.inconclusive, time=spent,
                      mode="duet", statistics={**STATISTICS, "window": f"{window}, one side computing at a time"})
    if result.failed or options.ops:
        result.slower_ops, result.ops_note = slower_ops(kept)
    return result


def slower_ops(kept: list[Restart]) -> tuple[list[opdiff.OpChange] | None, str]:
    """The slower ops from the restarts' traces (each side's first window), or why there are none."""
    def read(side: str) -> list:
        return [t for r in kept if side in r.traces for t in (opdiff.read_trace(r.traces[side]),) if t is not None]
    return opdiff.between(read("base"), read("candidate"), "restarts")


STATISTICS = {
    "step_time": "per restart: the base's windows' median steps (geometric mean), and the candidate's as the mean log "
                 "ratio of each of its windows to the base windows either side of it",
    "cpu_time": "the same for the training process's CPU time per step (it gates where the job is CPU-bound)",
    "test": sequential.TEST, "correction": sequential.CORRECTION, "sequential": sequential.SPENDING,
    "noise_floor": "A/A: the base's figures of restarts 2k and 2k+1 (each a fresh process) against each other",
    "pass": "equivalence: every gated metric's one-sided 95% upper bound below its threshold, and its minimum "
            "detectable change ((t(0.975) + t(0.8)) x SE) no larger",
    "neighbour": f"a window is disturbed where its side waited {DISTURBED_CORES:g} cores or more for a CPU (run-queue "
                 "wait); counted and said, not set aside",
}

