"""The zoo: planted-bottleneck scripts and healthy controls, profiled for real as a user would.

Each script in tests/workloads/zoo/ states what advise must find in its docstring::

    advise-expect: DL001 exclusive            # this finding and no other
    advise-expect: DL003 allow=DL001          # this one; DL001 may come along
    advise-expect: PR001 exclusive needs=cpu_bf16   # only where the CPU has native bf16
    advise-expect: none                       # a healthy control: no finding at all

Every script runs through ``python -m advisor profile ... --json`` (xdist spreads them over
workers). Recall (planted findings found) must be 100% and false positives (any finding on
a healthy control, or an unexpected one beside an exclusive plant) 0: each script is one
test, so a single miss or false positive fails the suite, and the summary line
``zoo: recall ... false positives ...`` is recorded per script for the report.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from advisor.model import Finding
from conftest import WORKLOADS, advise_cmd

pytestmark = pytest.mark.slow

ZOO = WORKLOADS / "zoo"
SCRIPTS = sorted(p for p in ZOO.glob("*.py") if not p.name.startswith("_"))
# Short runs: 1 start-up + 1 warm-up + 6 measured steps, the last 2 (+1) under the profiler.
PROBE = ["--steps", "6", "--warmup", "1", "--profile-steps", "2", "--no-experiments", "--json"]


def expectation(script: Path) -> dict:
    match = re.search(r"^advise-expect:\s*(.+)$", script.read_text(), flags=re.M)
    assert match, f"{script.name} has no 'advise-expect:' line"
    words = match.group(1).split()
    expect = {"codes": set(), "exclusive": False, "allow": set(), "needs": None}
    for word in words:
        if word == "none":
            expect["exclusive"] = True
        elif word == "exclusive":
            expect["exclusive"] = True
        elif word.startswith("allow="):
            expect["allow"] |= set(word[6:].split(","))
        elif word.startswith("needs="):
            expect["needs"] = word[6:]
        else:
            expect["codes"].add(word)
    return expect


def test_the_zoo_has_a_plant_for_every_cpu_rule_and_three_healthy_controls():
    planted = set().union(*(expectation(s)["codes"] for s in SCRIPTS))
    assert {"DL001", "DL003", "PR001", "STEP001", "CPU001", "CPU002", "CPU003", "OPT002"} <= planted
    assert sum(1 for s in SCRIPTS if not expectation(s)["codes"]) >= 3


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
@pytest.mark.timing
def test_zoo(script, tmp_path, record_property):
    expect = expectation(script)
    proc = subprocess.run(advise_cmd("profile", *PROBE, "--out", str(tmp_path / "run"), str(script)),
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["status"] == "ok", report["error"]
    assert not [w for w in report["warnings"] if w.startswith("rule ")], report["warnings"]  # no rule crashed
    found = {f["code"]: f for f in report["findings"]}

    wanted = set(expect["codes"])
    if expect["needs"] == "cpu_bf16" and not report["env"].get("bf16_supported"):
        wanted = set()  # device-aware: no native bf16, no claim of gain, no finding
    missed = wanted - set(found)
    if expect["exclusive"] or not wanted:
        unexpected = set(found) - wanted
    else:
        unexpected = set(found) - wanted - expect["allow"]
    recall = 1.0 if not wanted else (len(wanted) - len(missed)) / len(wanted)
    record_property("zoo", f"recall {recall:.0%}, false positives {len(unexpected)}")
    details = {code: (f["title"], f["evidence"]) for code, f in found.items()}
    assert not missed, f"planted {sorted(missed)} not found; found {details}; breakdown {report['breakdown']}"
    assert not unexpected, f"false positives {sorted(unexpected)}: {details}"

    for f in found.values():  # what the contract promises about every finding
        assert Finding.from_dict(f).problem() is None
        assert f["experiment"] is None and f["evidence"]
