"""Where a setting a fix changes comes from: the script's own switch, said as the switch.

A call given ``num_workers=args.workers`` (an argparse flag), ``workers`` (a click option's
parameter), ``mixed_precision`` (a module-level global that nanoGPT's ``exec(open("configurator.py")
.read())`` overrides from the command line) or ``int(os.environ.get("WORKERS", 0))`` reads the value
from a switch the user runs the script with. Writing the fix into the call would leave that switch
doing nothing, so the fix is said as the switch: the flag to run with (:mod:`.command_line`), the
environment variable to set, or, for a plain global with no configurator, its value changed where
it is bound. Read from the syntax tree of the file that makes the call; a switch that cannot hold
the value (a flag whose choices lack it, one that can only turn a setting off) is refused in one
line, never guessed; anything less plain is not a switch here, and the call is written as before.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Collection

import libcst as cst

from . import config_file
from .command_line import EnvVar, Flag, Said
from .config_file import ConfigChange
from .rewrite import Edit, Refused, SetValue, SourceFile, call_name, calls_in, string_index


@dataclass(frozen=True)
class Switch:
    """A switch a value comes from: how to set it (the flag or variable to run with, else an edit of
    its default) and what to tell the user."""

    line: int  # where the switch is declared, in the same file
    said: str  # "the --workers flag" / "the global mixed_precision" / "the environment variable WORKERS"
    current: str | None  # its default's code now (None: argparse's own None, or unknown)
    flag: Said | None = None  # the command-line words that set it (said, never written)
    edit: Edit | None = None  # where it has no flag: the edit of its default
    config: ConfigChange | None = None  # a key of a config file: the file changed (written with --write)


def switch_of(source: SourceFile, value: cst.BaseExpression, code: str) -> Switch | None:
    """The switch that `value` (a keyword's argument in a call of `source`) reads, set to `code`;
    None: none. Refused: a switch that cannot hold `code`."""
    if isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name):
        return _flag(source, value.value.value, value.attr.value, code) or _config(source, value, code)
    if isinstance(value, (cst.Subscript, cst.Attribute)):
        return _hydra(source, value, code) or _config(source, value, code) or _env(source, value, code)
    if isinstance(value, cst.Name):
        return _click(source, value, code) or _global(source, value, code)
    return _env(source, value, code)


def tell(switch: Switch, source: SourceFile, keyword: str, code: str) -> str:
    """One line: the switch the value comes from, and how it is set to `code`."""
    head = f"{source.name}:{switch.line}: {keyword} comes from {switch.said}"
    if switch.flag is not None:
        return f"{head}: run it with {switch.flag.said}"
    if switch.config is not None:
        return f"{head}: it is now {word(code)} there (the patch changes the file; --write writes it)"
    return f"{head}: it is now {code} (was {switch.current})"


def word(code: str) -> str:
    """A Python literal as the command line says it: ``"bf16"`` is bf16, ``2`` is 2."""
    value = ast.literal_eval(code)
    return value if isinstance(value, str) else repr(value)


def _takes(fn: cst.FunctionDef, name: str) -> bool:
    """Whether `fn` has a parameter (a plain one, as click and Hydra fill) called `name`."""
    return name in {p.name.value for p in fn.params.params}


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
    options = tuple(str(a.value.evaluated_value) for a in call.args
                    if a.keyword is None and isinstance(a.value, cst.SimpleString))
    options = tuple(sorted(options, key=lambda o: not o.startswith("--")))
    line = source.span(call).start.line
    said = f"the {options[0]} flag" if options else f"the {attr} argument"
    default = keywords.get("default")
    current = source.text(default) if default is not None else None
    action = source.text(keywords["action"]).strip("'\"") if "action" in keywords else "store"
    if action in ("store_true", "store_false"):
        if not options[0].startswith("-") or not _literal(code) or ast.literal_eval(code) is not (action == "store_true"):
            raise Refused(f"{source.name}:{line}: {said} can only set {action == 'store_true'}, not {code}")
        return Switch(line, said, current, flag=Flag(options, None))
    if action != "store" or not options or not options[0].startswith("-"):
        return None  # a positional, or an action whose value the command line does not say plainly
    if not _literal(code):
        return None
    choices = keywords.get("choices")
    if choices is not None and source.text(choices) != "None":
        listed = ast.literal_eval(source.text(choices)) if _literal(source.text(choices)) else None
        if listed is None:
            return None
        _must_hold(source, line, said, listed, code)
    return Switch(line, said, current, flag=Flag(options, word(code)))


def _must_hold(source: SourceFile, line: int, said: str, choices: Collection[object], code: str) -> None:
    """Refused where a flag's `choices` (a literal collection) lack `code`'s value."""
    if ast.literal_eval(code) not in choices:
        raise Refused(f"{source.name}:{line}: {said}'s choices ({', '.join(map(str, choices))}) do not hold "
                      f"{word(code)}: add it to them, or make the change by hand")


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
    """A module-level global bound once before the call reads it (and not rebound in the function
    that reads it): the configurator's ``--name=value`` where the script has one, else its literal
    value changed where it is bound."""
    scope = source.scope_of(name)
    if isinstance(scope, cst.FunctionDef) and (source.assignments(scope, name.value) or _takes(scope, name.value)):
        return None
    bound = source.assignments(source.module, name.value)
    if len(bound) != 1:
        return None
    stmt = bound[0]
    small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return None
    if isinstance(scope, cst.Module) and source.span(stmt).start.line > source.span(name).start.line:
        return None
    line, said, current = source.span(stmt).start.line, f"the global {name.value}", source.text(small.value)
    configurator = _configurator(source)
    if configurator is not None and _literal(code):
        return Switch(line, f"{said} ({configurator} sets it from the command line)", current,
                      flag=Flag((f"--{name.value}",), word(code), equals=True))
    if not _literal(current):
        return None
    return Switch(line, said, current, edit=SetValue(small.value, code))


def _click(source: SourceFile, name: cst.Name, code: str) -> Switch | None:
    """A parameter of the function that reads it, filled by a ``@click.option`` of that function."""
    scope = source.scope_of(name)
    if not isinstance(scope, cst.FunctionDef) or source.assignments(scope, name.value) or not _takes(scope, name.value):
        return None
    for decorator in scope.decorators:
        call = decorator.decorator
        if not isinstance(call, cst.Call) or call_name(call) != "option":
            continue
        words = [str(a.value.evaluated_value) for a in call.args
                 if a.keyword is None and isinstance(a.value, cst.SimpleString)]
        dashed = [w for w in words if w.startswith("-")]
        named = next((w for w in words if not w.startswith("-")), None)
        dest = named or max(dashed, key=len, default="").lstrip("-").replace("-", "_").lower()
        if dest != name.value or not dashed or not _literal(code):
            continue
        keywords = {a.keyword.value: source.text(a.value) for a in call.args if a.keyword is not None}
        line = source.span(call).start.line
        options = tuple(sorted(dashed, key=lambda o: not o.startswith("--")))
        said = f"the {options[0]} option (click)"
        if keywords.get("is_flag") == "True":
            if ast.literal_eval(code) is not True or "/" in options[0]:
                raise Refused(f"{source.name}:{line}: {said} is a flag: it can only turn it on, not set {code}")
            return Switch(line, said, keywords.get("default"), flag=Flag(options, None))
        choice = keywords.get("type", "")
        if "Choice(" in choice:
            listed = choice[choice.index("Choice(") + 7:].split(")")[0]
            if _literal(listed):
                _must_hold(source, line, said, ast.literal_eval(listed), code)
        return Switch(line, said, keywords.get("default"), flag=Flag(options, word(code)))
    return None


def _hydra(source: SourceFile, value: cst.BaseExpression, code: str) -> Switch | None:
    """``cfg.data.workers`` where ``cfg`` is the config a ``@hydra.main`` function is given: Hydra's
    override on the command line (``data.workers=2``)."""
    found = config_file.key_of(source, value)
    if found is None or not _literal(code):
        return None
    scope = source.scope_of(found[0])
    if not isinstance(scope, cst.FunctionDef) or not _takes(scope, found[0].value):
        return None
    main = next((d.decorator for d in scope.decorators if isinstance(d.decorator, cst.Call)
                 and call_name(d.decorator) == "main" and "hydra" in source.text(d.decorator.func)), None)
    if main is None:
        return None
    key = ".".join(found[1])
    return Switch(source.span(main).start.line, f"the Hydra config key {key}", None,
                  flag=Flag((key,), word(code), equals=True))


def _config(source: SourceFile, value: cst.BaseExpression, code: str) -> Switch | None:
    """A key of a YAML file the script loads (:mod:`.config_file`): that file changed."""
    found = config_file.key_of(source, value)
    path = config_file.loaded_from(source, found[0]) if found else None
    if found is None or path is None or not _literal(code):
        return None
    made = config_file.change(path, found[1], code)
    return Switch(source.span(value).start.line, made.said, None, config=made)


def _env(source: SourceFile, value: cst.BaseExpression, code: str) -> Switch | None:
    """``os.environ.get("NAME", ...)``, ``os.getenv("NAME", ...)`` or ``os.environ["NAME"]``, as it
    stands or converted by one call (``int(...)``): the variable to run the script with."""
    if isinstance(value, cst.Call) and call_name(value) in ("int", "float", "str", "bool") and len(value.args) == 1:
        value = value.args[0].value
    name = None
    if isinstance(value, cst.Call) and call_name(value) in ("get", "getenv") and value.args and \
            source.text(value.func) in ("os.environ.get", "os.getenv", "environ.get", "getenv"):
        first = value.args[0].value
        name = first.evaluated_value if isinstance(first, cst.SimpleString) else None
    elif isinstance(value, cst.Subscript) and source.text(value.value) in ("os.environ", "environ"):
        name = string_index(value)
    if not isinstance(name, str) or not _literal(code):
        return None
    return Switch(source.span(value).start.line, f"the environment variable {name}", None,
                  flag=EnvVar(name, word(code)))


def _configurator(source: SourceFile) -> str | None:
    """The file a nanoGPT-style script exec()s to override its globals (``configurator.py``), if it does."""
    for call in source.nodes(cst.Call):
        if call_name(call) == "exec" and call.args:
            opened = [c for c in calls_in(call.args[0].value) if call_name(c) == "open" and c.args]
            if opened and isinstance(opened[0].args[0].value, cst.SimpleString):
                return str(opened[0].args[0].value.evaluated_value)
    return None
