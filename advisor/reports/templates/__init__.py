"""The report templates and their inlined assets, in one folder (coverage.py's ``htmlfiles``).

Both renderers load from here, so :mod:`advisor.reports.html` and
:mod:`advisor.reports.markdown` need nothing from each other.
"""

from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).parent


def asset(name: str) -> str:
    """Our own CSS or JS, read as is, to be inlined into the page."""
    text = (TEMPLATES / name).read_text(encoding="utf-8")
    if "</" + "style" in text or "</" + "script" in text:
        raise ValueError(f"{name} would close its own <style>/<script> element")
    return text
