"""The terminal summary as a careful user reads it, in an 80-column terminal.

`COLUMNS=80 advise ...` (or a real terminal) wraps the summary at word boundaries, continuation
lines indented under their item, and never inside a value: not inside a number, not between a
number and its unit, not inside "95% CI 1.2–1.3×". `advise analyze` never mentions an option it
does not have (it measures nothing: no --no-experiments, no --steps).
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from advisor.commands.cli import main
from conftest import NO_SCREENS, SHIPPED_TRACES, WORKLOADS, advise_cmd, trace_path

UNITS = r"(?:%|×|x|ms|s|µs|B|KiB|MiB|GiB|samples/s|steps/s|GFLOP/s|TFLOP/s|cores?|calls?|steps?|MB|GB)\b"
EXAMPLE = WORKLOADS.parent.parent / "examples" / "train_mnist_like.py"
RESNET = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def run80(*args, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run(advise_cmd(*args), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def split_values(text: str) -> list[str]:
    """Each line break that falls inside a value: 'a line ending 3.5' + 'next starting 1×' and the like."""
    lines = [line for line in text.splitlines() if line.strip()]
    bad = []
    for a, b in zip(lines, lines[1:]):
        a, b = a.rstrip(), b.strip()
        inside_number = re.search(r"\d[.,]?$", a) and re.match(r"[\d.,×%]", b)  # not "faster," / "95% CI"
        from_unit = re.search(r"(?<![\w.])\d[\d,.]*%?$", a) and re.match(UNITS, b)
        from_interval = a.endswith(" CI") and re.match(r"\d", b)
        if inside_number or from_unit or from_interval:
            bad.append(f"{a!r} / {b!r}")
    return bad


def options_of(command: str) -> set[str]:
    return {opt for p in main.commands[command].params for opt in getattr(p, "opts", [])} | {"--help"}


def check_80(text: str, *, code_lines=()) -> None:
    long = [line for line in text.splitlines() if len(line) > 80 and line not in code_lines]
    assert not long, long
    assert not split_values(text), split_values(text)


@pytest.mark.parametrize("ranks", [1, 2])
def test_analyze_at_80_columns_wraps_between_values_and_names_only_its_own_options(tmp_path, ranks):
    trace_path(RESNET)  # the shipped traces, read by relative path as a user types it
    names = [RESNET, RESNET.replace("_0/worker0.1623143089861", "_4/worker0.1623212756351")][:ranks]
    proc = run80("analyze", *names, cwd=SHIPPED_TRACES)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "findings" in out and "recommended: none: a trace alone cannot be re-run" in out
    assert any(line.startswith("      ") and not line.startswith("       ") for line in out.splitlines())
    check_80(out)
    mentioned = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", out))
    assert mentioned <= options_of("analyze"), mentioned - options_of("analyze")
    # every wrapped finding reads back as the one line it is without COLUMNS
    plain = subprocess.run(advise_cmd("analyze", *names), cwd=SHIPPED_TRACES, capture_output=True, text=True,
                           timeout=300, env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    joined = " ".join(out.split())
    for line in plain.stdout.splitlines():
        if line.startswith("  ") and line.strip():
            assert " ".join(line.split()) in joined, line


@pytest.mark.slow
@pytest.mark.timing
def test_profile_at_80_columns_never_splits_a_value(tmp_path):
    proc = run80("profile", "--steps", "8", "--warmup", "2", "--profile-steps", "2", "--max-experiments", "2",
                 *NO_SCREENS, "--out", "run", str(EXAMPLE), "--epochs", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "DL001" in out and "95% CI" in out, out
    code = [line for line in out.splitlines() if re.match(r"      [-+] ", line)]  # snippets: code, never wrapped
    check_80(out, code_lines=code)
