"""Whole-array conversions between float32 and the small float types, with
the same jit codecs the kernels use (for tests and tools); and the table of
small-float kernels, by dtype."""
from __future__ import annotations

import numpy as np

from . import bf16, fp8, fp16
from .dtypes import DTYPES

__all__ = ["SMALL_FLOAT_KERNELS", "to_float32", "from_float32"]

#: dtype -> (view dtype, {op: kernel}, divide kernel, decode, encode)
SMALL_FLOAT_KERNELS = {
    DTYPES["bf16"]: (np.dtype(np.uint16), {
        "sum": bf16.bf16_sum, "prod": bf16.bf16_prod,
        "max": bf16.bf16_max, "min": bf16.bf16_min},
        bf16.bf16_div, bf16.bf16_decode, bf16.bf16_encode),
    DTYPES["fp16"]: (np.dtype(np.uint16), {
        "sum": fp16.fp16_sum, "prod": fp16.fp16_prod,
        "max": fp16.fp16_max, "min": fp16.fp16_min},
        fp16.fp16_div, fp16.fp16_decode, fp16.fp16_encode),
    DTYPES["fp8_e4m3"]: (np.dtype(np.uint8), {
        "sum": fp8.e4m3_sum, "prod": fp8.e4m3_prod,
        "max": fp8.e4m3_max, "min": fp8.e4m3_min},
        fp8.e4m3_div, fp8.e4m3_decode, fp8.e4m3_encode),
    DTYPES["fp8_e5m2"]: (np.dtype(np.uint8), {
        "sum": fp8.e5m2_sum, "prod": fp8.e5m2_prod,
        "max": fp8.e5m2_max, "min": fp8.e5m2_min},
        fp8.e5m2_div, fp8.e5m2_decode, fp8.e5m2_encode),
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
