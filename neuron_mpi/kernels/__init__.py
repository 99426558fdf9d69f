"""Elementwise reduction kernels of neuron_mpi: numba-compiled, bit-exact
against NumPy / ml_dtypes, for the 14 data types a collective can carry.

    reduce_into(dst, src, op)   dst[:] = op(dst, src), op in REDUCE_OPS
    divide_into(dst, n)         dst[:] = dst / n  (the "avg" op's last step)
    reduce_into_ref / divide_into_ref   the NumPy oracles of the two above
    reducer(op, dtype)          the kernel of reduce_into, without the checks
    warm()                      compile or load every specialisation
    warmed()                    has warm() run for this source into this cache
"""
from .dtypes import DTYPES, REDUCE_OPS, canonical_dtype, dtype_name
from .reference import divide_into_ref, reduce_into_ref

_COMPILED = ("divide_into", "reduce_into", "reducer", "warm")


def warmed() -> bool:
    """Has warm() run to the end for this source, Python and numba, into this
    numba cache? (Without importing numba: kernels.aot.warm_stamp.)"""
    from . import aot

    return aot.warm_stamp().is_file()


def __getattr__(name):
    """The numba kernels are imported at their first use: a rank whose data plane
    was built ahead of time (kernels.aot) may never need numba at all."""
    if name in _COMPILED:
        from . import reduce

        return getattr(reduce, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["DTYPES", "dtype_name", "canonical_dtype", "REDUCE_OPS",
           "reduce_into", "reduce_into_ref", "divide_into", "divide_into_ref", "reducer",
           "warm", "warmed"]
