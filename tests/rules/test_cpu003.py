"""CPU003 cpu-thread-settings: intra-op threads that do not match the physical cores.

Fixtures: probe-shaped CPU profiles (threads against physical cores, the workers' share, ranks
on one node). The real scripts (tests/test_cpu_rules.py) and the zoo's cpu_one_thread plant
(tests/test_rules_zoo.py) run it end to end.
"""

from __future__ import annotations

import pandas as pd
import pytest

from advisor.profile import Profile
from advisor.rules import cpu003_cpu_thread_settings


def _cpu_profile(*, threads, physical, logical, workers=0, wait=0.001, cpu_percent=100.0, ranks=None):
    steps = pd.DataFrame({"index": range(6), "t_start": [float(i) for i in range(6)], "t_end": [i + 0.9 for i in range(6)],
                          "duration_s": [0.05] * 6, "data_wait_s": [wait] * 6, "optimizer_s": [0.002] * 6,
                          "samples": [32] * 6, "profiled": [False] * 6})
    samples = pd.DataFrame({"t": [i * 0.5 for i in range(12)], "cpu_percent": [cpu_percent] * 12,
                            "sys_cpu_percent": [cpu_percent / logical] * 12})
    return Profile(steps=steps, samples=samples,
                   env={"device": "cpu", "cpu_count": logical, "physical_cores": physical, "torch_threads": threads,
                        "local_world_size": ranks},
                   observed={"dataloaders": [{"num_workers": workers, "batch_size": 32}]},
                   meta={"source": "probe", "step_source": "optimizer"})


@pytest.mark.parametrize("kw, threads", [
    (dict(threads=1, physical=8, logical=16), 8),             # cores idle: all of them
    (dict(threads=2, physical=8, logical=16, workers=2), 6),  # the workers keep two
    (dict(threads=16, physical=8, logical=16), 8),            # past the physical cores, onto SMT siblings
    (dict(threads=8, physical=8, logical=16), None),          # matched
    (dict(threads=6, physical=8, logical=8, workers=2), None),  # matched, beside the workers
    (dict(threads=8, physical=8, logical=8, workers=2), None),  # over only with the workers: cpu-oversubscription's
    (dict(threads=1, physical=8, logical=16, wait=0.04), None),  # waiting on data, not computing
    (dict(threads=1, physical=2, logical=2, ranks=2), None),  # two ranks on two cores: one each, matched
    (dict(threads=1, physical=8, logical=16, ranks=2), 4),    # two ranks on eight cores: four each
])
def test_cpu_thread_settings(kw, threads):
    found = list(cpu003_cpu_thread_settings.check(_cpu_profile(**kw)))
    assert [f.fix.overrides for f in found] == ([{"torch_threads": threads}] if threads else [])
