"""Both sides alive at once, taking turns (advisor/gate/duet.py), on real children."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from advisor.gate.duet import Duet, Turn, log_ratios
from advisor.probe.config import ProbeConfig

WORKLOADS = Path(__file__).parent / "workloads"


def test_the_sides_take_turns_and_a_held_side_loads_nothing(tmp_path):
    logs = {side: tmp_path / f"{side}.log" for side in ("base", "cand")}
    configs = {side: ProbeConfig(script=str(WORKLOADS / "duet_loader.py"), args=["--log", str(logs[side])],
                                 out=tmp_path / side, warmup=2, steps=3, profile_steps=0, timeout_s=120)
               for side in logs}
    turns, runs = Duet(configs, window_s=0.3, windows=3).run()

    assert {side: run.status for side, run in runs.items()} == {"base": "ok", "cand": "ok"}
    assert [t.side for t in turns] == ["base", "cand"] * 3
    for before, after in zip(turns, turns[1:]):
        assert before.ended is not None and before.ended <= after.started  # one side computes at a time
    assert all(len(t.step_s) >= 3 for t in turns)  # each window's min_steps, timed in the child
    assert all(t.wait is not None for t in turns) or sys.platform != "linux"
    # a held side's workers are stopped: none of its samples were loaded in the other side's turns
    for t in turns[1:]:
        other = "cand" if t.side == "base" else "base"
        loaded = [float(line.split()[1]) for line in logs[other].read_text().splitlines()]
        assert not [x for x in loaded if t.started + 0.05 < x < t.ended - 0.05], (t.side, t.round)


def test_a_candidate_window_is_read_against_the_base_windows_either_side():
    turns = [Turn("base", 0, 0.0, step_s=[1.0]), Turn("cand", 0, 1.0, step_s=[1.1]),
             Turn("base", 1, 2.0, step_s=[1.2]), Turn("cand", 1, 3.0, step_s=[1.2])]
    assert [round(x, 6) for x in log_ratios(turns, "base", "cand")] == [round(math.log(1.1 / 1.1), 6),
                                                                         round(math.log(1.2 / 1.2), 6)]
