"""Shared fixtures: run the real `advise` CLI in a subprocess, locate workloads and shared traces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

WORKLOADS = Path(__file__).parent / "workloads"
REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = Path(os.environ.get("ADVISE_SHARED_TRACES", REPO.parent / "shared" / "traces"))

# Fast probe settings for tests: the numbers only need to exist, not to be precise.
FAST = ["--steps", "6", "--warmup", "2", "--profile-steps", "2", "--no-experiments"]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    out: Path

    @property
    def report(self) -> dict:
        return json.loads((self.out / "report.json").read_text())


def advise_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "advisor", *args]


@pytest.fixture
def advise(tmp_path):
    """Run `advise ARGS...` for real in `tmp_path` (or `cwd`); the run dir is tmp_path/run."""

    def run(*args: str, cwd: Path | None = None, timeout: float = 180) -> Result:
        proc = subprocess.run(advise_cmd(*args), cwd=cwd or tmp_path, capture_output=True, text=True, timeout=timeout)
        return Result(proc.returncode, proc.stdout, proc.stderr, (cwd or tmp_path) / "run")

    return run


def shared_trace(relative: str) -> Path:
    path = SHARED_TRACES / relative
    if not path.exists():
        pytest.skip(f"shared trace not available: {path}")
    return path
