"""Read a Kineto trace's events in bounded memory: streamed in blocks, decoded by msgspec into columns.

A trace is one JSON object whose ``traceEvents`` list holds nearly all of its bytes. Loading
the whole document first (``json.loads``) costs about six times the file in memory, mostly in
one dict per event. Here the file (plain or gzip) is read in blocks; the events list is cut
between events (at a ``},`` that decodes as a whole list of events: a cut inside a string or a
nested object cannot), each piece is decoded by msgspec straight into small typed structs that
keep only the fields :mod:`advisor.trace.build` reads, and those are turned into columns at once,
names and shapes as codes into one table each (a trace repeats a few hundred names and shapes
millions of times). So the memory held is the columns plus one block, not the document.

What does not stream (NaN or Infinity literals, invalid UTF-8, an event that is not an object,
no ``traceEvents`` key found near the top) is decoded whole by the standard library, as
tolerant as before, and goes through the same columns. :func:`read_file` returns the
document's other keys, one :class:`Columns` per bucket, and the events' count.

:mod:`advisor.trace.ahead` runs :func:`read_raw` ahead in a forked process, so that
``advise analyze`` reads the trace on a second core while the interpreter imports the rest.
"""

from __future__ import annotations

import gzip
import json  # the tolerant path's; already imported at the CLI's start, before any trace is read
import math
import os
import re
import zlib
from array import array
from types import ModuleType
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Protocol

import msgspec
from msgspec import field

if TYPE_CHECKING:
    import numpy as np  # the reader itself runs without it

_inflate: ModuleType
try:  # Intel ISA-L's inflate: twice zlib's speed on a trace (benchmarks/README.md), same checks
    from isal import isal_zlib as _inflate
except ImportError:  # a platform without its wheel
    _inflate = zlib

_INFLATE_ERRORS = (zlib.error, getattr(_inflate, "error", zlib.error))

BLOCK = 1 << 20  # bytes read and decoded at a time: small enough to stay in cache (larger blocks: slower, benchmarks/README.md)
_HEAD_LIMIT = 64 << 20  # "traceEvents" not within this many bytes: decode the whole file instead
_NAN = float("nan")



class Share(Protocol):
    """The forked reader's side of a hand-over (:mod:`advisor.trace.ahead`): see :func:`read_raw`."""

    def asked(self) -> bool: ...

    def give(self, data: bytes | memoryview) -> None: ...


class TraceError(ValueError):
    """The file is missing, unreadable, or not a Kineto Chrome trace."""


class _Args(msgspec.Struct, gc=False):
    """The ``args`` keys the frames read; shapes and lists stay raw JSON until interned."""

    input_dims: msgspec.Raw = field(default_factory=msgspec.Raw, name="Input Dims")
    input_type: msgspec.Raw = field(default_factory=msgspec.Raw, name="Input type")
    concrete: msgspec.Raw = field(default_factory=msgspec.Raw, name="Concrete Inputs")
    external_id: object = field(default=None, name="External id")
    flops: object = None
    correlation: object = None
    device: object = None
    stream: object = None
    grid: msgspec.Raw = field(default_factory=msgspec.Raw)
    block: msgspec.Raw = field(default_factory=msgspec.Raw)
    registers: object = field(default=None, name="registers per thread")
    kind: object = None
    bytes: object = None
    mem_bytes: object = field(default=None, name="Bytes")
    total_allocated: object = field(default=None, name="Total Allocated")
    total_reserved: object = field(default=None, name="Total Reserved")
    device_type: object = field(default=-1, name="Device Type")
    device_id: object = field(default=-1, name="Device Id")


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: object = "X"
    cat: object = None
    name: object = None
    ts: object = msgspec.UNSET
    dur: object = msgspec.UNSET
    pid: object = None
    tid: object = None
    args: object = None  # decoded as _Args below when it is an object


class _EventTyped(_Event):
    args: _Args | None = None


_EVENTS = msgspec.json.Decoder(list[_EventTyped])
_ANY = msgspec.json.Decoder()

