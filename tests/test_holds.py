"""Taking turns with a neighbour (advisor/probe/holds.py): the arms' windows start while no other
process takes the cores the script's steps want. The first tests decide on sampler ticks written
here; the last runs a real script beside real busy loops that leave a second after its window."""

from __future__ import annotations

import json
import os

import pytest

from advisor.probe.holds import HOLD_MAX_S, LOOKBACK_TICKS, State, Holds, crowded

from conftest import profile_beside_busy_loops


def tick(t: float, machine_cores: float, tree_cores: float, advise_cores: float = 0.0, cpu_count: int = 2,
         waited_s: float = 0.0) -> dict:
    """A sampler tick: the machine's CPU (percent of all its cores), the script's tree's and advise's (of one core),
    and the tree's run-queue wait so far."""
    return {"t": t, "sys_cpu_percent": 100 * machine_cores / cpu_count, "cpu_percent": 100 * tree_cores,
            "advise_cpu_percent": 100 * advise_cores, "runq_wait_s": waited_s}


def test_a_neighbour_is_crowding_only_where_it_leaves_the_script_fewer_cores_than_it_used():
    burner = [tick(0.0, 2.0, 1.0), tick(0.1, 2.0, 1.0)]  # a busy loop beside the script, on 2 cores
    assert crowded(burner, cpu_count=2, need_cores=1.9)
    assert not crowded(burner, cpu_count=2, need_cores=0.9)  # a 1-thread script: the other core was free
    wide = [tick(0.0, 3.0, 2.0, cpu_count=16), tick(0.1, 3.0, 2.0, cpu_count=16)]
    assert not crowded(wide, cpu_count=16, need_cores=2.0)  # 16 cores: the neighbour took none of the script's
    planning = [tick(0.0, 1.0, 0.0, advise_cores=1.0), tick(0.1, 1.0, 0.0, advise_cores=1.0)]
    assert not crowded(planning, cpu_count=2, need_cores=1.9)  # advise planning the next round is no neighbour
    quiet = [tick(0.0, 1.9, 1.85), tick(0.1, 1.9, 1.85)]
    assert not crowded(quiet, cpu_count=2, need_cores=1.9)
    # an I/O loader's bursty 2-thread steps use half a core on average, but wait for one beside the burner
    bursts = [tick(0.0, 1.5, 0.5, waited_s=1.0), tick(0.1, 1.5, 0.5, waited_s=1.02)]
    assert crowded(bursts, cpu_count=2, need_cores=0.5)
    assert not crowded([tick(0.0, 1.5, 0.5), tick(0.1, 1.5, 0.5)], cpu_count=2, need_cores=0.5)
    assert not crowded([], cpu_count=2, need_cores=1.9)


def test_the_hold_file_follows_a_neighbour_that_came_and_each_hold_ends_at_its_cap(tmp_path):
    hold = tmp_path / "hold"
    holds = Holds(hold, cpu_count=2, need_cores=1.9, budget_s=10.0)
    # the sampler's last LOOKBACK_TICKS ticks (the child waits on a hold: its tree idles)
    stayed = lambda t: [tick(t - 0.1 * i, 2.0, 0.0) for i in reversed(range(LOOKBACK_TICKS))]  # noqa: E731
    came = lambda t: [tick(t - 0.3, 0.1, 0.0), tick(t - 0.2, 0.1, 0.0), tick(t - 0.1, 2.0, 0.0), tick(t, 2.0, 0.0)]  # noqa: E731
    quiet = lambda t: [tick(t - 0.1, 0.1, 0.0), tick(t, 0.1, 0.0)]  # noqa: E731
    holds.poll(stayed(1.0), now=1.0)
    assert not hold.exists()  # there all along: it has outstayed a hold already
    holds.poll(came(1.1), now=1.1)
    assert hold.exists() and holds.state is State.HELD
    holds.poll(came(1.1), now=1.12)  # the same tick: decided once
    holds.child_waits(now=1.15)
    holds.poll([*came(1.1), tick(1.2, 1.0, 0.0)], now=1.2)
    assert hold.exists()  # held while the neighbour stays, though the held script waits for nothing
    holds.poll(quiet(1.3), now=1.3)
    assert not hold.exists() and holds.state is State.OPEN  # the neighbour left: the window starts
    holds.child_held(0.15)
    # a neighbour that stays: the child's hold ends at HOLD_MAX_S, and none starts until its window has
    holds.poll(came(2.0), now=2.0)
    holds.child_waits(now=2.0)
    holds.poll(stayed(2.1 + HOLD_MAX_S), now=2.1 + HOLD_MAX_S)
    assert not hold.exists() and holds.state is State.RELEASED
    holds.poll(came(2.2 + HOLD_MAX_S), now=2.2 + HOLD_MAX_S)
    assert not hold.exists()
    holds.child_held(HOLD_MAX_S + 0.1)
    assert holds.state is State.OPEN and holds.held_s == pytest.approx(HOLD_MAX_S + 0.25)
    holds.poll(stayed(2.3 + HOLD_MAX_S), now=2.3 + HOLD_MAX_S)
    assert not hold.exists()  # a neighbour that outstayed a hold holds nothing until it has left
    holds.poll(came(2.5 + HOLD_MAX_S), now=2.5 + HOLD_MAX_S)
    assert hold.exists()  # it left and came back: a hold again
    holds.poll(quiet(2.6 + HOLD_MAX_S), now=2.6 + HOLD_MAX_S)
    # the holds add up to the budget at most: then none
    holds.held_s = 10.0
    holds.poll(came(20.0), now=20.0)
    assert not hold.exists() and holds.state is State.OPEN
    holds.end()
    assert not hold.exists()


@pytest.mark.timing
@pytest.mark.slow
def test_the_windows_wait_for_a_neighbour_that_leaves_and_the_budget_waits_with_them(tmp_path):
    """As many busy loops as the machine has cores start when the profiled window ends (its steps.csv
    appears) and leave 1.5 s later: the arms' first window waits for them, the budget grows by the
    wait, and the time line says so. (`timing`: run alone, its busy loops disturb no other test, and
    no other test is the neighbour it waits for.)"""
    proc, out = profile_beside_busy_loops(tmp_path, 4, os.cpu_count() or 2, 1.5)
    stdout, stderr = proc.stdout, proc.stderr
    assert proc.returncode == 0, stderr[-2000:]
    block = json.loads((out / "report.json").read_text())["experiments"]
    assert 0.5 <= block["held_s"] <= HOLD_MAX_S + 1.0, block
    added = block["held_s"] + (block["disturbed_s"] or 0.0) + (block["window_again_s"] or 0.0)
    assert block["budget_s"] == pytest.approx(4.0 + added), block
    assert "s of it added while the windows waited for a neighbour to leave the cores" in " ".join(stdout.split()), stdout[-3000:]
