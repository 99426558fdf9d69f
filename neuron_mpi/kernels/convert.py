"""Whole-array conversions between float32 and the small float types, with
the same jit codecs the kernels use (for tests and tools); and the table of
small-float kernels, by dtype."""
from __future__ import annotations

import numpy as np

from . import bf16, fp8, fp16
from .dtypes import DTYPES, REDUCE_OPS

__all__ = ["SMALL_FLOAT_KERNELS", "to_float32", "from_float32"]

def _kernels(module, prefix: str, view):
    """(view dtype, {op: kernel}, divide, decode, encode) of one small float type:
    ``module``'s functions ``<prefix>_<op>`` for each kernel reduce op, and
    ``<prefix>_div``, ``_decode``, ``_encode``."""
    k = {name: getattr(module, f"{prefix}_{name}")
         for name in REDUCE_OPS + ("div", "decode", "encode")}
    return (np.dtype(view), {op: k[op] for op in REDUCE_OPS}, k["div"], k["decode"],
            k["encode"])


#: dtype -> (view dtype, {op: kernel}, divide kernel, decode, encode)
SMALL_FLOAT_KERNELS = {
    DTYPES["bf16"]: _kernels(bf16, "bf16", np.uint16),
    DTYPES["fp16"]: _kernels(fp16, "fp16", np.uint16),
    DTYPES["fp8_e4m3"]: _kernels(fp8, "e4m3", np.uint8),
    DTYPES["fp8_e5m2"]: _kernels(fp8, "e5m2", np.uint8),
}


def _entry(dtype):
    try:
        return SMALL_FLOAT_KERNELS[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise ValueError(f"no jit codec for dtype {dtype!r}; "
                         "only fp16, bf16, fp8_e4m3 and fp8_e5m2") from None


def to_float32(a: np.ndarray) -> np.ndarray:
    """float32 copy of a 1-D fp16 / bf16 / fp8 array (jit decoder)."""
    view, _, _, decode, _ = _entry(a.dtype)
    bits = np.ascontiguousarray(a).reshape(-1).view(view)
    out = np.empty(bits.shape, np.float32)
    if out.size:
        decode(bits, out)
    return out.reshape(np.shape(a))


def from_float32(x: np.ndarray, dtype) -> np.ndarray:
    """x rounded to fp16 / bf16 / fp8 (jit encoder), as an array of dtype."""
    view, _, _, _, encode = _entry(dtype)
    x32 = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.empty(x32.shape, view)
    if out.size:
        encode(x32, out)
    return out.view(np.dtype(dtype)).reshape(np.shape(x))