# Category -> bucket.  Unknown categories (flows, Trace, cuda_sync, ...) are dropped.
CAT_BUCKET = {
    "cpu_op": "ops", "Operator": "ops",
    "user_annotation": "ann", "gpu_user_annotation": "ann",
    "kernel": "kernels", "Kernel": "kernels",
    "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
    "gpu_memset": "memset", "Memset": "memset",
    "cuda_runtime": "runtime", "Runtime": "runtime", "cuda_driver": "runtime",
    "python_function": "python",
    "cpu_instant_event": "instant", None: "instant",  # old traces: [memory] has no cat
}
BUCKETS = ("ops", "ann", "kernels", "memcpy", "memset", "runtime", "python", "instant")


# --------------------------------------------------------------------------
# Columns
#
# The reader builds its columns without numpy: it runs in a process forked before numpy is
# imported (:mod:`advisor.trace.ahead`), so the read starts sooner (benchmarks/README.md). Numbers go into
# ``array.array``, flags into ``bytearray``; :func:`arrays` makes numpy views of them (no copy)
# in the process that reads the frames.


class Table:
    """The distinct values of a kind of column (names, or JSON texts such as shapes), by code in
    order of first appearance: ``keys`` (the names; the JSON texts) and ``values`` (the names; the
    decoded JSON). One table per kind serves every column of a read, so its columns join and
    concatenate by their codes."""

    keys: list
    values: list
    index: _Index

    def __init__(self, kind: str, decode: Callable[[bytes | str], object] | None = None) -> None:
        self.kind, self.decode, self.keys, self.bad = kind, decode, [], False
        self.values = self.keys if decode is None else []
        self.index = _Index()
        self.index.table = self

    def coded(self, keys: list) -> "Coded":
        """The column of these keys (new ones added)."""
        return Coded(array("i", map(self.index.__getitem__, keys)), self)

    def add(self, key: object, value: object) -> int:
        """The code of `key`, added with `value` if new (joining another read's table)."""
        code = self.index.get(key)
        if code is None:
            code = self.index[key] = len(self.keys)
            self.keys.append(key)
            if self.values is not self.keys:
                self.values.append(value)
        return code

    def __getstate__(self) -> tuple[str, list, list | None]:  # the index is rebuilt, the decoder is not needed past the read
        return self.kind, self.keys, None if self.values is self.keys else self.values

    def __setstate__(self, state: tuple[str, list, list | None]) -> None:
        self.kind, self.keys, values = state
        self.decode, self.bad, self.values = None, False, self.keys if values is None else values
        self.index = _Index(zip(self.keys, range(len(self.keys))))
        self.index.table = self


class _Index(dict):
    """key -> code; a new key is added to its table on first sight (the lookup stays in C)."""

    table: Table

    def __missing__(self, key: bytes | str) -> int:
        table = self.table
        code = self[key] = len(table.keys)
        table.keys.append(key)
        if table.values is not table.keys:
            try:
                value = table.decode(key)  # type: ignore[misc]  # values of its own: a table with a decoder
            except (msgspec.DecodeError, UnicodeDecodeError):  # invalid UTF-8 inside a kept JSON text
                value, table.bad = None, True
            table.values.append(value)
        return code


class Coded:
    """A column of few distinct values (names, shapes), as codes into its :class:`Table`:
    ``array('i')`` in the reader, int32 numpy after :func:`arrays`."""

    __slots__ = ("codes", "table")

    def __init__(self, codes: Any, table: Table) -> None:  # array('i') in the reader, int32 numpy after arrays()
        self.codes, self.table = codes, table

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i: int) -> Any:  # a name, or a JSON text's value
        return self.table.values[self.codes[i]]

    def take(self, index: np.ndarray) -> "Coded":
        """The rows at `index` (positions or a mask; numpy codes)."""
        return Coded(self.codes[index], self.table)

    def tolist(self) -> list:
        return list(map(self.table.values.__getitem__, self.codes.tolist()))


