"""The user's own configuring line, read and rewritten: a framework's change written into the
one-line call the probe saw (``fabric = L.Fabric()`` -> ``fabric = L.Fabric(precision="bf16-mixed")``),
the call a line makes and the name it is made by, and TrainingArguments settings said as the flags
of a script whose ``HfArgumentParser`` reads them. Parsed (ast), never matched: a string holding a
comma or a parenthesis does not mislead it."""

from __future__ import annotations

import ast
import re

CONFIG_CHANGE = re.compile(r"(?P<pre>(?:[^\n]*\n)*?)- [^\n]*\n\+ [^\n]*?(?P<call>\w+)\(\.\.\., (?P<settings>[^\n]*)\)")

def in_users_line(change: str, code: str | None) -> str | None:
    """A configuration call's change written into the user's own line where that line is the whole
    call (``fabric = L.Fabric()`` -> ``fabric = L.Fabric(precision="bf16-mixed")``), so it pastes as
    it stands; None where it is not (a call over several lines, a setting the line already passes
    or may pass through ``**``). The line is parsed, so a string holding a comma or a parenthesis
    does not mislead it."""
    m = CONFIG_CHANGE.fullmatch(change)
    line = (code or "").strip()
    call = _the_call(line)
    if not m or call is None or call.end_col_offset is None or call_name(call.func) != m["call"]:
        return None
    settings = split_settings(m["settings"])
    given = {k.arg for k in call.keywords}  # None: a **mapping, which may hold the setting already
    if None in given or any(setting.partition("=")[0].strip() in given for setting in settings):
        return None
    before = line.encode()[:call.end_col_offset - 1].decode()  # up to the call's closing parenthesis
    after = line.encode()[call.end_col_offset - 1:].decode()
    passed = bool(call.args or call.keywords)
    return f"{m['pre']}- {line}\n+ {before}{', ' if passed else ''}{', '.join(settings)}{after}"

def command_line_flags(settings: list[str]) -> str:
    """TrainingArguments settings as the flags of a script whose ``HfArgumentParser`` reads them:
    ``bf16=True`` is ``--bf16``, ``optim="adamw_torch_fused"`` is ``--optim adamw_torch_fused``."""
    flags = []
    for setting in settings:
        key, _, value = setting.partition("=")
        value = value.strip().strip("'\"")
        flags.append(f"--{key.strip()}" if value == "True" else f"--{key.strip()} {value}")
    return " ".join(flags)

def _the_call(line: str) -> ast.Call | None:
    """The call a one-line statement makes (``x = f(...)`` or ``f(...)``), None for anything else."""
    try:
        tree = ast.parse(line)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.Assign, ast.AnnAssign, ast.Expr)):
        return None
    value = tree.body[0].value
    return value if isinstance(value, ast.Call) and value.end_lineno == 1 else None

def call_name(func: ast.expr) -> str | None:
    """The name a call is made by, as written: `Trainer` in `L.Trainer(...)` and `Trainer(...)`."""
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None

def split_settings(text: str) -> list[str]:
    """`a=1, b=f(x, y)` at its top-level commas."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [p for p in parts + [text[start:].strip()] if p]

def as_flags(change: str, script: str) -> str:
    """A TrainingArguments change as the flags of a script whose ``HfArgumentParser`` builds them
    (run_clm.py's way): ``bf16=True`` is ``--bf16``, ``optim="adamw_torch_fused"`` is
    ``--optim adamw_torch_fused``."""
    head, _, settings = change.rpartition("TrainingArguments(..., ")
    comment = "\n".join(line for line in head.splitlines() if line.startswith("  #"))
    return (comment + "\n" if comment else "") + f"+ python {script} ... " + command_line_flags(split_settings(settings[:-1]))
