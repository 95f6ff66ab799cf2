"""The history: records appended under a lock by real processes, read back with what was skipped said,
change points by the stated method, `--history` on real runs, and `advise history`'s page in Chromium."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from advisor.history import store, trend
from conftest import WORKLOADS, advise_cmd
from test_html import browser, open_page  # noqa: F401  (the module-scoped headless Chromium)

FP = {"device": "cpu", "gpu_name": None, "cpu_model": "Xeon", "cpu_count": 2, "torch": "2.13.0", "cuda": None}


def records(steps: list[float], fingerprint=None, torch_at: int | None = None) -> list[dict]:
    out = []
    for i, s in enumerate(steps):
        fp = dict(fingerprint or FP, **({"torch": "2.14.1"} if torch_at is not None and i >= torch_at else {}))
        out.append({"v": 1, "kind": "profile", "commit": f"c{i:02d}" + "0" * 30, "status": "ok", "script": "train.py",
                    "fingerprint": fp, "step_s": s})
    return out


def noisy(n: int, seed: int, plant_at: int | None = None, factor: float = 1.10, sd: float = 0.02) -> list[float]:
    rng = np.random.default_rng(seed)
    return [0.050 * (factor if plant_at is not None and i >= plant_at else 1.0) * float(np.exp(rng.normal(0, sd)))
            for i in range(n)]


def test_two_jobs_appending_at_once_both_land_whole(tmp_path):
    path = tmp_path / "h.jsonl"
    code = ("import sys\nfrom advisor.history import store\n"
            "for i in range(200):\n    store.append(sys.argv[1], {'v': 1, 'kind': 'profile', 'job': sys.argv[2], 'i': i, "
            "'pad': 'x' * 300})\n")
    jobs = [subprocess.Popen([sys.executable, "-c", code, str(path), name]) for name in ("a", "b")]
    assert [j.wait(timeout=60) for j in jobs] == [0, 0]
    read = store.read(path)
    assert read.skipped == [] and len(read.records) == 400
    for job in ("a", "b"):
        assert [r["i"] for r in read.records if r["job"] == job] == list(range(200))


def test_a_truncated_line_and_a_newer_record_are_skipped_and_said(tmp_path):
    path = tmp_path / "h.jsonl"
    store.append(path, {"v": 1, "kind": "profile", "step_s": 0.05})
    with open(path, "a") as fh:
        fh.write('{"v": 1, "kind": "prof')  # a writer that died mid-line
    store.append(path, {"v": 1, "kind": "profile", "step_s": 0.06})
    store.append(path, {"v": 99, "kind": "profile", "step_s": 0.07})
    read = store.read(path)
    assert [r["step_s"] for r in read.records] == [0.05, 0.06]
    assert read.skipped == ["line 2: not a whole record (a writer stopped mid-line?)",
                            "line 4: a record of version 99, newer than this advise reads (1)"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_planted_slowdown_is_named_by_its_commit_and_no_plant_names_none(seed):
    planted = records(noisy(20, seed, plant_at=12))
    [stretch] = trend.stretches(planted)
    assert [c.commit for c in stretch.changes] == [planted[12]["commit"]]
    assert 0.07 < stretch.changes[0].change < 0.13
    assert trend.stretches(records(noisy(20, seed)))[0].changes == []


def test_another_torch_is_a_new_stretch_marked_never_a_change():
    moved = records(noisy(10, 4) + [s * 1.15 for s in noisy(10, 5)], torch_at=10)
    first, second = trend.stretches(moved)
    assert first.indices == list(range(10)) and second.indices == list(range(10, 20))
    assert first.changes == [] and second.changes == [] and second.after == "torch 2.13.0 -> 2.14.1"


def test_profile_and_the_gate_append_their_records_with_the_commit(tmp_path, browser):  # noqa: F811
    repo = tmp_path / "repo"
    repo.mkdir()
    code = (WORKLOADS / "ab_matmul.py").read_text()
    (repo / "train.py").write_text(code)
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=a"]
    for args in (["init", "-q"], ["add", "train.py"], ["commit", "-qm", "base"]):
        subprocess.run(git + args, cwd=repo, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    history = tmp_path / "runs.jsonl"
    quick = ["--steps", "8", "--warmup", "2", "--profile-steps", "0", "--no-experiments", "--history", str(history)]
    run = subprocess.run(advise_cmd("profile", *quick, "--out", str(tmp_path / "r1"), "train.py", "--steps", "40"),
                         cwd=repo, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    (repo / "train.py").write_text(code + "\n# a local change\n")
    run = subprocess.run(advise_cmd("profile", *quick, "--out", str(tmp_path / "r2"), "train.py", "--steps", "40"),
                         cwd=repo, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    first, second = store.read(history).records
    assert first["commit"] == head and first["dirty"] is False and second["dirty"] is True
    assert first["fingerprint"]["torch"] and first["step_s"] > 0 and first["samples_per_s"] > 0
    bad = subprocess.run(advise_cmd("profile", "--history", str(tmp_path / "nowhere" / "h.jsonl"), "train.py"), cwd=repo,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "does not exist" in bad.stderr
    # the page: records from the method's test, the two real ones, offline in Chromium
    for r in records(noisy(20, 1, plant_at=12)):
        store.append(history, r)
    shown = subprocess.run(advise_cmd("history", str(history), "--out", str(tmp_path / "page")), capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "c12" in shown.stdout and "+local changes" not in shown.stdout
    markdown = (tmp_path / "page" / "history.md").read_text()
    assert "+local changes" in markdown and "binary segmentation" in markdown
    loaded = open_page(browser, tmp_path / "page" / "history.html")
    assert loaded.requests == [] and loaded.console == []
    assert browser.execute_script("return document.querySelectorAll('svg polyline').length") == 2  # two fingerprints
    assert browser.execute_script("return document.querySelectorAll('line.change').length") == 1
    json.loads(history.read_text().splitlines()[0])
