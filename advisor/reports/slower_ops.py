"""The slower-ops table (advisor.gate.opdiff) as the terminal, markdown and the HTML page show it.

Rows are :class:`advisor.gate.opdiff.OpChange` or their ``to_dict()`` (as ab.json / compare.json hold
them), so a saved decision renders the same table as the live one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import html as _html

from rich.console import Console
from rich.table import Table
from rich.text import Text

from advisor import units

if TYPE_CHECKING:
    from advisor.gate.opdiff import OpChange

NAME_MAX = 70
COLUMNS = ("", "op / kernel", "self/step", "change", "total/step", "calls/step", "shapes")


def _get(row: OpChange | dict, key: str) -> Any:
    return row[key] if isinstance(row, dict) else getattr(row, key)


def _cells(row: OpChange | dict) -> list[str]:
    name = str(_get(row, "name"))
    name = name if len(name) <= NAME_MAX else name[: NAME_MAX - 1] + "…"
    base, cur = _get(row, "base_us"), _get(row, "current_us")
    calls_a, calls_b = _get(row, "base_calls"), _get(row, "current_calls")
    shapes_a, shapes_b = _get(row, "base_shapes"), _get(row, "current_shapes")
    change = f"+{units.time_us(cur - base)}" + (f" ({cur / base - 1:+.0%})" if base > 0 else " (new)")
    return [
        _get(row, "kind"), name, f"{units.time_us(base)} → {units.time_us(cur)}", change,
        f"{units.time_us(_get(row, 'base_total_us'))} → {units.time_us(_get(row, 'current_total_us'))}",
        f"{calls_a:.3g}" if abs(calls_a - calls_b) < 1e-9 else f"{calls_a:.3g} → {calls_b:.3g}",
        f"{_compact(shapes_a)} → {_compact(shapes_b)}" if (shapes_a or shapes_b) else "",
    ]


def _compact(shapes: str | None) -> str:
    """'[[128, 256], [], []]' -> '[128,256]': spaces and the trailing scalar slots dropped."""
    if not shapes:
        return "?"
    text = shapes.replace(" ", "")
    while text.endswith(",[]]"):
        text = text[:-4] + "]"
    return text[1:-1] if text.startswith("[[") and text.count("[") == 2 else text


def title(n: int) -> str:
    return f"where the time went: the {n} op{'s' if n != 1 else ''} and kernels whose time per step grew most"


def print_table(rows: Sequence[OpChange | dict] | None, note: str, con: Console) -> None:
    if rows is None:
        con.print(Text(f"slower ops: {note}", style="dim"))
        return
    if not rows:
        con.print(Text("slower ops: no op or kernel took longer per step" + (f" ({note})" if note else ""), style="dim"))
        return
    table = Table(title=Text(title(len(rows)), style="bold"), title_justify="left", box=None, pad_edge=False,
                  header_style="dim", caption=note or None, caption_justify="left")
    for name in COLUMNS:
        table.add_column(name, justify="left" if name in ("", "op / kernel", "shapes") else "right",
                         no_wrap=name != "shapes")
    for row in rows:
        table.add_row(*_cells(row))
    con.print(table)


def markdown(rows: Sequence[OpChange | dict] | None, note: str) -> list[str]:
    if rows is None:
        return [f"_slower ops: {note}_"]
    if not rows:
        return ["_slower ops: no op or kernel took longer per step_"]
    lines = [f"**{title(len(rows)).capitalize()}**" + (f" ({note})" if note else ""), "",
             "| " + " | ".join(c or "kind" for c in COLUMNS) + " |", "|---|---|--:|--:|--:|--:|---|"]
    for row in rows:
        cells = _cells(row)
        cells[1] = f"`{cells[1]}`"
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def html(rows: Sequence[OpChange | dict] | None, note: str) -> str:
    if not rows:
        return f"<p>slower ops: {_html.escape(note or 'no op or kernel took longer per step')}</p>"
    head = "".join(f"<th>{_html.escape(c or 'kind')}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{_html.escape(c)}</td>" for c in _cells(r)) + "</tr>" for r in rows)
    return (f"<h2>{_html.escape(title(len(rows)))}</h2><p>{_html.escape(note)}</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
