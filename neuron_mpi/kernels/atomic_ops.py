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


def _int_array(arrty):
    return (isinstance(arrty, types.Array) and arrty.ndim == 1 and arrty.dtype in _INTS)


@intrinsic
def _fetch_add(typingctx, arr, idx, val):
    if not (_int_array(arr) and isinstance(idx, types.Integer)
            and isinstance(val, types.Integer)):
        return None
    dt = arr.dtype

    def codegen(context, builder, sig, args):
        a, i, v = args
        i = context.cast(builder, i, sig.args[1], types.intp)
        v = context.cast(builder, v, sig.args[2], dt)
        ptr = _ptr(context, builder, sig.args[0], a, i)
        return builder.atomic_rmw("add", ptr, v, "seq_cst")

    return dt(arr, idx, val), codegen


@intrinsic
def _cmpxchg(typingctx, arr, idx, expected, new):
    if not (_int_array(arr) and isinstance(idx, types.Integer)
            and isinstance(expected, types.Integer) and isinstance(new, types.Integer)):
        return None
    dt = arr.dtype

    def codegen(context, builder, sig, args):
        a, i, e, n = args
        i = context.cast(builder, i, sig.args[1], types.intp)
        e = context.cast(builder, e, sig.args[2], dt)
        n = context.cast(builder, n, sig.args[3], dt)
        ptr = _ptr(context, builder, sig.args[0], a, i)
        pair = builder.cmpxchg(ptr, e, n, "seq_cst", "seq_cst")
        return builder.extract_value(pair, 0)

    return dt(arr, idx, expected, new), codegen


@intrinsic
def _load(typingctx, arr, idx):
    if not (_int_array(arr) and isinstance(idx, types.Integer)):
        return None
    dt = arr.dtype

    def codegen(context, builder, sig, args):
        a, i = args
        i = context.cast(builder, i, sig.args[1], types.intp)
        ptr = _ptr(context, builder, sig.args[0], a, i)
        return builder.load_atomic(ptr, "seq_cst", dt.bitwidth // 8)

    return dt(arr, idx), codegen


@intrinsic
def _store(typingctx, arr, idx, val):
    if not (_int_array(arr) and isinstance(idx, types.Integer)
            and isinstance(val, types.Integer)):
        return None
    dt = arr.dtype

    def codegen(context, builder, sig, args):
        a, i, v = args
        i = context.cast(builder, i, sig.args[1], types.intp)
        v = context.cast(builder, v, sig.args[2], dt)
        ptr = _ptr(context, builder, sig.args[0], a, i)
        builder.store_atomic(v, ptr, "seq_cst", dt.bitwidth // 8)
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
