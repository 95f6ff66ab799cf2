"""How many optimizer steps the script runs as it was launched, where its own arguments say so.

A compile fix pays its one-off compilation back after some steps
(:func:`advisor.experiments.judge.payoff_steps`); whether the user's run gets there is the
script's own step count. Read from the script's syntax tree and the arguments it was launched with,
never guessed: a flag or global named exactly for a step count (``--max_iters 5000``, argparse's
literal default, nanoGPT's ``max_iters = 600000`` with configurator.py's config files and
``--max_iters=5000`` over it, HF's ``--max_steps``), else the epochs it is named for times the
batches of the one DataLoader that fed the steps (over the batches each step drew). Anything less
plain (a default that is not a literal int, two flags of such names, an abbreviated flag, several
loaders, ranks that split the dataset) is unknown, and nothing is said.
"""

from __future__ import annotations

import ast
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

import libcst as cst

from ..run_dir.seen import LoaderSeen, Observed, Sources
from .rewrite import Refused, SourceFile, call_name
from .switches import _configurator, _dest

# Exact names (argparse dests, module globals, HF's TrainingArguments fields), never substrings.
STEP_NAMES = frozenset({"max_steps", "max_iters", "num_steps", "total_steps", "train_steps", "iterations", "iters",
                        "steps", "max_iterations", "num_iters", "num_iterations", "num_train_steps"})
EPOCH_NAMES = frozenset({"epochs", "num_epochs", "n_epochs", "max_epochs", "num_train_epochs"})
HF_FIELDS = frozenset({"max_steps", "num_train_epochs"})  # what HfArgumentParser reads from the command line


@dataclass(frozen=True)
class ScriptSteps:
    """The optimizer steps the script would run as launched, and how that is known, in words."""

    steps: int
    said: str  # "--max_iters 5000" / "max_iters = 600000 in train.py" / "--epochs 3 × 1,563 batches an epoch"