def _decode_raw(key: bytes | str) -> object:
    return _ANY.decode(key) if key else None  # b"": the key was absent


class Columns:
    """One bucket's events as columns (numpy arrays, :class:`Coded` columns, lists); ``ok``: a usable 'X' event.
    In the reader they are ``array.array`` and ``bytearray`` until :func:`arrays`."""

    def __init__(self, data: dict | None = None) -> None:
        self.data = data or {}

    def __len__(self) -> int:
        ts = self.data.get("ts")
        return 0 if ts is None else len(ts)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def take(self, mask: np.ndarray) -> "Columns":
        import numpy as np  # numpy: 110 ms; the forked reader reads without it

        idx = np.flatnonzero(mask)
        out = {}
        for k, v in self.data.items():
            out[k] = v.take(mask) if isinstance(v, Coded) else v[mask] if isinstance(v, np.ndarray) else [
                v[i] for i in idx.tolist()]
        return Columns(out)


def concat(parts: list) -> Any:  # a column, as Columns[key] is
    """One column of several (numpy arrays, Coded columns of one table, lists)."""
    import numpy as np  # numpy: 110 ms; the forked reader reads without it

    first = parts[0]
    if isinstance(first, Coded):
        return Coded(np.concatenate([p.codes for p in parts]), first.table)
    if isinstance(first, np.ndarray):
        return np.concatenate(parts)
    return [v for p in parts for v in p]


def arrays(columns: dict) -> dict:
    """The reader's columns (per bucket) with numpy views of its arrays and flags (no copy)."""
    import numpy as np  # numpy: 110 ms; the forked reader reads without it

    def view(v: object) -> object:
        if isinstance(v, array):
            return np.frombuffer(v, dtype=v.typecode)
        if isinstance(v, bytearray):
            return np.frombuffer(v, dtype=bool)
        if isinstance(v, Coded) and isinstance(v.codes, array):
            return Coded(np.frombuffer(v.codes, dtype=np.int32), v.table)
        return v

    return {b: Columns({k: view(v) for k, v in c.data.items()}) for b, c in columns.items()}


