"""`advise history FILE`: the trend per metric and its change points, as a page and as markdown.

Both read one view (:func:`view`) of the records (:mod:`advisor.history.trend`): per script, its
stretches of one fingerprint (a machine or torch change starts a new line on the chart, marked, and
is never called a regression), the change points found in each, named by commit; and the gate's
paired ratios, which hold across machines, as one trend. The page is self-contained (inline SVG, no
script): it opens offline.
"""

from __future__ import annotations

import html as _html
from dataclasses import dataclass

from advisor.history import trend

W, H, PAD = 760, 220, 44


@dataclass
class View:
    path: str
    records: list[dict]
    skipped: list[str]
    stretches: list[trend.Stretch]
    gates: list[tuple[int, dict]]

    def scripts(self) -> list[str | None]:
        return list(dict.fromkeys(s.script for s in self.stretches))


def view(path: str, records: list[dict], skipped: list[str]) -> View:
    return View(path, records, skipped, trend.stretches(records), trend.gates(records))


def short(commit: object, dirty: object = None) -> str:
    return (str(commit)[:10] if commit else "no commit") + (" +local changes" if dirty else "")


def _ms(x: object) -> str:
    return f"{float(x) * 1e3:.2f} ms" if isinstance(x, (int, float)) else "–"


def change_lines(v: View) -> list[str]:
    lines = []
    for s in v.stretches:
        for c in s.changes:
            lines.append(f"{s.script}: {c.change:+.1%} step time at {short(c.commit)} (record {c.index + 1}): "
                         f"{_ms(c.before_s)} -> {_ms(c.after_s)}, p = {c.p:.2g} ({s.label()})")
    return lines


def fingerprint_lines(v: View) -> list[str]:
    return [f"{s.script}: from record {s.indices[0] + 1} on another fingerprint ({s.after}): a new line, not a change"
            for s in v.stretches if s.after]


def _gate_cell(r: dict) -> str:
    """A gate record's verdict and ratio; empty for a profile."""
    return f"{r.get('verdict')} {r['ratio']:.3f}x" if r.get("kind") == "gate" and r.get("ratio") else ""


def markdown(v: View) -> str:
    profiles = sum(r.get("kind") == "profile" for r in v.records)
    lines = [f"### advise history: `{v.path}`", "",
             f"{len(v.records)} records ({profiles} profiles, {len(v.gates)} gate decisions)"
             + (f"; {len(v.skipped)} lines skipped" if v.skipped else ""), "",
             f"Change points: {trend.METHOD}.", ""]
    changes = change_lines(v)
    lines += [f"- **{c}**" for c in changes] or ["- none found"]
    lines += [""] + [f"- {f}" for f in fingerprint_lines(v)] + [f"> skipped {s}  " for s in v.skipped]
    lines += ["", "| # | date | commit | kind | step | samples/s | MFU | gate |", "|--:|---|---|---|--:|--:|--:|---|"]
    for i, r in enumerate(v.records):
        gate = _gate_cell(r)
        sps = f"{r['samples_per_s']:,.1f}" if isinstance(r.get("samples_per_s"), (int, float)) else "–"
        mfu = f"{r['mfu']:.1%}" if isinstance(r.get("mfu"), (int, float)) else "–"
        lines.append(f"| {i + 1} | {str(r.get('at', ''))[:16]} | {short(r.get('commit'), r.get('dirty'))} | "
                     f"{r.get('kind')} | {_ms(r.get('step_s'))} | {sps} | {mfu} | {gate} |")
    return "\n".join(lines) + "\n"


def _chart(v: View, script: str | None) -> str:
    """One script's step time over the history: a line per stretch, change points and new fingerprints marked."""
    mine = [s for s in v.stretches if s.script == script]
    points = [(i, v.records[i]["step_s"] * 1e3) for s in mine for i in s.indices]
    n = len(v.records)
    top = max(y for _, y in points) * 1.1
    x = lambda i: PAD + (W - 2 * PAD) * (i / max(1, n - 1))  # noqa: E731
    y = lambda ms: H - PAD - (H - 2 * PAD) * (ms / top)  # noqa: E731
    parts = [f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" class="axis"/>',
             f'<text x="4" y="{PAD - 8}" class="label">{top:.1f} ms</text>']
    for s in mine:
        pts = " ".join(f"{x(i):.1f},{y(v.records[i]['step_s'] * 1e3):.1f}" for i in s.indices)
        parts.append(f'<polyline points="{pts}" class="series"/>')
        parts += [f'<circle cx="{x(i):.1f}" cy="{y(v.records[i]["step_s"] * 1e3):.1f}" r="3"><title>record {i + 1}: '
                  f'{_html.escape(short(v.records[i].get("commit"), v.records[i].get("dirty")))} '
                  f'{v.records[i]["step_s"] * 1e3:.2f} ms</title></circle>' for i in s.indices]
        if s.after:
            parts.append(f'<line x1="{x(s.indices[0]):.1f}" y1="{PAD}" x2="{x(s.indices[0]):.1f}" y2="{H - PAD}" '
                         f'class="fingerprint"><title>{_html.escape(s.after)}</title></line>')
            parts.append(f'<text x="{x(s.indices[0]) + 3:.1f}" y="{PAD + 10}" class="label">new fingerprint</text>')
        for c in s.changes:
            parts.append(f'<line x1="{x(c.index):.1f}" y1="{PAD}" x2="{x(c.index):.1f}" y2="{H - PAD}" class="change"/>')
            parts.append(f'<text x="{x(c.index) + 3:.1f}" y="{H - PAD + 14}" class="change-label">'
                         f'{_html.escape(short(c.commit))} {c.change:+.1%}</text>')
    return f'<svg viewBox="0 0 {W} {H}" role="img" aria-label="step time, {_html.escape(str(script))}">{"".join(parts)}</svg>'


