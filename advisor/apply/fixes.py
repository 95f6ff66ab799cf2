"""What each override of the vocabulary changes in the user's code, at the lines the probe saw.

One function per key of :data:`advisor.overrides.VOCABULARY`: it locates the user's nodes
(:mod:`advisor.apply.rewrite`) from the run's sites (:mod:`advisor.apply.sites`) and plans the
edits, or refuses, in one line naming the file:line and why, what it cannot change safely. Where
a framework runs the step and the fix is a setting of its configuring call (``TrainingArguments``,
``L.Trainer``, ``Fabric``, ``Accelerator``), the setting goes into the user's call instead, in the
framework's own words (:func:`advisor.framework.words.config_settings`: the same words as the snippets).
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import libcst as cst

from .. import overrides as vocabulary
from ..framework import words as framework_words
from .rewrite import Block, Edit, InsertAfter, Refused, Scope, SetKeywords, SetValue, SourceFile, Wrap, call_name, calls_in
from .sites import Site, Sites
from . import own_autocast
from .command_line import Flag, Said
from .config_file import ConfigChange
from .switches import Switch, switch_of, tell, word

# DataLoader's parameters in their positional order: a setting passed by position is refused, not doubled
DATALOADER_PARAMETERS = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers", "collate_fn",
                         "pin_memory", "drop_last", "timeout", "worker_init_fn", "multiprocessing_context", "generator")


class Files:
    """The user's files, each read and parsed once; a file that changed since the report's patch
    was made (`expected`: path -> sha256) is refused, since the probe's lines may have moved."""

    def __init__(self, expected: dict[str, str] | None = None) -> None:
        self.expected = expected or {}
        self.parsed: dict[str, SourceFile | Refused] = {}

    def get(self, path: str) -> SourceFile:
        key = os.path.realpath(path)
        if key not in self.parsed:
            self.parsed[key] = self._load(Path(key), os.path.basename(path))
        found = self.parsed[key]
        if isinstance(found, Refused):
            raise found
        return found

    def _load(self, path: Path, name: str) -> SourceFile | Refused:
        try:
            data = path.read_bytes()
        except OSError as exc:
            return Refused(f"{name}: cannot read it ({exc.strerror or exc})")
        try:
            source = SourceFile(path, data)
        except Refused as exc:
            return Refused(f"{name}: {exc}")
        want = self.expected.get(str(path))
        if want is not None and want != source.sha256:
            return Refused(f"{name}: changed since the run (the probe's lines may have moved): profile it again")
        return source


