"""Bit-exact float32 <-> fp16 / bf16 / fp8 conversion inside numba, and the
reduction kernels of those small float types.

numba cannot type ml_dtypes arrays and handles float16 poorly, so arrays of
these types are viewed as uint16 / uint8 and converted with integer bit
manipulation.  Each conversion reproduces what numpy / ml_dtypes ``astype``
does, bit for bit:

* bf16 (ml_dtypes): decode is ``bits << 16`` (NaN payloads kept); encode
  rounds to nearest even, subnormals kept, any NaN becomes sign | 0x7fc0.
* fp16 (numpy): decode keeps NaN payloads; encode rounds to nearest even,
  overflows to inf, and a NaN keeps the top 10 bits of its payload (forced
  non-zero), as numpy's ``npy_floatbits_to_halfbits``.
* fp8_e4m3 (float8_e4m3fn: no inf, NaN = S.1111.111): encode rounds to
  nearest even as if 0x7f were 480, so anything past 464 (and inf, NaN)
  becomes NaN with the sign kept.
* fp8_e5m2: encode rounds to nearest even, past 61440 to inf; NaN becomes
  sign | 0x7e.  Decoding fp8 maps every NaN code to sign | 0x7fc00000.

The kernels live in this file too, on purpose: numba's on-disk cache
(cache=True) is invalidated only when the file defining the cached function
changes, not when a helper it calls from another file does.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .dtypes import DTYPES

# error_model="numpy": no ZeroDivisionError branch in the loops.
JIT_OPTIONS = dict(nogil=True, cache=True, error_model="numpy")


# --------------------------------------------------------------------------
# float32 <-> bits
# --------------------------------------------------------------------------
@intrinsic
def f32_from_bits(typingctx, bits):
    """The float32 whose bit pattern is the low 32 bits of an integer."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        (value,) = args
        i32 = ir.IntType(32)
        if bits.bitwidth > 32:
            value = builder.trunc(value, i32)
        elif bits.bitwidth < 32:
            value = builder.zext(value, i32)
        return builder.bitcast(value, ir.FloatType())

    return types.float32(bits), codegen


