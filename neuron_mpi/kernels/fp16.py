"""fp16 (numpy float16) kernels, on the uint16 view of the arrays.

Bit-exact with numpy's ``npy_halfbits_to_floatbits`` /
``npy_floatbits_to_halfbits``: decode keeps NaN payloads; encode rounds to
nearest even (subnormals included), overflows to inf, and a NaN keeps the
top 10 bits of its payload (forced non-zero so that it stays a NaN).
Arithmetic runs in float32.
"""
from __future__ import annotations

from numba import njit

from .llvm_ops import JIT_OPTIONS, decoder, encoder, select


def _decode(h):
    sign = (h & 0x8000) << 16
    exp = h & 0x7C00
    man = h & 0x3FF
    normal = ((h & 0x7FFF) + 0x1C000) << 13           # rebias 15 -> 127
    special = (man << 13) | 0x7F800000                # inf, NaN (payload kept)
    sub = (man.to_f32() * 2.0 ** -24).bits()          # zero, subnormal: exact
    bits = select(exp.eq(0x7C00), special, normal)
    bits = select(exp.eq(0), sub, bits)
    return bits | sign


def _encode(x):
    u = x.bits()
    a = u & 0x7FFFFFFF
    sign = (u >> 16) & 0x8000
    r = a - (112 << 23)                               # rebias 127 -> 15
    normal = (r + ((r >> 13) & 1) + 0xFFF) >> 13      # nearest even at bit 13
    # below 2**-14 the FPU rounds: 0.5 + |x| has an ulp of 2**-24
    sub = (a.as_f32() + 0.5).bits() - 0x3F000000
    payload = (a >> 13) & 0x3FF
    nan = select(payload.eq(0), 0x7C01, payload | 0x7C00)
    code = select(a < (113 << 23), sub, normal)
    code = select(a >= 0x47800000, 0x7C00, code)      # overflow, inf
    code = select(a > 0x7F800000, nan, code)
    return code | sign


dec = decoder(_decode, "dec_fp16")
enc = encoder(_encode, "enc_fp16", 16)


@njit(**JIT_OPTIONS)
def fp16_sum(d, s):
    for i in range(d.size):
        d[i] = enc(dec(d[i]) + dec(s[i]))


@njit(**JIT_OPTIONS)
def fp16_prod(d, s):
    for i in range(d.size):
        d[i] = enc(dec(d[i]) * dec(s[i]))


@njit(**JIT_OPTIONS)
def fp16_max(d, s):
    # np.maximum: a NaN first operand wins, equal operands give the second
    for i in range(d.size):
        a = dec(d[i])
        b = dec(s[i])
        d[i] = enc(a if (a > b) | (a != a) else b)


@njit(**JIT_OPTIONS)
def fp16_min(d, s):
    for i in range(d.size):
        a = dec(d[i])
        b = dec(s[i])
        d[i] = enc(a if (a < b) | (a != a) else b)


@njit(**JIT_OPTIONS)
def fp16_div(d, n):
    """n: float32."""
    for i in range(d.size):
        d[i] = enc(dec(d[i]) / n)


@njit(**JIT_OPTIONS)
def fp16_decode(bits, out):
    for i in range(bits.size):
        out[i] = dec(bits[i])


@njit(**JIT_OPTIONS)
def fp16_encode(x, out):
    for i in range(x.size):
        out[i] = enc(x[i])
