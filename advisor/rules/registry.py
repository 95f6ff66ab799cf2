"""The rule model: one decorator per rule, Findings with evidence, Fixes with an applicability.

A rule is a plain function over a :class:`~advisor.profile.Profile` that yields
:class:`~advisor.model.Finding` objects (with a :class:`~advisor.model.Fix` built by
``Fix.safe`` / ``Fix.unsafe`` / ``Fix.manual``). Its module docstring is its user-facing documentation (ruff's
sections: ``## What it does``, ``## Why is this bad?``, ``## Example`` + ``Use instead:``,
``## Fix safety``, ``## Options``); its keyword-only parameters are its options, with their
defaults. One decorator registers everything::

    @rule(code="DL001", name="dataloader-starvation")
    def check(profile, *, min_wait_frac: float = 0.10) -> Iterator[Finding]:
        ...

Built-in rules and third-party rules are loaded the same way: through the entry-point group
``advisor.rules`` (an entry point names a module, a Rule, or a list of Rules). A plugin that
fails to import is reported in one line naming its package, never raised.
"""

from __future__ import annotations

import functools
import ast
import importlib
import inspect
import pkgutil
import re
import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from advisor.run_dir.interrupt import Interrupted
from advisor.model import Finding, Fix  # noqa: F401 - the plugin API (docs/how-to/write-a-rule-plugin.md)
from advisor.framework.words import expand_fix_blocks

if TYPE_CHECKING:
    from advisor.profile import Profile

STATUSES = ("stable", "preview", "deprecated", "removed")
REQUIRED_SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "## Fix safety", "## Options")
ENTRY_POINT_GROUP = "advisor.rules"
BUILTIN_PACKAGE = "advisor.rules"

_CODE_RE = re.compile(r"^[A-Z]{1,5}[0-9]{3}$")
_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Option:
    """A rule option: a keyword-only parameter of the rule function and its default."""

    name: str  # snake_case, as in the signature
    default: object

    @property
    def key(self) -> str:
        """The spelling used in configuration and docs (kebab-case, as ruff's options)."""
        return self.name.replace("_", "-")

    def coerce(self, value: object) -> object:
        """`value` as this option's type, or ValueError with a one-line reason."""
        kind = type(self.default)
        if kind is bool:
            if isinstance(value, bool):
                return value
        elif kind is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        elif kind is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        elif kind is str:
            if isinstance(value, str):
                return value
        elif isinstance(value, kind):
            return value
        raise ValueError(f"expects {kind.__name__}, got {value!r}")


@dataclass(eq=False)
class Rule:
    """A registered rule: identity, documentation and the check function."""

    code: str
    name: str
    func: Callable[..., Iterable[Finding]]
    doc: str
    module: str
    status: str = "stable"
    options: tuple[Option, ...] = ()
    origin: str = "advise"  # the distribution that provides it

    @property
    def summary(self) -> str:
        """The first sentence of ``## What it does``: one line for the catalogue."""
        text = section(self.doc, "## What it does").strip()
        first = " ".join(text.split("\n\n")[0].split())
        return first.split(". ")[0].rstrip(".") + "."

    @property
    def prefix(self) -> str:
        return self.code.rstrip("0123456789")

    def defaults(self) -> dict[str, object]:
        return {o.name: o.default for o in self.options}

    def defaults_by_key(self) -> dict[str, object]:
        return {o.key: o.default for o in self.options}

    def run(self, profile: Profile, options: Mapping[str, object] | None = None) -> list[Finding]:
        findings = list(self.func(profile, **(options or {})) or ())
        for f in findings:
            f.rule, f.code = self.name, self.code
        return findings

    def __call__(self, profile: Profile, **options: object) -> list[Finding]:
        return self.run(profile, options)


def rule(*, code: str, name: str, status: str = "stable") -> Callable[[Callable], Rule]:
    """Register a check function as a Rule; its module docstring is its documentation."""
    if not _CODE_RE.match(code):
        raise ValueError(f"rule code {code!r} must be a 1-5 letter prefix and 3 digits (e.g. DL001)")
    if not _NAME_RE.match(name):
        raise ValueError(f"rule name {name!r} must be kebab-case (e.g. dataloader-starvation)")
    if status not in STATUSES:
        raise ValueError(f"rule status {status!r} is not one of {', '.join(STATUSES)}")

    def wrap(func: Callable) -> Rule:
        module = sys.modules.get(func.__module__)
        doc = expand_fix_blocks(inspect.cleandoc((module.__doc__ if module else None) or func.__doc__ or ""))
        options = tuple(
            Option(p.name, p.default)
            for p in inspect.signature(func).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty
        )
        return Rule(code=code, name=name, func=func, doc=doc, module=func.__module__, status=status, options=options)

    return wrap


def section(doc: str, header: str) -> str:
    """The text under `header` in a rule's doc, up to the next ``## `` header ('' if absent)."""
    lines = doc.splitlines()
    out: list[str] = []
    inside = False
    for line in lines:
        if line.startswith("## "):
            if inside:
                break
            inside = line.strip() == header
            continue
        if inside:
            out.append(line)
    return "\n".join(out).strip("\n")


