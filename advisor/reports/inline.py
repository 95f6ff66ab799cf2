"""A report where people read it from Python: inline in a notebook, and as a few lines of text.

Notebook frontends do not run the scripts of output they did not make, so the inline form is the
same offline page as report.html (:func:`advisor.reports.page.build_page`, readable with scripts
off) in a sandboxed ``<iframe srcdoc>``: its styles stay inside it, and nothing in it runs. The
text form is the agent summary's words (:mod:`advisor.reports.agent`), so the two never disagree.
"""

from __future__ import annotations

import html

from advisor.report import Report

from . import agent
from .html import render_html
from .page import build_page

HEIGHT_PX = 720


def iframe(report: Report) -> str:
    """The report's page in a sandboxed iframe (no scripts, no same origin), for ``_repr_html_``."""
    page = render_html(build_page(report))
    return (f'<iframe sandbox="" title="advise report" srcdoc="{html.escape(page, quote=True)}" '
            f'style="width:100%;height:{HEIGHT_PX}px;border:1px solid #ccc"></iframe>')


def text(report: Report) -> str:
    """A few lines: the script and how its run ended, its pace, the recommendation, the findings."""
    said = agent.summary(report, "report.json")
    pace = [f"{said['samples_per_s']:,.1f} samples/s"] if said.get("samples_per_s") else []
    pace += [f"median step {said['step_time_median_s'] * 1e3:.1f} ms"] if said.get("step_time_median_s") else []
    lines = [f"advise report: {said['script'] or '?'} · {said['status']}" + (f" · {', '.join(pace)}" if pace else "")]
    if said.get("error"):
        lines.append(f"error: {said['error']}")
    lines.append(said["verdict"])
    lines += [f"  {f['code']} [{f['severity']}] {f['title']}" for f in said["findings"]]
    return "\n".join(lines)
