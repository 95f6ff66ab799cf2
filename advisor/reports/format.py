"""Number formatting: one spelling for each unit, for every renderer (terminal, HTML, markdown, compare).

A core module: it imports nothing from advise's stages. Every function takes whatever a report
holds (None, NaN, a bool, a string) and returns text; a value that is not a finite number is
the dash.
"""

from __future__ import annotations

import math

DASH = "–"


def _num(x) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def time_s(seconds) -> str:
    """`seconds` as µs, ms or s, three significant-ish digits."""
    s = _num(seconds)
    if s is None:
        return DASH
    if abs(s) < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if abs(s) < 1:
        return f"{s * 1e3:.1f} ms"
    if abs(s) < 120:
        return f"{s:.2f} s"
    return f"{int(s // 60)} min {s % 60:.0f} s"


def tick_time(seconds) -> str:
    """An axis label: like `time_s`, without a trailing `.0` (60 ms, 1.5 s)."""
    text = time_s(seconds)
    return text.replace(".0 ", " ").replace(".00 ", " ")


def time_us(us) -> str:
    u = _num(us)
    return DASH if u is None else time_s(u / 1e6)


def frac(f, digits: int = 0) -> str:
    v = _num(f)
    return DASH if v is None else f"{v * 100:.{digits}f}%"


def percent(p) -> str:
    v = _num(p)
    return DASH if v is None else f"{v:.0f}%"


def count(n) -> str:
    v = _num(n)
    return DASH if v is None else f"{v:,.0f}"


def rate(x, unit: str) -> str:
    v = _num(x)
    if v is None:
        return DASH
    return f"{v:,.1f} {unit}" if v < 10_000 else f"{v:,.0f} {unit}"


def _scaled(v: float, units: tuple[tuple[str, float, int], ...], base: str) -> str:
    """`v` in the first unit it reaches (name, scale, decimals), else in `base` units."""
    for unit, scale, digits in units:
        if abs(v) >= scale:
            return f"{v / scale:.{digits}f} {unit}"
    return f"{v:.0f} {base}"


def bytes_(n) -> str:
    v = _num(n)
    return DASH if v is None else _scaled(v, (("GiB", 2**30, 2), ("MiB", 2**20, 1), ("KiB", 2**10, 1)), "B")


def watts(w) -> str:
    v = _num(w)
    return DASH if v is None else f"{v:.0f} W"


def flops(f) -> str:
    v = _num(f)
    if v is None or v <= 0:
        return DASH
    return _scaled(v, (("TFLOP", 1e12, 2), ("GFLOP", 1e9, 2), ("MFLOP", 1e6, 2), ("kFLOP", 1e3, 2)), "FLOP")


def speedup(x) -> str:
    v = _num(x)
    return DASH if v is None else f"{v:.2f}×"


def speedup_words(x) -> str:
    """1.71× faster, or 0.93×, 7% slower."""
    v = _num(x)
    if v is None:
        return DASH
    return f"{v:.2f}× faster" if v >= 1 else f"{v:.2f}×, {(1 - v) * 100:.0f}% slower"


def interval(lo, hi) -> str:
    a, b = _num(lo), _num(hi)
    if a is None or b is None:
        return ""
    return f"{a:.2f}–{b:.2f}×"


def value(v) -> str:
    """Any evidence value, readably: numbers by their name's unit suffix is the caller's job."""
    if v is None:
        return DASH
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if not math.isfinite(v):
            return DASH
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, (list, tuple)):
        return ", ".join(value(x) for x in v) if v else DASH
    if isinstance(v, dict):
        return ", ".join(f"{k}={value(x)}" for k, x in v.items()) if v else DASH
    return str(v)


def number(x, digits: int = 1) -> str:
    """A plain number with thousands separators: 1,389.2."""
    v = _num(x)
    return DASH if v is None else f"{v:,.{digits}f}"


def in_unit(x, unit: str) -> str:
    """A compared metric's value in its unit's spelling (the unit itself is in the row's label)."""
    if unit == "samples/s":
        return number(x, 1)
    if unit == "steps/s":
        return number(x, 2)
    if unit == "s":
        return time_s(x)
    if unit == "bytes":
        return bytes_(x)
    if unit == "fraction":
        return frac(x, 1)
    v = _num(x)
    return DASH if v is None else f"{v:g}"


def change(x, unit: str = "") -> str:
    """A relative change, signed (+12.3%); a change of a fraction in percentage points (+1.5 pp)."""
    v = _num(x)
    if v is None:
        return DASH
    return f"{v * 100:+.1f} pp" if unit == "fraction" else f"{v:+.1%}"


def change_interval(ci, unit: str = "") -> str:
    """A change's interval: [+1.0%, +3.0%]."""
    if not ci or len(ci) != 2:
        return DASH
    return f"[{change(ci[0], unit)}, {change(ci[1], unit)}]"


def p_value(p) -> str:
    v = _num(p)
    if v is None:
        return DASH
    return f"{v:.2g}" if v >= 1e-4 else "<1e-4"


def by_suffix(key: str, v) -> str:
    """An evidence value formatted by its key's unit suffix (`_s`, `_us`, `_bytes`, `_frac`, ...)."""
    if _num(v) is None or isinstance(v, bool):
        return value(v)
    for per in ("_per_step", "_per_s"):
        if key.endswith(per) and key != per and by_suffix(key[: -len(per)], v) != value(v):
            return by_suffix(key[: -len(per)], v) + (" / step" if per == "_per_step" else " / s")
    if key.endswith("_frac") or key.endswith("_share"):
        return frac(v, 1)
    if key.endswith("_percent") or key.endswith("_pct"):
        return percent(v)
    if key.endswith("_us"):
        return time_us(v)
    if key.endswith("_ms"):
        return time_s(_num(v) / 1e3)
    if key.endswith("_s"):
        return time_s(v)
    if key.endswith("_bytes"):
        return bytes_(v)
    if key.endswith("_flops"):
        return flops(v)
    if key.endswith("_w"):
        return watts(v)
    return value(v)
