"""The neighbours the benchmarks run beside: a second training script that evaluates and saves.

A CPU burner is periodic (each benchmark keeps its own phases); a real workload is not. The
trainer is pytorch/examples mnist's shape (its conv net, a test pass and a checkpoint after every
epoch of 640 samples), started again when it ends, and gone when the benchmark that started it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TRAINER = Path(__file__).resolve().parent / "truth" / "scripts" / "conv_mnist.py"
TRAINER_LOOP = """
import os, subprocess, sys
parent = os.getppid()
while os.getppid() == parent:
    subprocess.run([sys.executable, *sys.argv[1:]], stdout=subprocess.DEVNULL, cwd=os.environ.get("TMPDIR", "/tmp"))
"""


def start_trainer() -> subprocess.Popen:
    """The second training script, looping until its parent (the benchmark) ends; :func:`stop_trainer`
    stops it with the run it is in."""
    return subprocess.Popen([sys.executable, "-c", TRAINER_LOOP, str(TRAINER), "--train-size", "640",
                             "--test-size", "2000", "--epochs", "1000", "--save-model"], start_new_session=True)


def stop_trainer(proc: subprocess.Popen) -> None:
    """The loop and the script it runs, killed (its session), and reaped."""
    os.killpg(proc.pid, 9)
    proc.kill()
    proc.wait()
