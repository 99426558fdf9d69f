"""fp8 kernels, on the uint8 view of the arrays: fp8_e4m3
(ml_dtypes.float8_e4m3fn) and fp8_e5m2 (ml_dtypes.float8_e5m2).

Bit-exact with ml_dtypes ``astype``:

* e4m3fn has no infinity and one NaN per sign (S.1111.111).  Encode rounds
  to nearest even as if 0x7f were 480, so anything past 464, inf and NaN
  all become NaN, sign kept.
* e5m2 rounds to nearest even, past 61440 to inf; NaN becomes sign | 0x7e.
* Decoding maps every NaN code to sign | 0x7fc00000.

Arithmetic runs in float32.
"""
from __future__ import annotations

from numba import njit

from .llvm_ops import JIT_OPTIONS, decoder, encoder, select, umin


def _decode_e4m3(b):
    sign = (b & 0x80) << 24
    mag = b & 0x7F
    normal = (mag << 20) + (120 << 23)                # rebias 7 -> 127
    sub = (mag.to_f32() * 2.0 ** -9).bits()           # exact
    bits = select(mag >= 8, normal, sub)
    bits = select(mag.eq(0x7F), 0x7FC00000, bits)
    return bits | sign


def _encode_e4m3(x):
    u = x.bits()
    a = u & 0x7FFFFFFF
    sign = (u >> 24) & 0x80
    r = a - (120 << 23)
    normal = umin((r + ((r >> 20) & 1) + 0x7FFFF) >> 20, 0x7F)   # 0x7f: NaN
    sub = (a.as_f32() + 2.0 ** 14).bits() - 0x46800000           # ulp 2**-9
    return select(a < (121 << 23), sub, normal) | sign


def _decode_e5m2(b):
    sign = (b & 0x80) << 24
    mag = b & 0x7F
    normal = (mag << 21) + (112 << 23)                # rebias 15 -> 127
    sub = (mag.to_f32() * 2.0 ** -16).bits()
    bits = select(mag >= 4, normal, sub)
    bits = select(mag.eq(0x7C), 0x7F800000, bits)
    bits = select(mag > 0x7C, 0x7FC00000, bits)
    return bits | sign


def _encode_e5m2(x):
    u = x.bits()
    a = u & 0x7FFFFFFF
    sign = (u >> 24) & 0x80
    r = a - (112 << 23)
    normal = umin((r + ((r >> 21) & 1) + 0xFFFFF) >> 21, 0x7C)   # 0x7c: inf
    sub = (a.as_f32() + 2.0 ** 7).bits() - 0x43000000            # ulp 2**-16
    code = select(a < (113 << 23), sub, normal)
    code = select(a > 0x7F800000, 0x7E, code)
    return code | sign


dec_e4m3 = decoder(_decode_e4m3, "dec_e4m3")
enc_e4m3 = encoder(_encode_e4m3, "enc_e4m3", 8)
dec_e5m2 = decoder(_decode_e5m2, "dec_e5m2")
enc_e5m2 = encoder(_encode_e5m2, "enc_e5m2", 8)


# ---- e4m3 -----------------------------------------------------------------
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
    # np.maximum: a NaN first operand wins, equal operands give the second
    for i in range(d.size):
        a = dec_e4m3(d[i])
        b = dec_e4m3(s[i])
        d[i] = enc_e4m3(a if (a > b) | (a != a) else b)


@njit(**JIT_OPTIONS)
def e4m3_min(d, s):
    for i in range(d.size):
        a = dec_e4m3(d[i])
        b = dec_e4m3(s[i])
        d[i] = enc_e4m3(a if (a < b) | (a != a) else b)


@njit(**JIT_OPTIONS)
def e4m3_div(d, n):
    """n: float32."""
    for i in range(d.size):
        d[i] = enc_e4m3(dec_e4m3(d[i]) / n)


@njit(**JIT_OPTIONS)
def e4m3_decode(bits, out):
    for i in range(bits.size):
        out[i] = dec_e4m3(bits[i])


@njit(**JIT_OPTIONS)
def e4m3_encode(x, out):
    for i in range(x.size):
        out[i] = enc_e4m3(x[i])


# ---- e5m2 -----------------------------------------------------------------
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
        a = dec_e5m2(d[i])
        b = dec_e5m2(s[i])
        d[i] = enc_e5m2(a if (a > b) | (a != a) else b)


@njit(**JIT_OPTIONS)
def e5m2_min(d, s):
    for i in range(d.size):
        a = dec_e5m2(d[i])
        b = dec_e5m2(s[i])
        d[i] = enc_e5m2(a if (a < b) | (a != a) else b)


@njit(**JIT_OPTIONS)
def e5m2_div(d, n):
    """n: float32."""
    for i in range(d.size):
        d[i] = enc_e5m2(dec_e5m2(d[i]) / n)


@njit(**JIT_OPTIONS)
def e5m2_decode(bits, out):
    for i in range(bits.size):
        out[i] = dec_e5m2(bits[i])


@njit(**JIT_OPTIONS)
def e5m2_encode(x, out):
    for i in range(x.size):
        out[i] = enc_e5m2(x[i])
