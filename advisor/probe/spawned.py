"""Ranks a script starts itself with ``torch.multiprocessing`` (``mp.spawn``, ``start_processes``,
Lightning's ``ddp_spawn``): each is probed as a rank of its own, in its own files.

torch starts every rank with ``_wrap(fn, i, args, error_file)`` as the process target, looked up
in ``torch.multiprocessing.spawn`` when the ranks start. The probed script's process replaces it
with :func:`probed_wrap`, which the spawned interpreter unpickles by name: there it runs
``fn(i, *args)`` under a probe whose files carry the suffix ``.rank{i}``, and ends at the same
measured step as every other rank, so no rank waits in a collective for one that was stopped.
The config comes through the environment the ranks inherit. No experiments run inside a spawned
rank; a forked rank (``start_method="fork"``) inherits the parent's probe and is left as torch
runs it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import advisor

from .bootstrap import probe

ENV = "ADVISE_SPAWN_CONFIG"
_TORCH_SPAWN = "torch.multiprocessing.spawn"
_original = None  # torch's _wrap, once install() replaced it (a forked rank inherits it)


def install(config_path: str) -> None:
    """In the probed script's process: ranks it spawns find the config and run under the probe."""
    module = sys.modules.get(_TORCH_SPAWN)
    if module is None or not hasattr(module, "_wrap"):
        return  # a torch without the hook point: its ranks run unprobed, as before
    os.environ[ENV] = str(config_path)
    global _original
    _original = module._wrap
    module._wrap = probed_wrap


def probed_wrap(fn, i: int, args, error_file) -> None:
    """torch's ``_wrap`` for rank `i`, under the probe (the process target of a spawned rank)."""
    wrap = _original or sys.modules[_TORCH_SPAWN]._wrap  # a spawned interpreter: torch's, unreplaced
    path = os.environ.get(ENV)
    if not path or advisor._clock is not None:  # no config, or forked from a probed process
        return wrap(fn, i, args, error_file)
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, ValueError):  # the run ended and took its config along: run as torch would
        return wrap(fn, i, args, error_file)
    config.update(rank_suffix=f".rank{i}", arms=False)
    sys.exit(probe(config, lambda: wrap(fn, i, args, error_file)))
