"""Ranks a script starts itself: each is probed as a rank of its own, in its own files.

Two ways frameworks start them, both caught in the probed process:

- ``torch.multiprocessing`` (``mp.spawn``, ``start_processes``, Lightning's ``ddp_spawn``);
- the script re-run as a new command for each other rank, the probed process being rank 0
  (Lightning's default ``ddp``: ``subprocess.Popen([sys.executable, script, *argv])`` with
  ``LOCAL_RANK`` set). Exactly that command, this interpreter on this script (or ``-m`` this
  module) with a ``LOCAL_RANK`` above 0, is rewritten into the probe's entry line with the
  rank's own config (``.probe-config.rankN.json``); every other command runs as written.

For ``torch.multiprocessing``:
torch starts every rank with ``_wrap(fn, i, args, error_file)`` as the process target, looked up
in ``torch.multiprocessing.spawn`` when the ranks start. The probed script's process replaces it
with :func:`probed_wrap`, which the spawned interpreter unpickles by name: there it runs
``fn(i, *args)`` under a probe whose files carry the suffix ``.rank{i}``, and ends at the same
measured step as every other rank, so no rank waits in a collective for one that was stopped.
The config comes through the environment the ranks inherit. Each rank runs the parent's arms
plans as a launched rank does (the runner writes every rank the same plan); a forked rank
(``start_method="fork"``) inherits the parent's probe and is left as torch runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec

import advisor

from .bootstrap import probe
from .entry import BOOTSTRAP
from advisor.run_dir.protocol import read_config, write_config

ENV = "ADVISE_SPAWN_CONFIG"
_TORCH_SPAWN = "torch.multiprocessing.spawn"
_original = None  # torch's _wrap, once install() replaced it (a forked rank inherits it)


def install(config_path: str) -> None:
    """In the probed script's process: ranks it spawns find the config and run under the probe."""
    module: Any = sys.modules.get(_TORCH_SPAWN)  # torch's spawn module, where imported: its private _wrap is replaced
    if module is None or not hasattr(module, "_wrap"):
        return  # a torch without the hook point: its ranks run unprobed, as before
    os.environ[ENV] = str(config_path)
    global _original
    _original = module._wrap
    module._wrap = probed_wrap
    subprocess.Popen = _RankPopen  # type: ignore[misc]  # patched in: the ranks the script starts run under the probe


class _RankPopen(subprocess.Popen):
    """Popen that starts a re-run of the probed script, for a rank above 0, under the probe."""

    def __init__(self, args, *rest, **kwargs) -> None:
        rank = _reexec_rank(args, kwargs.get("env"))
        if rank is not None:
            args = _probed_command(list(args), rank) or args
        super().__init__(args, *rest, **kwargs)


def _reexec_rank(args, env) -> int | None:
    """LOCAL_RANK of a command that re-runs the probed script with this interpreter, else None."""
    if not isinstance(args, (list, tuple)) or len(args) < 2 or not os.environ.get(ENV):
        return None
    value = str((env if env is not None else os.environ).get("LOCAL_RANK") or "")
    return int(value) if value.isdigit() and int(value) > 0 and str(args[0]) == sys.executable else None


def _probed_command(args: list, rank: int) -> list | None:
    """The probe's entry line for this rank, or None when `args` is not a re-run of the script."""
    path = Path(os.environ[ENV])
    try:
        config = read_config(path)
    except (OSError, ValueError):
        return None
    if config.module:
        if args[1:3] != ["-m", config.script]:
            return None
        rest = args[3:]
    else:
        if os.path.abspath(str(args[1])) != os.path.abspath(config.script):
            return None
        rest = args[2:]
    rank_config = path.with_name(f".probe-config.rank{rank}.json")
    write_config(rank_config, msgspec.structs.replace(config, rank_suffix=f".rank{rank}", args=[str(a) for a in rest]))
    return [sys.executable, "-c", BOOTSTRAP, str(rank_config)]


def probed_wrap(fn, i: int, args, error_file) -> None:
    """torch's ``_wrap`` for rank `i`, under the probe (the process target of a spawned rank)."""
    wrap = _original or sys.modules[_TORCH_SPAWN]._wrap  # a spawned interpreter: torch's, unreplaced
    path = os.environ.get(ENV)
    if not path or advisor._clock is not None:  # no config, or forked from a probed process
        return wrap(fn, i, args, error_file)
    try:
        config = read_config(path)
    except (OSError, ValueError):  # the run ended and took its config along: run as torch would
        return wrap(fn, i, args, error_file)
    sys.exit(probe(msgspec.structs.replace(config, rank_suffix=f".rank{i}"), lambda: _run_noting_interrupt(wrap, fn, i, args, error_file)))


def _run_noting_interrupt(wrap, fn, i: int, args, error_file) -> None:
    """torch's `_wrap` swallows a Ctrl-C (the parent's SIGINT) and returns: raise it again, so the
    rank's account says `interrupted`, not `finished`."""
    seen: list[KeyboardInterrupt] = []

    def noted(*a):
        try:
            return fn(*a)
        except KeyboardInterrupt as exc:
            seen.append(exc)
            raise

    wrap(noted, i, args, error_file)
    if seen:
        raise seen[0]
