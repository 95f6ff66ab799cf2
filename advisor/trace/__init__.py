"""Kineto traces: read (streamed, or ahead in forked processes) and turned into pandas frames.

The surface, two calls:

- ``reads = start_reading(paths)``: start reading the traces these paths name (once, when the
  command starts: :mod:`advisor.commands.launch`, else the ``analyze`` command itself), each in a forked
  reader while this process imports the rest; :func:`trace_files` says which files a folder
  stands for. ``reads`` is a :class:`ReadAhead`, the session's whole state.
- ``reader.frames(path)``: the :class:`TraceFrames` of one trace (from its read ahead, or read
  here); :func:`load_trace` is the same read without a read-ahead.

Inside: :mod:`.read` (the file streamed in blocks, decoded by msgspec into columns, no numpy),
:mod:`.ahead` (the read-ahead session), :mod:`.forked` (work done in a forked child), :mod:`.build`
(frames from columns), :mod:`.device_parts` (a step's data wait and optimizer on the device's
timeline), :mod:`.nesting` (operator depth and self time), :mod:`.flops` (FLOP
estimates for GEMMs and convolutions), :mod:`.frames` (the frames' layout, name helpers).

Importing this package imports no numpy or pandas: the names below load their module on use,
so the read-ahead can fork before the heavy imports.
"""

from __future__ import annotations

from importlib import import_module

from typing import TYPE_CHECKING

__all__ = ["ReadAhead", "TraceError", "TraceFrames", "interval_union_us", "load_trace", "name_mask", "per_name",
           "start_reading", "trace_files"]

_HOME = {"ReadAhead": "ahead", "start_reading": "ahead", "trace_files": "ahead", "TraceError": "read", "TraceFrames": "frames",
         "name_mask": "frames", "per_name": "frames", "load_trace": "build"}

if TYPE_CHECKING:
    from .intervals import union_length as interval_union_us
    from .ahead import ReadAhead, start_reading, trace_files
    from .build import load_trace
    from .frames import TraceFrames, name_mask, per_name
    from .read import TraceError


def __getattr__(name: str) -> object:
    if name == "interval_union_us":  # union of intervals in us (a public name kept)
        return import_module("advisor.trace.intervals").union_length
    if name in _HOME:
        return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
