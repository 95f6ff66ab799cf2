"""Write a file so that readers never see half of it: the one implementation every writer uses.

A report, a CSV or compare.json is read by people, CI and ``advise compare`` while a run may be
writing it, and a run can be killed mid-write (timeout, Ctrl-C). Writing to a temp file in the
same folder and renaming it over the target makes the new file appear whole or not at all, and a
failed write leaves the old file and no temp file behind.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

__all__ = ["NotAFile", "check_replaceable", "open_nofollow", "write_bytes_atomic", "write_text_atomic", "write_json_atomic", "check_writable"]


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` through a temp file made beside it and :func:`os.replace`.

    The one way advise creates a file (README "The run dir"). The name itself is replaced, never
    followed: a symlink at `path` is replaced by the new file and whatever it pointed at is left
    alone, so a link planted in a run dir cannot make advise overwrite a file elsewhere. A name
    taken by something that is not a regular file or a link (a folder, a FIFO that would block
    forever, a device) is refused with :class:`NotAFile`. The file gets ``0o666 & ~umask`` like
    any file the user creates (it is meant to be shared), not the 0600 of a temp file.
    """
    target = Path(path)
    try:
        check_replaceable(target)
        tmp, fd = _create_temp(target)
    except OSError as exc:
        _naming(exc, path)
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            _naming(exc, path)
        raise


def open_nofollow(path: str | os.PathLike, flags: int, mode: int = 0o666) -> int:
    """``os.open`` that never opens through a symlink at `path` (ELOOP): for the few files a
    process appends to while it runs (the script's log, the step lines), where a rename cannot
    stand in for the write. Usable as ``open(..., opener=open_nofollow)``."""
    return os.open(path, flags | _NOFOLLOW, mode)


class NotAFile(OSError):
    """A name advise would replace is taken by a folder, a FIFO, a socket or a device."""


def check_replaceable(path: str | os.PathLike) -> None:
    """Raise :class:`NotAFile` unless `path` is absent, a regular file or a symlink (not followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise NotAFile(errno.EEXIST, f"{kind}, not a file advise can replace", os.fspath(path))


def check_writable(folder: str | os.PathLike, nbytes: int = 16384) -> None:
    """Raise the OSError a writer would meet in `folder` now (read-only, forbidden, full); leave nothing.

    Writes `nbytes` to a temp file and removes it: a disk with no room left fails here, before a
    run spends minutes producing files it cannot keep. The error names `folder`.
    """
    folder = Path(folder)
    try:
        tmp, fd = _create_temp(folder / "write-check")
    except OSError as exc:
        _naming(exc, folder)
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(bytes(nbytes))
    except OSError as exc:
        _naming(exc, folder)
        raise
    finally:
        tmp.unlink(missing_ok=True)


def _naming(exc: OSError, path: str | os.PathLike) -> OSError:
    """`exc` naming the file the caller asked for: not the hidden temp file, nor nothing (a failed write()).
    Changed in place (the caller re-raises it) and returned."""
    if exc.filename is None or Path(exc.filename).name.startswith(".tmp-"):
        exc.filename = os.fspath(path)
    return exc


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """:func:`write_bytes_atomic` of `text` in UTF-8 (newlines as given)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike, obj: object, *, indent: int | None = 2) -> None:
    """`obj` as indented JSON plus a final newline; numpy/pandas scalars and paths are accepted.

    Serialised before any file is touched, so an unserialisable object leaves the target as it was.
    """
    write_text_atomic(path, json.dumps(obj, indent=indent, default=_jsonable) + "\n")


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _create_temp(target: Path) -> tuple[Path, int]:
    """A new hidden file beside `target`, opened for writing.

    ``os.open`` with mode 0o666 lets the kernel apply the umask, so no process-wide
    ``os.umask`` dance (racy with other threads) is needed to get ordinary permissions.
    """
    while True:
        tmp = target.with_name(f".tmp-{target.name[:64]}.{os.urandom(6).hex()}")  # short: NAME_MAX
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666)
        except FileExistsError:
            continue


def _jsonable(value: object) -> object:
    """numpy/pandas scalars and paths, which json cannot encode by itself."""
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def clean(value: object) -> Any:  # JSON: a dict, list or scalar as `value` was
    """JSON-safe: NaN/inf become None, numpy scalars become Python ones, recursively."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