@dataclass
class Planned:
    """One override's edits, file by file, and what was refused or is said instead."""

    key: str
    title: str
    edits: list[tuple[SourceFile, Edit]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    told: list[str] = field(default_factory=list)
    flags: list[Said] = field(default_factory=list)  # the command-line words (or variables) that make it
    configs: list[ConfigChange] = field(default_factory=list)  # config files' keys that make it

    def said(self, switch: Switch, source: SourceFile, keyword: str, code: str) -> None:
        """The value set through `switch`: its flag to run with, else the edit of its default; told."""
        if switch.flag is not None:
            if switch.flag not in self.flags:
                self.flags.append(switch.flag)
        elif switch.config is not None:
            self.configs.append(switch.config)
        elif switch.edit is not None:
            self.edits.append((source, switch.edit))
        self.told.append(tell(switch, source, keyword, code))

    def add(self, site: Site | str, source: SourceFile, edit: Edit) -> None:
        """Plan `edit` in `source`, unless its own check refuses it (then one line, at `site`). A
        keyword the call already passes from the script's own switch (``num_workers=args.workers``)
        is said as that switch instead (the flag to run with, :mod:`.switches`), never written over it."""
        if isinstance(edit, SetKeywords):
            kept = []
            for keyword, code in edit.settings:
                given = next((a.value for a in edit.call.args if a.keyword is not None and a.keyword.value == keyword), None)
                try:
                    switch = switch_of(source, given, code) if given is not None else None
                except Refused as exc:
                    self.refused.append(str(exc))
                    continue
                if switch is None:
                    kept.append((keyword, code))
                elif switch.flag is None and switch.current == code:
                    self.refused.append(f"{source.name}:{switch.line}: {switch.said} already defaults to {code}")
                else:
                    self.said(switch, source, keyword, code)
            if not kept:
                return
            edit = SetKeywords(edit.call, tuple(kept), edit.positional)
        try:
            check = getattr(edit, "check", None)
            if check is not None:
                check(source)
        except Refused as exc:
            self.refused.append(f"{_where(site)}: {exc}")
            return
        self.edits.append((source, edit))


def _where(site: Site | str) -> str:
    return site.short if isinstance(site, Site) else os.path.basename(site)


def plan(overrides: dict, sites: Sites, files: Files) -> list[Planned]:
    """Each override of the recommendation as edits of the user's files, or why it cannot be."""
    out = []
    for key, value in (overrides or {}).items():
        planned = Planned(key, vocabulary.describe({key: value}))
        try:
            if not _in_config_call(planned, key, value, sites, files):
                FIXES.get(key, _unknown)(planned, value, sites, files)
        except Refused as exc:
            planned.refused.append(str(exc))
        out.append(planned)
    return out


def _script(sites: Sites) -> str:
    return os.path.basename(sites.main) if sites.main else "the script"


def _none_seen(sites: Sites, what: str) -> Refused:
    """Why there is no line to change: the run dir is older than these records, or the probe saw none."""
    if sites.unrecorded:
        return Refused(f"{_script(sites)}: the run dir does not say where its {what} was built (an older advise "
                       "made it): profile the script again")
    return Refused(f"{_script(sites)}: the probe saw no {what} of yours in the steps"
                   + (f" ({sites.unseen})" if sites.unseen else ""))


# --- the framework's own configuring call ----------------------------------------------------------

def _in_config_call(planned: Planned, key: str, value: object, sites: Sites, files: Files) -> bool:
    """A setting of the framework's configuring call, written into the user's call (or, for
    TrainingArguments an HfArgumentParser builds, said as the flag to add); False: not one."""
    found = framework_words.config_settings(key, value, sites.framework)
    if found is None or key in REFUSED:
        return False
    call, settings = found
    framework = sites.framework or {}
    name = framework_words.FRAMEWORK_NAMES.get(str(framework.get("name")), str(framework.get("name")))
    at = framework.get("configured_at") or {}
    if not at.get("file") or not isinstance(at.get("line"), int):
        raise Refused(f"{_script(sites)}: {name} runs the step, but the probe found no {call}(...) line of yours "
                      f"to add {', '.join(settings)} to")
    site = Site(str(at["file"]), int(at["line"]))
    if framework.get("command_line"):
        said = [Flag((f"--{key.strip()}",), None if value.strip() == "True" else word(value.strip()))
                for key, _, value in (setting.partition("=") for setting in settings)]
        planned.flags += [f for f in said if f not in planned.flags]
        planned.told.append(f"{site.short}: the script builds its TrainingArguments from its command line "
                            f"(HfArgumentParser): run it with {' '.join(f.said for f in said)}")
        return True
    pairs = []
    for setting in settings:
        keyword, _, code = setting.partition("=")
        try:
            ast.literal_eval(code.strip())
        except (ValueError, SyntaxError):
            raise Refused(f"{site.short}: {setting} needs a value of the script's own") from None
        pairs.append((keyword.strip(), code.strip()))
    source = _file(files, site)
    planned.add(site, source, SetKeywords(_call(source, site, {call}, f"{call}(...)"), tuple(pairs)))
    return True


# --- plain PyTorch ----------------------------------------------------------------------------------

def _file(files: Files, site: Site | str) -> SourceFile:
    return files.get(site.file if isinstance(site, Site) else site)


def _call(source: SourceFile, site: Site, names: set[str], what: str) -> Any:
    try:
        return source.call_at(site.line, names, what)
    except Refused as exc:
        if site.via:
            raise Refused(f"{site.short}: built inside {site.via}(), which is not your code: give {site.via}() "
                          f"the setting if it takes one, or build it with a {what} call of your own") from None
        raise Refused(f"{site.short}: {exc}") from None


def _dataloader(planned: Planned, value: dict, sites: Sites, files: Files) -> None:
    settings = tuple((k, repr(value[k])) for k in vocabulary.DATALOADER_KEYS if k in value)
    if not sites.loaders:
        raise _none_seen(sites, "DataLoader")
    for site in sites.loaders:
        try:
            source = _file(files, site)
            # a subclass of the user's builds its loader through super().__init__(...)
            names = {"DataLoader", site.op} | ({"__init__"} if site.function == "__init__" else set())
            call = _call(source, site, names, "DataLoader(...)")
            planned.add(site, source, SetKeywords(call, _follow_workers(settings, call, source), DATALOADER_PARAMETERS))
        except Refused as exc:
            planned.refused.append(str(exc))
    if value.get("pin_memory"):  # pinned batches pay off only when copied asynchronously
        for site in sites.copies:
            if site.non_blocking:
                continue
            try:
                source = _file(files, site)
                for call in source.calls_on(site.line, {"to", "cuda"}):
                    if isinstance(call.func, cst.Attribute):
                        planned.add(site, source, SetKeywords(call, (("non_blocking", "True"),)))
            except Refused as exc:
                planned.refused.append(str(exc))


def _follow_workers(settings: tuple[tuple[str, str], ...], call: cst.Call,
                    source: SourceFile) -> tuple[tuple[str, str], ...]:
    """`persistent_workers` and `prefetch_factor` are errors without workers: where the call takes
    num_workers from the script's own switch (``num_workers=args.workers``), which the patch keeps
    and the user may still set to 0, they follow it rather than break that run."""
    given = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "num_workers"), None)
    try:
        follows = given is not None and switch_of(source, given, "0") is not None
    except Refused:
        follows = True  # a switch that cannot say 0 may still be given 0 another way: follow it all the same
    if not follows:
        return settings
    workers = f"{source.text(given)} > 0"
    return tuple((key, workers if key == "persistent_workers" and code == "True" else
                  f"{code} if {workers} else None" if key == "prefetch_factor" else code) for key, code in settings)


