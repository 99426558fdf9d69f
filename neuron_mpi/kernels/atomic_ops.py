"""Atomic operations on integer words of (shared) numpy arrays, as numba compiles
them: the intrinsics the data plane uses, and the functions kernels.atomics binds
when no module built ahead of time (kernels.aot) matches this source.

numba has no atomics on array elements, so each one is an LLVM instruction
emitted by an intrinsic (``atomicrmw``, ``cmpxchg``, atomic ``load``/``store``,
all sequentially consistent) and wrapped in a small ``njit`` function:

    fetch_add(a, i, v)          old = a[i]; a[i] += v     (atomically) -> old
    add_many(a, idx, vals)      a[idx[k]] += vals[k] for every k, each atomic
    compare_exchange(a, i, e, n) if a[i] == e: a[i] = n   (atomically) -> old
    load(a, i) / store(a, i, v) sequentially consistent load and store

``a`` is a 1-D C-contiguous int32 or int64 array (a view into an mmap works).
"""
from __future__ import annotations

from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .llvm_ops import JIT_OPTIONS

_INTS = (types.int32, types.int64)


def _ptr(context, builder, arrty, arr, idx):
    ary = context.make_array(arrty)(context, builder, arr)
    return cgutils.get_item_pointer(context, builder, arrty, ary, [idx], wraparound=False)


def _typed(arr, *scalars) -> bool:
    """A 1-D int32/int64 array and integer index and operands."""
    return (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype in _INTS
            and all(isinstance(v, types.Integer) for v in scalars))


def _operands(context, builder, sig, args):
    """The element pointer of ``args[0][args[1]]`` and the other operands cast to
    the array's element type."""
    arrty = sig.args[0]
    i = context.cast(builder, args[1], sig.args[1], types.intp)
    ptr = _ptr(context, builder, arrty, args[0], i)
    return ptr, [context.cast(builder, v, t, arrty.dtype)
                 for v, t in zip(args[2:], sig.args[2:])]


@intrinsic
def _fetch_add(typingctx, arr, idx, val):
    if not _typed(arr, idx, val):
        return None

    def codegen(context, builder, sig, args):
        ptr, (v,) = _operands(context, builder, sig, args)
        return builder.atomic_rmw("add", ptr, v, "seq_cst")

    return arr.dtype(arr, idx, val), codegen


@intrinsic
def _cmpxchg(typingctx, arr, idx, expected, new):
    if not _typed(arr, idx, expected, new):
        return None

    def codegen(context, builder, sig, args):
        ptr, (e, n) = _operands(context, builder, sig, args)
        pair = builder.cmpxchg(ptr, e, n, "seq_cst", "seq_cst")
        return builder.extract_value(pair, 0)

    return arr.dtype(arr, idx, expected, new), codegen


@intrinsic
def _load(typingctx, arr, idx):
    if not _typed(arr, idx):
        return None
    width = arr.dtype.bitwidth // 8

    def codegen(context, builder, sig, args):
        ptr, _ = _operands(context, builder, sig, args)
        return builder.load_atomic(ptr, "seq_cst", width)

    return arr.dtype(arr, idx), codegen


@intrinsic
def _store(typingctx, arr, idx, val):
    if not _typed(arr, idx, val):
        return None
    width = arr.dtype.bitwidth // 8

    def codegen(context, builder, sig, args):
        ptr, (v,) = _operands(context, builder, sig, args)
        builder.store_atomic(v, ptr, "seq_cst", width)
        return context.get_dummy_value()

    return types.void(arr, idx, val), codegen


@njit(**JIT_OPTIONS)
def fetch_add(a, i, v):
    return _fetch_add(a, i, v)


@njit(**JIT_OPTIONS)
def add_many(a, idx, vals):
    for k in range(idx.size):
        _fetch_add(a, idx[k], vals[k])


@njit(**JIT_OPTIONS)
def compare_exchange(a, i, expected, new):
    return _cmpxchg(a, i, expected, new)


@njit(**JIT_OPTIONS)
def load(a, i):
    return _load(a, i)


@njit(**JIT_OPTIONS)
def store(a, i, v):
    _store(a, i, v)
