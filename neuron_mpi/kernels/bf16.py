"""bf16 (ml_dtypes.bfloat16) kernels, on the uint16 view of the arrays.

Bit-exact with ml_dtypes ``astype``: decode is ``bits << 16`` (NaN payloads
kept); encode rounds to nearest even, keeps subnormals and infinities, and
turns any NaN into sign | 0x7fc0.  Arithmetic runs in float32.
"""
from __future__ import annotations

from numba import njit

from .llvm_ops import JIT_OPTIONS, decoder, encoder, select


def _decode(h):
    return h << 16


def _encode(x):
    u = x.bits()
    rounded = (u + ((u >> 16) & 1) + 0x7FFF) >> 16   # wraps only for NaN
    nan = ((u >> 16) & 0x8000) | 0x7FC0
    return select(x.isnan(), nan, rounded)


dec = decoder(_decode, "dec_bf16")
enc = encoder(_encode, "enc_bf16", 16)


@njit(**JIT_OPTIONS)
def bf16_sum(d, s):
    for i in range(d.size):
        d[i] = enc(dec(d[i]) + dec(s[i]))


@njit(**JIT_OPTIONS)
def bf16_prod(d, s):
    for i in range(d.size):
        d[i] = enc(dec(d[i]) * dec(s[i]))


@njit(**JIT_OPTIONS)
def bf16_max(d, s):
    # np.maximum: a NaN first operand wins, equal operands give the second
    for i in range(d.size):
        a = dec(d[i])
        b = dec(s[i])
        d[i] = enc(a if (a > b) | (a != a) else b)


@njit(**JIT_OPTIONS)
def bf16_min(d, s):
    for i in range(d.size):
        a = dec(d[i])
        b = dec(s[i])
        d[i] = enc(a if (a < b) | (a != a) else b)


@njit(**JIT_OPTIONS)
def bf16_div(d, n):
    """n: float32."""
    for i in range(d.size):
        d[i] = enc(dec(d[i]) / n)


@njit(**JIT_OPTIONS)
def bf16_decode(bits, out):
    for i in range(bits.size):
        out[i] = dec(bits[i])


@njit(**JIT_OPTIONS)
def bf16_encode(x, out):
    for i in range(x.size):
        out[i] = enc(x[i])