class _Builder:
    """Turns decoded events into per-bucket columns, a piece at a time."""

    def __init__(self) -> None:
        self.parts: dict = {b: [] for b in BUCKETS}
        self.names = Table("names")
        self.raws = Table("raws", _decode_raw)  # shapes, types, concrete inputs, grids: JSON texts
        self.n_events = 0

    def add(self, events: list) -> None:
        self.n_events += len(events)
        buckets: dict = {b: [] for b in BUCKETS}
        appenders = {cat: buckets[b].append for cat, b in CAT_BUCKET.items()}
        get = appenders.get
        for e in events:
            try:
                a = get(e.cat)
            except TypeError:  # unhashable cat
                continue
            if a is not None:
                a(e)
        for b, evs in buckets.items():
            if evs:
                self.parts[b].append(self._columns(b, evs))

    def finish(self) -> dict:
        out = {}
        for b, parts in self.parts.items():
            if not parts:
                out[b] = Columns()
                continue
            data = parts[0]
            for more in parts[1:]:  # in place: the first piece's arrays grow
                for k, v in more.items():
                    if isinstance(v, Coded):
                        data[k].codes += v.codes
                    else:
                        data[k] += v
            out[b] = Columns(data)
        return out

    # ---- per piece
    def _values(self, raws: list) -> Coded:
        """Raw JSON values as codes, each distinct text decoded once (None when absent)."""
        return self.raws.coded(list(map(bytes, raws)))

    def _columns(self, bucket: str, evs: list) -> dict:
        n = len(evs)
        args = [e.args for e in evs]
        if not all(map(_Args.__instancecheck__, args)):
            args = [a if isinstance(a, _Args) else _NO_ARGS for a in args]
        if bucket == "instant":
            keep = [i for i, e in enumerate(evs) if e.name == "[memory]"]
            if len(keep) < n:
                evs = [evs[i] for i in keep]
                args = [args[i] for i in keep]
            return {
                "ts": _numbers([e.ts for e in evs]), "bytes": _numbers([a.mem_bytes for a in args]),
                "total_allocated": _numbers([a.total_allocated for a in args]),
                "total_reserved": _numbers([a.total_reserved for a in args]),
                "device_type": to_int_ids([a.device_type for a in args]),
                "device_id": to_int_ids([a.device_id for a in args]),
            }
        names = [e.name for e in evs]
        ok = None  # None: every event usable; else one 0/1 byte per event
        if not all(map(str.__instancecheck__, names)):
            ok = _both(ok, bytearray(isinstance(x, str) for x in names))
            names = [x if isinstance(x, str) else "" for x in names]
        phs = [e.ph for e in evs]
        if phs.count("X") != n:
            ok = _both(ok, bytearray(p == "X" for p in phs))
        ts, ts_ok = _times([e.ts for e in evs])
        dur, dur_ok = _times([e.dur for e in evs])
        ok = _both(_both(ok, ts_ok), dur_ok)
        cols = {
            "name": self.names.coded(names), "ts": ts, "dur": dur,
            "ok": bytearray(b"\x01") * n if ok is None else ok,
            "pid": to_int_ids([e.pid for e in evs]), "tid": to_int_ids([e.tid for e in evs]),
        }
        if bucket == "ann":
            cols["gpu"] = bytearray(e.cat == "gpu_user_annotation" for e in evs)
        elif bucket == "ops":
            values = self._values
            cols["external_id"], cols["external_id_na"] = nullable_ints([a.external_id for a in args])
            cols["input_dims"] = values([a.input_dims for a in args])
            cols["input_types"] = values([a.input_type for a in args])
            cols["concrete"] = values([a.concrete for a in args])
            flops = [a.flops for a in args]
            cols["flops"] = (array("d", [_NAN]) * n if all(v is None for v in flops) else
                             array("d", [v if isinstance(v, (int, float)) and not isinstance(v, bool) else _NAN
                                         for v in flops]))
        elif bucket in ("kernels", "memcpy", "memset", "runtime"):
            cols["correlation"], cols["correlation_na"] = nullable_ints([a.correlation for a in args])
        if bucket in ("kernels", "memcpy", "memset"):
            dev = [a.device for a in args]
            if None in dev:
                dev = [d if d is not None else e.pid for d, e in zip(dev, evs)]
            stream = [a.stream for a in args]
            if None in stream:
                stream = [s if s is not None else e.tid for s, e in zip(stream, evs)]
            cols["device"], cols["stream"] = to_int_ids(dev), to_int_ids(stream)
        if bucket == "kernels":
            values = self._values
            cols["grid"] = values([a.grid for a in args])
            cols["block"] = values([a.block for a in args])
            cols["registers"] = _numbers([a.registers for a in args])
        elif bucket in ("memcpy", "memset"):
            cols["kind"] = [k if isinstance(k, str) else None for k in (a.kind for a in args)]
            cols["bytes"] = _numbers([a.bytes for a in args])
        return cols


def _both(a: bytearray | None, b: bytearray | None) -> bytearray | None:
    """Per event, both flags set (None: all set)."""
    if a is None or b is None:
        return b if a is None else a
    return bytearray(x & y for x, y in zip(a, b))


def _times(values: list) -> tuple[array, bytearray | None]:
    """ts or dur as float64 (null: NaN, to be counted as impossible), and which were usable (None: all)."""
    try:
        return array("d", values), None
    except (TypeError, OverflowError):
        pass
    floats = [_as_float(v) for v in values]
    ok = bytearray(v is None or isinstance(v, (int, float)) or f == f for v, f in zip(values, floats))
    return array("d", floats), ok


