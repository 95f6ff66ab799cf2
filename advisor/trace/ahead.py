"""Read traces ahead in forked processes, while ``advise analyze`` imports the rules and pandas.

A :class:`ReadAhead` is the reading of one command: started once, at launch, on the traces the
command names (:meth:`ReadAhead.start`), then asked for each trace's frames
(:meth:`ReadAhead.frames`). The read (:func:`advisor.trace.read.read_raw`) and the imports then
overlap on two cores (:mod:`advisor.trace.forked`; the figures are in benchmarks/README.md); a
job's rank traces are read in lanes, one per core. The reader's own imports (msgspec, ISA-L)
happen before the fork, once; it needs no numpy (this process imports that with pandas).
Whatever goes wrong in a child, the trace is read in this process instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from . import forked

if TYPE_CHECKING:
    from pathlib import Path
    import ctypes
    from .frames import TraceFrames
    from .read import Shared

PREFETCH_MAX_BYTES = 64 << 20  # bigger files are read in-process: the hand-over would double their columns
READ_AHEAD = 8  # readers started at once at most (the others start as traces are collected) ...
# ... and no more than one per core and one ahead: a reader that has read holds its columns, and pins the
# pages this process has changed since it forked, until it is collected (the figures: benchmarks/README.md)
SPLIT_MIN = 16 << 20  # bytes of JSON: below this, asking for half of the rest is not worth a hand-over


def start_reading(paths: Iterable[str | os.PathLike]) -> ReadAhead:
    """A read-ahead of the traces `paths` name (files, folders of rank traces: :func:`trace_files`);
    none started for a missing path or a folder without traces (the command says so)."""
    try:
        files = trace_files(paths)
    except ValueError:
        files = []
    return ReadAhead().start(files)


class ReadAhead:
    """The traces one command reads: those being read in forked readers, those waiting for one.

    ``start(paths)`` once, then ``frames(path)`` for each (in any order; a path never started is
    read in this process). A reader nobody collects is killed at exit (:mod:`advisor.trace.forked`).
    """

    def __init__(self) -> None:
        self.pending: dict = {}  # absolute path -> (forked.Ahead, the ask pipe (None once asked), the hand-over pipe)
        self.waiting: list[str] = []  # traces to read ahead once a reader can be started
        self.lanes: list[int] = []  # per lane (one per core), the pipe that says its last reader's read has ended

    # --- the surface -------------------------------------------------------------------------

    def start(self, paths: Iterable[str | os.PathLike]) -> ReadAhead:
        """Read ahead every trace of `paths` (one per rank, say), one lane of readers per core: in a
        lane each reader waits for the one before it to end its read, so the cores stay busy while
        this process imports and builds the frames, without waiting for it to collect (HTA reads a
        job's ranks in a process pool; the figures: benchmarks/README.md)."""
        for path in paths:
            key = os.path.abspath(os.fspath(path))
            if key not in self.pending and key not in self.waiting:
                self.waiting.append(key)
        self._start_waiting()
        return self

    def frames(self, path: str | os.PathLike) -> TraceFrames:
        """The :class:`~advisor.trace.frames.TraceFrames` of `path`: from its read ahead when one was
        started, else read here. TraceError (one line) for a trace that cannot be read."""
        from .build import build, no_gc  # build: numpy and pandas (300 ms), after the read has started
        from .read import read_file  # read: 9 ms, after the read has started

        src = os.fspath(path)
        with no_gc():
            result = self.collect(src)
            return build(src, *(result if result is not None else read_file(src)))

    def ask(self, src: str | os.PathLike) -> None:
        """Ask the reader of `src` for half of the events it has left, where the file is big enough.

        Called a little before this process is free to decode them (:meth:`frames`): the reader
        answers between blocks and inflates the rest first, time that then overlaps this process's
        last imports. Once per read; a no-op when none is pending.
        """
        key = os.path.abspath(os.fspath(src))
        pending = self.pending.get(key)
        if pending is None or pending[1] is None:
            return
        ahead, fd, data = pending
        self.pending[key] = (ahead, None, data)
        try:
            if _json_size(os.fspath(src)) >= SPLIT_MIN:
                os.write(fd, b"1")
        except BrokenPipeError:  # the reader ended already (a bad file, say): its answer comes all the same
            pass
        finally:
            os.close(fd)

    # --- the readers -------------------------------------------------------------------------

    def read_one(self, path: str | os.PathLike, after: int | None = None) -> int | None:
        """Start reading `path` in a forked process, for :meth:`collect` to pick up; the read end of a
        pipe that says when the read is done (or the reader died), to start another after it.

        `after`: such a pipe of an earlier reader; this one waits for it (a lane of readers, each one
        starting when the one before it ends, without this process having to be there: see
        :meth:`start`). None (nothing started) where :func:`advisor.trace.forked.can_fork` says no
        (no fork, one core, other threads running: a test runner's) or for a file over
        ``PREFETCH_MAX_BYTES``.
        """
        src = os.fspath(path)
        key = os.path.abspath(src)  # collect finds it by this, however the path was spelled
        try:
            small = os.path.isfile(src) and os.path.getsize(src) <= PREFETCH_MAX_BYTES
        except OSError:
            small = False
        if not small or key in self.pending or not forked.can_fork():
            return None
        from . import read  # noqa: F401 - 9 ms: imported once, before the fork (see above), not at launch

        ask_r, ask_w = os.pipe()  # this process asks for the second half of what is left to read ...
        data_r, data_w = forked.pipe()  # ... and the reader hands it over (once, maybe empty)
        done_r, done_w = os.pipe()  # the reader's read has ended (or the reader has)
        ahead = forked.start(_read_ahead, src, ask_r, data_w, done_w, after)
        for fd in (ask_r, data_w, done_w):
            os.close(fd)
        if ahead is None:
            for fd in (ask_w, data_r, done_r):
                os.close(fd)
            return None
        self.pending[key] = (ahead, ask_w, data_r)
        return done_r

    def _start_waiting(self) -> None:
        while self.waiting and len(self.pending) < min(READ_AHEAD, forked.cores() + 1):
            after = self.lanes.pop(0) if len(self.lanes) >= forked.cores() else None
            done = self.read_one(self.waiting.pop(0), after)  # (declined: too big, no fork; then it is read in-process)
            if done is None:
                if after is not None:
                    self.lanes.insert(0, after)
                continue
            if after is not None:
                os.close(after)  # the new reader has its copy
            self.lanes.append(done)

    def collect(self, src: str | os.PathLike) -> tuple[dict, dict, int] | None:
        """The read-ahead's columns for `src` (:func:`advisor.trace.read.read_file`'s answer): None when
        none is pending or the child failed.

        This process comes here idle (its imports ended before the read): where the file is big
        enough it asks the reader for the second half of the events left and decodes them itself,
        while the reader decodes the first; the halves are joined (the same columns as one read).
        A TraceError the child met is raised here, as reading in-process would have.
        """
        from . import read  # 9 ms: imported once, before the fork, not at launch

        key = os.path.abspath(os.fspath(src))
        if key in self.waiting:  # not started yet: read in this process, which has nothing else to do
            self.waiting.remove(key)
        self.ask(src)
        pending = self.pending.pop(key, None)
        if pending is None:
            return None
        ahead, _, data = pending
        shared = None
        try:
            with os.fdopen(data, "rb") as fh:
                size = int.from_bytes(fh.read(8) or b"\0", "little")
                if size:
                    shared = read.read_shared(fh.read(size))
        except Exception:  # noqa: BLE001 - a void half (the reader then reads whole, or this read is redone)
            shared = None
        try:
            doc, columns, n = ahead.result()
        except forked.Failed:
            return None
        finally:
            self._start_waiting()  # its reader has ended: the next trace's read starts while this one is built
        if isinstance(doc, read.Shared):
            return None if shared is None else read.join(doc, shared, columns, n)
        return doc, read.arrays(columns), n


class _Share:
    """The reader's side of the hand-over (see :func:`advisor.trace.read.read_raw`)."""

    def __init__(self, ask: int, data: int) -> None:
        os.set_blocking(ask, False)
        self.ask, self.data, self.given = ask, data, False

    def asked(self) -> bool:
        try:
            return bool(os.read(self.ask, 1))
        except BlockingIOError:
            return False

    def give(self, data: bytes | memoryview) -> None:
        if self.given:
            return
        self.given = True
        with os.fdopen(self.data, "wb") as out:
            out.write(len(data).to_bytes(8, "little"))
            out.write(data)


def _read_ahead(src: str, ask: int, data: int, done: int, after: int | None) -> tuple[dict | Shared, dict, int]:
    from .read import read_raw  # in the forked reader

    if after is not None:
        os.read(after, 1)  # the reader before this one in its lane has ended its read (or died: EOF)
        os.close(after)
    libc = _keep_freed_memory()
    try:
        return read_raw(src, _Share(ask, data))
    finally:
        os.close(done)  # the next reader in this lane starts (EOF)
        if libc is not None:
            libc.malloc_trim(0)  # what the read freed goes back before the result is handed over (peak RSS)


def _keep_freed_memory() -> ctypes.CDLL | None:
    """glibc in the reader: serve blocks from the heap and keep what is freed until the read ends
    (each block's buffers were otherwise mapped and unmapped anew: page faults, benchmarks/README.md).
    The C library (to trim at the end), or None where it has no `mallopt`."""
    c = forked.libc()
    if c is None:
        return None
    try:
        c.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: glibc's highest
        c.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
        c.malloc_trim  # noqa: B018 - present where mallopt is (glibc)
        return c
    except AttributeError:  # not glibc
        return None


def trace_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The trace files named; a folder stands for its ``*.json`` / ``*.json.gz`` files (those named
    ``*trace*`` when there are any, as in a run dir beside report.json and probe.json).
    ValueError (one line) for a missing path or a folder without traces."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))
            named = [p for p in found if "trace" in p.name]  # a run dir: its traces, not report/probe .json
            found = named or found
            if not found:
                raise ValueError(f"{path}: no .json or .json.gz trace in this folder")
            files += found
        elif not path.exists():
            raise ValueError(f"{path}: no such file")
        else:
            files.append(path)
    return files


def _json_size(src: str) -> int:
    """The JSON's size: a plain file's, or a gzip file's (its last member's length field)."""
    try:
        with open(src, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                return os.path.getsize(src)
            fh.seek(-4, os.SEEK_END)
            return int.from_bytes(fh.read(4), "little")
    except OSError:
        return 0
