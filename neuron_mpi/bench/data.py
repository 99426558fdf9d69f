"""Check data (nccl-tests' ``verifiable``): inputs every rank can regenerate, and
results every rank can compute for itself, bit for bit, with NumPy.

``random``: member g's input element at position p is a small integer made from
draw p of the PCG64 stream seeded with seed + g (streams can jump to any position),
so any member can produce any other member's
input, or any slice of it, without communication. The values are integers small
enough that every partial result is exact in the data type, in any order, so every
algorithm must agree bit for bit:

* sum / avg: values in [-V, V] with V = min(M // r, 100), where M is the largest integer
  the type holds exactly (2**24 for fp32, 256 for bf16, 16 for fp8_e4m3, 127 for
  int8...). When r > M, only members with (g + p) % ceil(r / M) == 0 may add a -1 or
  a 1 at position p.
* prod: values -2, -1, 1 or 2, with at most L twos per position where 2**L fits the
  type.
* max / min and the operations that move data: values in [-min(M, 100), min(M, 100)].

Unsigned types take the non-negative half of each range (0..V, 1 or 2). The signs
catch a reduction that compares or adds signed data as unsigned, or loses a sign.

``all_ones``: every input is 1; a sum over r ranks gives exactly r, prod / max /
min / avg give 1.
"""
from __future__ import annotations

import math

import numpy as np

SEED = 0x5EED
MODES = ("random", "all_ones")



def _hash(key: int, start: int, n: int) -> np.ndarray:
    """Raw uint64 draws start..start+n-1 of the PCG64 stream ``key`` (one draw per
    position, and ``advance`` jumps to ``start`` in O(log start))."""
    bg = np.random.PCG64(key)
    if start:
        bg.advance(start)
    return bg.random_raw(n) if n else np.zeros(0, np.uint64)


def _below(z: np.ndarray, m: int) -> np.ndarray:
    """Values in [0, m) from raw draws (multiply-shift of the high 32 bits), int64."""
    v = (z >> np.uint64(32)) * np.uint64(m)
    v >>= np.uint64(32)
    return v.view(np.int64)


def exact_limit(dtype) -> int:
    """The largest M such that every integer in [0, M] is exact in ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return int(np.iinfo(dtype).max)
    import ml_dtypes

    fi = ml_dtypes.finfo(dtype)
    return int(min(2 ** (fi.nmant + 1), float(fi.max)))


def pow2_limit(dtype) -> int:
    """The largest L <= 30 such that 2**L is exact in ``dtype`` (products of 2s)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        top = int(np.iinfo(dtype).max)
    else:
        import ml_dtypes

        top = float(ml_dtypes.finfo(dtype).max)
    return max(1, min(30, int(math.floor(math.log2(top)))))


def _cast(a: np.ndarray, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return a.astype(dtype)
    return a.astype(np.float64).astype(dtype)


def raw(mode: str, dtype, redop: str | None, g: int, r: int, start: int, n: int,
        seed: int = SEED) -> np.ndarray:
    """Member g's input at positions [start, start + n) as int64 (exact values)."""
    if mode == "all_ones":
        return np.ones(n, np.int64)
    if mode != "random":
        raise ValueError(f"check: expected one of {', '.join(MODES)}, got {mode!r}")
    z = _hash(seed + g, start, n)
    m = exact_limit(dtype)
    signed = np.dtype(dtype).kind != "u"  # (ml_dtypes' floats are of kind "V")
    if redop in ("sum", "avg"):
        vmax = min(m // r, 100)
        if vmax >= 1:
            return _symmetric(z, vmax, signed)
        stride = -(-r // m)
        keep = (np.arange(start, start + n, dtype=np.int64) + g) % stride == 0
        return _symmetric(z, 1, signed) * keep
    if redop == "prod":
        lim = pow2_limit(dtype)
        stride = max(1, -(-r // lim))
        keep = (np.arange(start, start + n, dtype=np.int64) + g) % stride == 0
        v = 1 + _below(z, 2) * keep
        if signed:  # (the draw's lowest bit: _below reads the highest 32)
            v *= 1 - 2 * (z & np.uint64(1)).view(np.int64)
        return v
    return _symmetric(z, min(m, 100), signed)


def _symmetric(z: np.ndarray, v: int, signed: bool) -> np.ndarray:
    """Values in [-v, v] from raw draws ([0, v] when not ``signed``), int64."""
    return _below(z, 2 * v + 1) - v if signed else _below(z, v + 1)


def values(mode, dtype, redop, g, r, start, n, seed=SEED) -> np.ndarray:
    """Member g's input at positions [start, start + n), in ``dtype``."""
    return _cast(raw(mode, dtype, redop, g, r, start, n, seed), dtype)


def reduced(mode, dtype, redop: str, r: int, start: int, n: int, seed=SEED) -> np.ndarray:
    """The reduction over all r members of positions [start, start + n)."""
    from ..kernels import divide_into_ref

    if mode == "all_ones":
        acc = np.full(n, r if redop in ("sum", "avg") else 1, np.int64)
    else:
        acc = raw(mode, dtype, redop, 0, r, start, n, seed)
        for g in range(1, r):
            v = raw(mode, dtype, redop, g, r, start, n, seed)
            if redop in ("sum", "avg"):
                acc += v
            elif redop == "prod":
                acc *= v
            elif redop == "max":
                np.maximum(acc, v, out=acc)
            elif redop == "min":
                np.minimum(acc, v, out=acc)
            else:
                raise ValueError(f"op: unknown reduction {redop!r}")
    out = _cast(acc, dtype)
    if redop == "avg":
        divide_into_ref(out, r)
    return out


def count_wrong(result: np.ndarray, expected: np.ndarray) -> int:
    """Elements whose bits differ (NaN never equals; sizes must agree)."""
    if result.shape != expected.shape:
        return max(result.size, expected.size)
    if result.size == 0:
        return 0
    w = result.dtype.itemsize
    utype = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[w]
    return int(np.count_nonzero(result.view(utype) != expected.view(utype)))


def sentinel_fill(a: np.ndarray) -> None:
    """Fill a result buffer with 0xA5 bytes (not a value of the check data in any
    type wider than a byte), so a run that writes nothing cannot pass the check on
    the results of the timed iterations."""
    a.reshape(-1).view(np.uint8)[...] = 0xA5
