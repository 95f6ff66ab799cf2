"""The script's own autocast context around its forward: where bf16 is its switch to turn, never a
second ``with torch.autocast`` inside the first.

nanoGPT runs its forward under ``with ctx:``, where ``ctx = nullcontext() if device_type == 'cpu'
else torch.amp.autocast(device_type=device_type, dtype=ptdtype)`` and ``ptdtype = {...}[dtype]``,
``dtype`` a global its configurator sets from ``--dtype=...``. The fix there is ``--dtype=bfloat16``
(and, on a CPU, the context made the autocast on every device), not a second autocast nested
inside a context the script already switches. Read from the syntax tree: the ``with`` statements
that hold the forward, each item an autocast call or a name bound once to an expression that holds
one (an ``if``/``else`` whose other branch is a no-op context, taken or not on the run's device).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from .rewrite import Refused, SourceFile, call_name

AUTOCASTS = {"autocast"}  # torch.autocast, torch.amp.autocast, torch.cuda.amp.autocast, torch.cpu.amp.autocast


@dataclass(frozen=True)
class OwnAutocast:
    """The script's autocast call its forward runs in, and the branch that may leave it off."""

    call: cst.Call
    line: int
    name: str  # how the with statement names it: `ctx`, or the call itself
    choice: cst.IfExp | None = None  # `nullcontext() if device_type == 'cpu' else torch.amp.autocast(...)`
    taken: bool = True  # whether the run's device takes the autocast branch of `choice`


def find(source: SourceFile, forward: cst.CSTNode, device: str) -> OwnAutocast | None:
    """The autocast context of the script's own that holds `forward`, None: none."""
    for holder in source.ancestors(forward):
        if not isinstance(holder, cst.With):
            continue
        for item in holder.items:
            found = _of(source, item.item, device)
            if found is not None:
                return found
    return None


def _of(source: SourceFile, expr: cst.BaseExpression, device: str) -> OwnAutocast | None:
    if isinstance(expr, cst.Call) and call_name(expr) in AUTOCASTS:
        return OwnAutocast(expr, source.span(expr).start.line, source.text(expr))
    if not isinstance(expr, cst.Name):
        return None
    value = source.bound_value(expr)
    if isinstance(value, cst.Call) and call_name(value) in AUTOCASTS:
        return OwnAutocast(value, source.span(value).start.line, expr.value)
    if isinstance(value, cst.IfExp):
        branches = [(value.body, True), (value.orelse, False)]
        for branch, if_true in branches:
            if isinstance(branch, cst.Call) and call_name(branch) in AUTOCASTS:
                on = _test(source, value.test, device)
                if on is None:
                    raise Refused(f"{source.name}:{source.span(value).start.line}: the script's own autocast context "
                                  f"({expr.value}) is chosen by `{source.text(value.test)}`, which cannot be read here: "
                                  f"switch it on by the script's own option")
                return OwnAutocast(branch, source.span(value).start.line, expr.value, value, on == if_true)
    return None


def _test(source: SourceFile, test: cst.BaseExpression, device: str) -> bool | None:
    """`device_type == 'cpu'` (or `!=`) on the run's device; None: a test of anything else."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    target = test.comparisons[0]
    literal = target.comparator
    if not isinstance(literal, cst.SimpleString) or "device" not in source.text(test.left):
        return None
    said = str(literal.evaluated_value)
    if isinstance(target.operator, cst.Equal):
        return device == said
    if isinstance(target.operator, cst.NotEqual):
        return device != said
    return None


def dtype_choice(source: SourceFile, name: cst.Name, want: str = "bfloat16") -> tuple[cst.Name, str] | None:
    """``ptdtype`` bound once to ``{'float32': torch.float32, 'bfloat16': torch.bfloat16, ...}[dtype]``:
    the name the choice is made by (``dtype``) and the key that gives `want` (``'bfloat16'``)."""
    value = source.bound_value(name)
    if not (isinstance(value, cst.Subscript) and isinstance(value.value, cst.Dict) and len(value.slice) == 1
            and isinstance(value.slice[0].slice, cst.Index) and isinstance(value.slice[0].slice.value, cst.Name)):
        return None
    for element in value.value.elements:
        if isinstance(element, cst.DictElement) and source.text(element.value).endswith(want) \
                and isinstance(element.key, cst.SimpleString):
            return value.slice[0].slice.value, source.text(element.key)
    return None