def _gate_chart(v: View) -> str:
    n = len(v.records)
    ratios = [r["ratio"] for _, r in v.gates] + [hi for _, r in v.gates for hi in (r.get("ci") or [])]
    lo, hi = min(ratios + [0.9]), max(ratios + [1.1])
    x = lambda i: PAD + (W - 2 * PAD) * (i / max(1, n - 1))  # noqa: E731
    y = lambda r: H - PAD - (H - 2 * PAD) * ((r - lo) / (hi - lo))  # noqa: E731
    parts = [f'<line x1="{PAD}" y1="{y(1.0):.1f}" x2="{W - PAD}" y2="{y(1.0):.1f}" class="axis"/>',
             f'<text x="4" y="{y(1.0) - 4:.1f}" class="label">1.0x</text>']
    for i, r in v.gates:
        if r.get("ci"):
            parts.append(f'<line x1="{x(i):.1f}" y1="{y(r["ci"][0]):.1f}" x2="{x(i):.1f}" y2="{y(r["ci"][1]):.1f}" class="ci"/>')
        parts.append(f'<circle cx="{x(i):.1f}" cy="{y(r["ratio"]):.1f}" r="4" class="{_html.escape(str(r.get("verdict")))}">'
                     f'<title>{_html.escape(short(r.get("commit")))}: {r["ratio"]:.3f}x {r.get("verdict")}</title></circle>')
    return f'<svg viewBox="0 0 {W} {H}" role="img" aria-label="the gate\'s ratios">{"".join(parts)}</svg>'


STYLE = """body{font:14px system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}svg{width:100%;max-width:760px;
background:#fafafa;border:1px solid #ddd}.axis{stroke:#888}.series{fill:none;stroke:#1f6feb;stroke-width:2}
circle{fill:#1f6feb}.fingerprint{stroke:#a60;stroke-dasharray:2 3}.change{stroke:#b00;stroke-dasharray:5 3}
.change-label{fill:#b00;font-size:11px}.label{fill:#555;font-size:11px}.ci{stroke:#888;stroke-width:2}
circle.regression{fill:#b00}circle.pass{fill:#070}circle.inconclusive{fill:#a60}table{border-collapse:collapse}
td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}td:nth-child(3),td:nth-child(4){text-align:left}"""


def page(v: View) -> str:
    """history.html: self-contained, no script."""
    esc = _html.escape
    charts = "".join(f"<h2>{esc(str(s))}: median step time</h2>{_chart(v, s)}" for s in v.scripts())
    gates = f"<h2>The gate's paired ratios (across machines)</h2>{_gate_chart(v)}" if v.gates else ""
    items = "".join(f"<li><strong>{esc(c)}</strong></li>" for c in change_lines(v)) or "<li>none found</li>"
    notes = "".join(f"<li>{esc(t)}</li>" for t in fingerprint_lines(v) + [f"skipped {s}" for s in v.skipped])
    rows = "".join(
        f"<tr><td>{i + 1}</td><td>{esc(str(r.get('at', ''))[:16])}</td><td>{esc(short(r.get('commit'), r.get('dirty')))}</td>"
        f"<td>{esc(str(r.get('kind')))}</td><td>{_ms(r.get('step_s'))}</td><td>{esc(_gate_cell(r))}</td></tr>"
        for i, r in enumerate(v.records))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>advise history</title><style>{STYLE}</style></head>
<body><h1>advise history</h1><p><code>{esc(v.path)}</code>: {len(v.records)} records.</p>
<h2>Change points</h2><ul>{items}</ul><p><small>{esc(trend.METHOD)}.</small></p><ul>{notes}</ul>
{charts}{gates}
<h2>Records</h2><table><thead><tr><th>#</th><th>date</th><th>commit</th><th>kind</th><th>step</th><th>gate</th></tr></thead>
<tbody>{rows}</tbody></table></body></html>
"""
