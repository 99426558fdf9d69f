"""reduce_into / divide_into: argument checks, then one numba kernel per
(op, storage dtype), compiled on first use and cached on disk (numba
cache=True, honouring NUMBA_CACHE_DIR)."""
from __future__ import annotations

import numpy as np

from . import native as nt
from .checks import check_array, check_n, check_pair, independent_src
from .convert import SMALL_FLOAT_KERNELS
from .dtypes import DTYPES, REDUCE_OPS

__all__ = ["reduce_into", "divide_into", "reducer", "warm", "jit_kernels"]

_NATIVE_OPS = {"sum": nt.native_sum, "prod": nt.native_prod,
               "max": nt.native_max, "min": nt.native_min}

# (op, dtype) -> (kernel, view dtype or None)
_REDUCE: dict = {}
# dtype -> (kernel, view dtype or None, type of the divisor argument)
_DIVIDE: dict = {}

for _dt in DTYPES.values():
    if _dt in SMALL_FLOAT_KERNELS:
        _view, _ops, _div = SMALL_FLOAT_KERNELS[_dt][:3]
        for _op in REDUCE_OPS:
            _REDUCE[_op, _dt] = (_ops[_op], _view)
        _DIVIDE[_dt] = (_div, _view, np.float32)
        continue
    for _op in REDUCE_OPS:
        _REDUCE[_op, _dt] = (_NATIVE_OPS[_op], None)
    if _dt.kind == "f":
        _DIVIDE[_dt] = (nt.float_div, None, _dt.type)
    elif _dt.itemsize == 8:
        _DIVIDE[_dt] = (nt.int_div_exact, None, _dt.type)
    else:
        _DIVIDE[_dt] = (nt.int_div_f64, None, np.float64)
del _dt, _view, _ops, _div, _op


def reduce_into(dst: np.ndarray, src: np.ndarray, op: str) -> None:
    """``dst[:] = op(dst, src)`` elementwise, in place, with a numba kernel.

    dst and src: 1-D C-contiguous arrays of one supported dtype and length.
    op: one of REDUCE_OPS.  Raises ValueError on any mismatch.
    """
    check_pair(dst, src, op)
    if dst.size == 0:
        return
    kernel, view = _REDUCE[op, dst.dtype]
    src = independent_src(dst, src)
    if view is None:
        kernel(dst, src)
    else:
        kernel(dst.view(view), src.view(view))


def reducer(op: str, dtype):
    """The kernel of ``reduce_into(dst, src, op)`` for arrays of ``dtype``, without
    the argument checks: ``f(dst, src)`` for two 1-D C-contiguous arrays of that
    dtype, the same length, not overlapping. For hot loops that checked once."""
    kernel, view = _REDUCE[op, np.dtype(dtype)]
    if view is None:
        return kernel
    return lambda d, s: kernel(d.view(view), s.view(view))


def divide_into(dst: np.ndarray, n: int) -> None:
    """``dst[:] = dst / n`` in place (the last step of an "avg" reduction).

    fp32 / fp64 divide natively; fp16, bf16 and fp8 divide in float32 and
    round to nearest even; integers truncate toward zero (C, as NCCL), int64
    and uint64 with exact integer division.
    """
    check_array("dst", dst, writeable=True)
    n = check_n(n)
    if dst.size == 0:
        return
    kernel, view, ntype = _DIVIDE[dst.dtype]
    kernel(dst if view is None else dst.view(view), ntype(n))


def warm() -> int:
    """Compile, or load from numba's disk cache, every specialisation.

    Covers each op x dtype of reduce_into and each dtype of divide_into, the
    transport's atomics and its compiled data plane; returns how many
    specialisations that is (4 * 14 + 14 = 70, plus atomics.warm()'s and the data
    plane's).  Run it once before starting many ranks so that they all load from
    the cache.
    """
    from neuron_mpi.transport import native, plane

    from . import aot, atomics

    # the module built ahead of time, in a child beside numba's own compiles here
    # (cached for NEURON_MPI_AOT=0)
    aside = aot.build_aside()
    try:
        count = atomics.warm(jit=True) + native.warm(plane)
    finally:
        if aside is not None:
            aside.wait()
    aot.build()
    for dt in DTYPES.values():
        for op in REDUCE_OPS:
            reduce_into(np.zeros(1, dt), np.zeros(1, dt), op)
            count += 1
        divide_into(np.zeros(1, dt), 1)
        count += 1
    stamp = aot.warm_stamp()  # (for the launcher's warm-up: kernels.warmed())
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.touch()
    return count


def jit_kernels() -> list:
    """Every numba dispatcher used by reduce_into and divide_into, and the atomics."""
    from . import atomic_ops as ops

    seen: dict[int, object] = {id(f): f for f in (
        ops.fetch_add, ops.add_many, ops.compare_exchange, ops.load, ops.store)}
    for kernel, _ in _REDUCE.values():
        seen.setdefault(id(kernel), kernel)
    for kernel, _, _ in _DIVIDE.values():
        seen.setdefault(id(kernel), kernel)
    return list(seen.values())
