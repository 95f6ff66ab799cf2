"""The layers hold: commands -> stages -> core, no cycles (import-linter, contracts in pyproject.toml).

`lint-imports` reads the source tree itself (advisor/, as a wheel holds it); the climbing test
plants an import in a copy of it. Function-level imports count.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torchfree  # import-linter reads the source: the main torch only (.ci/run's matrix has no lint tools)

REPO = Path(__file__).resolve().parents[1]


def lint(root: Path) -> subprocess.CompletedProcess:
    """`lint-imports` over the `advisor` package found in `root`."""
    exe = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    assert exe, "lint-imports is not installed (pip install -e '.[test]')"
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([exe, "--config", str(REPO / "pyproject.toml"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_layer_contracts_are_kept():
    result = lint(REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "4 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("climb", ["from advisor.commands import pipeline", "from advisor.reports import terminal"])
def test_a_core_module_that_climbs_a_layer_breaks_the_contract(tmp_path, climb):
    shutil.copytree(REPO / "advisor", tmp_path / "advisor", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "advisor" / "trace" / "build.py", "a", encoding="utf-8") as f:  # a core module
        f.write(f"\n\ndef _climbs():\n    {climb}  # a function-level import counts too\n")
    result = lint(tmp_path)
    assert result.returncode != 0 and "commands -> stages -> core BROKEN" in result.stdout, result.stdout[-3000:]
