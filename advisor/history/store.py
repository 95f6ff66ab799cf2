"""The history file: JSON lines, one record per run, appended under a lock.

This is the one file advise writes outside a run dir, and only where the user names it
(``--history FILE``). Two jobs appending at once both land: each append holds an exclusive
``flock`` on the file for the write of its one line, and a line is written whole (one ``write``
of at most a few hundred bytes, then ``fsync``). A writer that died mid-line leaves a last line
without its newline: the next append starts on a new line, and the reader skips the fragment and
says so. A record of a newer version than this reader knows is skipped and said, never guessed at.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..report import Report
from ..report_blocks import Fingerprint

VERSION = 1
FINGERPRINT = ("device", "gpu_name", "cpu_model", "cpu_count", "torch", "cuda")  # what makes figures comparable


class HistoryError(ValueError):
    """A history file that cannot be written or read: one line."""


@dataclass
class Read:
    records: list[dict]
    skipped: list[str] = field(default_factory=list)  # why each skipped line was skipped


def git_state(folder: str | os.PathLike) -> tuple[str | None, bool | None]:
    """(the commit checked out in `folder`, whether tracked files differ from it); (None, None) outside git."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None
    commit = git("rev-parse", "HEAD")
    if not commit:
        return None, None
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit, bool(status) if status is not None else None


def fingerprint(report: Report) -> dict:
    """The facts two records must share for their absolute figures to be compared."""
    fp = report.fingerprint if isinstance(report.fingerprint, Fingerprint) else Fingerprint()
    facts = {k: getattr(fp, k) for k in FINGERPRINT}
    facts["device"] = facts["device"] or report.device
    return facts


def profile_record(report: Report, folder: str | os.PathLike) -> dict:
    """One `advise profile` run as a history record."""
    commit, dirty = git_state(folder)
    tp, mem = report.throughput, report.memory
    peak = mem.peak_allocated_bytes or mem.peak_memory_bytes or mem.peak_rss_hwm_bytes
    return {"v": VERSION, "kind": "profile", "at": _now(), "commit": commit, "dirty": dirty, "script": report.script,
            "fingerprint": fingerprint(report), "status": report.status, "step_s": tp.step_time_median_s,
            "samples_per_s": tp.samples_per_s, "steps_per_s": tp.steps_per_s,
            "mfu": report.mfu.mfu if report.mfu is not None else None, "peak_memory_bytes": peak}


def gate_record(decision: dict, folder: str | os.PathLike, base_folder: str | os.PathLike) -> dict:
    """One `advise ab` decision (its ab.json) as a history record: the candidate's commit, the base's."""
    commit, dirty = git_state(folder)
    base, _ = git_state(base_folder)
    step: dict = next((m for m in decision.get("metrics", []) if m.get("name") == "step_time"), {})
    ratio = 1 + step["slowdown"] if step.get("slowdown") is not None else None
    ci = [1 + x for x in step["ci"]] if step.get("ci") else None
    return {"v": VERSION, "kind": "gate", "at": _now(), "commit": commit, "dirty": dirty, "base_commit": base,
            "script": decision.get("script"), "verdict": decision.get("verdict"), "mode": decision.get("mode"),
            "ratio": ratio, "ci": ci, "mdc": step.get("mdc"), "rounds": (decision.get("statistics") or {}).get("rounds")}


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def append(path: str | os.PathLike, record: dict) -> None:
    """Append `record` to the history at `path` (created where missing), whole, under an exclusive lock."""
    line = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise HistoryError(f"cannot open the history file {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line  # a writer died mid-line: its fragment stays a line of its own, skipped when read
        os.write(fd, line)
        os.fsync(fd)
    except OSError as exc:
        raise HistoryError(f"cannot append to the history file {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read(path: str | os.PathLike) -> Read:
    """Every record of the history at `path` that this version can read, and why any other was skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise HistoryError(f"cannot read the history file {path}: {exc.strerror or exc}") from None
    out = Read([])
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record: Any = json.loads(line)
        except json.JSONDecodeError:
            out.skipped.append(f"line {n}: not a whole record (a writer stopped mid-line?)")
            continue
        if not isinstance(record, dict) or not isinstance(record.get("v"), int):
            out.skipped.append(f"line {n}: not a history record")
        elif record["v"] > VERSION:
            out.skipped.append(f"line {n}: a record of version {record['v']}, newer than this advise reads ({VERSION})")
        else:
            out.records.append(record)
    return out