def read(script: str | os.PathLike | None, argv: Sequence[str], observed: Observed | None = None,
         sources: Sources | None = None, samples_per_step: float | None = None,
         world_size: int | None = None) -> ScriptSteps | None:
    """The step count of `script` launched with `argv`, or None where it cannot be known. The
    epoch path needs the run's `observed` loaders (the one that fed the steps: `sources`) and the
    samples each measured step drew; a job of several ranks (a sampler splits the dataset) has none."""
    source = _parse(script)
    if source is None:
        return None
    steps = count(source, argv, STEP_NAMES)
    if steps is not None and steps[0] > 0:
        return ScriptSteps(*steps)
    if steps is None and _declares(source, STEP_NAMES):  # a step count the script has, unknown: not its epochs
        return None
    epochs = count(source, argv, EPOCH_NAMES)
    loader = fed_loader(observed, sources) if observed is not None else None
    if epochs is None or epochs[0] <= 0 or loader is None or (world_size or 1) > 1:
        return None
    per_epoch = batches_per_epoch(loader)
    per_step = batches_per_step(loader, samples_per_step)
    if per_epoch is None or per_step is None:
        return None
    said = f"{epochs[1]} × {per_epoch:,} batches an epoch" + (f", {per_step} a step" if per_step > 1 else "")
    return ScriptSteps(epochs[0] * max(1, per_epoch // per_step), said)


def count(source: SourceFile, argv: Sequence[str], names: frozenset[str]) -> tuple[int, str] | None:
    """The int the script sets under one of `names` as launched, and where it is said: an argparse
    flag, HF's command line, else a module-level global (with configurator.py's overrides). 0: left
    unset (a flag's default None, a field HF's command line does not give; -1 says the same), so a
    step count falls back to the epochs."""
    flags = [c for c in source.nodes(cst.Call) if call_name(c) == "add_argument" and _dest(source, c) in names]
    if len(flags) > 1:
        return None
    if flags:
        return _flag(source, flags[0], argv)
    if any(call_name(c) == "HfArgumentParser" for c in source.nodes(cst.Call)):
        fields = [f"--{name}" for name in sorted(names & HF_FIELDS)]
        if not any(_names(token, fields) for token in argv):
            return (0, "") if fields else None
        given = [found for field in fields if (found := _given(argv, (field,))) is not None]
        return given[0] if len(given) == 1 else None
    return _global(source, argv, names)


def fed_loader(observed: Observed, sources: Sources | None) -> LoaderSeen | None:
    """The one DataLoader that fed the steps: the run's only one, or the only one built where
    sources.json says the steps' loader was; None where that is not clear."""
    loaders = list(observed.dataloaders)
    if len(loaders) > 1 and sources is not None:
        fed = {(r.file, r.line) for r in sources.rows("dataloader-built")}
        loaders = [dl for dl in loaders if isinstance(dl.built_at, dict)
                   and (dl.built_at.get("file"), dl.built_at.get("line")) in fed]
    return loaders[0] if len(loaders) == 1 else None


def batches_per_epoch(loader: LoaderSeen) -> int | None:
    """A map-style loader's batches in one pass over its dataset (its last batch partial)."""
    if loader.iterable or not loader.batched or not loader.dataset_len or not loader.batch_size:
        return None
    return math.ceil(loader.dataset_len / loader.batch_size)


def batches_per_step(loader: LoaderSeen, samples_per_step: float | None) -> int | None:
    """The batches each measured step drew (gradient accumulation draws several): a whole number of
    the loader's batches, else None."""
    if not samples_per_step or not loader.batch_size or not math.isfinite(samples_per_step):
        return None
    k = samples_per_step / loader.batch_size
    return round(k) if k >= 1 and abs(k - round(k)) < 1e-6 else None


def _declares(source: SourceFile, names: frozenset[str]) -> bool:
    """Whether the script has a flag or a module-level global of one of `names`."""
    return any(call_name(c) == "add_argument" and _dest(source, c) in names for c in source.nodes(cst.Call)) or any(
        source.assignments(source.module, name) for name in names)


def _parse(script: str | os.PathLike | None) -> SourceFile | None:
    if not script or not os.path.isfile(script):
        return None
    try:
        return SourceFile(Path(script), Path(script).read_bytes())
    except (OSError, Refused):
        return None


def _int(text: str) -> int | None:
    """A literal int (``5000``, ``5_000``, or a float that is whole, as argparse's type=float gives
    ``3.0``); None for anything else, bools included."""
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if isinstance(value, int) or (math.isfinite(value) and value.is_integer()) else None


def _flag(source: SourceFile, call: cst.Call, argv: Sequence[str]) -> tuple[int, str] | None:
    """An add_argument(...) flag's value: the command line's, else its literal default."""
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    if any(a.star for a in call.args) or "nargs" in keywords or (
            "action" in keywords and source.text(keywords["action"]).strip("'\"") != "store"):
        return None
    options = [str(a.value.evaluated_value) for a in call.args
               if a.keyword is None and isinstance(a.value, cst.SimpleString)]
    if not options or not all(o.startswith("-") for o in options):
        return None  # a positional: where it sits among the arguments is argparse's to say
    if any(_abbreviates(token, options) for token in argv):
        return None
    if (given := _given(argv, options)) is not None or any(_names(token, options) for token in argv):
        return given
    default = keywords.get("default")
    if default is None or source.text(default) == "None":
        return (0, "")
    value = _int(source.text(default))
    return (value, f"{options[-1]} {value}, its default in {source.name}") if value is not None else None


def _names(token: str, options: Sequence[str]) -> bool:
    return token in options or token.split("=", 1)[0] in options


def _abbreviates(token: str, options: Sequence[str]) -> bool:
    """argparse takes an unambiguous prefix of a long flag (``--max_it 10``): such a token is a
    value this reading would miss."""
    head = token.split("=", 1)[0]
    return head.startswith("--") and len(head) > 2 and head not in options and any(
        o.startswith(head) for o in options)


def _given(argv: Sequence[str], options: Sequence[str]) -> tuple[int, str] | None:
    """The last value `argv` gives one of `options` (``--flag 5`` or ``--flag=5``); None where it gives
    none, or one that is not an int."""
    found: tuple[str, str] | None = None
    for i, token in enumerate(argv):
        if token == "--":
            break
        if token in options and i + 1 < len(argv):
            found = (token, argv[i + 1])
        elif "=" in token and token.split("=", 1)[0] in options:
            found = (token.split("=", 1)[0], token.split("=", 1)[1])
        elif token in options:
            return None
    if found is None:
        return None
    value = _int(found[1])
    return (value, f"{found[0]} {found[1]}") if value is not None else None


def _global(source: SourceFile, argv: Sequence[str], names: frozenset[str]) -> tuple[int, str] | None:
    """A module-level global of one of `names`, bound once to a literal int; where the script exec()s
    nanoGPT's configurator.py, the config files and ``--name=value`` of its command line, in order, over
    it (``--name=value`` alone where the script sets its globals by name itself). A script that reads
    its command line some other way, launched with arguments, may set it: unknown."""
    bound = {name: stmts for name in names if (stmts := source.assignments(source.module, name))}
    if len(bound) != 1:
        return None
    (name, stmts), = bound.items()
    small = stmts[0].body[0] if len(stmts) == 1 and isinstance(stmts[0], cst.SimpleStatementLine) else None
    if not isinstance(small, cst.Assign) or len(small.targets) != 1 or (value := _int(source.text(small.value))) is None:
        return None
    found = (value, f"{name} = {source.text(small.value)} in {source.name}")
    exec_file, in_place = _configurator(source) is not None, _sets_globals(source)
    if not (exec_file or in_place):  # the global stands, unless the command line may reach it some other way
        reads_argv = any(n.value == "argv" for n in source.nodes(cst.Name))
        return None if argv and (reads_argv or any(t.split("=", 1)[0] == f"--{name}" for t in argv)) else found
    for token in argv:  # configurator.py: a bare argument is a config file exec()d, --key=value a literal
        if "=" not in token:
            if not exec_file:
                return None
            set_there = _config_file(Path(token), name)
            if set_there is False:
                return None
            found = set_there if set_there is not None else found
        elif token.startswith(f"--{name}="):
            value = _int(token.split("=", 1)[1])
            if value is None:
                return None
            found = (value, token)
    return found


def _sets_globals(source: SourceFile) -> bool:
    """Whether the script sets its globals by name (``globals()[key] = ...``): configurator.py's
    ``--key=value`` written into the script itself."""
    return any(isinstance(t.target, cst.Subscript) and isinstance(t.target.value, cst.Call)
               and call_name(t.target.value) == "globals" for a in source.nodes(cst.Assign) for t in a.targets)


def _config_file(path: Path, name: str) -> tuple[int, str] | None | Literal[False]:
    """What a config file configurator.py exec()s sets `name` to: (value, words), None where it does
    not set it, False where that cannot be known (no such file, a value not a literal int)."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return False
    binds = [node for node in ast.walk(tree) if any(isinstance(t, ast.Name) and t.id == name for t in (
        node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign))
        else []))]
    if not binds:
        return None
    only = binds[0]
    value = _int(ast.unparse(only.value)) if len(binds) == 1 and isinstance(only, ast.Assign) and len(only.targets) == 1 else None
    return (value, f"{name} = {value} in {path}") if value is not None else False