@intrinsic
def f32_to_bits(typingctx, x):
    """The bit pattern of a float32, as a non-negative int64."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        (value,) = args
        bits = builder.bitcast(value, ir.IntType(32))
        return builder.zext(bits, ir.IntType(64))

    return types.int64(x), codegen


# --------------------------------------------------------------------------
# scalar codecs: decode(bits) -> float32, encode(float32) -> bits (int64)
# --------------------------------------------------------------------------
_TWO_M24 = np.float32(2.0 ** -24)        # fp16 subnormal unit
_MAGIC_F16 = np.float32(0.5)             # ulp 2**-24: rounds to fp16 subnormals
_MAGIC_E4M3 = np.float32(2.0 ** 14)      # ulp 2**-9
_MAGIC_E5M2 = np.float32(2.0 ** 7)       # ulp 2**-16


@njit(inline="always")
def dec_bf16(h):
    return f32_from_bits(np.int64(h) << 16)


@njit(inline="always")
def enc_bf16(x):
    u = f32_to_bits(x)
    rounded = (u + (0x7FFF + ((u >> 16) & 1))) >> 16
    nan = ((u >> 16) & 0x8000) | 0x7FC0
    return nan if x != x else rounded


@njit(inline="always")
def dec_f16(h):
    h = np.int64(h)
    sign = (h & 0x8000) << 16
    exp = h & 0x7C00
    normal = sign | (((h & 0x7FFF) + 0x1C000) << 13)
    special = sign | 0x7F800000 | ((h & 0x3FF) << 13)          # inf, NaN
    sub = sign | f32_to_bits(np.float32(h & 0x3FF) * _TWO_M24)  # 0, subnormal
    bits = special if exp == 0x7C00 else normal
    bits = sub if exp == 0 else bits
    return f32_from_bits(bits)


@njit(inline="always")
def enc_f16(x):
    u = f32_to_bits(x)
    a = u & 0x7FFFFFFF
    sign = (u >> 16) & 0x8000
    # normal range: rebias, round to nearest even at bit 13
    r = a - (112 << 23)
    normal = (r + (0xFFF + ((r >> 13) & 1))) >> 13
    # below 2**-14: let the FPU round, adding a number whose ulp is 2**-24
    sub = f32_to_bits(f32_from_bits(a) + _MAGIC_F16) - 0x3F000000
    payload = (a >> 13) & 0x3FF
    nan = 0x7C00 | payload | (1 if payload == 0 else 0)
    code = sub if a < (113 << 23) else normal
    code = 0x7C00 if a >= 0x47800000 else code                # overflow, inf
    code = nan if a > 0x7F800000 else code
    return sign | code


def _fp8_table(exp_bits: int, man_bits: int, has_inf: bool) -> np.ndarray:
    """float32 value of each of the 256 codes of an fp8 format (by formula)."""
    bias = (1 << (exp_bits - 1)) - 1
    codes = np.arange(256)
    exp = (codes >> man_bits) & ((1 << exp_bits) - 1)
    man = codes & ((1 << man_bits) - 1)
    mag = np.where(exp == 0, man * 2.0 ** (1 - bias - man_bits),
                   (1.0 + man / 2.0 ** man_bits) * 2.0 ** (exp - bias))
    top = exp == (1 << exp_bits) - 1
    if has_inf:
        mag = np.where(top & (man == 0), np.inf, mag)
        nan = top & (man != 0)
    else:
        nan = top & (man == (1 << man_bits) - 1)
    value = np.where(codes & 0x80, -mag, mag).astype(np.float32)
    bits = value.view(np.uint32)
    bits[nan] = np.where(codes[nan] & 0x80, 0xFFC00000, 0x7FC00000).astype(np.uint32)
    return value


DECODE_E4M3 = _fp8_table(4, 3, has_inf=False)
DECODE_E5M2 = _fp8_table(5, 2, has_inf=True)


@njit(inline="always")
def dec_e4m3(b):
    return DECODE_E4M3[b]


@njit(inline="always")
def dec_e5m2(b):
    return DECODE_E5M2[b]


@njit(inline="always")
def enc_e4m3(x):
    u = f32_to_bits(x)
    a = u & 0x7FFFFFFF
    sign = (u >> 24) & 0x80
    r = a - (120 << 23)
    normal = min((r + (0x7FFFF + ((r >> 20) & 1))) >> 20, 0x7F)  # 0x7f: NaN
    sub = f32_to_bits(f32_from_bits(a) + _MAGIC_E4M3) - 0x46800000
    code = sub if a < (121 << 23) else normal
    return sign | code


@njit(inline="always")
def enc_e5m2(x):
    u = f32_to_bits(x)
    a = u & 0x7FFFFFFF
    sign = (u >> 24) & 0x80
    r = a - (112 << 23)
    normal = min((r + (0xFFFFF + ((r >> 21) & 1))) >> 21, 0x7C)  # 0x7c: inf
    sub = f32_to_bits(f32_from_bits(a) + _MAGIC_E5M2) - 0x43000000
    code = sub if a < (113 << 23) else normal
    code = 0x7E if a > 0x7F800000 else code
    return sign | code


# --------------------------------------------------------------------------
# float32 operators (max / min as np.maximum / np.minimum, NaN propagating:
# a NaN first operand wins, equal operands (+0 / -0) give the second)
# --------------------------------------------------------------------------
@njit(inline="always")
def op_max(a, b):
    return a if (a > b) | (a != a) else b


@njit(inline="always")
def op_min(a, b):
    return a if (a < b) | (a != a) else b


# --------------------------------------------------------------------------
# kernels: one function per (op, format) so that each compiles to a loop
# with no dispatch inside; d and s are the uint16 / uint8 views.
# --------------------------------------------------------------------------
@njit(**JIT_OPTIONS)
def bf16_sum(d, s):
    for i in range(d.size):
        d[i] = enc_bf16(dec_bf16(d[i]) + dec_bf16(s[i]))


@njit(**JIT_OPTIONS)
def bf16_prod(d, s):
    for i in range(d.size):
        d[i] = enc_bf16(dec_bf16(d[i]) * dec_bf16(s[i]))


@njit(**JIT_OPTIONS)
def bf16_max(d, s):
    for i in range(d.size):
        d[i] = enc_bf16(op_max(dec_bf16(d[i]), dec_bf16(s[i])))


@njit(**JIT_OPTIONS)
def bf16_min(d, s):
    for i in range(d.size):
        d[i] = enc_bf16(op_min(dec_bf16(d[i]), dec_bf16(s[i])))


@njit(**JIT_OPTIONS)
def bf16_div(d, n):
    for i in range(d.size):
        d[i] = enc_bf16(dec_bf16(d[i]) / n)


@njit(**JIT_OPTIONS)
def f16_sum(d, s):
    for i in range(d.size):
        d[i] = enc_f16(dec_f16(d[i]) + dec_f16(s[i]))


@njit(**JIT_OPTIONS)
def f16_prod(d, s):
    for i in range(d.size):
        d[i] = enc_f16(dec_f16(d[i]) * dec_f16(s[i]))


@njit(**JIT_OPTIONS)
def f16_max(d, s):
    for i in range(d.size):
        d[i] = enc_f16(op_max(dec_f16(d[i]), dec_f16(s[i])))


@njit(**JIT_OPTIONS)
def f16_min(d, s):
    for i in range(d.size):
        d[i] = enc_f16(op_min(dec_f16(d[i]), dec_f16(s[i])))


@njit(**JIT_OPTIONS)
def f16_div(d, n):
    for i in range(d.size):
        d[i] = enc_f16(dec_f16(d[i]) / n)


@njit(**JIT_OPTIONS)
def e4m3_sum(d, s):
    for i in range(d.size):
        d[i] = enc_e4m3(dec_e4m3(d[i]) + dec_e4m3(s[i]))


@njit(**JIT_OPTIONS)
def e4m3_prod(d, s):
    for i in range(d.size):
        d[i] = enc_e4m3(dec_e4m3(d[i]) * dec_e4m3(s[i]))


@njit(**JIT_OPTIONS)
def e4m3_max(d, s):
    for i in range(d.size):
        d[i] = enc_e4m3(op_max(dec_e4m3(d[i]), dec_e4m3(s[i])))


@njit(**JIT_OPTIONS)
def e4m3_min(d, s):
    for i in range(d.size):
        d[i] = enc_e4m3(op_min(dec_e4m3(d[i]), dec_e4m3(s[i])))


@njit(**JIT_OPTIONS)
def e4m3_div(d, n):
    for i in range(d.size):
        d[i] = enc_e4m3(dec_e4m3(d[i]) / n)


@njit(**JIT_OPTIONS)
def e5m2_sum(d, s):
    for i in range(d.size):
        d[i] = enc_e5m2(dec_e5m2(d[i]) + dec_e5m2(s[i]))


@njit(**JIT_OPTIONS)
def e5m2_prod(d, s):
    for i in range(d.size):
        d[i] = enc_e5m2(dec_e5m2(d[i]) * dec_e5m2(s[i]))


@njit(**JIT_OPTIONS)
def e5m2_max(d, s):
    for i in range(d.size):
        d[i] = enc_e5m2(op_max(dec_e5m2(d[i]), dec_e5m2(s[i])))


@njit(**JIT_OPTIONS)
def e5m2_min(d, s):
    for i in range(d.size):
        d[i] = enc_e5m2(op_min(dec_e5m2(d[i]), dec_e5m2(s[i])))


@njit(**JIT_OPTIONS)
def e5m2_div(d, n):
    for i in range(d.size):
        d[i] = enc_e5m2(dec_e5m2(d[i]) / n)


# --------------------------------------------------------------------------
# whole-array conversions (tests, tools): fmt 0 bf16, 1 fp16, 2 e4m3, 3 e5m2
# --------------------------------------------------------------------------
@njit(**JIT_OPTIONS)
def _decode_into(bits, out, fmt):
    for i in range(bits.size):
        b = bits[i]
        if fmt == 0:
            out[i] = dec_bf16(b)
        elif fmt == 1:
            out[i] = dec_f16(b)
        elif fmt == 2:
            out[i] = dec_e4m3(b)
        else:
            out[i] = dec_e5m2(b)


@njit(**JIT_OPTIONS)
def _encode_into(x, out, fmt):
    for i in range(x.size):
        v = x[i]
        if fmt == 0:
            out[i] = enc_bf16(v)
        elif fmt == 1:
            out[i] = enc_f16(v)
        elif fmt == 2:
            out[i] = enc_e4m3(v)
        else:
            out[i] = enc_e5m2(v)


_FORMATS = {DTYPES["bf16"]: (0, np.uint16), DTYPES["fp16"]: (1, np.uint16),
            DTYPES["fp8_e4m3"]: (2, np.uint8), DTYPES["fp8_e5m2"]: (3, np.uint8)}


def _format(dtype):
    try:
        return _FORMATS[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise ValueError(f"no bit codec for dtype {dtype!r}; "
                         "only fp16, bf16, fp8_e4m3, fp8_e5m2") from None


def to_float32(a: np.ndarray) -> np.ndarray:
    """float32 copy of a 1-D fp16 / bf16 / fp8 array, with the jit decoders."""
    fmt, view = _format(a.dtype)
    out = np.empty(a.shape, np.float32)
    _decode_into(np.ascontiguousarray(a).view(view), out, fmt)
    return out


def from_float32(x: np.ndarray, dtype) -> np.ndarray:
    """Round a 1-D float32 array to fp16 / bf16 / fp8 with the jit encoders."""
    fmt, view = _format(dtype)
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(x.shape, view)
    _encode_into(x, out, fmt)
    return out.view(np.dtype(dtype))
