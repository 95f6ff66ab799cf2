"""DL003 cpu-oversubscription: more busy threads than cores, the CPU saturated.

Fixtures: probe-shaped CPU profiles (workers, intra-op threads, cores, CPU load). The zoo's
planted script (tests/test_rules_zoo.py) runs it end to end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.engine import Settings
from advisor.profile import Profile
from rule_inputs import CATALOGUE, probe_profile, run_rules_json


@pytest.mark.parametrize("kw, fires", [
    (dict(workers=4, threads=2), True),          # 6 busy threads on 2 saturated cores
    (dict(workers=1, threads=1), False),         # fits
    (dict(workers=4, threads=2, cpu_percent=60.0), False),  # the CPU was not saturated
    (dict(workers=0, threads=2), False),
])
def test_cpu_oversubscription(kw, fires):
    found, _ = run_rules_json(probe_profile(**kw), Settings(select=["DL003"]), CATALOGUE)
    assert bool(found) == fires
    if fires:
        assert found[0]["evidence"]["threads_demanded"] == 6
        assert found[0]["fix"]["overrides"] == {"torch_threads": 1, "dataloader": {"num_workers": 1}}


def test_a_wait_caused_by_oversubscription_is_reported_once_as_oversubscription():
    starved_by_contention = probe_profile(workers=4, threads=2, wait=0.03)
    found, _ = run_rules_json(starved_by_contention, Settings(select=["DL001", "DL003"]), CATALOGUE)
    assert [f["code"] for f in found] == ["DL003"] and found[0]["evidence"]["data_wait_frac"] == pytest.approx(0.6)
    fitting = probe_profile(workers=1, threads=1, wait=0.03)
    assert [f["code"] for f in run_rules_json(fitting, Settings(select=["DL001", "DL003"]), CATALOGUE)[0]] == ["DL001"]


RUNS = Path(__file__).parent.parent / "data" / "runs"


def test_workers_a_neighbour_starves_still_ask_for_their_cores():
    """loader-cpu-workers (2 workers, 2 intra-op threads on 2 cores) beside a CPU burner: its workers
    used 0.12 cores (0.48-0.50 quiet), read by use alone as idle, and DL003 was not found; with the
    time they waited runnable for a core (the kernel's wait clock, the tree's less the main
    process's) they ask for a core, and it is."""
    profile = Profile.from_run_dir(RUNS / "loader_cpu_workers_starved_workers_beside_a_burner")
    [found] = [f for f in run_rules_json(profile, Settings(select=["DL003"]), CATALOGUE)[0] if f["code"] == "DL003"]
    evidence = found["evidence"]
    assert evidence["workers_busy_cores"] < 0.25 < evidence["workers_wanted_cores"] and evidence["threads_demanded"] == 3
    assert found["fix"]["overrides"] == {"torch_threads": 1, "dataloader": {"num_workers": 1}}
    # the same run without the main process's wait (a run dir from before it was sampled): counted by use, idle
    profile.samples = profile.samples.drop(columns=["main_runq_wait_s"])
    assert run_rules_json(profile, Settings(select=["DL003"]), CATALOGUE)[0] == []


def test_io_workers_that_wait_behind_a_neighbour_while_the_trainer_waits_on_them_are_dl001s():
    """forever_workers.py (2 workers sleeping 4 ms a sample, 2 intra-op threads on 2 cores) beside a
    test suite: its workers used 0.06 cores and waited 0.24 more for one while the main process
    waited on them 57% of its steps. Its threads idle then, so that wait is the neighbour's: the
    workers do not ask for a core, and the wait is DL001's, its fix more workers."""
    profile = Profile.from_run_dir(RUNS / "forever_workers_io_loader_beside_a_test_suite")
    found, _ = run_rules_json(profile, Settings(select=["DL001", "DL003"]), CATALOGUE)
    assert [f["code"] for f in found] == ["DL001"] and found[0]["evidence"]["data_wait_frac"] > 0.5
    assert found[0]["fix"]["overrides"]["dataloader"]["num_workers"] > 2
    # counted whole, as when the trainer computed all the while, the wait asked for a core
    profile.steps = profile.steps.assign(data_wait_s=0.0)
    [over] = run_rules_json(profile, Settings(select=["DL003"]), CATALOGUE)[0]
    assert over["evidence"]["workers_busy_cores"] < 0.25 < over["evidence"]["workers_wanted_cores"]
