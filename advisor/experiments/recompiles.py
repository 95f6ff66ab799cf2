"""What a compile arm's recompiles say: how many, in how many steps, and what varied, in one line on
its experiment.

The child counts them per window from torch's own records (:class:`advisor.run_dir.protocol.
CompileCounts`); dynamo's failed guard names the input and the dimension ("tensor 'x' size mismatch
at index 0. expected 32, actual 17"), so the line can say which shape varied, which a user cannot
see without ``TORCH_LOGS=recompiles``. Each recompile is a compilation paid inside the steps (seconds
on a CPU), and a model whose shapes keep varying past dynamo's recompile limit runs uncompiled.
"""

from __future__ import annotations

import re

from ..run_dir.protocol import ArmLine

_SIZE = re.compile(r"tensor '(?P<name>.+?)' (?P<what>size|stride) mismatch at index (?P<dim>\d+)\. "
                   r"expected (?P<a>\d+), actual (?P<b>\d+)")
_RANGE = re.compile(r"(?P<name>[\w\[\]'\".]+?)\.size\(\)\[(?P<dim>\d+)\]")
_LOCAL = re.compile(r"""^L\[['"](?P<name>[^'"]+)['"]\]$""")  # dynamo's older spelling of a local: L['x']
MAX_SAID = 100  # characters of a reason said as it is


def summary(lines: list[ArmLine]) -> dict | None:
    """A compile arm's recompiles over its windows (`lines`), with `said`, the line that tells them;
    None where no window of it compiled anything."""
    counts = [line.compile for line in lines if line.compile is not None]
    if not counts:
        return None
    reasons = [r for c in counts for r in c.reasons]
    out = {"count": sum(c.recompiles for c in counts), "steps": sum(c.steps for c in counts),
           "timed": sum(c.recompiles_timed for c in counts), "graphs": sum(c.graphs for c in counts),
           "varied": varied(reasons), "reasons": list(dict.fromkeys(reasons)),
           "limit_hit": any(c.limit_hit for c in counts),
           "cudagraph_records": sum(c.cudagraph_records for c in counts),
           "cudagraph_records_timed": sum(c.cudagraph_records_timed for c in counts),
           "cudagraph_skips": sum(c.cudagraph_skips for c in counts),
           "cudagraph_skip_reasons": sorted({r for c in counts for r in c.cudagraph_skip_reasons})}
    out["said"] = said(out)
    return out


def varied(reasons: list[str]) -> list[dict]:
    """The inputs whose size or stride changed, per dimension, with the values the guards saw, in order."""
    out: dict[tuple[str, str, int], list[int]] = {}
    for reason in reasons:
        m = _SIZE.search(reason)
        if m is None:
            continue
        values = out.setdefault((_name(m["name"]), m["what"], int(m["dim"])), [])
        values += [v for v in (int(m["a"]), int(m["b"])) if v not in values]
    return [{"input": name, "what": what, "dim": dim, "values": values} for (name, what, dim), values in out.items()]


def said(s: dict) -> str | None:
    """`recompiled 2 times in 24 steps (1 in its timed steps): x's size 0 varied (8, 5, 7)`, with
    dynamo's recompile limit and CUDA graphs' re-records and skips; None when there is nothing to say."""
    parts = []
    if s["count"]:
        times = "once" if s["count"] == 1 else f"{s['count']} times"
        timed = f" ({s['timed']} in its timed steps)" if s["timed"] else ""
        parts.append(f"recompiled {times} in {s['steps']} steps{timed}: {'; '.join(_causes(s))}")
    if s["limit_hit"]:
        parts.append("dynamo reached its recompile limit: from then on that code ran uncompiled")
    if s["cudagraph_records_timed"]:
        parts.append(f"CUDA graphs recorded again {s['cudagraph_records_timed']} times in its timed steps "
                     "(one recording per new input shape)")
    if s["cudagraph_skips"]:
        why = "; ".join(s["cudagraph_skip_reasons"]) or "inductor's reason was not recorded"
        parts.append(f"CUDA graphs skipped for {s['cudagraph_skips']} graph{'s' if s['cudagraph_skips'] > 1 else ''} ({why})")
    return "; ".join(parts) or None


def _causes(s: dict) -> list[str]:
    """What changed, once each: the inputs' varied dimensions, then the other guards as dynamo says them."""
    causes = [f"{v['input']}'s {v['what']} {v['dim']} varied ({', '.join(str(x) for x in v['values'])})" for v in s["varied"]]
    for reason in s["reasons"]:
        if _SIZE.search(reason):
            continue
        guard = reason.split("  #")[0].strip()
        m = _RANGE.search(guard)
        text = (f"{_name(m['name'])}'s size {m['dim']} left the range it was compiled for ({guard})" if m
                else guard if len(guard) <= MAX_SAID else guard[:MAX_SAID - 1] + "…")
        if text not in causes:
            causes.append(text)
    return causes or ["dynamo did not say why"]


def _name(name: str) -> str:
    m = _LOCAL.match(name)
    return m["name"] if m else name
