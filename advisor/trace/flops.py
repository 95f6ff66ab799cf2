"""FLOP estimates for GEMMs and convolutions from their input shapes (see :mod:`advisor.trace.frames`'s
``ops.flops``): multiply-add = 2 FLOPs."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .read import Coded


def per_value(column: Coded, test: Callable[[Any], object]) -> np.ndarray:
    """`test` of each of the column's table's values, by code."""
    values = column.table.values
    return np.fromiter(map(test, values), dtype=bool, count=len(values))


# name -> (index of A, index of B, batched)
_MM_OPS = {
    "aten::mm": (0, 1, False), "aten::addmm": (1, 2, False),
    "aten::bmm": (0, 1, True), "aten::baddbmm": (1, 2, True),
}
# name -> (stride, padding, dilation, transposed) positions in the schema
_CONV_OPS = {
    "aten::conv1d": (3, 4, 5, None), "aten::conv2d": (3, 4, 5, None), "aten::conv3d": (3, 4, 5, None),
    "aten::convolution": (3, 4, 5, 6), "aten::_convolution": (3, 4, 5, 6),
    "aten::cudnn_convolution": (3, 2, 4, None),
    "aten::miopen_convolution": (4, 3, 5, None), "aten::mkldnn_convolution": (4, 3, 5, None),
}
# name -> (grad_output index, input index, weight index, transposed index, output_mask index)
_CONV_BWD_OPS = {
    "aten::convolution_backward": (0, 1, 2, 7, 10),
    "aten::cudnn_convolution_backward": (1, 0, 2, None, 10),
}
_FLOP_OPS = set(_MM_OPS) | set(_CONV_OPS) | set(_CONV_BWD_OPS)


def op_flops(names: Coded, given: np.ndarray, concretes: Coded, dims: Coded) -> tuple[np.ndarray, list[int]]:
    """FLOPs per op (NaN if unknown) and the positions of convs whose output size was guessed.

    Estimated once per distinct (name, shapes, concrete inputs): a trace repeats a few hundred."""
    out = given.copy()
    guessed: list = []
    candidates = (per_value(names, _FLOP_OPS.__contains__)[names.codes] & np.isnan(out)
                  & per_value(dims, bool)[dims.codes])
    done: dict = {}  # key -> (FLOPs or None, whether the conv's output size is a guess)
    for i in np.flatnonzero(candidates).tolist():
        key = (names.codes[i], dims.codes[i], concretes.codes[i])
        known = done.get(key)
        if known is None:
            name, concrete = names[i], concretes[i]
            try:
                f = _estimate_flops(name, dims[i], concrete)
            except (TypeError, ValueError, IndexError, ZeroDivisionError):
                f = None
            known = done[key] = (f if f is not None and f >= 0 else None, name in _CONV_OPS and not concrete)
        if known[0] is not None:
            out[i] = known[0]
            if known[1]:
                guessed.append(i)
    return out, guessed


def _shape(x: object) -> list | None:
    if isinstance(x, list) and all(isinstance(v, int) for v in x):
        return x
    return None


def _parse_ints(concrete: list | None, idx: int | None, nsp: int) -> list[int] | None:
    """'[2, 2]' or '2' from "Concrete Inputs" -> list of nsp ints (None if unknown)."""
    if not concrete or idx is None or idx >= len(concrete):
        return None
    s = concrete[idx]
    if not isinstance(s, str):
        return None
    s = s.strip().strip("[]()")
    if not s:
        return None
    vals = [int(v) for v in s.replace(" ", "").split(",") if v]
    if len(vals) == 1:
        vals = vals * nsp
    return vals if len(vals) == nsp else None


def _parse_bool(concrete: list | None, idx: int | None) -> bool | None:
    if not concrete or idx is None or idx >= len(concrete) or not isinstance(concrete[idx], str):
        return None
    s = concrete[idx].strip().lower()
    return True if s == "true" else False if s == "false" else None


def _estimate_flops(name: str, dims: list, concrete: list | None) -> float | None:
    mm = _MM_OPS.get(name)
    if mm is not None:
        ia, ib, batched = mm
        a, b = _shape(dims[ia]), _shape(dims[ib])
        if a is None or b is None:
            return None
        if batched and len(a) == 3 and len(b) == 3:
            return 2.0 * a[0] * a[1] * a[2] * b[2]
        if not batched and len(a) == 2 and len(b) == 2:
            return 2.0 * a[0] * a[1] * b[1]
        return None
    conv = _CONV_OPS.get(name)
    if conv is not None:
        x, w = _shape(dims[0]), _shape(dims[1])
        if x is None or w is None or len(x) < 3 or len(w) != len(x):
            return None
        return _conv_fwd_flops(x, w, concrete, *conv)
    bwd = _CONV_BWD_OPS.get(name)
    if bwd is not None:
        ig, ix, iw, it, im = bwd
        g, x, w = _shape(dims[ig]), _shape(dims[ix]), _shape(dims[iw])
        if g is None or x is None or w is None or len(g) < 3 or len(w) != len(g):
            return None
        spatial = x[2:] if _parse_bool(concrete, it) else g[2:]
        one = 2.0 * g[0] * math.prod(spatial) * math.prod(w)
        passes = 2
        if concrete and im < len(concrete) and isinstance(concrete[im], str):
            mask = [v.strip().lower() == "true" for v in concrete[im].strip("[]").split(",")]
            if len(mask) >= 2:
                passes = int(mask[0]) + int(mask[1])
        return one * passes
    return None


def _conv_fwd_flops(x: list[int], w: list[int], concrete: list | None, i_stride: int, i_pad: int, i_dil: int,
                    i_transposed: int | None) -> float:
    nsp = len(x) - 2
    if _parse_bool(concrete, i_transposed):
        spatial = x[2:]
    else:
        stride = _parse_ints(concrete, i_stride, nsp)
        pad_s = concrete[i_pad].strip().lower() if concrete and i_pad < len(concrete) and isinstance(concrete[i_pad], str) else ""
        if stride is None:
            spatial = x[2:]  # no "Concrete Inputs": assume 'same' output size
        elif pad_s in ("same", "'same'", '"same"'):
            spatial = [-(-x[2 + i] // stride[i]) for i in range(nsp)]
        else:
            pad = [0] * nsp if pad_s in ("valid", "'valid'", '"valid"') else (_parse_ints(concrete, i_pad, nsp) or [0] * nsp)
            dil = _parse_ints(concrete, i_dil, nsp) or [1] * nsp
            spatial = [
                (x[2 + i] + 2 * pad[i] - dil[i] * (w[2 + i] - 1) - 1) // stride[i] + 1
                for i in range(nsp)
            ]
            spatial = [max(s, 0) for s in spatial]
    return 2.0 * x[0] * math.prod(spatial) * math.prod(w)

def refine_conv_flops(flops: np.ndarray, positions: list[int], names: Coded, dims: Coded, ts: np.ndarray, end: np.ndarray,
                      thr: np.ndarray, look_ahead: int = 32) -> None:
    """Old traces have no stride/padding: read the conv's output shape from its consumer.

    Among the next few ops that start after the conv ends on the same thread,
    the first one whose first input is [N, Cout, *spatial] (normally the
    following batch_norm / relu) gives the output size; the search stops at
    the next convolution.  When nothing matches the 'same'-size guess stays.
    """
    n = len(ts)
    for j in positions:
        x, w = dims[j][0], dims[j][1]
        rank = len(x)
        e = end[j]
        t = thr[j]
        for k in range(j + 1, min(n, j + look_ahead)):
            if thr[k] != t or ts[k] < e:
                continue
            if names[k] in _CONV_OPS:
                break
            d = dims[k]
            y = d[0] if isinstance(d, list) and d else None
            if (isinstance(y, list) and len(y) == rank and y[0] == x[0] and y[1] == w[0]
                    and all(isinstance(v, int) and 0 < v <= xi for v, xi in zip(y[2:], x[2:]))):
                flops[j] = 2.0 * x[0] * math.prod(y[2:]) * math.prod(w)
                break


