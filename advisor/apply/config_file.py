"""A value the script reads from a YAML config file: the key changed in that file, comments and
layout kept (ruamel.yaml's round trip), shown in the patch and written only with ``--write``.

Read from the syntax tree: ``cfg["data"]["workers"]`` (or ``cfg.data.workers``) where ``cfg`` is
bound once to ``yaml.safe_load(...)``/``yaml.load(...)``/``OmegaConf.load(...)`` of a file named by
a string literal (``open("config.yaml")``, or ``with open("config.yaml") as f`` and the load of
``f``). A file that is missing, read-only, or lacks the key is refused in one line, never guessed.
"""

from __future__ import annotations

import ast
import io
import os
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from .rewrite import Refused, SourceFile, call_name, string_index

LOADS = {"safe_load", "load", "full_load"}  # yaml's, and OmegaConf.load


@dataclass(frozen=True)
class ConfigChange:
    """A key of a config file set to a value: the file's text before and after."""

    path: Path
    keys: tuple[str, ...]
    code: str  # the value, a Python literal
    before: bytes
    after: bytes

    @property
    def said(self) -> str:
        return f"{'.'.join(self.keys)} in {self.path.name}"


def key_of(source: SourceFile, value: cst.BaseExpression) -> tuple[cst.Name, tuple[str, ...]] | None:
    """``cfg["data"]["workers"]`` or ``cfg.data.workers``: (cfg, ("data", "workers")); None: neither."""
    keys: list[str] = []
    while True:
        key = string_index(value)
        if key is not None and isinstance(value, cst.Subscript):
            keys.insert(0, key)
            value = value.value
        elif isinstance(value, cst.Attribute):
            keys.insert(0, value.attr.value)
            value = value.value
        else:
            break
    return (value, tuple(keys)) if isinstance(value, cst.Name) and keys else None


def loaded_from(source: SourceFile, name: cst.Name) -> Path | None:
    """The file `name` was loaded from, where it is bound once to a YAML load of a literal path."""
    call = source.bound_value(name)
    if not (isinstance(call, cst.Call) and call_name(call) in LOADS and call.args):
        return None
    if "yaml" not in source.text(call.func).lower() and "omegaconf" not in source.text(call.func).lower():
        return None
    arg = call.args[0].value
    if isinstance(arg, cst.Call) and call_name(arg) == "open" and arg.args:
        arg = arg.args[0].value
    elif isinstance(arg, cst.Name):
        arg = _opened_as(source, arg) or arg
    if not isinstance(arg, cst.SimpleString):
        return None
    text = str(arg.evaluated_value)
    where = [Path(text)] if os.path.isabs(text) else [source.path.parent / text, Path.cwd() / text]
    # its real path, as the user's Python files are kept (apply.fixes.Files): a link is written through,
    # and a file it leads out of the checkout is refused (apply.patch._within), never replaced by a copy
    return Path(os.path.realpath(next((p for p in where if p.exists()), where[0])))


def _opened_as(source: SourceFile, name: cst.Name) -> cst.BaseExpression | None:
    """The path of ``with open(PATH) as name``, if `name` is bound that way."""
    for node in source.nodes(cst.WithItem):
        if isinstance(node.asname, cst.AsName) and isinstance(node.asname.name, cst.Name) \
                and node.asname.name.value == name.value and isinstance(node.item, cst.Call) \
                and call_name(node.item) == "open" and node.item.args:
            return node.item.args[0].value
    return None


def change(path: Path, keys: tuple[str, ...], code: str, text: bytes | None = None) -> ConfigChange:
    """The file at `path` (or its `text`, with earlier changes made) with `keys` set to the literal
    `code`; Refused: missing, read-only, no such key."""
    from ruamel.yaml import YAML  # only advise apply on a script with a YAML config reads one
    from ruamel.yaml.error import YAMLError

    name = path.name
    try:
        before = path.read_bytes() if text is None else text
    except OSError as exc:
        raise Refused(f"{name}: cannot read it ({exc.strerror or exc}): set {'.'.join(keys)} in it by hand") from None
    if not os.access(path, os.W_OK):
        raise Refused(f"{name} is read-only: set {'.'.join(keys)}: {_yaml_word(code)} in it by hand")
    yaml = YAML()
    yaml.preserve_quotes = True
    try:
        data = yaml.load(before)
    except YAMLError as exc:
        raise Refused(f"{name}: not YAML ruamel.yaml reads ({str(exc).splitlines()[0]})") from None
    holder = data
    for key in keys[:-1]:
        holder = holder.get(key) if isinstance(holder, dict) else None
    if not isinstance(holder, dict) or keys[-1] not in holder:
        raise Refused(f"{name} has no {'.'.join(keys)} key (the script reads it): set it there by hand")
    holder[keys[-1]] = ast.literal_eval(code)
    out = io.BytesIO()
    yaml.dump(data, out)
    return ConfigChange(path, keys, code, before, out.getvalue())


def together(changes: list[ConfigChange]) -> dict[Path, tuple[bytes, bytes]]:
    """Each file's text before and after every change to it, made one after another."""
    out: dict[Path, tuple[bytes, bytes]] = {}
    for item in changes:
        before, now = out.get(item.path, (item.before, item.before))
        out[item.path] = (before, change(item.path, item.keys, item.code, now).after)
    return out


def _yaml_word(code: str) -> str:
    value = ast.literal_eval(code)
    return str(value).lower() if isinstance(value, bool) else str(value)
