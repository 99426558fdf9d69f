"""Argument checks shared by the jit kernels and their NumPy references."""
from __future__ import annotations

import operator

import numpy as np

from .dtypes import DTYPES, REDUCE_OPS

_SUPPORTED = frozenset(DTYPES.values())
_N_MAX = 2 ** 63 - 1


def check_array(name: str, a, *, writeable: bool = False) -> None:
    """A 1-D C-contiguous array of a supported dtype (writeable if asked)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (strides {a.strides})")
    if a.dtype not in _SUPPORTED:
        supported = ", ".join(DTYPES)
        raise ValueError(f"{name} has unsupported dtype {str(a.dtype)!r}; "
                         f"supported: {supported}")
    if writeable and not a.flags.writeable:
        raise ValueError(f"{name} is read-only")


def check_pair(dst, src, op) -> None:
    """dst and src fit ``dst[:] = op(dst, src)``."""
    if op not in REDUCE_OPS:
        raise ValueError(f"unsupported reduce op {op!r}; supported: "
                         f"{', '.join(REDUCE_OPS)} (avg is sum, then divide_into)")
    check_array("dst", dst, writeable=True)
    check_array("src", src)
    if dst.dtype != src.dtype:
        raise ValueError(f"dtype mismatch: dst is {dst.dtype}, src is {src.dtype}")
    if dst.size != src.size:
        raise ValueError(f"length mismatch: dst has {dst.size} elements, "
                         f"src has {src.size}")


def check_n(n) -> int:
    """The rank count of an average: an integer, 1 <= n < 2**63."""
    if isinstance(n, (bool, np.bool_)):
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    try:
        n = operator.index(n)
    except TypeError:
        raise ValueError(f"n must be an integer >= 1, got {n!r}") from None
    if not 1 <= n <= _N_MAX:
        raise ValueError(f"n must be an integer in [1, 2**63), got {n}")
    return n


def independent_src(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """src, or a copy of it when it partly overlaps dst.

    The kernels read s[i] and then write d[i]: the same memory (src is dst)
    is fine, a shifted overlap is not.
    """
    if src is dst or not np.may_share_memory(dst, src):
        return src
    if dst.__array_interface__["data"][0] == src.__array_interface__["data"][0]:
        return src
    return src.copy()