def _optimizer(planned: Planned, value: dict, sites: Sites, files: Files) -> None:
    settings = tuple((k, "True") for k, on in value.items() if on)
    if not sites.optimizers:
        raise _none_seen(sites, "optimizer")
    for site in sites.optimizers:
        try:
            source = _file(files, site)
            what = f"{site.op or 'optimizer'}(...)"
            planned.add(site, source, SetKeywords(_call(source, site, {site.op}, what), settings))
        except Refused as exc:
            planned.refused.append(str(exc))


def _setup(planned: Planned, sites: Sites, files: Files, existing: Callable[[SourceFile], cst.BaseExpression | None],
           value_code: str, statement: str) -> None:
    """Module-level setup in the script's own file: the value of an existing call or assignment
    changed (`existing` finds its node), else `statement` after the imports (``{torch}``: the
    name torch is bound to; ``import torch`` added where it is not)."""
    if not sites.main:
        raise Refused(f"the script's own file is not known (a module run, or it moved): add "
                      f"{statement.format(torch='torch')} after its imports")
    source = _file(files, sites.main)
    node = existing(source)
    if node is not None:
        if source.text(node) == value_code:
            raise Refused(f"{_where(sites.main)}:{source.span(node).start.line}: it already sets {value_code}")
        planned.add(sites.main, source, SetValue(node, value_code))
        return
    torch = source.torch_name()
    code = ([] if torch else ["import torch"]) + [statement.format(torch=torch or "torch")]
    planned.add(sites.main, source, InsertAfter(source.header_anchor(), tuple(code), spaced=True))


