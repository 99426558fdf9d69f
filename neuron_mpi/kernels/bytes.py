"""Reductions and copies on raw bytes, for compiled callers (the transport's data
plane).

``reduce_bytes(code, dst, src)`` is ``reduce_into`` on two uint8 views: ``code``
(``CODES[(op, dtype name)]``) picks the kernel, the bytes are viewed as that type.
One function holds every kernel, so a compiled caller links them all once; its
branches are written out (numba cannot cache a function that takes another as an
argument). tests/test_kernels.py checks every code against ``reduce_into``.

``divide_bytes(code, dst, n)`` is ``divide_into`` (an "avg" reduction's last step) on
a uint8 view, the dtype taken from a reduce code of that dtype (``code // 4``).

``copy_bytes(dst, d, src, s, n)`` is ``dst[d:d + n] = src[s:s + n]`` as one memmove.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from . import bf16, fp8, fp16
from . import native as nt
from .codes import CODES  # noqa: F401  (reduce_bytes' codes, re-exported)
from .llvm_ops import JIT_OPTIONS


@njit(**JIT_OPTIONS)
def reduce_bytes(code, d, s):
    """dst = op(dst, src) on the bytes ``d`` and ``s`` (same length), by ``code``."""
    if code == 0:
        nt.native_sum(d.view(np.float32), s.view(np.float32))
    elif code == 1:
        nt.native_prod(d.view(np.float32), s.view(np.float32))
    elif code == 2:
        nt.native_max(d.view(np.float32), s.view(np.float32))
    elif code == 3:
        nt.native_min(d.view(np.float32), s.view(np.float32))
    elif code == 4:
        nt.native_sum(d.view(np.float64), s.view(np.float64))
    elif code == 5:
        nt.native_prod(d.view(np.float64), s.view(np.float64))
    elif code == 6:
        nt.native_max(d.view(np.float64), s.view(np.float64))
    elif code == 7:
        nt.native_min(d.view(np.float64), s.view(np.float64))
    elif code == 8:
        nt.native_sum(d.view(np.int8), s.view(np.int8))
    elif code == 9:
        nt.native_prod(d.view(np.int8), s.view(np.int8))
    elif code == 10:
        nt.native_max(d.view(np.int8), s.view(np.int8))
    elif code == 11:
        nt.native_min(d.view(np.int8), s.view(np.int8))
    elif code == 12:
        nt.native_sum(d.view(np.uint8), s.view(np.uint8))
    elif code == 13:
        nt.native_prod(d.view(np.uint8), s.view(np.uint8))
    elif code == 14:
        nt.native_max(d.view(np.uint8), s.view(np.uint8))
    elif code == 15:
        nt.native_min(d.view(np.uint8), s.view(np.uint8))
    elif code == 16:
        nt.native_sum(d.view(np.int16), s.view(np.int16))
    elif code == 17:
        nt.native_prod(d.view(np.int16), s.view(np.int16))
    elif code == 18:
        nt.native_max(d.view(np.int16), s.view(np.int16))
    elif code == 19:
        nt.native_min(d.view(np.int16), s.view(np.int16))
    elif code == 20:
        nt.native_sum(d.view(np.uint16), s.view(np.uint16))
    elif code == 21:
        nt.native_prod(d.view(np.uint16), s.view(np.uint16))
    elif code == 22:
        nt.native_max(d.view(np.uint16), s.view(np.uint16))
    elif code == 23:
        nt.native_min(d.view(np.uint16), s.view(np.uint16))
    elif code == 24:
        nt.native_sum(d.view(np.int32), s.view(np.int32))
    elif code == 25:
        nt.native_prod(d.view(np.int32), s.view(np.int32))
    elif code == 26:
        nt.native_max(d.view(np.int32), s.view(np.int32))
    elif code == 27:
        nt.native_min(d.view(np.int32), s.view(np.int32))
    elif code == 28:
        nt.native_sum(d.view(np.uint32), s.view(np.uint32))
    elif code == 29:
        nt.native_prod(d.view(np.uint32), s.view(np.uint32))
    elif code == 30:
        nt.native_max(d.view(np.uint32), s.view(np.uint32))
    elif code == 31:
        nt.native_min(d.view(np.uint32), s.view(np.uint32))
    elif code == 32:
        nt.native_sum(d.view(np.int64), s.view(np.int64))
    elif code == 33:
        nt.native_prod(d.view(np.int64), s.view(np.int64))
    elif code == 34:
        nt.native_max(d.view(np.int64), s.view(np.int64))
    elif code == 35:
        nt.native_min(d.view(np.int64), s.view(np.int64))
    elif code == 36:
        nt.native_sum(d.view(np.uint64), s.view(np.uint64))
    elif code == 37:
        nt.native_prod(d.view(np.uint64), s.view(np.uint64))
    elif code == 38:
        nt.native_max(d.view(np.uint64), s.view(np.uint64))
    elif code == 39:
        nt.native_min(d.view(np.uint64), s.view(np.uint64))
    elif code == 40:
        bf16.bf16_sum(d.view(np.uint16), s.view(np.uint16))
    elif code == 41:
        bf16.bf16_prod(d.view(np.uint16), s.view(np.uint16))
    elif code == 42:
        bf16.bf16_max(d.view(np.uint16), s.view(np.uint16))
    elif code == 43:
        bf16.bf16_min(d.view(np.uint16), s.view(np.uint16))
    elif code == 44:
        fp16.fp16_sum(d.view(np.uint16), s.view(np.uint16))
    elif code == 45:
        fp16.fp16_prod(d.view(np.uint16), s.view(np.uint16))
    elif code == 46:
        fp16.fp16_max(d.view(np.uint16), s.view(np.uint16))
    elif code == 47:
        fp16.fp16_min(d.view(np.uint16), s.view(np.uint16))
    elif code == 48:
        fp8.e4m3_sum(d.view(np.uint8), s.view(np.uint8))
    elif code == 49:
        fp8.e4m3_prod(d.view(np.uint8), s.view(np.uint8))
    elif code == 50:
        fp8.e4m3_max(d.view(np.uint8), s.view(np.uint8))
    elif code == 51:
        fp8.e4m3_min(d.view(np.uint8), s.view(np.uint8))
    elif code == 52:
        fp8.e5m2_sum(d.view(np.uint8), s.view(np.uint8))
    elif code == 53:
        fp8.e5m2_prod(d.view(np.uint8), s.view(np.uint8))
    elif code == 54:
        fp8.e5m2_max(d.view(np.uint8), s.view(np.uint8))
    elif code == 55:
        fp8.e5m2_min(d.view(np.uint8), s.view(np.uint8))


@njit(**JIT_OPTIONS)
def divide_bytes(code, d, n):
    """dst = dst / n on the bytes ``d``, as ``divide_into``: ``code`` is any reduce
    code of the bytes' dtype (the codes go four to a dtype, in _ORDER's dtype order)."""
    t = code // 4
    if t == 0:
        nt.float_div(d.view(np.float32), np.float32(n))
    elif t == 1:
        nt.float_div(d.view(np.float64), np.float64(n))
    elif t == 2:
        nt.int_div_f64(d.view(np.int8), np.float64(n))
    elif t == 3:
        nt.int_div_f64(d.view(np.uint8), np.float64(n))
    elif t == 4:
        nt.int_div_f64(d.view(np.int16), np.float64(n))
    elif t == 5:
        nt.int_div_f64(d.view(np.uint16), np.float64(n))
    elif t == 6:
        nt.int_div_f64(d.view(np.int32), np.float64(n))
    elif t == 7:
        nt.int_div_f64(d.view(np.uint32), np.float64(n))
    elif t == 8:
        nt.int_div_exact(d.view(np.int64), np.int64(n))
    elif t == 9:
        nt.int_div_exact(d.view(np.uint64), np.uint64(n))
    elif t == 10:
        bf16.bf16_div(d.view(np.uint16), np.float32(n))
    elif t == 11:
        fp16.fp16_div(d.view(np.uint16), np.float32(n))
    elif t == 12:
        fp8.e4m3_div(d.view(np.uint8), np.float32(n))
    elif t == 13:
        fp8.e5m2_div(d.view(np.uint8), np.float32(n))


@intrinsic
def _memmove(typingctx, dst, dst_off, src, src_off, n):
    """llvm.memmove of ``n`` bytes from ``src`` + ``src_off`` to ``dst`` + ``dst_off``
    (1-D uint8 arrays; the caller checks bounds and contiguity)."""
    ok = all(isinstance(a, types.Array) and a.ndim == 1 and a.dtype == types.uint8
             for a in (dst, src)) and all(isinstance(v, types.Integer)
                                         for v in (dst_off, src_off, n))
    if not ok:
        return None
    sig = types.void(dst, dst_off, src, src_off, n)

    def codegen(context, builder, signature, args):
        d, do, s, so, count = args
        ty = signature.args
        da = context.make_array(ty[0])(context, builder, d)
        sa = context.make_array(ty[2])(context, builder, s)
        do = context.cast(builder, do, ty[1], types.intp)
        so = context.cast(builder, so, ty[3], types.intp)
        count = context.cast(builder, count, ty[4], types.intp)
        cgutils.raw_memmove(builder, builder.gep(da.data, [do]), builder.gep(sa.data, [so]),
                            count, 1)
        return context.get_dummy_value()

    return sig, codegen


@njit(**JIT_OPTIONS)
def copy_bytes(dst, d, src, s, n):
    """``dst[d:d + n] = src[s:s + n]`` on 1-D uint8 arrays, as one memmove when both
    are contiguous (numba's slice assignment copies byte by byte, ~10x slower than
    memcpy on large pieces); overlapping ranges are fine."""
    if n <= 0:
        return
    if d < 0 or s < 0 or d + n > dst.size or s + n > src.size:
        raise IndexError("copy_bytes: range out of bounds")
    if dst.strides[0] == 1 and src.strides[0] == 1:
        _memmove(dst, d, src, s, n)
    elif dst.ctypes.data + d * dst.strides[0] > src.ctypes.data + s * src.strides[0]:
        for i in range(n - 1, -1, -1):  # a loop, not a slice assignment: that may
            dst[d + i] = src[s + i]      # allocate, and the data plane runs without NRT
    else:
        for i in range(n):
            dst[d + i] = src[s + i]
