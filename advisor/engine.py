"""Run the rules over a Profile: which rules (``select`` / ``ignore``), with which options.

Settings come, in increasing priority, from the rules' defaults, ``[tool.advise]`` in the
nearest ``pyproject.toml`` (or a file given with ``--config``), then ``--select`` /
``--ignore`` on the command line. The conventions are ruff's::

    [tool.advise]
    select = ["DL", "fp32-matmul"]   # codes, code prefixes, names, or "ALL" (default: ALL)
    ignore = ["MEM001"]

    [tool.advise.dataloader-starvation]  # one table per rule, keyed by its name
    min-wait-frac = 0.2

A ``--config FILE`` may be a pyproject.toml (its ``[tool.advise]`` table) or a dedicated
``advise.toml`` whose top level is that table. Every mistake (unknown key, rule, option,
or a wrongly typed value) is a :class:`ConfigError` with a one-line message.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from advisor.model import AFTER, Finding, rank
from advisor.rules.registry import Catalogue, Rule, load_rules

if TYPE_CHECKING:
    from advisor.profile import Profile

_TOP_KEYS = {"select", "ignore"}


class ConfigError(ValueError):
    """Bad configuration or selection; the message is one line for the CLI."""


@dataclass
class Settings:
    select: list[str] = field(default_factory=lambda: ["ALL"])
    ignore: list[str] = field(default_factory=list)
    options: dict[str, dict[str, object]] = field(default_factory=dict)  # rule name -> {option: value}
    source: str | None = None  # the file the settings came from


# --------------------------------------------------------------------------- configuration


# A line that opens or sets the advise table: [tool.advise], [tool.advise.RULE], tool.advise.x = ...,
# or advise = {...} (under [tool]). Read in a pyproject.toml that is not valid TOML.
_ADVISE_LINE = re.compile(r"""^\s*(\[+\s*tool\s*\.\s*["']?advise(?![\w-])|tool\s*\.\s*["']?advise(?![\w-])"""
                          r"""|["']?advise["']?\s*[.=])""", re.MULTILINE)


def find_config(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start` that has a ``[tool.advise]`` table.

    A pyproject.toml that is not valid TOML is someone else's problem and skipped, unless it
    has an advise table: then it is ours, and a :class:`ConfigError` naming the file.
    """
    start = start.resolve()
    for folder in [start, *start.parents] if start.is_dir() else [start.parent, *start.parent.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                text = candidate.read_bytes().decode("utf-8", errors="replace")
                data = tomllib.loads(text)
            except OSError:
                continue  # unreadable: nothing says it is ours
            except ValueError as exc:
                if _ADVISE_LINE.search(text):
                    reason = str(exc).splitlines()[0]
                    raise ConfigError(f"{candidate}: [tool.advise]: not valid TOML ({reason})") from None
                continue  # someone else's broken pyproject is not ours to judge
            if isinstance(data.get("tool"), dict) and "advise" in data["tool"]:
                return candidate
    return None


def read_config(path: Path) -> dict:
    """The advise table of `path`: ``[tool.advise]`` of a pyproject.toml, else its top level."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({str(exc).splitlines()[0]})") from None
    tool = data.get("tool")
    if isinstance(tool, dict) and "advise" in tool:
        table = tool["advise"]
    elif Path(path).name == "pyproject.toml":
        table = {}
    else:
        table = data
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.advise] must be a table")
    return table


def settings_from_table(table: dict, catalogue: Catalogue, source: str | None = None) -> Settings:
    """Validate an advise table against the rules that exist; no unknown key passes silently."""
    where = f"{source}: " if source else ""
    settings = Settings(source=source)
    by_key = catalogue.by_key()
    for key, value in table.items():
        if key in _TOP_KEYS:
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}'{key}' must be a list of rule codes or names")
            setattr(settings, key, list(value))
            continue
        target = by_key.get(key) or by_key.get(key.upper())
        if target is not None and not isinstance(value, dict):
            raise ConfigError(f"{where}[tool.advise.{key}] must be a table of the rule's options, not {value!r}")
        if target is None:
            raise ConfigError(f"{where}unknown key '{key}' in [tool.advise] (expected select, ignore, or a rule name "
                              f"such as [tool.advise.dataloader-starvation])")
        opts = {o.key: o for o in target.options}
        opts.update({o.name: o for o in target.options})
        chosen = settings.options.setdefault(target.name, {})
        for opt_key, opt_value in value.items():
            option = opts.get(opt_key)
            if option is None:
                known = ", ".join(o.key for o in target.options) or "none"
                raise ConfigError(f"{where}rule {target.name} has no option '{opt_key}' (options: {known})")
            try:
                chosen[option.name] = option.coerce(opt_value)
            except ValueError as exc:
                raise ConfigError(f"{where}{target.name}.{option.key} {exc}") from None
    for key in ("select", "ignore"):
        resolve(getattr(settings, key), catalogue, f"{where}{key}")
    return settings


def load_settings(*, config: str | Path | None, search_from: Path | None, select: Iterable[str] = (),
                  ignore: Iterable[str] = (), catalogue: Catalogue | None = None) -> Settings:
    """Settings for one run: the config file (given, or found above `search_from`), then the CLI."""
    catalogue = catalogue or load_rules()
    path = Path(config) if config else (find_config(search_from) if search_from else None)
    settings = settings_from_table(read_config(path), catalogue, str(path)) if path else Settings()
    cli_select = split_codes(select)
    cli_ignore = split_codes(ignore)
    if cli_select:
        resolve(cli_select, catalogue, "--select")
        settings.select = cli_select  # as in ruff: --select replaces the configured selection
    if cli_ignore:
        resolve(cli_ignore, catalogue, "--ignore")
        settings.ignore = settings.ignore + cli_ignore
    return settings


def split_codes(values: Iterable[str]) -> list[str]:
    """``--select DL001,fp32-matmul --select MEM`` -> ['DL001', 'fp32-matmul', 'MEM']."""
    out = []
    for value in values:
        out += [v.strip() for v in value.split(",") if v.strip()]
    return out


def resolve(keys: Iterable[str], catalogue: Catalogue, what: str) -> list[Rule]:
    """The rules that codes, prefixes, names or ALL designate; an unknown one is a ConfigError."""
    chosen: list[Rule] = []
    for key in keys:
        if key.upper() == "ALL":
            matched = list(catalogue.rules)
        else:
            upper = key.upper()
            matched = [r for r in catalogue.rules if r.name == key.lower() or r.code == upper
                       or (upper.isalpha() and r.prefix == upper)
                       or (not upper.isalpha() and upper[:1].isalpha() and r.code.startswith(upper))]
        if not matched:
            raise ConfigError(f"{what}: unknown rule, code or prefix '{key}' (see `advise rules`)")
        chosen += [r for r in matched if r not in chosen]
    return chosen


def enabled(settings: Settings, catalogue: Catalogue) -> list[Rule]:
    ignored = resolve(settings.ignore, catalogue, "ignore")
    return [r for r in resolve(settings.select, catalogue, "select") if r not in ignored and r.status != "removed"]


# --------------------------------------------------------------------------- running


def run_rules(profile: Profile, settings: Settings | None = None,
              catalogue: Catalogue | None = None) -> tuple[list[Finding], list[str]]:
    """Findings (ranked as every renderer shows them) and warnings; a rule that fails is a warning."""
    catalogue = catalogue or load_rules()
    settings = settings or Settings()
    warnings = list(catalogue.warnings)
    findings: list[Finding] = []
    for r in enabled(settings, catalogue):
        try:
            produced = r.run(profile, settings.options.get(r.name))
        except Exception as exc:  # noqa: BLE001 - a rule (a plugin's too) may raise anything; it costs no other
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            warnings.append(f"rule {r.code} ({r.name}) failed: {type(exc).__name__}{': ' + first if first else ''}")
            continue
        for finding in produced:
            problem = finding.problem() if isinstance(finding, Finding) else "not a Finding"
            if problem:
                warnings.append(f"rule {r.code} ({r.name}) produced an invalid finding, dropped: {problem}")
                continue
            findings.append(finding)
    codes = {f.code for f in findings}
    for finding in findings:
        if finding.cause is not None and finding.cause not in codes:
            finding.without_cause()  # before the screens are weighed: its own fix may own one
    findings = _owned_screens_dropped(findings)
    framework = profile.observed.framework
    for finding in findings:
        finding.fix.speak(framework)
    return rank(findings), warnings


def _owned_screens_dropped(findings: list[Finding]) -> list[Finding]:
    """A screen is for a fix no rule is about: one whose overrides a rule's fix already measures
    (PR001's precision ladder owns bf16 autocast) is left out, so one finding tells that story.
    The rule's fix then waits where the screen did (:attr:`Finding.after`): the loading comes first
    whoever proposes a compute fix. Beside a CPU burner loader-starved's single-thread AdamW step
    read over CPU002's 10% of the step (5.5% quiet), the fused step was measured alone on the
    starved loop, read no gain, and was left out of the loading fix's stack in 2 runs of 3."""
    owned = [p for f in findings if not f.screen for p in f.fix.points()]
    for screen in (f for f in findings if f.screen and f.after and f.fix.overrides in owned):
        for owner in (f for f in findings if not f.screen and not f.after and f.fix.overrides == screen.fix.overrides):
            owner.evidence[AFTER] = screen.after
    return [f for f in findings if not (f.screen and f.fix.overrides in owned)]


def describe(r: Rule, doc: bool = False) -> dict:
    """A rule as data (`advise rules --json`)."""
    out = {"code": r.code, "name": r.name, "summary": r.summary, "status": r.status, "origin": r.origin,
           "options": {o.key: o.default for o in r.options}}
    if doc:
        out["doc"] = r.doc
    return out


def rule_docs(catalogue: Catalogue | None = None) -> dict[str, str]:
    """Each rule's documentation by code and by name, for the renderers (which never load rules)."""
    catalogue = catalogue or load_rules()
    return {key: r.doc for r in catalogue.rules for key in (r.code, r.name)}
