"""Plain NumPy / ml_dtypes twins of reduce_into and divide_into: the oracle
the jit kernels are tested against, with exactly the same semantics."""
from __future__ import annotations

import numpy as np

from .checks import check_array, check_n, check_pair
from .dtypes import SMALL_FLOATS

__all__ = ["reduce_into_ref", "divide_into_ref"]

#: the numpy ufunc of each kernel reduce op
UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def reduce_into_ref(dst: np.ndarray, src: np.ndarray, op: str) -> None:
    """``dst[:] = op(dst, src)``; small floats go through float32."""
    check_pair(dst, src, op)
    ufunc = UFUNCS[op]
    with np.errstate(all="ignore"):
        if dst.dtype in SMALL_FLOATS:
            wide = ufunc(dst.astype(np.float32), src.astype(np.float32))
            dst[...] = wide.astype(dst.dtype)
        else:
            # integers wrap around, floats are IEEE; numpy handles overlap
            ufunc(dst, src, out=dst)


def divide_into_ref(dst: np.ndarray, n: int) -> None:
    """``dst[:] = dst / n``; integers truncate toward zero."""
    check_array("dst", dst, writeable=True)
    n = check_n(n)
    dt = dst.dtype
    with np.errstate(all="ignore"):
        if dt in SMALL_FLOATS:
            dst[...] = (dst.astype(np.float32) / np.float32(n)).astype(dt)
        elif dt.kind == "f":
            np.divide(dst, dt.type(n), out=dst)
        elif dt == np.uint64:
            np.floor_divide(dst, np.uint64(n), out=dst)
        else:
            # int64 holds every other integer type, and n < 2**63
            x = dst.astype(np.int64)
            q = (x - np.fmod(x, np.int64(n))) // np.int64(n)
            dst[...] = q.astype(dt)
