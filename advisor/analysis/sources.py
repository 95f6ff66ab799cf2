"""Where in the user's code: the lines behind host syncs, matmuls, host-to-device copies and
DataLoader fetches, as the rules' findings name them (``at train.py:42``).

Two sources, one shape (``{category: [site, ...]}``, a site being ``file``, ``line``,
``function``, ``op``, ``count`` and what the category needs: ``device``, ``dtype``, ``pinned``):

- a probe run writes ``sources.json`` (see :mod:`advisor.probe.sources`): the exact line of each
  call, seen from Python while one warm-up step runs;
- a trace alone (``advise analyze``) has ``python_function`` events when it was recorded with
  ``with_stack=True``: :func:`from_trace` puts each op under the innermost user frame around it.
  Those frames name the line a *function starts on* (the profiler's Python tracer records calls,
  not lines), so a trace's sites are the enclosing function's first line, said in ``precision``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import os
import re
import sys
import sysconfig
from collections import Counter
from pathlib import Path

from ..model import SourceLocation
from ..run_dir.seen import SourceSite, Sources

if TYPE_CHECKING:
    from advisor.trace import TraceFrames
    import pandas as pd

CATEGORIES = ("host-sync", "matmul", "h2d-copy", "dataloader")
_FROM_TRACE = "trace python_function events"
TOP = 5  # sites per finding

_ADVISOR_DIR = str(Path(__file__).resolve().parents[1]) + os.sep  # advisor/, not advisor/analysis/
# a frame name from a trace is shortened by the tracer (``torch/nn/modules/module.py``)
_LIBRARY = re.compile(r"(^<|[/\\](?:site-packages|dist-packages)[/\\]|^torch[/\\]|[/\\]torch[/\\]|^advisor[/\\])")
_STDLIB = tuple(str(Path(p).resolve()) + os.sep for p in {sysconfig.get_paths().get("stdlib"), sys.prefix, sys.base_prefix}
                if p)


def is_user_file(path: str) -> bool:
    """Whether `path` is the user's own code: not torch, an installed package, the stdlib or advise."""
    if not path or path.startswith(_ADVISOR_DIR) or _LIBRARY.search(path):
        return False
    return not (os.path.isabs(path) and path.startswith(_STDLIB))


_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<function>.+)$")


def parse_frame(name: str) -> tuple[str, int, str] | None:
    """``('train.py', 42, 'step')`` from a profiler frame name ``train.py(42): step``, or None."""
    m = _FRAME.match(name or "")
    return (m["file"], int(m["line"]), m["function"]) if m else None


def locations(sources: Sources | None, category: str, *, top: int = TOP, **match: object) -> list[SourceLocation]:
    """The `top` sites of `category` whose fields equal `match` (a value may be a tuple of
    choices), most calls first, as the Finding's typed locations."""
    rows = sources.rows(category) if sources is not None else []
    picked = [r for r in rows if all(getattr(r, k) in (v if isinstance(v, tuple) else (v,)) for k, v in match.items())]
    merged: Counter = Counter()
    for r in picked:
        merged[(r.file, r.line, r.function, r.op)] += r.count
    ranked = sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return [SourceLocation(file, line, function, count, op) for (file, line, function, op), count in ranked]


def frame_locations(frames: list[tuple[str, int, str]]) -> list[SourceLocation]:
    """Locations from profiler frame names with counts and what was called, ``(name, count, op)``;
    names that are not a frame (an op name where the trace had no stacks) are left out."""
    out = []
    for name, count, op in frames:
        parsed = parse_frame(name)
        if parsed and is_user_file(parsed[0]):
            out.append(SourceLocation(parsed[0], parsed[1], parsed[2], int(count), op))
    return out


# --------------------------------------------------------------------------- from a trace

SYNC_OPS = ("aten::item", "aten::nonzero", "aten::masked_select", "aten::unique", "aten::_unique2")
_DTYPE = {"float": "float32", "c10::Half": "float16", "c10::BFloat16": "bfloat16", "double": "float64"}


