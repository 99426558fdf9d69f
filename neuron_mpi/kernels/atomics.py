"""Atomic operations on integer words of (shared) numpy arrays, for Python callers
(the engine's doorbells and claim word, the link ledger, the boards):

    fetch_add(a, i, v)          old = a[i]; a[i] += v     (atomically) -> old
    add_many(a, idx, vals)      a[idx[k]] += vals[k] for every k, each atomic
    compare_exchange(a, i, e, n) if a[i] == e: a[i] = n   (atomically) -> old
    load(a, i) / store(a, i, v) sequentially consistent load and store

``a`` is a 1-D C-contiguous int32 or int64 array (a view into an mmap works);
``add_many`` takes int64 arrays. They come from the module built ahead of time
(kernels.aot) when there is one, else from numba (kernels/atomic_ops.py, which
also holds the intrinsics compiled code uses).
"""
from __future__ import annotations

import sys


def _bind():
    from . import aot

    impl = aot.load()
    if impl is None:
        from . import atomic_ops as impl

        return impl.fetch_add, impl.fetch_add, impl.compare_exchange, \
            impl.compare_exchange, impl.load, impl.load, impl.store, impl.store, impl.add_many
    return impl.fetch_add_i32, impl.fetch_add_i64, impl.compare_exchange_i32, \
        impl.compare_exchange_i64, impl.load_i32, impl.load_i64, impl.store_i32, \
        impl.store_i64, impl.add_many


(_fetch_add32, _fetch_add64, _cas32, _cas64, _load32, _load64, _store32, _store64,
 add_many) = _bind()


def fetch_add(a, i, v):
    return (_fetch_add32 if a.itemsize == 4 else _fetch_add64)(a, i, v)


def compare_exchange(a, i, expected, new):
    return (_cas32 if a.itemsize == 4 else _cas64)(a, i, expected, new)


def load(a, i):
    return (_load32 if a.itemsize == 4 else _load64)(a, i)


def store(a, i, v):
    (_store32 if a.itemsize == 4 else _store64)(a, i, v)


def warm(jit: bool = False) -> int:
    """Call every specialisation the transport uses once (numba compiles them, or
    loads them from its cache); returns how many. ``jit``: numba's even when a module
    built ahead of time is bound here."""
    import numpy as np

    if jit:
        from . import atomic_ops as f
    else:
        f = sys.modules[__name__]
    n = 0
    for dt in (np.int32, np.int64):
        a = np.zeros(2, dt)
        f.fetch_add(a, 0, 1)
        f.compare_exchange(a, 0, 1, 2)
        f.load(a, 0)
        f.store(a, 1, 3)
        n += 4
    f.add_many(np.zeros(2, np.int64), np.zeros(1, np.int64), np.ones(1, np.int64))
    return n + 1
