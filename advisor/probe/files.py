"""Names of the files in a run dir, and the one way we write them (atomically)."""

from __future__ import annotations

import json
import os
import tempfile
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
    )


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temp file in the same folder and rename: readers never see half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a report is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_atomic(path: Path, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, default=_jsonable) + "\n")


def _jsonable(value):
    """numpy/pandas scalars and paths, which json cannot encode by itself."""
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