def from_trace(trace: TraceFrames) -> Sources | None:
    """Sites from a trace's ``python_function`` events (None when it has none: no with_stack)."""
    py = trace.python
    if py is None or py.empty:
        return None
    user = py[[_user_frame_name(n) for n in py["name"]]]
    if user.empty:
        return Sources(captured_by=_FROM_TRACE, precision="function")
    ops = trace.ops
    sites: dict[str, Counter] = {c: Counter() for c in CATEGORIES}
    frames = {tid: g.sort_values("ts_us") for tid, g in user.groupby("tid")}

    def innermost(tid: int, ts: float) -> str | None:
        g = frames.get(tid)
        if g is None:
            return None
        inside = g[(g["ts_us"].to_numpy() <= ts) & (g["end_us"].to_numpy() >= ts)]
        return inside["name"].iloc[-1] if len(inside) else None

    device = "cuda" if trace.meta.get("has_gpu") else "cpu"

    def add(category: str, frame: str | None, **extra: object) -> None:
        extra.setdefault("device", device)
        if frame is not None:
            sites[category][(frame, tuple(sorted(extra.items())))] += 1

    # GEMMs/convs: the op carrying the FLOPs (aten::linear over aten::addmm counts once, see advisor.trace)
    gemm = ops["name"].str.contains(r"mm|conv|linear|matmul", regex=True) & ~ops["name"].str.contains("backward")
    gemms = ops[gemm & ops["flops"].notna()] if "flops" in ops else ops.iloc[0:0]
    for row in gemms.itertuples():
        types = row.input_types if isinstance(row.input_types, list) else []
        dtype = _DTYPE.get(types[0], types[0]) if types else None
        add("matmul", innermost(row.tid, row.ts_us), op=row.name.removeprefix("aten::"), dtype=dtype)
    for row in ops[ops["name"].isin(SYNC_OPS)].itertuples():
        add("host-sync", innermost(row.tid, row.ts_us), op=row.name.removeprefix("aten::"))
    _pageable_copies(trace, ops, innermost, add)
    _fetches(trace, user, add)
    out: dict[str, list[SourceSite]] = {}
    for category, counter in sites.items():
        rows = []
        for (frame, extra), count in counter.items():
            parsed = parse_frame(frame)
            assert parsed is not None  # every frame here is one of `user`'s, which parse
            file, line, function = parsed
            rows.append(SourceSite(file=file, line=line, function=function, count=count, **dict(extra)))
        if rows:
            out[category] = sorted(rows, key=lambda r: -r.count)
    return Sources(captured_by=_FROM_TRACE, precision="function", sites=out)


def _user_frame_name(name: str) -> bool:
    parsed = parse_frame(name)
    return parsed is not None and is_user_file(parsed[0])


def _pageable_copies(trace: TraceFrames, ops: pd.DataFrame, innermost: Callable[[int, float], str | None],
                     add: Callable[..., None]) -> None:
    """Host-to-device copies: the copy op around each runtime call that issued a memcpy, with its pin state."""
    mc, rt = trace.memcpy, trace.runtime
    if mc.empty or rt.empty or "kind" not in mc:
        return
    h2d = mc[mc["kind"] == "HtoD"]
    calls = rt[rt["correlation"].isin(h2d["correlation"].dropna())]
    pinned = dict(zip(h2d["correlation"], h2d["src"] != "Pageable")) if "src" in h2d else {}
    for call in calls.itertuples():
        add("h2d-copy", innermost(call.tid, call.ts_us), op="copy", pinned=bool(pinned.get(call.correlation, False)),
            device="cuda")


def _fetches(trace: TraceFrames, user: pd.DataFrame, add: Callable[..., None]) -> None:
    """DataLoader fetches: the outermost user frames inside each ``enumerate(DataLoader)`` range
    (the Dataset's ``__getitem__``, a user collate_fn)."""
    ann = trace.annotations
    if ann.empty:
        return
    fetch = ann[ann["name"].str.startswith("enumerate(DataLoader)")]
    for f in fetch.itertuples():
        inside = user[(user["tid"] == f.tid) & (user["ts_us"] >= f.ts_us) & (user["end_us"] <= f.end_us)]
        ends: list[float] = []
        for frame in inside.sort_values(["ts_us", "dur_us"], ascending=[True, False]).itertuples():
            if ends and frame.ts_us < ends[-1]:
                continue  # nested inside a user frame already counted
            ends.append(frame.end_us)
            add("dataloader", frame.name, op="DataLoader fetch")
