"""The history on real runs: does `advise history` name the commit that planted a slowdown, and only it?

A git repository of tests/workloads/slowdown_knob.py (a 40 ms step that waits: a planted
``--slowdown`` default is that much slower, whatever the machine), 20 commits; at commit PLANT the
default becomes 1.10 (10% slower). For each commit, `advise profile --no-experiments --history`;
beside them `advise ab --history` on three pairs of neighbouring commits (the planted pair among
them); then `advise history`. The same again with no plant, into a second file. Then 4 more
records of the planted repository's last commit from another torch (`--other-python`, a venv with
another torch): a changed fingerprint, to be marked and not named.

    python benchmarks/history_show.py --other-python /tmp/tvenv/bin/python [--screenshot docs/how-to/history.png]

Prints what `advise history` found for each file; exits 1 where the Show does not hold.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KNOB = REPO / "tests" / "workloads" / "slowdown_knob.py"
DEFAULT = 'parser.add_argument("--slowdown", type=float, default=1.0,'
COMMITS, PLANT = 20, 12
PROFILE = ["--no-experiments", "--steps", "40", "--warmup", "3", "--profile-steps", "0"]
GATE = ["--rounds", "3", "--max-rounds", "3", "--turn", "0.3", "--turns", "6", "--warmup", "3"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=show@advise", "-c", "user.name=show", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def make_repo(root: Path, plant: bool) -> list[str]:
    root.mkdir(parents=True)
    git(root, "init", "-q")
    code = KNOB.read_text()
    assert DEFAULT in code
    commits = []
    for k in range(COMMITS):
        text = code.replace(DEFAULT, DEFAULT.replace("default=1.0", "default=1.1")) if plant and k >= PLANT else code
        (root / "train.py").write_text(text + f"\n# commit {k}\n")
        git(root, "add", "train.py")
        git(root, "commit", "-qm", f"commit {k}")
        commits.append(git(root, "rev-parse", "HEAD"))
    return commits


def advise(python: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([python, "-P", "-m", "advisor", *args], cwd=cwd, env=env, capture_output=True, text=True)


def record_all(repo: Path, commits: list[str], history: Path, python: str, gates: list[int], work: Path) -> None:
    for k, commit in enumerate(commits):
        git(repo, "checkout", "-q", commit)
        run = advise(python, "profile", *PROFILE, "--history", str(history), "--out", str(work / f"run-{k}"), "train.py",
                     "--step-ms", "40", cwd=repo)
        if run.returncode != 0:
            raise SystemExit(f"commit {k}: advise profile exited {run.returncode}: {run.stderr[-1500:]}")
        if k in gates:  # the gate on this commit against the one before it, each a worktree
            base, cand = work / f"base-{k}", work / f"cand-{k}"
            git(repo, "worktree", "add", "-q", "--detach", str(base), commits[k - 1])
            git(repo, "worktree", "add", "-q", "--detach", str(cand), commit)
            gate = advise(python, "ab", *GATE, "--base", str(base), "--candidate", str(cand), "--history", str(history),
                          "--out", str(work / f"gate-{k}"), "train.py", "--step-ms", "40", cwd=work)
            print(f"  gate at commit {k}: exit {gate.returncode}", flush=True)
    git(repo, "checkout", "-q", commits[-1])


def found(history: Path, out: Path) -> dict:
    shown = advise(sys.executable, "history", str(history), "--out", str(out), "--format", "markdown", cwd=out.parent)
    if shown.returncode != 0:
        raise SystemExit(f"advise history exited {shown.returncode}: {shown.stderr}")
    print(shown.stdout.split("| # |")[0], flush=True)
    from advisor.history import store, trend

    records = store.read(history).records
    stretches = trend.stretches(records)
    return {"records": len(records), "gates": sum(r["kind"] == "gate" for r in records),
            "changes": [c.commit for s in stretches for c in s.changes], "stretches": [s.after for s in stretches]}


def screenshot(page: Path, png: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,1400", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(page.as_uri())
        driver.save_screenshot(str(png))
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other-python", required=True, help="a Python whose torch differs (a changed fingerprint)")
    parser.add_argument("--screenshot", type=Path, default=None, help="save the planted history's page as this PNG")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        planted = make_repo(work / "planted", plant=True)
        record_all(work / "planted", planted, work / "planted.jsonl", sys.executable, [5, PLANT, 17], work / "p")
        for k in range(4):  # the last commit again, from another torch
            run = advise(args.other_python, "profile", *PROFILE, "--history", str(work / "planted.jsonl"),
                         "--out", str(work / "p" / f"other-{k}"), "train.py", "--step-ms", "40", cwd=work / "planted")
            if run.returncode != 0:
                raise SystemExit(f"another torch: advise profile exited {run.returncode}: {run.stderr[-1500:]}")
        steady = make_repo(work / "steady", plant=False)
        record_all(work / "steady", steady, work / "steady.jsonl", sys.executable, [], work / "s")
        got = found(work / "planted.jsonl", work / "planted-page")
        print(f"planted at commit {PLANT} ({planted[PLANT][:10]}): {json.dumps(got)}")
        ok &= got["changes"] == [planted[PLANT]] and got["gates"] >= 3 and len(got["stretches"]) == 2
        still = found(work / "steady.jsonl", work / "steady-page")
        print(f"no plant: {json.dumps(still)}")
        ok &= still["changes"] == []
        if args.screenshot:
            screenshot(work / "planted-page" / "history.html", args.screenshot)
    print("the Show holds" if ok else "the Show does NOT hold")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