def documented_options(doc: str) -> list[str]:
    """Option keys listed under ``## Options`` as ``- `key` ...`` lines."""
    return re.findall(r"^\s*[-*]\s+`([a-z0-9-]+)`", section(doc, "## Options"), flags=re.M)


def doc_problems(r: Rule) -> list[str]:
    """What is missing or wrong in a rule's documentation (empty when it is complete)."""
    problems = [f"missing section {h!r}" for h in REQUIRED_SECTIONS if h not in r.doc.splitlines()]
    example = section(r.doc, "## Example")
    if "## Example" in r.doc and "Use instead:" not in example:
        problems.append("'## Example' has no 'Use instead:'")
    listed = documented_options(r.doc)
    real = [o.key for o in r.options]
    if sorted(listed) != sorted(real):
        problems.append(f"'## Options' lists {listed} but the rule takes {real}")
    documented = documented_defaults(r.doc)
    for o in r.options:
        if o.key in documented and documented[o.key] != o.default:
            problems.append(f"'## Options' says {o.key} defaults to {documented[o.key]!r}, the rule uses {o.default!r}")
    return problems


def documented_defaults(doc: str) -> dict[str, object]:
    """``- `key` (default VALUE)`` lines under ``## Options``, VALUE parsed as a Python/TOML literal."""
    out = {}
    for key, raw in re.findall(r"^\s*[-*]\s+`([a-z0-9-]+)`\s*\(default\s+`?([^)`]+)`?\)", section(doc, "## Options"), flags=re.M):
        text = {"true": "True", "false": "False"}.get(raw.strip(), raw.strip())
        try:
            out[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[key] = raw.strip()
    return out


# --------------------------------------------------------------------------- loading


@dataclass
class Catalogue:
    """All rules that loaded, in code order, plus one warning per plugin that did not."""

    rules: list[Rule] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def by_key(self) -> dict[str, Rule]:
        out = {}
        for r in self.rules:
            out[r.code.upper()] = r
            out[r.name] = r
        return out

    def find(self, key: str) -> Rule | None:
        return self.by_key().get(key.upper() if _CODE_RE.match(key.upper()) else key.lower())


def rules_in(obj: object) -> list[Rule]:
    """The Rules an entry point resolves to: a Rule, an iterable of Rules, or a module(/package)."""
    if isinstance(obj, Rule):
        return [obj]
    if inspect.ismodule(obj):
        found = [v for v in vars(obj).values() if isinstance(v, Rule)]
        if hasattr(obj, "__path__"):  # a package: every submodule, in name order
            for info in sorted(pkgutil.iter_modules(obj.__path__), key=lambda m: m.name):
                found += [v for v in vars(importlib.import_module(f"{obj.__name__}.{info.name}")).values()
                          if isinstance(v, Rule)]
        return found
    if isinstance(obj, (list, tuple)) and all(isinstance(v, Rule) for v in obj):
        return list(obj)
    raise TypeError(f"resolves to {type(obj).__name__}, not a Rule, a list of Rules or a module")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _entry_points() -> list:
    try:
        return list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # noqa: BLE001 - any installed package's broken metadata may raise anything; it must not stop the built-ins
        return []


@functools.lru_cache(maxsize=1)
def load_rules() -> Catalogue:
    """Every rule: the built-ins, then each entry point in group ``advisor.rules`` (loaded once).

    The built-ins are declared as an entry point too; they are loaded directly as well, so a
    stale install whose metadata lacks that entry point still has them. A plugin that fails
    to load, resolves to something else, or reuses a code or name, gives one warning.
    """
    cat = Catalogue()
    seen: dict[str, Rule] = {}

    def add(found: Iterable[Rule], origin: str) -> None:
        for r in found:
            if any(r is v for v in seen.values()):
                continue
            clash = seen.get(r.code) or seen.get(r.name)
            if clash is not None:
                cat.warnings.append(f"rule {r.code} ({r.name}) from {origin} clashes with {clash.code} ({clash.name}) "
                                    f"from {clash.origin}; ignored")
                continue
            r.origin = origin
            seen[r.code] = seen[r.name] = r
            cat.rules.append(r)

    add(rules_in(importlib.import_module(BUILTIN_PACKAGE)), "advise")
    for ep in _entry_points():
        dist = getattr(ep, "dist", None)
        package = f"{dist.metadata['Name']} {dist.version}" if dist is not None else ep.value.split(":")[0]
        if ep.value.split(":")[0] == BUILTIN_PACKAGE:
            continue
        try:
            found = rules_in(ep.load())
        except Interrupted:  # the user's Ctrl-C (advisor.run_dir.interrupt) while a plugin loads: advise stops
            raise
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 - a plugin raises anything: a warning
            cat.warnings.append(f"rule plugin {ep.name!r} from package {package} failed to load: {_one_line(exc)}")
            continue
        add(found, package)
    cat.rules.sort(key=lambda r: (r.origin != "advise", r.prefix, r.code))
    return cat