def _first_arg_of(name: str) -> Callable[[SourceFile], cst.BaseExpression | None]:
    def find(source: SourceFile) -> cst.BaseExpression | None:
        calls = [c for c in source.nodes(cst.Call) if call_name(c) == name and c.args and not c.args[0].keyword]
        return calls[0].args[0].value if calls else None
    return find


def _assigned(attribute: str) -> Callable[[SourceFile], cst.BaseExpression | None]:
    def find(source: SourceFile) -> cst.BaseExpression | None:
        for node in source.nodes(cst.Assign):
            if any(source.text(t.target).endswith(attribute) for t in node.targets):
                return node.value
        return None
    return find


def _matmul_precision(planned: Planned, value: str, sites: Sites, files: Files) -> None:
    _setup(planned, sites, files, _first_arg_of("set_float32_matmul_precision"), f'"{value}"',
           '{torch}.set_float32_matmul_precision("%s")' % value)


def _cudnn_benchmark(planned: Planned, value: object, sites: Sites, files: Files) -> None:
    _setup(planned, sites, files, _assigned("cudnn.benchmark"), "True", "{torch}.backends.cudnn.benchmark = True")


def _threads(planned: Planned, value: int, sites: Sites, files: Files) -> None:
    _setup(planned, sites, files, _first_arg_of("set_num_threads"), str(value), "{torch}.set_num_threads(%d)" % value)


def _torch_in(planned: Planned, site: Site, source: SourceFile) -> str:
    """The name torch is bound to in `source`, ``import torch`` planned after its imports where it is not."""
    torch = source.torch_name()
    if torch is None:
        planned.add(site, source, InsertAfter(source.header_anchor(), ("import torch",)))
    return torch or "torch"


def _model(sites: Sites, what: str) -> Site:
    model = sites.model
    if model is None:
        raise Refused(f"{_script(sites)}: the probe recorded no call of the model (a module with parameters)"
                      + (f": {sites.unseen}" if sites.unseen else "") + f"; {what} by hand, as the snippet shows")
    return model


def _autocast(planned: Planned, value: str, sites: Sites, files: Files) -> None:
    if value != "bfloat16":
        raise Refused(f"{_script(sites)}: fp16 autocast also needs a GradScaler around backward() and the "
                      "optimizer's step: make it by hand, as the snippet shows")
    model = _model(sites, "wrap the forward and the loss in torch.autocast")
    backward = next((b for b in sites.backward if b.file == model.file and b.function == model.function),
                    next((b for b in sites.backward if b.file == model.file), None))
    if backward is None:
        raise Refused(f"{model.short}: the probe recorded no backward() in the file that calls the model "
                      + (f"({sites.unseen})" if sites.unseen else ""))
    source = _file(files, model)
    step, forward = source.statement_at(backward.line), source.statement_at(model.line)
    block = source.block_of(step)
    body = list(block.body)
    if source.block_of(forward) is not block:
        body, loss = _nested_forward(source, forward, step, backward, block, model)
    else:
        loss = _loss(source, step, backward.line, body[:body.index(step)])
    if loss is None:
        raise Refused(f"{backward.short}: cannot tell which statement before backward() computes the loss")
    at_forward, at_loss = body.index(forward), body.index(loss)
    if at_forward > at_loss:
        raise Refused(f"{model.short}: the model is called after the loss is computed (at {_where(model.file)}:"
                      f"{source.span(loss).start.line})")
    torch = _torch_in(planned, model, source)
    own = own_autocast.find(source, forward, sites.device)
    if own is not None:
        _through_own(planned, own, model, source, sites.device, torch)
        return
    if any(isinstance(a, cst.With) and any("autocast" in source.text(item.item) for item in a.items)
           for a in source.ancestors(forward)):
        raise Refused(f"{model.short}: already under torch.autocast")
    header = f'with {torch}.autocast(device_type="{sites.device}", dtype={torch}.bfloat16)'
    planned.add(model, source, Wrap(body[at_forward], loss, header))


