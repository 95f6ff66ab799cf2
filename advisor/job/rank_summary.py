"""One rank reduced to what the job's report needs of it, where the rank runs.

The job's own processes are the distributed engine: each rank reads its own trace into its
cross-rank step table (:meth:`advisor.analysis.ranks.JobProfile.step_table`: step, collective, exposed
and busy time, FLOPs), keeps its measured steps, how it ended and what each arms window
switched, and sends that (a few kB) to rank 0. Rank 0 merges N such summaries with its own
Profile; it never loads another rank's trace, so a 128-rank job costs one trace and 127 small
summaries. :func:`to_profile` turns a summary back into a Profile the cross-rank rules read.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from ..analysis import steptime, temporal
from ..profile import Profile, ProfileMeta
from ..run_dir.protocol import ArmLine
from ..run_dir.seen import Env
from ..analysis.ranks import JobProfile

VERSION = 1


def _clean(value: object) -> Any:  # JSON: a dict, list or scalar as `value` was
    """JSON without NaN (a missing figure is null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def summarize(profile: Profile, account: dict, rank: int, node: int, arm_windows: list[ArmLine] | None = None) -> dict:
    """This rank's summary: `account` (status, measured steps, error) and what its trace and steps say."""
    profile.env.rank = rank
    table = profile.derived("rank_steps", lambda: JobProfile([profile]).step_table())
    return _clean({
        "version": VERSION,
        "rank": rank,
        "node": node,
        "host": profile.env.hostname,
        "account": account,
        "env": profile.env.record(),
        "steps": profile.steps.to_dict("records"),
        "rank_steps": table.to_dict("records"),
        "hta": (temporal.hta_breakdown(profile.trace) or {}).get("ranks", []),
        "notes": profile.meta.notes,
        "arm_windows": [{k: getattr(w, k) for k in ("round", "window", "arm", "overrides", "applied", "not_switchable", "error")}
                        for w in arm_windows or []],
    })


def to_profile(summary: dict) -> Profile:
    """A Profile of the summarised rank: its steps and env, its step table ready (no trace)."""
    profile = Profile(steps=pd.DataFrame(summary.get("steps") or []), env=Env.read(summary.get("env")),
                      meta=ProfileMeta(source="summary"))
    profile.env.rank = summary["rank"]
    table = pd.DataFrame(summary.get("rank_steps") or [])
    profile.memo["rank_steps"] = table.astype(float).assign(rank=int(summary["rank"]), index=table["index"].astype(int)) \
        if len(table) else table
    return profile


def rank_row(summary: dict) -> dict:
    """report.json's `ranks` row of a summarised rank: how it ended, where it ran, its step times."""
    tp = steptime.throughput(pd.DataFrame(summary.get("steps") or []))
    account = {k: v for k, v in (summary.get("account") or {}).items() if k not in ("traceback", "ended_at")}
    return dict(account, rank=summary["rank"], node=summary.get("node"), host=summary.get("host"),
                samples_per_s=tp["samples_per_s"], step_time_median_s=tp["step_time_median_s"],
                step_time_p90_s=tp["step_time_p90_s"])


def missing_row(rank: int, waited_s: float) -> dict:
    """A rank whose summary never came: crashed, killed, or slower than rank 0 would wait."""
    return {"rank": rank, "status": "missing", "measured_steps": 0,
            "error": f"sent no summary to rank 0 within {waited_s:.0f} s (crashed, killed, or still running)"}


def disagreements(own: list[dict], others: dict[int, list[dict]]) -> dict[str, list[str]]:
    """Arms whose windows did not switch the same on every rank: the arm's overrides (JSON, keys
    sorted) -> what differed ("rank 1: dataloader").

    Every rank runs one plan; a rank whose switch was refused (a loader it could not rebuild)
    measured another configuration in that window, and the job's step time is then no measure of the fix."""
    ours = {(w.get("round"), w.get("window")): w for w in own}
    out: dict[str, list[str]] = {}
    for rank, windows in sorted(others.items()):
        for w in windows:
            mine = ours.get((w.get("round"), w.get("window")))
            if mine is None or w.get("arm") in (None, "baseline"):
                continue
            if (w.get("applied") or {}) != (mine.get("applied") or {}) or w.get("error") != mine.get("error"):
                refused = ", ".join(w.get("not_switchable") or []) or w.get("error") or "a different switch"
                text = f"rank {rank}: {refused}"
                key = json.dumps(w.get("overrides") or {}, sort_keys=True)
                if text not in out.setdefault(key, []):
                    out[key].append(text)
    return out
