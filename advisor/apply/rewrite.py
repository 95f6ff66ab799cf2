"""Edits of the user's own source, made on a lossless syntax tree (libcst): formatting, comments and
everything not edited come back byte for byte.

A file is parsed once (:class:`SourceFile`); the fixes locate the nodes they change at the lines
the probe saw (:meth:`SourceFile.call_at`, :meth:`SourceFile.statement_at`) and describe each
change as an edit of an original node (:class:`SetKeywords`, :class:`InsertAfter`, :class:`Wrap`,
:class:`SetValue`). :func:`render` applies any subset of them to the original tree, so each fix's
change alone and all of them together come from the same located nodes, whatever order they are
made in. A change that cannot be made safely raises :class:`Refused` with its reason in one line.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence, TypeGuard, Union, cast

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, ParentNodeProvider, PositionProvider


class Refused(Exception):
    """A change that cannot be made safely; the message is one line: why."""


Block = Union[cst.Module, cst.IndentedBlock]
Scope = Union[cst.Module, cst.FunctionDef]


def call_name(call: cst.Call) -> str | None:
    """The name a call is made by, as written: `DataLoader` in `DataLoader(...)` and `data.DataLoader(...)`."""
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else None


def string_index(node: cst.BaseExpression) -> str | None:
    """``"key"`` of ``x["key"]``: a subscript by one string literal; None for anything else."""
    if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) \
            and isinstance(node.slice[0].slice.value, cst.SimpleString):
        return str(node.slice[0].slice.value.evaluated_value)
    return None


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    """Every call inside `node` (itself included), outermost first."""
    found: list[cst.Call] = []

    class Collect(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            found.append(n)

    node.visit(Collect())
    return found


class SourceFile:
    """One of the user's files, parsed losslessly, with the lines each node spans."""

    def __init__(self, path: Path, data: bytes) -> None:
        self.path = path
        self.data = data
        self.sha256 = hashlib.sha256(data).hexdigest()
        try:
            wrapper = MetadataWrapper(cst.parse_module(data))
        except (cst.ParserSyntaxError, SyntaxError, UnicodeDecodeError, LookupError, ValueError) as exc:
            # a syntax libcst does not know, bytes that are not the file's coding, a coding Python does not know
            raise Refused(f"libcst cannot parse it ({str(exc).splitlines()[0]})") from None
        self.module = wrapper.module
        self.positions = wrapper.resolve(PositionProvider)
        self.parents = wrapper.resolve(ParentNodeProvider)

    @property
    def name(self) -> str:
        return self.path.name

    def text(self, node: cst.CSTNode | None = None) -> str:
        """The file's text (the original), or one node's code."""
        return self.module.code if node is None else self.module.code_for_node(node)

    def span(self, node: cst.CSTNode) -> CodeRange:
        return self.positions[node]

    def nodes(self, kind: type) -> list:
        """Every node of `kind` in the file."""
        return [n for n in self.positions if isinstance(n, kind)]

    # --- finding the nodes at a line ---------------------------------------------------------------

    def calls_on(self, line: int, names: Iterable[str] | None = None) -> list[cst.Call]:
        """The calls spanning `line` (named one of `names`), innermost first."""
        wanted = set(names) if names is not None else None
        found = [c for c in self.nodes(cst.Call) if self.span(c).start.line <= line <= self.span(c).end.line
                 and (wanted is None or call_name(c) in wanted)]
        return sorted(found, key=lambda c: (self.span(c).end.line - self.span(c).start.line, -self.span(c).start.line))

    def call_at(self, line: int, names: Iterable[str], what: str) -> cst.Call:
        """The one call named one of `names` at `line` (a call that starts there first, else the
        innermost spanning it); Refused when there is none, or two that are not nested."""
        calls = self.calls_on(line, names)
        starting = [c for c in calls if self.span(c).start.line == line]
        calls = starting or calls
        if not calls:
            raise Refused(f"no {what} call on this line")
        outer = [c for c in calls if not any(o is not c and any(a is o for a in self.ancestors(c)) for o in calls)]
        if len(outer) > 1:
            raise Refused(f"{len(outer)} {what} calls on this line: cannot tell which one")
        return outer[0]

    def statement_at(self, line: int) -> cst.BaseStatement:
        """The innermost statement spanning `line` that sits on a line of its own in a block."""
        found = [s for s in self.nodes(cst.BaseStatement) if self.span(s).start.line <= line <= self.span(s).end.line
                 and isinstance(self.parents.get(s), (cst.Module, cst.IndentedBlock))]
        if not found:
            raise Refused("no statement of its own on this line")
        return min(found, key=lambda s: self.span(s).end.line - self.span(s).start.line)

    def block_of(self, statement: cst.BaseStatement) -> Block:
        return cast(Block, self.parents[statement])

    def scope_of(self, node: cst.CSTNode) -> Scope:
        """The function whose body holds `node`, else the module."""
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.Module)):
            parent = self.parents.get(parent)
        return parent if parent is not None else self.module

    def ancestors(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """The nodes that hold `node`, innermost first."""
        out, parent = [], self.parents.get(node)
        while parent is not None:
            out.append(parent)
            parent = self.parents.get(parent)
        return out

    def assignments(self, scope: Scope, name: str) -> list[cst.BaseStatement]:
        """The statements of `scope` (not of the functions or classes inside it) that bind `name`
        by assignment, in the file's order."""
        out = []
        for stmt in self.nodes(cst.SimpleStatementLine):
            if self.scope_of(stmt) is not scope or any(isinstance(a, cst.ClassDef) for a in self.ancestors(stmt)):
                continue
            for small in stmt.body:
                targets = ([t.target for t in small.targets] if isinstance(small, cst.Assign)
                           else [small.target] if isinstance(small, (cst.AnnAssign, cst.AugAssign)) else [])
                if any(isinstance(t, cst.Name) and t.value == name for t in targets):
                    out.append(stmt)
                    break
        return sorted(out, key=lambda s: self.span(s).start.line)

    def bound_value(self, name: cst.Name) -> cst.BaseExpression | None:
        """The value `name` is bound to by its one plain assignment (``x = ...``) in the function that
        reads it, else in the module; None where it is bound otherwise, or more than once."""
        bound = self.assignments(self.scope_of(name), name.value) or self.assignments(self.module, name.value)
        if len(bound) != 1 or not isinstance(bound[0], cst.SimpleStatementLine):
            return None
        small = bound[0].body[0]
        return small.value if isinstance(small, cst.Assign) else None

    # --- the module's header -------------------------------------------------------------------

    def torch_name(self) -> str | None:
        """The name torch is bound to at the module's top level (`torch`, or its alias), None when not bound."""
        for stmt in self.module.body:
            for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        dotted = self.module.code_for_node(alias.name)
                        if alias.asname is None and dotted.split(".")[0] == "torch":
                            return "torch"
                        if alias.asname is not None and dotted == "torch":
                            return self.module.code_for_node(alias.asname.name)
        return None

    def header_anchor(self) -> cst.BaseStatement | None:
        """The statement after which module-level setup goes: the last import of the module's
        leading docstring and imports (or the top-level `import torch` when it comes later);
        None: the very top."""
        anchor = None
        for stmt in self.module.body:
            if _is_import(stmt) or (anchor is None and _is_docstring(stmt)):
                anchor = stmt
            else:
                break
        for stmt in self.module.body:
            if _is_import(stmt) and "torch" in self.module.code_for_node(stmt).split() and (
                    anchor is None or self.span(stmt).start.line > self.span(anchor).start.line):
                anchor = stmt
        return anchor


def _is_import(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


# --- the edits --------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class SetKeywords:
    """Keyword arguments set on a call: an argument it already passes is changed, not duplicated;
    the new ones follow its layout (one per line where it has one per line). `positional`: the
    callee's parameters in order, to refuse a setting the call may pass by position."""

    call: cst.Call
    settings: tuple[tuple[str, str], ...]  # (keyword, value as code)
    positional: tuple[str, ...] = ()

    def check(self, source: SourceFile) -> None:
        """Refused where the call's arguments may already hold a setting out of sight, or
        nothing would change."""
        args = self.call.args
        if any(a.star == "**" for a in args):
            raise Refused(f"{source.text(self.call.func)}(...) passes **kwargs: cannot tell what it already sets")
        given = sum(1 for a in args if a.keyword is None and not a.star)
        for name, _ in self.settings:
            if name in self.positional and (given > self.positional.index(name) or any(a.star == "*" for a in args)):
                raise Refused(f"{source.text(self.call.func)}(...) passes {name} by position (or *args)")
        current = {a.keyword.value: source.text(a.value) for a in args if a.keyword is not None}
        if all(current.get(name) == code for name, code in self.settings):
            raise Refused(f"it already passes {', '.join(f'{n}={c}' for n, c in self.settings)}")


@dataclass(frozen=True, eq=False)
class SetValue:
    """An expression replaced by another: the argument of ``torch.set_float32_matmul_precision("highest")``,
    the value of ``torch.backends.cudnn.benchmark = False``."""

    node: cst.BaseExpression
    code: str


@dataclass(frozen=True, eq=False)
class InsertAfter:
    """Statements inserted after `anchor` in its block (None: at the top of the module); `spaced`:
    a blank line before them (setup after the imports)."""

    anchor: cst.BaseStatement | None
    code: tuple[str, ...]
    spaced: bool = False


@dataclass(frozen=True, eq=False)
class Wrap:
    """The statements `first` to `last` of one block put under a ``with`` statement (`header`,
    without its colon)."""

    first: cst.BaseStatement
    last: cst.BaseStatement
    header: str


Edit = Union[SetKeywords, SetValue, InsertAfter, Wrap]


def render(source: SourceFile, edits: Sequence[Edit]) -> bytes:
    """The file with `edits` made (any subset of those located in it), as bytes in its own encoding."""
    if not edits:
        return source.data
    return source.module.visit(_Apply(source, edits)).bytes


class _Apply(cst.CSTTransformer):
    """The edits, keyed by the original node each changes: every node passes through on_leave."""

    def __init__(self, source: SourceFile, edits: Sequence[Edit]) -> None:
        super().__init__()
        self.config = source.module.config_for_parsing
        self.on_node: dict[int, list[SetKeywords | SetValue]] = {}
        self.after: dict[int | None, list[InsertAfter]] = {}
        self.wraps: dict[int, Wrap] = {}
        for edit in edits:
            if isinstance(edit, SetKeywords):
                self.on_node.setdefault(id(edit.call), []).append(edit)
            elif isinstance(edit, SetValue):
                self.on_node.setdefault(id(edit.node), []).append(edit)
            elif isinstance(edit, InsertAfter):
                self.after.setdefault(id(edit.anchor) if edit.anchor is not None else None, []).append(edit)
            else:
                self.wraps[id(edit.first)] = edit

    def on_leave(  # type: ignore[override]  # libcst's says the node's own type comes back; a SetValue's does not
            self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
        for edit in self.on_node.get(id(original), ()):
            if isinstance(edit, SetKeywords):
                updated = _set_keywords(cast(cst.Call, updated), edit.settings, self.config)  # keyed by its call
            else:
                updated = cst.parse_expression(edit.code, self.config).with_changes(
                    lpar=getattr(updated, "lpar", ()), rpar=getattr(updated, "rpar", ()))
        if isinstance(original, (cst.Module, cst.IndentedBlock)):
            updated = updated.with_changes(body=self._body(original, cast(Block, updated)))
        return updated

    def _body(self, original: Block, updated: Block) -> list:
        old, new = list(original.body), list(updated.body)
        out: list = []
        if isinstance(original, cst.Module):
            out += self._inserted(None)
        i = 0
        while i < len(old):
            wrap = self.wraps.get(id(old[i]))
            if wrap is not None:
                j = next(k for k in range(i, len(old)) if old[k] is wrap.last)
                out.append(self._with(wrap, new[i:j + 1]))
                out += [s for k in range(i, j + 1) for s in self._inserted(id(old[k]))]
                i = j + 1
                continue
            out.append(new[i])
            out += self._inserted(id(old[i]))
            i += 1
        return out

    def _inserted(self, key: int | None) -> list:
        """The statements inserted after one anchor, each once (two fixes may both need ``import torch``)."""
        edits = self.after.get(key, ())
        code = list(dict.fromkeys(line for edit in edits for line in edit.code))
        out = [cst.parse_statement(line, self.config) for line in code]
        setup = next((i for i, stmt in enumerate(out) if not _is_import(stmt)), None)
        if setup is not None and any(edit.spaced for edit in edits):  # a blank line between the imports and the setup
            out[setup] = out[setup].with_changes(leading_lines=[cst.EmptyLine()])
        return out

    def _with(self, wrap: Wrap, body: list) -> cst.With:
        header = cast(cst.With, cst.parse_statement(f"{wrap.header}:\n    pass\n", self.config))
        first = body[0]
        return header.with_changes(leading_lines=first.leading_lines,
                                   body=cst.IndentedBlock(body=[first.with_changes(leading_lines=()), *body[1:]]))


_NO_SPACE = cst.SimpleWhitespace("")
_COMMA_SPACE = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def _set_keywords(call: cst.Call, settings: Sequence[tuple[str, str]], config: cst.PartialParserConfig) -> cst.Call:
    args = list(call.args)
    missing = []
    for name, code in settings:
        value = cst.parse_expression(code, config)
        at = next((i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == name), None)
        if at is not None:
            args[at] = args[at].with_changes(value=value)
        else:
            missing.append(cst.Arg(value=value, keyword=cst.Name(name),
                                   equal=cst.AssignEqual(whitespace_before=_NO_SPACE, whitespace_after=_NO_SPACE)))
    return call.with_changes(args=_appended(call, args, missing) if missing else args)


def _newline(ws: cst.BaseParenthesizableWhitespace | None) -> TypeGuard[cst.ParenthesizedWhitespace]:
    return isinstance(ws, cst.ParenthesizedWhitespace)


def _appended(call: cst.Call, args: list[cst.Arg], new: list[cst.Arg]) -> list[cst.Arg]:
    """`args` and then `new`, laid out as the call lays out its own: on one line, or one argument
    per line with the closing parenthesis on a line of its own; comments stay on their lines."""
    if not args:
        return [a.with_changes(comma=_COMMA_SPACE) for a in new[:-1]] + [new[-1]]
    last = args[-1]
    tail = last.comma if isinstance(last.comma, cst.Comma) else None
    closing = tail.whitespace_after if tail is not None else last.whitespace_after_arg  # before ")"
    between = [a.comma.whitespace_after for a in args[:-1] if isinstance(a.comma, cst.Comma)]
    if not isinstance(closing, cst.ParenthesizedWhitespace) or (between and not _newline(between[-1])):
        # not one per line: the new arguments follow the last one on its line
        sep = cst.Comma(whitespace_before=_NO_SPACE,
                        whitespace_after=_clean(between[-1]) if between else cst.SimpleWhitespace(" "))
        return (args[:-1] + [last.with_changes(comma=sep, whitespace_after_arg=_NO_SPACE)]
                + [a.with_changes(comma=sep) for a in new[:-1]]
                + [new[-1].with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)])
    # f(a, b,\n): nothing says how an argument line is indented; the closing one will do
    indent = next((ws for ws in reversed([call.whitespace_before_args, *between]) if _newline(ws)), closing)
    line = cst.ParenthesizedWhitespace(indent=indent.indent, last_line=indent.last_line)
    sep = cst.Comma(whitespace_before=_NO_SPACE, whitespace_after=line)
    end = cst.ParenthesizedWhitespace(indent=closing.indent, last_line=closing.last_line)
    # the last argument keeps whatever followed it on its line (a comment) and the lines under it
    kept = closing.with_changes(indent=indent.indent, last_line=indent.last_line)
    if tail is not None:
        old_last = last.with_changes(comma=tail.with_changes(whitespace_after=kept))
        final = new[-1].with_changes(comma=cst.Comma(whitespace_before=_NO_SPACE, whitespace_after=end))
    else:
        old_last = last.with_changes(comma=cst.Comma(whitespace_before=_NO_SPACE, whitespace_after=kept),
                                     whitespace_after_arg=_NO_SPACE)
        final = new[-1].with_changes(whitespace_after_arg=end)
    return args[:-1] + [old_last] + [a.with_changes(comma=sep) for a in new[:-1]] + [final]


def _clean(ws: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    """A separator's whitespace without its comment or the comment lines under it (reused between new arguments)."""
    if _newline(ws):
        return cst.ParenthesizedWhitespace(indent=ws.indent, last_line=ws.last_line)
    return ws
