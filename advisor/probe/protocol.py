"""The parent-child protocol: the lines the child writes and the parent reads, in one place.

The child appends one JSON object per line to ``steps{r}.jsonl`` (every step, with its
``phase``) and ``arms{r}.jsonl`` (one per arm window); the parent reads them while the child runs,
whole lines only, from where it stopped. The phases:

- ``startup``, ``warmup``, ``profiler-warmup``, ``measure``: the profiled run's own steps;
- ``window-done``: the measured window is over and the child waits for a plan (``plan{r}.json``);
- ``arm``: a step of an arm window (its round, window and arm);
- ``plan-done``: a plan's last window ended (with ``error`` when an arm failed).
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import IO


class Phase(str, Enum):
    STARTUP = "startup"
    WARMUP = "warmup"
    PROFILER_WARMUP = "profiler-warmup"
    MEASURE = "measure"
    WINDOW_DONE = "window-done"
    ARM = "arm"
    PLAN_DONE = "plan-done"

    def __str__(self) -> str:
        return self.value


WINDOW_PHASES = (Phase.STARTUP, Phase.WARMUP, Phase.PROFILER_WARMUP, Phase.MEASURE)  # the profiled run's own steps


def write_line(sink: IO[str], record: dict) -> None:
    """One record, one line, flushed: the parent may read it at once."""
    sink.write(json.dumps(record) + "\n")
    sink.flush()


def read_lines(path: Path, offset: int = 0) -> tuple[list[dict], int]:
    """The whole lines written after byte `offset` and the offset after them (a line still being
    written is read next time). A missing file has no lines yet."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    lines = []
    for line in chunk[:end].splitlines():
        try:
            lines.append(json.loads(line)) if line.strip() else None
        except ValueError:
            continue  # a line torn by a crash mid-write: the rest still counts
    return lines, offset + end
