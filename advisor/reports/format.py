"""Number formatting for every renderer (terminal, HTML, markdown, compare): the phrases a report
writes around its numbers (a speed-up in words, an interval, a change, a p-value, any evidence
value by its key's unit suffix).

The unit spellings themselves are :mod:`advisor.units` (a core leaf, so the rules' messages use
them too); a renderer imports them from there. A value that is not a finite number is the dash.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from advisor.units import DASH, bytes_, finite, flops, frac, number, percent, time_s, time_us, watts


def tick_time(seconds: object) -> str:
    """An axis label: like `time_s`, without a trailing `.0` (60 ms, 1.5 s)."""
    text = time_s(seconds)
    return text.replace(".0 ", " ").replace(".00 ", " ")


def speedup_words(x: object) -> str:
    """1.71× faster, or 0.93×, 7% slower."""
    v = finite(x)
    if v is None:
        return DASH
    return f"{v:.2f}× faster" if v >= 1 else f"{v:.2f}×, {(1 - v) * 100:.0f}% slower"


def interval(lo: object, hi: object, ci: bool = False) -> str:
    """`1.58–1.84×` (`ci`: `95% CI 1.58–1.84×`), or '' without both ends."""
    a, b = finite(lo), finite(hi)
    if a is None or b is None:
        return ""
    return f"{'95% CI ' if ci else ''}{a:.2f}–{b:.2f}×"


def value(v: object) -> str:
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


def in_unit(x: object, unit: str) -> str:
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
    v = finite(x)
    return DASH if v is None else f"{v:g}"


def change(x: object, unit: str = "") -> str:
    """A relative change, signed (+12.3%); a change of a fraction in percentage points (+1.5 pp)."""
    v = finite(x)
    if v is None:
        return DASH
    return f"{v * 100:+.1f} pp" if unit == "fraction" else f"{v:+.1%}"


def change_interval(ci: Sequence[object] | None, unit: str = "") -> str:
    """A change's interval: [+1.0%, +3.0%]."""
    if not ci or len(ci) != 2:
        return DASH
    return f"[{change(ci[0], unit)}, {change(ci[1], unit)}]"


def p_value(p: object) -> str:
    v = finite(p)
    if v is None:
        return DASH
    return f"{v:.2g}" if v >= 1e-4 else "<1e-4"


def by_suffix(key: str, v: object) -> str:
    """An evidence value formatted by its key's unit suffix (`_s`, `_us`, `_bytes`, `_frac`, ...)."""
    if finite(v) is None or isinstance(v, bool):
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
        ms = finite(v)
        return time_s(ms / 1e3 if ms is not None else None)
    if key.endswith("_s"):
        return time_s(v)
    if key.endswith("_bytes"):
        return bytes_(v)
    if key.endswith("_flops"):
        return flops(v)
    if key.endswith("_w"):
        return watts(v)
    return value(v)
