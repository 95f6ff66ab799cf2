"""A copy's kind and sides from its kernel name: 'Memcpy HtoD (Pageable -> Device)' is a
host-to-device copy from pageable memory, which DL002 reads; a memset has only its destination."""

from __future__ import annotations

import re
from typing import Iterable

_MEM_RE = re.compile(r"^\s*Mem(?:cpy|set)\s*([A-Za-z]+)?\s*(?:\(\s*([A-Za-z]+)\s*(?:->\s*([A-Za-z]+)\s*)?\))?")
_COPY_KINDS = {"HtoD", "DtoH", "DtoD", "HtoH", "PtoP"}
_MEM_SIDES = {"Pageable", "Pinned", "Device", "Managed"}


def _parse_mem_name(name: str, is_memset: bool, args_kind: object) -> tuple[str, str, str]:
    """'Memcpy HtoD (Pageable -> Device)' -> ('HtoD', 'Pageable', 'Device')."""
    m = _MEM_RE.match(name)
    tok = a = b = None
    if m:
        tok, a, b = m.groups()
    if is_memset:
        # 'Memset (Device)': the single side is the destination.
        dst = a if a in _MEM_SIDES else ""
        return "Memset", "", dst
    kind = tok if tok in _COPY_KINDS else (args_kind if args_kind in _COPY_KINDS else "other")
    src = a if a in _MEM_SIDES else ""
    dst = b if b in _MEM_SIDES else ""
    return kind, src, dst


def copy_sides(parts: Iterable[tuple[list[str], Iterable, bool]]) -> tuple[list[str], list[str], list[str]]:
    """(kinds, sources, destinations) of every copy and memset of `parts` (each: its names, its
    args' kinds, whether they are memsets), each distinct name parsed once."""
    cache: dict = {}
    kinds, srcs, dsts = [], [], []
    for names, arg_kinds, is_set in parts:
        for name, k in zip(names, arg_kinds):
            key = (name, is_set, k)
            r = cache.get(key)
            if r is None:
                r = cache[key] = _parse_mem_name(name, is_set, k)
            kinds.append(r[0])
            srcs.append(r[1])
            dsts.append(r[2])
    return kinds, srcs, dsts