def _through_own(planned: Planned, own: own_autocast.OwnAutocast, model: Site, source: SourceFile, device: str,
                 torch: str) -> None:
    """bf16 through the script's own autocast context: its dtype (and its on switch) set where they
    come from, said as the script's flag where they come from one, and the context made the autocast
    where the run's device took its no-op branch; never a second autocast inside it."""
    keywords = {a.keyword.value: a.value for a in own.call.args if a.keyword is not None}
    where = f"{source.name}:{own.line}"
    changes: list[tuple[str, str]] = []
    dtype = keywords.get("dtype")
    if dtype is None and device != "cpu":
        changes.append(("dtype", f"{torch}.bfloat16"))
    elif dtype is not None and not source.text(dtype).endswith("bfloat16"):
        choice = own_autocast.dtype_choice(source, dtype) if isinstance(dtype, cst.Name) else None
        switch = switch_of(source, choice[0], choice[1]) if choice else None
        if switch is not None and choice is not None:
            planned.said(switch, source, "the autocast's dtype", choice[1])
        elif isinstance(dtype, (cst.Name, cst.Attribute)) and not source.text(dtype).startswith(("torch.", f"{torch}.")):
            raise Refused(f"{where}: the forward runs in the script's own autocast ({own.name}), whose dtype comes from "
                          f"{source.text(dtype)}: set that to bfloat16 rather than add a second autocast")
        else:
            changes.append(("dtype", f"{torch}.bfloat16"))
    enabled = keywords.get("enabled")
    if enabled is not None and source.text(enabled) != "True":
        switch = switch_of(source, enabled, "True")
        if switch is None:
            raise Refused(f"{where}: the forward runs in the script's own autocast ({own.name}), switched on by "
                          f"`{source.text(enabled)}`: turn that on rather than add a second autocast")
        planned.said(switch, source, "the autocast's enabled", "True")
    if own.choice is not None and not own.taken:
        if changes:
            raise Refused(f"{where}: the script's own autocast ({own.name}) is off on {device} and sets no bf16 dtype: "
                          "make it the autocast, with dtype=torch.bfloat16, by hand")
        planned.add(model, source, SetValue(own.choice, source.text(own.call)))
        planned.told.append(f"{where}: the forward runs in the script's own autocast context ({own.name}), which the "
                            f"script leaves off on {device}: it is now the autocast on every device")
    elif changes:
        planned.add(model, source, SetKeywords(own.call, tuple(changes)))
    elif not planned.flags and not planned.told:
        raise Refused(f"{where}: the forward already runs in the script's own bf16 autocast ({own.name})")


def _nested_forward(source: SourceFile, forward: cst.BaseStatement, step: cst.BaseStatement, backward: Site, block: Block,
                    model: Site) -> tuple[list[cst.BaseStatement], cst.SimpleStatementLine | None]:
    """The forward in a block of its own before backward() (nanoGPT's ``with ctx:``, whose body
    computes the model's loss and scales it, backward() after it): that block's statements and the
    one of them that last assigns the loss backward() is called on (None: not in that block)."""
    owner = next((a for a in source.ancestors(forward) if source.parents.get(a) is block), None)
    outer = list(block.body)
    if owner is None or not isinstance(owner, cst.BaseStatement) or outer.index(owner) > outer.index(step):
        raise Refused(f"{model.short}: the model is called outside the block of backward() at {backward.short} "
                      "(another function, or after it): wrap its forward and loss by hand")
    body = list(source.block_of(forward).body)
    return body, _loss(source, step, backward.line, body[body.index(forward):])


