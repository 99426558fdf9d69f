"""Argument checks a rank can make alone, before any data moves.

Every failure is an InvalidArgumentError naming the argument, what was expected
and what came.
"""
from __future__ import annotations

import numbers
import operator

import numpy as np

from . import kernels
from .errors import InvalidArgumentError, arg_error
from .vocab import REDUCE_OPS


_KNOWN = kernels.dtypes._KNOWN  # dtypes already accepted (canonical_dtype keeps them)


def array(x, name="x") -> np.ndarray:
    if type(x) is np.ndarray and x.dtype in _KNOWN:
        return x
    if not isinstance(x, np.ndarray):
        raise arg_error(name, "a numpy.ndarray", type(x).__name__)
    try:
        kernels.canonical_dtype(x.dtype)
    except ValueError as e:
        raise InvalidArgumentError(f"{name}: unsupported dtype {x.dtype}: {e}") from None
    return x


def rows(x, name="x") -> int:
    if x.ndim == 0:
        raise arg_error(name, "an array with at least one dimension (split along axis 0)",
                        f"a 0-d array of {x.dtype}")
    return x.shape[0]


def row_elems(x) -> int:
    return int(np.prod(x.shape[1:], dtype=np.int64)) if x.ndim else 1


_OPS = frozenset(REDUCE_OPS)


def reduce_op(op) -> str:
    if type(op) is str and op in _OPS:
        return op
    if isinstance(op, str) and op.lower() in REDUCE_OPS:
        return op.lower()
    raise arg_error("op", "one of " + ", ".join(REDUCE_OPS), op)


def integer(v, name, lo=None, hi=None) -> int:
    if type(v) is not int:  # the common case skips the abstract-class checks
        if isinstance(v, bool) or not isinstance(v, (numbers.Integral, np.integer)):
            raise arg_error(name, "an integer", v)
        v = operator.index(v)
    if lo is not None and v < lo or hi is not None and v > hi:
        rng = f"an integer in [{lo}, {hi}]" if hi is not None else f"an integer >= {lo}"
        raise arg_error(name, rng, v)
    return v


def counts(c, n: int, name="counts") -> tuple[int, ...]:
    try:
        seq = list(c)
    except TypeError:
        raise arg_error(name, f"a sequence of {n} non-negative integers", c) from None
    if len(seq) != n:
        raise arg_error(name, f"{n} counts (one per rank)", f"{len(seq)} counts")
    return tuple(integer(v, f"{name}[{i}]", lo=0) for i, v in enumerate(seq))


def out_array(out, shape, dtype, name="out") -> np.ndarray | None:
    if out is None:
        return None
    if not isinstance(out, np.ndarray):
        raise arg_error(name, "a numpy.ndarray or None", type(out).__name__)
    if tuple(out.shape) != tuple(shape):
        raise arg_error(name, f"shape {tuple(shape)}", tuple(out.shape))
    if out.dtype != dtype:
        raise arg_error(name, f"dtype {dtype}", str(out.dtype))
    if not out.flags.writeable:
        raise InvalidArgumentError(f"{name}: expected a writeable array, got a read-only one")
    return out


def rank(v, n: int, name: str) -> int:
    return integer(v, name, lo=0, hi=n - 1)


def pairs(p, n: int, name="pairs") -> tuple[tuple[int, int], ...]:
    try:
        items = tuple(tuple(q) for q in p)
    except TypeError:
        raise arg_error(name, "a list of (src, dst) pairs", p) from None
    # the common case in a few C-level passes (a permute of 64 ranks checked pair by
    # pair costs more than its data); anything unusual takes the path that names it
    if all(len(q) == 2 and type(q[0]) is int and type(q[1]) is int for q in items):
        srcs = {q[0] for q in items}
        dsts = {q[1] for q in items}
        if len(srcs) == len(dsts) == len(items) and \
                (not items or min(min(srcs), min(dsts)) >= 0 and max(max(srcs), max(dsts)) < n):
            return items
    return _pairs_named(items, n, name)


def _pairs_named(items, n: int, name: str) -> tuple[tuple[int, int], ...]:
    srcs, dsts = set(), set()
    out = []
    for i, q in enumerate(items):
        if len(q) != 2:
            raise arg_error(f"{name}[{i}]", "a (src, dst) pair", q)
        s, d = rank(q[0], n, f"{name}[{i}][0]"), rank(q[1], n, f"{name}[{i}][1]")
        if s in srcs:
            raise InvalidArgumentError(
                f"{name}: rank {s} sends more than once (each rank sends to at most one)")
        if d in dsts:
            raise InvalidArgumentError(
                f"{name}: rank {d} receives more than once (each rank receives from at "
                "most one)")
        srcs.add(s)
        dsts.add(d)
        out.append((s, d))
    return tuple(out)


def replica_groups(groups, n: int, name="replica_groups") -> list[list[int]]:
    try:
        gs = [list(g) for g in groups]
    except TypeError:
        raise arg_error(name, "a list of lists of ranks", groups) from None
    seen = set()
    out = []
    for i, g in enumerate(gs):
        if not g:
            raise arg_error(f"{name}[{i}]", "a non-empty group", g)
        members = []
        for r in g:
            r = rank(r, n, f"{name}[{i}]")
            if r in seen:
                where = f"twice in group {i}" if r in members else "in more than one group"
                raise InvalidArgumentError(f"{name}: rank {r} appears {where}")
            seen.add(r)
            members.append(r)
        out.append(members)
    return out
