"""One spelling for each unit: times, sizes, shares, counts, rates, FLOPs, speed-ups.

A leaf of the core (it imports nothing of advise's), so the reports' renderers
(:mod:`advisor.reports.format`) and the rules' messages write a number the same way. Every
function takes whatever a report holds (None, NaN, a bool, a string) and returns text; a value
that is not a finite number is the dash.
"""

from __future__ import annotations

import math

DASH = "–"


def finite(x: object) -> float | None:
    """`x` as a float when it is a finite number (not a bool), else None."""
    if x is None or isinstance(x, bool):
        return None
    try:
        x = float(x)  # type: ignore[arg-type]  # whatever a report holds: what float() refuses is the dash
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def time_s(seconds: object) -> str:
    """`seconds` as µs, ms or s, three significant-ish digits."""
    s = finite(seconds)
    if s is None:
        return DASH
    if abs(s) < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if abs(s) < 1:
        return f"{s * 1e3:.1f} ms"
    if abs(s) < 120:
        return f"{s:.2f} s"
    return f"{int(s // 60)} min {s % 60:.0f} s"


def time_us(us: object) -> str:
    u = finite(us)
    return DASH if u is None else time_s(u / 1e6)


def frac(f: object, digits: int = 0) -> str:
    v = finite(f)
    return DASH if v is None else f"{v * 100:.{digits}f}%"


def percent(p: object) -> str:
    v = finite(p)
    return DASH if v is None else f"{v:.0f}%"


def count(n: object) -> str:
    v = finite(n)
    return DASH if v is None else f"{v:,.0f}"


def rate(x: object, unit: str) -> str:
    v = finite(x)
    if v is None:
        return DASH
    return f"{v:,.1f} {unit}" if v < 10_000 else f"{v:,.0f} {unit}"


def _scaled(v: float, units: tuple[tuple[str, float, int], ...], base: str) -> str:
    """`v` in the first unit it reaches (name, scale, decimals), else in `base` units."""
    for unit, scale, digits in units:
        if abs(v) >= scale:
            return f"{v / scale:.{digits}f} {unit}"
    return f"{v:.0f} {base}"


def bytes_(n: object) -> str:
    v = finite(n)
    return DASH if v is None else _scaled(v, (("GiB", 2**30, 2), ("MiB", 2**20, 1), ("KiB", 2**10, 1)), "B")


def watts(w: object) -> str:
    v = finite(w)
    return DASH if v is None else f"{v:.0f} W"


def flops(f: object) -> str:
    v = finite(f)
    if v is None or v <= 0:
        return DASH
    return _scaled(v, (("TFLOP", 1e12, 2), ("GFLOP", 1e9, 2), ("MFLOP", 1e6, 2), ("kFLOP", 1e3, 2)), "FLOP")


def speedup(x: object) -> str:
    v = finite(x)
    return DASH if v is None else f"{v:.2f}×"


def number(x: object, digits: int = 1) -> str:
    """A plain number with thousands separators: 1,389.2."""
    v = finite(x)
    return DASH if v is None else f"{v:,.{digits}f}"