def _loss(source: SourceFile, step: cst.BaseStatement, line: int,
          before: list[cst.BaseStatement]) -> cst.SimpleStatementLine | None:
    """The statement of `before` (the block up to backward()) that last assigns the tensor
    backward() is called on (``loss`` in ``loss.backward()``, ``scaler.scale(loss).backward()``)."""
    names: list[str] = []
    for call in source.calls_on(line, {"backward"}):
        parts = ([call.func.value] if isinstance(call.func, cst.Attribute) else []) + [a.value for a in call.args]
        for part in parts:
            names += [n.value for n in _names(part)]
    for name in names:
        for stmt in reversed(before):
            if isinstance(stmt, cst.SimpleStatementLine) and any(
                    isinstance(s, (cst.Assign, cst.AnnAssign, cst.AugAssign)) and name in _targets(s) for s in stmt.body):
                return stmt
    return None


def _names(node: cst.CSTNode) -> list[cst.Name]:
    found: list[cst.Name] = []

    class Collect(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.append(n)

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)  # x.y: x, not the attribute's name
            return False

    node.visit(Collect())
    return found


def _targets(small: cst.Assign | cst.AnnAssign | cst.AugAssign) -> set[str]:
    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
    return {n.value for t in targets for n in _names(t)}


ARGUMENT = object()  # a name bound as a parameter of the function that calls the model


def _compile(planned: Planned, value: object, sites: Sites, files: Files) -> None:
    model = _model(sites, "add torch.compile(model)")
    source = _file(files, model)
    calls = source.calls_on(model.line)
    named = [c.func.value for c in calls if isinstance(c.func, cst.Name)]
    scope = source.scope_of(source.statement_at(model.line))
    scopes: list[Scope] = [scope] if isinstance(scope, cst.Module) else [scope, source.module]
    where = f"{scope.name.value}()" if isinstance(scope, cst.FunctionDef) else "the module"

    def binding(name: str) -> Any:  # a statement, ARGUMENT or None (a sentinel mypy cannot narrow by `is`)
        """The last statement that binds `name` before the call (in the function, else the module),
        ARGUMENT for a parameter of the function, None when neither."""
        for s in scopes:
            found = [a for a in source.assignments(s, name) if source.span(a).start.line < model.line or s is not scope]
            if found:
                return found[-1]
            if isinstance(s, cst.FunctionDef) and name in {p.name.value for p in _params(s)}:
                return ARGUMENT
        return None

    if not named:
        called = next((source.text(c.func) for c in calls if not source.text(c.func).startswith(("torch.", "F."))), None)
        if called:
            raise Refused(f"{model.short}: the model is called as {called}(...): compile it where it is built "
                          f"({called} = torch.compile({called}))")
    bound = {name: b for name, b in ((n, binding(n)) for n in named) if b is not None}
    matching = [name for name, b in bound.items() if b is not ARGUMENT and model.op and model.op in source.text(b)]
    chosen = matching if len(matching) == 1 else list(bound)
    if len(chosen) > 1 and all(b is ARGUMENT for b in bound.values()):
        raise Refused(f"{model.short}: the model comes into {where} as an argument ({', '.join(bound)}): "
                      "compile it where it is built (model = torch.compile(model))")
    if len(chosen) != 1:
        called = ", ".join(source.text(c.func) for c in calls) or "nothing"
        raise Refused(f"{model.short}: cannot tell which call here is the model ({model.op}; calls: {called}): "
                      "compile it where it is built")
    name, stmt = chosen[0], bound[chosen[0]]
    if stmt is ARGUMENT:
        raise Refused(f"{model.short}: `{name}` is an argument of {where}: compile it where it is "
                      f"built ({name} = torch.compile({name}))")
    if _through_own_compile(planned, source, name, scopes, value):
        return
    torch = _torch_in(planned, model, source)
    mode = "" if value is True else f', mode="{value}"'  # the mode the compile ladder measured best
    planned.add(model, source, InsertAfter(stmt, (f"{name} = {torch}.compile({name}{mode})",)))


