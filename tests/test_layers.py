"""The layers hold: commands -> stages -> core, no cycles (import-linter, contracts in pyproject.toml).

`advisor.rules` and `advisor.reports` are mapped from rules/ and reports/ at install time, and
import-linter reads packages from disk, so the test stages the installed layout in a temp dir
(what a wheel holds) and runs the real `lint-imports` over it. Function-level imports count.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def stage(root: Path, extra: str = "") -> Path:
    """advisor/ with rules/ and reports/ inside, as installed; `extra` is appended to advisor/trace/build.py (a core module)."""
    pkg = root / "advisor"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "advisor", pkg, ignore=ignore)
    shutil.copytree(REPO / "rules", pkg / "rules", ignore=ignore)
    shutil.copytree(REPO / "reports", pkg / "reports", ignore=ignore)
    if extra:
        with open(pkg / "trace" / "build.py", "a", encoding="utf-8") as f:
            f.write(extra)
    return root


def lint(root: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    assert exe, "lint-imports is not installed (pip install -e '.[test]')"
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([exe, "--config", str(REPO / "pyproject.toml"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_layer_contracts_are_kept(tmp_path):
    result = lint(stage(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "3 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("climb", ["from advisor import pipeline", "from advisor.reports import terminal"])
def test_a_core_module_that_climbs_a_layer_breaks_the_contract(tmp_path, climb):
    result = lint(stage(tmp_path, f"\n\ndef _climbs():\n    {climb}  # a function-level import counts too\n"))
    assert result.returncode != 0 and "commands -> stages -> core BROKEN" in result.stdout, result.stdout[-3000:]