def _as_float(value: object) -> float:
    """A JSON number as a float: NaN if it is not a number, infinite if it is an integer beyond float range."""
    if isinstance(value, str):  # '12.5': a number, as numpy reads it
        try:
            return float(value)
        except ValueError:
            return _NAN
    if not isinstance(value, (int, float)):
        return _NAN
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _numbers(values: list) -> array:
    try:
        return array("d", values)
    except (TypeError, OverflowError):
        return array("d", [_as_float(v) for v in values])  # None, a string: NaN


_INT_RE = re.compile(r"-?\d+")
_INT64 = range(-(2**63), 2**63)


def to_int_ids(values: list, default: int = -1) -> array:
    """pid/tid/device/stream ids -> int64; strings like '25738' or 'stream 7' parsed."""
    try:
        return array("q", values)
    except (TypeError, OverflowError):
        pass
    cache: dict = {}
    out = array("q", bytes(8 * len(values)))
    r: int | None
    for i, v in enumerate(values):
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v:
            r = int(v) if -(2**63) <= v < 2**63 else default
        else:
            r = cache.get(v, None) if isinstance(v, str) else None
            if r is None:
                m = _INT_RE.search(v) if isinstance(v, str) else None
                r = int(m.group()) if m else default
                if r not in _INT64:
                    r = default
                if isinstance(v, str):
                    cache[v] = r
        out[i] = r
    return out


def nullable_ints(values: list) -> tuple[array, bytearray]:
    """(int64 values, missing flags) for a nullable integer column."""
    n = len(values)
    try:
        if None not in values:
            return array("q", values), bytearray(n)
        return array("q", [0 if v is None else v for v in values]), bytearray(v is None for v in values)
    except (TypeError, OverflowError):
        vals, mask = array("q", bytes(8 * n)), bytearray(n)
        for i, v in enumerate(values):
            try:
                iv = int(v)
                if iv in _INT64:
                    vals[i] = iv
                    continue
            except (ValueError, TypeError, OverflowError):
                pass
            mask[i] = 1
        return vals, mask


# --------------------------------------------------------------------------
# Reading


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class _NotStreamable(Exception):
    """The fast path gives up; the whole-document path decides (and words any error)."""


_HEAD_RE = re.compile(rb'"traceEvents"\s*:\s*\[')


def read_file(src: str) -> tuple[dict, dict, int]:
    """(the document without its events, columns per bucket, number of events); TraceError on bad input."""
    doc, columns, n = read_raw(src)
    assert isinstance(doc, dict)  # a Shared stands in only for a read with a `share`
    return doc, arrays(columns), n


