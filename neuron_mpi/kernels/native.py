"""Reduction kernels of the types numba handles natively: fp32, fp64 and the
eight integer types.  Each function compiles once per array dtype.

Integers wrap around (the sums and products are computed in int64 / uint64
and truncated on store, which keeps exactly the low bits numpy keeps); max and
min of floats propagate NaN exactly as np.maximum / np.minimum.
"""
from __future__ import annotations

from numba import njit, types
from numba.extending import intrinsic

from .llvm_ops import JIT_OPTIONS


@intrinsic
def tdiv(typingctx, a, b):
    """C integer division (truncates toward zero): LLVM sdiv / udiv."""
    if not (isinstance(a, types.Integer) and a == b):
        return None

    def codegen(context, builder, sig, args):
        if a.signed:
            return builder.sdiv(args[0], args[1])
        return builder.udiv(args[0], args[1])

    return a(a, b), codegen


@njit(**JIT_OPTIONS)
def native_sum(d, s):
    for i in range(d.size):
        d[i] = d[i] + s[i]


@njit(**JIT_OPTIONS)
def native_prod(d, s):
    for i in range(d.size):
        d[i] = d[i] * s[i]


@njit(**JIT_OPTIONS)
def native_max(d, s):
    # np.maximum: a NaN first operand wins; equal (+0 / -0) gives the second
    for i in range(d.size):
        a = d[i]
        b = s[i]
        d[i] = a if (a > b) | (a != a) else b


@njit(**JIT_OPTIONS)
def native_min(d, s):
    for i in range(d.size):
        a = d[i]
        b = s[i]
        d[i] = a if (a < b) | (a != a) else b


@njit(**JIT_OPTIONS)
def float_div(d, n):
    """d /= n with n of d's own float type (correctly rounded division)."""
    for i in range(d.size):
        d[i] = d[i] / n


@njit(**JIT_OPTIONS)
def int_div_f64(d, n):
    """Truncating d /= n for integers of at most 32 bits, n a float64.

    Exact: for |x| < 2**53 the correctly rounded quotient x / n never
    crosses an integer (a non-integral x/n is at least 1/n away from one,
    and the rounding error is below |x/n| * 2**-53 < 1/n), and the
    float -> int conversion truncates toward zero.
    """
    for i in range(d.size):
        d[i] = int(d[i] / n)


@njit(**JIT_OPTIONS)
def int_div_exact(d, n):
    """Truncating d /= n for int64 / uint64, n of d's type: no float trip."""
    for i in range(d.size):
        d[i] = tdiv(d[i], n)