def _through_own_compile(planned: Planned, source: SourceFile, name: str, scopes: list[Scope], value: object) -> bool:
    """The script compiles `name` itself (nanoGPT: ``if compile: model = torch.compile(model)``, its
    `compile` a configurator global): the fix is its switch (``--compile=True``), never a second
    compile after the first; True where that is so (said, or refused in one line)."""
    own = [stmt for scope in scopes for stmt in source.assignments(scope, name)
           if any(call_name(c) == "compile" for c in calls_in(stmt))]
    if not own:
        return False
    stmt = own[-1]
    where = f"{source.name}:{source.span(stmt).start.line}"
    branch = next((a for a in source.ancestors(stmt) if isinstance(a, cst.If)), None)
    if branch is None:
        raise Refused(f"{where}: the script already compiles {name} ({source.text(stmt).strip()})")
    if value is not True:
        raise Refused(f"{where}: the script compiles {name} itself, under `if {source.text(branch.test)}:`: "
                      f"mode={value!r} goes into that call by hand")
    switch = switch_of(source, branch.test, "True")
    if switch is None:
        raise Refused(f"{where}: the script compiles {name} itself, under `if {source.text(branch.test)}:`: "
                      "turn that on rather than compile it twice")
    planned.said(switch, source, "torch.compile", "True")
    return True



def _params(fn: cst.FunctionDef) -> list[cst.Param]:
    p = fn.params
    return [*p.posonly_params, *p.params, *p.kwonly_params] + [x for x in (p.star_arg, p.star_kwarg) if isinstance(x, cst.Param)]


def _zero_grad(planned: Planned, value: object, sites: Sites, files: Files) -> None:
    paths = list(dict.fromkeys([*(s.file for s in sites.backward + sites.optimizers), *([sites.main] if sites.main else [])]))
    found = 0
    for path in paths:
        try:
            source = _file(files, path)
        except Refused as exc:
            planned.refused.append(str(exc))
            continue
        for call in source.nodes(cst.Call):
            kept = [a for a in call.args if a.keyword is not None and a.keyword.value == "set_to_none"]
            if call_name(call) == "zero_grad" and kept and source.text(kept[0].value) == "False":
                found += 1
                planned.add(Site(path, source.span(call).start.line), source, SetKeywords(call, (("set_to_none", "True"),)))
    if not found:
        raise Refused(f"{', '.join(os.path.basename(p) for p in paths) or _script(sites)}: no zero_grad(set_to_none=False) "
                      "call found: make the change by hand, as the snippet shows")


# The fixes advise measures but does not write: the reason, in one line.
REFUSED = {
    "batch_size_scale": "a new batch size wants its learning rate (and, for a smaller one, the loop's accumulation) "
                        "looked at: change batch_size by hand, as the snippet shows",
    "channels_last": "channels_last converts the model and every image batch: make both changes by hand, as the "
                     "snippet shows",
    "activation_checkpointing": "checkpointing wraps the model's blocks inside its forward: make it by hand, as the "
                                "snippet shows",
}


def _refused(key: str) -> Callable:
    def refuse(planned: Planned, value: object, sites: Sites, files: Files) -> None:
        raise Refused(f"{_script(sites)}: {REFUSED[key]}")
    return refuse


def _allocator(planned: Planned, value: object, sites: Sites, files: Files) -> None:
    """The CUDA allocator reads its settings from the environment, before the script's first CUDA call."""
    planned.told.append(f"{_script(sites)}: run it with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in its "
                        "environment (the allocator reads it before the first CUDA call, not from the code)")


def _unknown(planned: Planned, value: object, sites: Sites, files: Files) -> None:
    raise Refused(f"{_script(sites)}: advise has no code change for {planned.key}")


FIXES: dict[str, Callable[[Planned, Any, Sites, Files], None]] = {
    "dataloader": _dataloader,
    "optimizer": _optimizer,
    "float32_matmul_precision": _matmul_precision,
    "cudnn_benchmark": _cudnn_benchmark,
    "torch_threads": _threads,
    "autocast": _autocast,
    "compile": _compile,
    "zero_grad_set_to_none": _zero_grad,
    "expandable_segments": _allocator,
    **{key: _refused(key) for key in REFUSED},
}