def read_raw(src: str, share: Share | None = None) -> tuple[dict | Shared, dict, int]:
    """:func:`read_file` without numpy (``array.array`` columns, for :func:`arrays`): the reader forked
    by :mod:`advisor.trace.ahead` runs it.

    `share` (:mod:`advisor.trace.ahead`'s reader): ``asked()`` is polled between blocks; when it
    says yes, the events left are split in two and ``give(bytes)`` hands the second half over
    (``give(b"")``: none); then a :class:`Shared` takes the document's place. Every read with a
    `share` gives exactly once."""
    if not os.path.exists(src):
        raise TraceError(f"trace file not found: {src}")
    if os.path.isdir(src):
        raise TraceError(f"trace path is a directory, not a file: {src}")
    try:
        with open(src, "rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"  # gzip magic; do not trust the extension
    except OSError as exc:
        raise TraceError(f"{src}: cannot read ({_one_line(exc)})") from None
    builder = _Builder()
    try:
        doc = _stream(src, gz, builder, share)
    except _NotStreamable:
        if share is not None:
            share.give(b"")  # (a no-op if it gave already: the asker's half is then void, this read is whole)
        builder = _Builder()
        doc = _whole(src, gz, builder)
    return doc, builder.finish(), builder.n_events


class _Inflate:
    """A gzip file's bytes, a block at a time: ISA-L (or zlib) directly, which checks each member's
    CRC and length, without the gzip module's per-call overhead; concatenated members are read on."""

    CHUNK = 64 << 10  # compressed bytes read at a time (a trace inflates ~15x: about one BLOCK)

    def __init__(self, fh: BinaryIO) -> None:
        self.fh, self.z = fh, _inflate.decompressobj(31)

    def read(self, _n: int = -1) -> bytes:
        """The next inflated bytes (b"" only at the end); `_n` is ignored: any block size will do."""
        while True:
            raw = self.z.unused_data or self.fh.read(self.CHUNK)
            if self.z.eof:
                raw = raw.lstrip(b"\0")  # zero padding after a member, as the gzip module allows
                if not raw and not (raw := self.fh.read(self.CHUNK).lstrip(b"\0")):
                    return b""
                self.z = _inflate.decompressobj(31)  # the next member
            elif not raw:
                raise EOFError("compressed file ended before the end-of-stream marker was reached")
            out = self.z.decompress(raw)
            if out:
                return out


def _read_block(fh: BinaryIO | _Inflate, src: str, gz: bool) -> bytes:
    try:
        return fh.read(BLOCK)
    except (EOFError, OSError, *_INFLATE_ERRORS) as exc:
        if gz:
            raise TraceError(f"{src}: truncated or corrupt gzip ({_one_line(exc)})") from None
        raise TraceError(f"{src}: cannot read ({_one_line(exc)})") from None


def _stream(src: str, gz: bool, builder: _Builder, share: Share | None = None) -> dict | Shared:
    """The document without its events, the events into `builder`.

    `share` (see :func:`read_file`): asked between blocks, it may take the second half of the
    events left; then the first half is decoded here and a :class:`Shared` replaces the document."""
    try:
        raw = open(src, "rb")
    except OSError as exc:
        raise TraceError(f"{src}: cannot read ({_one_line(exc)})") from None
    with raw:
        fh = _Inflate(raw) if gz else raw
        head = bytearray()
        while True:  # the document's head, up to the events list's '['
            block = _read_block(fh, src, gz)
            seen = max(0, len(head) - 64)  # the key may straddle two blocks
            head += block
            m = _HEAD_RE.search(head, seen)
            if m or not block or len(head) > _HEAD_LIMIT:
                break
        if not m:
            raise _NotStreamable
        buf = bytearray(b"[") + head[m.end():]
        doc_head = bytes(head[: m.end()])
        eof, want = False, BLOCK
        while True:
            while len(buf) < want and not eof:
                block = _read_block(fh, src, gz)
                eof = not block
                buf += block
            if share is not None and share.asked():
                while not eof and len(buf) < SHARE_MAX:  # the rest, inflated at once (fast)
                    block = _read_block(fh, src, gz)
                    eof = not block
                    buf += block
                if eof and _share(buf, builder, share):
                    return Shared(doc_head)
                share.give(b"")  # too much left to hold at once, or no event end past the middle
                share = None  # answered: read on alone
            if eof:
                break
            before = len(buf)
            _decode_prefix(buf, builder)
            want = BLOCK if len(buf) < before else before + BLOCK  # no cut decoded: read on
        tail = _decode_last(bytes(buf), builder)
    if share is not None:
        share.give(b"")  # never asked, or asked too late: the asker reads nothing
    return _document(doc_head, tail)


SHARE_MAX = 256 << 20  # bytes of JSON left: more than this are not shared (held in memory at once)


class Shared:
    """:func:`read_raw`'s answer in place of the document when the second half of the events went
    to the asker (:func:`read_shared` reads it, :func:`join` puts the two together)."""

    __slots__ = ("head",)

    def __init__(self, head: bytes) -> None:
        self.head = head


def _share(buf: bytearray, builder: _Builder, share: Share) -> bool:
    """Give the events after the middle of `buf` (all that is left) to `share`, decode the first
    half; False (nothing given) where no event ends past the middle."""
    cut = buf.find(b"},", len(buf) // 2)
    if cut < 0:
        return False
    with memoryview(buf) as whole:
        share.give(whole[cut + 2:])  # first: the asker decodes its half while this one does the other
    if _decode_pieces(buf, builder, cut + 2) == cut + 1:
        return True
    raise _NotStreamable  # not an event's end after all (inside a string): the given half is void, read whole


def read_shared(data: bytes) -> tuple[bytes, dict, int]:
    """The events a reader gave away (:class:`Shared`): (the bytes after the events list, columns as
    :func:`read_raw` gives them, count)."""
    buf = bytearray(b"[") + data
    builder = _Builder()
    pos = _decode_pieces(buf, builder, len(buf))
    tail = _decode_last(bytes(buf[pos:]), builder)
    return tail, builder.finish(), builder.n_events


def join(head: Shared, shared: tuple[bytes, dict, int], columns: dict, n: int) -> tuple[dict, dict, int] | None:
    """A reader's first half and :func:`read_shared`'s second half, as one :func:`read_file` answer
    (None where the document around the events does not decode: the file is to be read again whole)."""
    tail, more, m = shared
    columns, more = arrays(columns), arrays(more)
    tables = {v.table.kind: v.table for c in columns.values() for v in c.data.values() if isinstance(v, Coded)}
    merged = {}
    for bucket in BUCKETS:
        a, b = columns[bucket], _onto(more[bucket], tables)
        merged[bucket] = b if not len(a) else a if not len(b) else Columns(
            {k: concat([v, b[k]]) for k, v in a.data.items()})
    try:
        return _document(head.head, tail), merged, n + m
    except _NotStreamable:
        return None  # read again in one piece: the whole-document path words the error


def _onto(c: Columns, tables: dict) -> Columns:
    """`c` with its coded columns recoded into `tables` (kind -> Table; a kind not there joins them)."""
    import numpy as np  # numpy: 110 ms; the forked reader reads without it

    out = {}
    for k, v in c.data.items():
        if isinstance(v, Coded):
            into = tables.setdefault(v.table.kind, v.table)
            if into is not v.table:
                remap = np.array([into.add(key, value) for key, value in zip(v.table.keys, v.table.values)],
                                 dtype=np.int32)
                v = Coded(remap[v.codes], into)
        out[k] = v
    return Columns(out)


def _document(head: bytes, tail: bytes) -> dict:
    try:
        doc = _ANY.decode(head + b"]" + tail)
    except (msgspec.DecodeError, UnicodeDecodeError):
        raise _NotStreamable from None
    if not isinstance(doc, dict):
        raise _NotStreamable
    return doc


def _decode_prefix(buf: bytearray, builder: _Builder) -> None:
    """Decode the whole events at the front of `buf` ('[' + events...), leaving '[' + the rest in it."""
    pos = _decode_pieces(buf, builder, len(buf))
    if pos:
        del buf[:pos]
    elif len(buf) > max(8 * BLOCK, 64 << 20):  # no cut decodes: something the stream cannot read
        raise _NotStreamable
    # else: read more and try again


def _decode_pieces(buf: bytearray, builder: _Builder, stop: int) -> int:
    """Decode the whole events of `buf` (from its '[') that end before `stop`, in pieces of about
    BLOCK bytes (a piece decoded while its bytes are in cache); the offset of the '[' that opens
    the events left (0: none decoded).

    In place, no copy: the ',' after a piece's last event becomes the ']' that closes the piece,
    then the '[' that opens the next. A cut must decode as a whole list of events, so one inside a
    string or a nested object (which cannot) is passed over for an earlier one; a window with no
    cut that decodes is widened.
    """
    pos, window = 0, BLOCK
    while pos + 1 < stop:
        hi = min(pos + window, stop)
        cut = _cut(buf, pos, hi, builder)
        if cut < 0:
            if hi == stop:
                break
            window *= 2
            continue
        pos, window = cut + 1, BLOCK
        buf[pos] = 0x5B  # '['
    return pos


def _cut(buf: bytearray, start: int, end: int, builder: _Builder, tries: int = 8) -> int:
    """Decode buf[start:cut + 2] for the last of the last `tries` event ends ('},') before `end`
    that decodes; that cut (-1: none). ``buf[cut + 1]`` is then ']'."""
    for _ in range(tries):
        cut = buf.rfind(b"},", start + 1, end)
        if cut < 0:
            break
        buf[cut + 1] = 0x5D  # ']'
        if _decode_into(buf, start, cut + 2, builder):
            return cut
        buf[cut + 1] = 0x2C  # ',' again
        end = cut
    return -1


def _decode_into(buf: bytearray, start: int, stop: int, builder: _Builder) -> bool:
    """Decode buf[start:stop] (a JSON list of events) into the builder; False if it does not decode.

    msgspec's Raw fields keep the buffer exported until the events are gone, so they are handed
    to the builder and dropped before the view is released (and `buf` can be resized again).
    """
    with memoryview(buf) as whole:
        piece = whole[start:stop]
        try:
            events = _EVENTS.decode(piece)
        except (msgspec.DecodeError, msgspec.ValidationError):
            piece.release()
            return False
        except UnicodeDecodeError:  # invalid UTF-8, which no other cut mends: the whole-document path reads it
            piece.release()
            raise _NotStreamable from None
        builder.add(events)
        del events
        piece.release()
    if builder.raws.bad:  # the same, inside a shape or another JSON text kept raw
        raise _NotStreamable
    return True


_LIST_END = re.compile(rb"}\s*\]")


def _decode_last(buf: bytes, builder: _Builder, tries: int = 16) -> bytes:
    """At the end of the file: decode the last events up to the list's ']'; return what follows it."""
    if buf[1:].lstrip().startswith(b"]"):  # no events left
        return buf[1:].lstrip()[1:]
    ends = [m.end() for m in _LIST_END.finditer(buf)]
    for end in ends[::-1][:tries]:  # the list's end is '}' then ']'; later ones sit in the trailing keys
        try:
            events = _EVENTS.decode(buf[:end])
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        except UnicodeDecodeError:
            break
        builder.add(events)
        if builder.raws.bad:
            break
        return buf[end:]
    raise _NotStreamable


def _whole(src: str, gz: bool, builder: _Builder) -> dict:
    """The tolerant path: the whole document through the standard library, then the same columns."""
    try:
        with open(src, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise TraceError(f"{src}: cannot read ({_one_line(exc)})") from None
    if gz:
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceError(f"{src}: truncated or corrupt gzip ({_one_line(exc)})") from None
    if not raw or raw.isspace():
        raise TraceError(f"{src}: empty file, not JSON")
    try:
        doc = json.loads(raw)
    except UnicodeDecodeError:
        # Stack strings occasionally hold invalid UTF-8; keep the trace.
        try:
            doc = json.loads(raw.decode("utf-8", "replace"))
        except ValueError as exc:
            raise TraceError(f"{src}: not valid JSON ({_one_line(exc)})") from None
    except (ValueError, RecursionError) as exc:
        raise TraceError(f"{src}: not valid JSON ({_one_line(exc)})") from None
    del raw
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{src}: not a Kineto trace (no 'traceEvents' list)")
    events = doc.pop("traceEvents")
    builder.n_events = len(events)
    dicts = [e for e in events if isinstance(e, dict)]
    del events
    decoded: list[_EventTyped] | list[_Event]
    try:  # NaN/Infinity become null (counted as impossible times, as before); re-read typed
        decoded = _EVENTS.decode(msgspec.json.encode(dicts))
    except (msgspec.DecodeError, msgspec.ValidationError, OverflowError, TypeError):
        decoded = [_event_from_dict(e) for e in dicts]
    n = builder.n_events
    builder.add(decoded)
    builder.n_events = n
    return doc


def _event_from_dict(e: dict) -> _Event:
    """One event the typed decoder refused (odd args): its top-level fields, args left out."""
    return _Event(ph=e.get("ph", "X"), cat=e.get("cat"), name=e.get("name"), ts=e.get("ts", msgspec.UNSET),
                  dur=e.get("dur", msgspec.UNSET), pid=e.get("pid"), tid=e.get("tid"))
