"""The run dir's file names, per rank: the probe writes them, the Profile and the report read them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def rank_info() -> dict:
    """RANK / LOCAL_RANK / WORLD_SIZE as torchrun sets them (None when not distributed)."""
    def _int(name: str) -> int | None:
        value = os.environ.get(name)
        return int(value) if value and value.isdigit() else None

    return {"rank": _int("RANK"), "local_rank": _int("LOCAL_RANK"), "world_size": _int("WORLD_SIZE")}


@dataclass(frozen=True)
class RunFiles:
    """Artifact names; under torchrun each rank gets its own (``trace.rank1.json.gz``)."""

    trace: str
    steps_jsonl: str
    steps_csv: str
    samples_csv: str
    probe_json: str
    log: str
    report_json: str
    report_html: str


def names(rank_suffix: str = "") -> RunFiles:
    r = rank_suffix
    return RunFiles(
        trace=f"trace{r}.json.gz",
        steps_jsonl=f"steps{r}.jsonl",
        steps_csv=f"steps{r}.csv",
        samples_csv=f"samples{r}.csv",
        probe_json=f"probe{r}.json",
        log=f"script{r}.log",
        report_json=f"report{r}.json",
        report_html=f"report{r}.html",
    )


def rank_suffix() -> str:
    """``.rank1`` for rank 1 of a multi-rank job, '' for a single process."""
    info = rank_info()
    return f".rank{info['rank']}" if (info["world_size"] or 1) > 1 else ""


# What a run leaves only while it writes: atomic writes' temp files (advisor.atomic, the probe's
# trace export), the probe's config for its child, the raw step lines it turns into steps.csv.
SCRATCH = (".tmp-*", ".probe-config*.json", "steps*.jsonl")


def remove_scratch(run_dir: str | os.PathLike) -> list[str]:
    """Delete the scratch files a failed run left in `run_dir` and its experiments; never raises."""
    removed = []
    for pattern in SCRATCH:
        try:
            found = list(Path(run_dir).rglob(pattern))
        except OSError:
            continue
        for path in found:
            try:
                if path.is_file() or path.is_symlink():
                    path.unlink()
                    removed.append(str(path))
            except OSError:
                pass
    return removed
