"""Where a setting a fix changes comes from: the script's own switch, changed at its default.

A call given ``precision=args.precision`` (an argparse flag) or ``mixed_precision=mixed_precision``
(a module-level global, which nanoGPT's ``exec(open("configurator.py").read())`` overrides from the
command line) reads the value from a switch the user runs the script with. A fix written into the
call would leave that switch doing nothing; a person changes the switch's default instead, so the
script runs with the fix by default and the flag still sets it. Read from the syntax tree of the
file that makes the call; anything less plain (a flag action, choices that lack the value, a default
that is not a literal, a global bound twice) is not a switch here, and the call is written as before.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import libcst as cst

from .rewrite import Edit, SetKeywords, SetValue, SourceFile, call_name


@dataclass(frozen=True)
class Switch:
    """A switch's default: the edit that sets it to a value, and what to tell the user."""

    edit: Edit
    line: int  # where the default is said, in the same file
    said: str  # "the --precision flag" / "the global mixed_precision"
    current: str | None  # the default's code now (None: argparse's own None)


def switch_of(source: SourceFile, value: cst.BaseExpression, code: str) -> Switch | None:
    """The switch that `value` (a keyword's argument in a call of `source`) reads, set to `code`; None: none."""
    if isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name):
        return _flag(source, value.value.value, value.attr.value, code)
    if isinstance(value, cst.Name):
        return _global(source, value, code)
    return None


def tell(switch: Switch, source: SourceFile, keyword: str, code: str) -> str:
    """One line: where the fix was written instead of the call, and that the switch still sets it."""
    head = f"{source.name}:{switch.line}: {keyword} comes from {switch.said}"
    if switch.said.startswith("the global "):
        name, configurator = switch.said.removeprefix("the global "), _configurator(source)
        still = f"; {configurator} still sets it: --{name}=..." if configurator else ""
        return f"{head}: it is now {code} (was {switch.current}{still})"
    return f"{head}: its default is now {code} (was {switch.current or 'None'}; the flag still sets it)"


def _literal(code: str) -> bool:
    try:
        ast.literal_eval(code)
    except (ValueError, SyntaxError):
        return False
    return True


def _flag(source: SourceFile, namespace: str, attr: str, code: str) -> Switch | None:
    """``args.attr`` where ``args = parser.parse_args()``: the add_argument(...) whose dest is `attr`."""
    if not _parsed_args(source, namespace):
        return None
    found = [c for c in source.nodes(cst.Call) if call_name(c) == "add_argument" and _dest(source, c) == attr]
    if len(found) != 1:
        return None
    call = found[0]
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    if any(a.star for a in call.args):
        return None
    if "action" in keywords and source.text(keywords["action"]).strip("'\"") != "store":
        return None  # store_true and its kind: a default the flag cannot give back
    choices = keywords.get("choices")
    if choices is not None and not (_literal(source.text(choices)) and
                                    ast.literal_eval(code) in ast.literal_eval(source.text(choices))):
        return None
    default = keywords.get("default")
    if default is not None and not _literal(source.text(default)):
        return None
    flag = next(source.text(a.value).strip("'\"") for a in call.args if a.keyword is None)
    line = source.span(call).start.line
    edit: Edit = SetValue(default, code) if default is not None else SetKeywords(call, (("default", code),))
    return Switch(edit, line, f"the {flag} flag", None if default is None else source.text(default))


def _parsed_args(source: SourceFile, namespace: str) -> bool:
    """Whether `namespace` is bound to an argparse ``parse_args()`` (or ``parse_known_args()``'s first) result."""
    for node in source.nodes(cst.Assign):
        if not isinstance(node.value, cst.Call) or call_name(node.value) not in ("parse_args", "parse_known_args"):
            continue
        for target in node.targets:
            t = target.target
            first = t.elements[0].value if isinstance(t, (cst.Tuple, cst.List)) and t.elements else t
            if isinstance(first, cst.Name) and first.value == namespace:
                return True
    return False


def _dest(source: SourceFile, call: cst.Call) -> str | None:
    """The attribute an add_argument(...) call's value lands in (argparse's own rule)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dest":
            return source.text(arg.value).strip("'\"")
    names = []
    for arg in call.args:
        if arg.keyword is None and isinstance(arg.value, cst.SimpleString):
            names.append(str(arg.value.evaluated_value))
    long = next((n for n in names if n.startswith("--")), None)
    name = long or next((n for n in names if n.startswith("-")), None) or (names[0] if names else None)
    return name.lstrip("-").replace("-", "_") if name else None


def _global(source: SourceFile, name: cst.Name, code: str) -> Switch | None:
    """A module-level global bound once, to a literal, before the call reads it (and not rebound in
    the function that reads it)."""
    scope = source.scope_of(name)
    if isinstance(scope, cst.FunctionDef) and (source.assignments(scope, name.value) or name.value in
                                               {p.name.value for p in scope.params.params}):
        return None
    bound = source.assignments(source.module, name.value)
    if len(bound) != 1:
        return None
    stmt = bound[0]
    small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
    if not isinstance(small, cst.Assign) or len(small.targets) != 1 or not _literal(source.text(small.value)):
        return None
    if isinstance(scope, cst.Module) and source.span(stmt).start.line > source.span(name).start.line:
        return None
    return Switch(SetValue(small.value, code), source.span(stmt).start.line, f"the global {name.value}",
                  source.text(small.value))


def _configurator(source: SourceFile) -> str | None:
    """The file a nanoGPT-style script exec()s to override its globals (``configurator.py``), if it does."""
    for call in source.nodes(cst.Call):
        if call_name(call) == "exec" and call.args:
            opened = [c for c in _calls_in(call.args[0].value) if call_name(c) == "open" and c.args]
            if opened and isinstance(opened[0].args[0].value, cst.SimpleString):
                return str(opened[0].args[0].value.evaluated_value)
    return None


def _calls_in(node: cst.CSTNode) -> list[cst.Call]:
    found: list[cst.Call] = []

    class Collect(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            found.append(n)

    node.visit(Collect())
    return found
