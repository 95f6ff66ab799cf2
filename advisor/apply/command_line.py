"""A fix said as the script's own command line: the flag (or environment variable) that sets it,
and the run's command with it set.

Where the value a fix changes comes from an option the script already takes (argparse, click,
nanoGPT's ``--key=value`` configurator) the advice is to run the script with that option, not to
edit the code: the option is what its author meant to be turned. The profiled run's own command is
the starting point: an option it already passes gets its value replaced (its last occurrence: the
last wins, for argparse and the configurator alike), one it does not pass is added at the end.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    """A value said as the script's own command-line option."""

    options: tuple[str, ...]  # the option strings it takes, the one to write first (--workers, -j)
    value: str | None  # the value's word; None: an option that takes none (argparse's store_true, click's is_flag)
    equals: bool = False  # written --key=value (nanoGPT's configurator reads only that form; Hydra's key=value)

    @property
    def words(self) -> list[str]:
        head = self.options[0]
        if self.value is None:
            return [head]
        return [f"{head}={self.value}"] if self.equals else [head, self.value]

    @property
    def said(self) -> str:
        return shlex.join(self.words)


@dataclass(frozen=True)
class EnvVar:
    """A value read from an environment variable: said as the assignment to run the script with."""

    name: str
    value: str

    @property
    def words(self) -> list[str]:
        return [f"{self.name}={self.value}"]

    @property
    def said(self) -> str:
        return shlex.join(self.words)


Said = Flag | EnvVar


@dataclass
class CommandLine:
    """The profiled run's command with each flag set, and what is worth saying about it."""

    env: dict[str, str]  # variables to run it with
    head: list[str]  # python train.py
    args: list[str]  # the script's arguments, the flags set
    notes: dict[Flag, str]  # "the --workers flag appears 2 times in the run's command (4, 0): the last wins, ..."
    already: set[Flag]  # flags the run already passes at the fix's value

    @property
    def said(self) -> str:
        return shlex.join([*(f"{k}={v}" for k, v in self.env.items()), *self.head, *self.args])


def _occurrences(argv: list[str], flag: Flag) -> list[tuple[int, str | None]]:
    """Where `argv` passes `flag`: (index, its value word) for each, the value None for a bare option."""
    found: list[tuple[int, str | None]] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            break
        name, eq, value = word.partition("=")
        if name in flag.options and (word.startswith("-") or eq):  # an option, or Hydra's key=value override
            if eq:
                found.append((i, value))
            elif flag.value is not None and i + 1 < len(argv):
                found.append((i, argv[i + 1]))
                i += 1
            else:
                found.append((i, None))
        i += 1
    return found


def run_with(script: str, argv: list[str], said: list[Said]) -> CommandLine:
    """``python SCRIPT ARGV`` (``python -m MODULE ARGV`` for `script` ``-m MODULE``) with each of
    `said` set: environment variables before it, each flag's last occurrence replaced, else added."""
    args, env = list(argv), {}
    notes: dict[Flag, str] = {}
    already: set[Flag] = set()
    for item in said:
        if isinstance(item, EnvVar):
            env[item.name] = item.value
            continue
        seen = _occurrences(args, item)
        if len(seen) > 1:
            values = ", ".join("on" if v is None else v for _, v in seen)
            notes[item] = (f"the {item.options[0]} flag appears {len(seen)} times in the run's command ({values}): "
                           f"the last wins, and it is the one set")
        if not seen:
            args += item.words
            continue
        at, value = seen[-1]
        if value == item.value:
            already.add(item)
            continue
        width = 2 if item.value is not None and "=" not in args[at] else 1
        args[at:at + width] = item.words
    head = ["python", "-m", script.removeprefix("-m ").strip()] if script.startswith("-m ") else ["python", script]
    return CommandLine(env, head, args, notes, already)
