"""Derived datatypes in the mpi4py facade's buffer specs.

A message whose datatype is derived (``MPI.DOUBLE.Create_vector(...).Commit()``,
Create_subarray, Create_struct, Create_resized and the rest, built by the real MPI
underneath) travels as its packed bytes: the type signature's elements in typemap
order, as MPI_Pack lays them out. The sender packs, the receiver unpacks into its
own layout, so a column sent as a vector type may be received as contiguous
doubles, as MPI allows for matching signatures.

The typemap is read once per datatype (kept as an attribute of it, which the MPI
underneath drops when the type is freed): decoded from its combiner
(MPI_Type_get_contents) down to the named types as contiguous runs of bytes, or,
for what is not decoded (darray, named types with gaps), by packing one element
with the real MPI_Pack over a probe region whose bytes spell their own offsets.
Packing and unpacking are then numpy copies: one strided 2-d copy per contiguous
run, or a gather through an index array (``Layout.map[p]``: the offset of packed
byte ``p``) when the runs are many.

``lower(spec, name, kind, size)`` turns a spec with a derived datatype into one with
the packed bytes and a predefined element type (the signature's own when all its
elements are alike, else bytes), which the facade's ordinary code moves, and what
writes a result back into the user's buffer. Kinds: "whole" (a message of count
elements), "block" (a gathered or scattered buffer: count per process), "v" (a -v
buffer: counts per process, displacements in extents).
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI as _MPI
from mpi4py.util.dtlib import to_numpy_dtype

from ..errors import InvalidArgumentError
from .buffers import Msg, _ints, array_of, as_bytes, split_spec, spread, whole

#: at most this many contiguous runs per element: copied run by run (more: gathered
#: through an index array)
RUNS = 32


class Layout:
    """The typemap of a committed derived datatype: ``size`` packed bytes per element,
    ``extent`` bytes between elements, its contiguous runs of bytes in typemap order
    (``off``, ``ln``: offsets from the buffer's start and lengths; ``runs``: with
    their packed positions, when few), ``map`` the offset of each packed byte (made
    when first needed), ``base`` the numpy type of its elements (bytes when they
    differ)."""

    def __init__(self, t, name: str):
        self.size, self.extent = int(t.Get_size()), int(t.Get_extent()[1])
        if self.extent <= 0:
            raise NotImplementedError(
                f"{name}: a derived datatype of extent {self.extent} is not emulated")
        _committed(t, name)
        off, ln = _runs(t, name)
        if int(ln.sum()) != self.size:  # (a decoding this module got wrong: ask MPI)
            off, ln = _probe_runs(t, name, self.size, self.extent)
        self.off, self.ln = off, ln
        self.pos = np.concatenate([[0], np.cumsum(ln)[:-1]]).astype(np.int64) if ln.size \
            else np.empty(0, np.int64)
        self.lo = int(off.min()) if ln.size else 0
        self.hi = int((off + ln).max()) if ln.size else 0
        self.runs = [(int(p), int(o), int(n)) for p, o, n in zip(self.pos, off, ln)] \
            if ln.size <= RUNS else None
        self._map = None
        self.base = _element(t, self.size)

    @property
    def map(self) -> np.ndarray:
        if self._map is None:
            self._map = np.repeat(self.off - self.pos, self.ln) + np.arange(self.size)
        return self._map

    def reach(self, count: int, start: int) -> tuple[int, int]:
        """The bytes [lo, hi) that ``count`` elements from byte ``start`` touch."""
        if count <= 0 or not self.size:
            return start, start
        return start + self.lo, start + (count - 1) * self.extent + self.hi

    def _views(self, b: np.ndarray, count: int, start: int, writeable: bool):
        for p, off, n in self.runs:
            yield p, n, np.lib.stride_tricks.as_strided(
                b[start + off:], shape=(count, n), strides=(self.extent, 1),
                writeable=writeable)

    def _index(self, count: int, start: int) -> np.ndarray:
        steps = start + np.arange(count, dtype=np.int64)[:, None] * self.extent
        return (steps + self.map[None, :]).reshape(-1)

    def pack(self, b: np.ndarray, count: int, start: int) -> np.ndarray:
        """``count`` elements from byte ``start`` of ``b`` (bytes), packed."""
        out = np.empty((count, self.size), np.uint8)
        if count and self.size:
            if self.runs is not None:
                for p, n, v in self._views(b, count, start, False):
                    out[:, p:p + n] = v
            else:
                out.reshape(-1)[:] = b[self._index(count, start)]
        return out.reshape(-1)

    def unpack(self, packed: np.ndarray, b: np.ndarray, count: int, start: int,
               tail: int = 0) -> None:
        """The first ``count`` packed elements of ``packed`` into ``b`` from byte
        ``start``, and ``tail`` bytes of the next (a receive that ended inside it:
        MPI places the basic elements that came)."""
        if count and self.size:
            rows = packed[:count * self.size].reshape(count, self.size)
            if self.runs is not None:
                for p, n, v in self._views(b, count, start, True):
                    v[...] = rows[:, p:p + n]
            else:
                b[self._index(count, start)] = rows.reshape(-1)
        if tail:
            at = start + count * self.extent + self.map[:tail]
            b[at] = packed[count * self.size:count * self.size + tail]


def _committed(t, name: str) -> None:
    """MPI.Exception(ERR_TYPE) naming the argument if ``t`` is not committed (the
    real MPI_Pack of no element refuses it)."""
    try:
        t.Pack(np.empty(0, np.uint8), np.empty(0, np.uint8), 0, _MPI.COMM_SELF)
    except _MPI.Exception as e:
        if e.Get_error_class() == _MPI.ERR_TYPE:
            from .requests import MPIError

            raise MPIError(f"{name}: the derived datatype is not committed (call its "
                           "Commit() before using it in a message)", _MPI.ERR_TYPE) from None
        raise


#: the largest true extent whose typemap a probe of MPI_Pack reads (the combiners
#: _runs does not decode: darray, named types with gaps)
PROBE_MAX = 1 << 26


def _runs(t, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, lengths) of the contiguous byte runs of one element of ``t``, in
    typemap order, decoded from its combiner (MPI_Type_get_contents) down to the
    named types; what it does not decode is read by a probe of MPI_Pack."""
    if t.is_predefined:
        size = int(t.Get_size())
        if tuple(t.Get_true_extent()) == (0, size):  # (no gaps: one run)
            return np.zeros(1, np.int64), np.full(1, size, np.int64)
        return _probe_runs(t, name, size, int(t.Get_extent()[1]))
    base, comb, p = t.decode()
    subs = p.get("datatypes") or [base]
    try:
        if comb == "STRUCT":
            off, ln = [], []
            for k, (n, d, s) in enumerate(zip(p["blocklengths"], p["displacements"], subs)):
                o, l = _runs(s, name)
                shifts = d + np.arange(n, dtype=np.int64) * int(s.Get_extent()[1])
                off.append((shifts[:, None] + o[None, :]).reshape(-1))
                ln.append(np.tile(l, n))
            return _merged(np.concatenate(off) if off else np.empty(0, np.int64),
                           np.concatenate(ln) if ln else np.empty(0, np.int64))
        e = int(base.Get_extent()[1])
        i64 = np.int64
        if comb in ("DUP", "RESIZED"):
            shifts = np.zeros(1, i64)
        elif comb == "CONTIGUOUS":
            shifts = np.arange(p["count"], dtype=i64) * e
        elif comb in ("VECTOR", "HVECTOR"):
            step = p["stride"] * (e if comb == "VECTOR" else 1)
            shifts = (np.arange(p["count"], dtype=i64)[:, None] * step +
                      np.arange(p["blocklength"], dtype=i64)[None, :] * e).reshape(-1)
        elif comb in ("INDEXED", "HINDEXED", "INDEXED_BLOCK", "HINDEXED_BLOCK"):
            unit = e if comb in ("INDEXED", "INDEXED_BLOCK") else 1
            lens = p.get("blocklengths") or [p["blocklength"]] * len(p["displacements"])
            shifts = np.concatenate(
                [d * unit + np.arange(n, dtype=i64) * e
                 for n, d in zip(lens, p["displacements"])] or [np.empty(0, i64)])
        elif comb == "SUBARRAY":
            sizes, sub, st = p["sizes"], p["subsizes"], p["starts"]
            dims = range(len(sizes))
            if p["order"] == _MPI.ORDER_FORTRAN:  # (the first dimension fastest)
                sizes, sub, st = sizes[::-1], sub[::-1], st[::-1]
            strides = [int(np.prod(sizes[d + 1:], dtype=i64)) * e for d in dims]
            shifts = np.zeros(1, i64)
            for d in dims:  # (the last dimension fastest)
                shifts = (shifts[:, None] + ((st[d] + np.arange(sub[d], dtype=i64)) *
                                             strides[d])[None, :]).reshape(-1)
        else:  # DARRAY and the rest: ask MPI
            return _probe_runs(t, name, int(t.Get_size()), int(t.Get_extent()[1]))
        o, l = _runs(base, name)
        return _merged((shifts[:, None] + o[None, :]).reshape(-1), np.tile(l, shifts.size))
    finally:
        for s in subs:
            if not s.is_predefined:
                s.Free()  # (MPI_Type_get_contents' new handle)


def _merged(off: np.ndarray, ln: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs that continue one another joined; empty ones dropped."""
    keep = ln > 0
    off, ln = off[keep], ln[keep]
    if off.size < 2:
        return off, ln
    new = np.concatenate([[True], off[1:] != off[:-1] + ln[:-1]])
    at = np.flatnonzero(new)
    return off[at], np.add.reduceat(ln, at)


def _probe_runs(t, name: str, size: int, extent: int) -> tuple[np.ndarray, np.ndarray]:
    true_extent = int(t.Get_true_extent()[1])
    if true_extent > PROBE_MAX:
        raise NotImplementedError(
            f"{name}: a datatype of this combiner spanning {true_extent} bytes is not "
            "emulated")
    m = _typemap(t, name, size, extent)
    if not m.size:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    at = np.flatnonzero(np.concatenate([[True], m[1:] != m[:-1] + 1]))
    return m[at], np.diff(np.concatenate([at, [m.size]]))


def _typemap(t, name: str, size: int, extent: int) -> np.ndarray:
    """Where each packed byte of one element of ``t`` comes from (offsets from the
    buffer's start, absolute addresses for a type of MPI.BOTTOM), found by the real
    MPI_Pack over a probe region whose bytes spell their own offsets, one byte
    plane at a time; the probe covers the type's true extent, at the address its
    true lower bound gives from the start passed to MPI_Pack. A packed byte MPI_Pack
    leaves unwritten (the padding of an x87 long double, of which Open MPI packs 10
    of 16 bytes) is taken as the byte after the one before it: the padding travels
    too, harmlessly."""
    import ctypes

    true_lb, true_extent = (int(v) for v in t.Get_true_extent())
    n = max(true_extent, 1)
    probe = np.empty(n, np.uint8)  # (the bytes [true_lb, true_lb + n) from the start)
    start = (ctypes.c_char * extent).from_address((probe.ctypes.data - true_lb) % (1 << 64))
    found = np.zeros(size, np.int64)
    written = np.ones(size, bool)
    packed = np.empty(size, np.uint8)
    for j in range(max(1, (int(n - 1).bit_length() + 7) // 8)):
        for lo in range(0, n, 1 << 20):  # (byte plane j of each offset, a MiB at a time)
            at = np.arange(lo, min(n, lo + (1 << 20)), dtype=np.int64)
            probe[lo:lo + at.size] = (at >> (8 * j)) & 0xFF
        got = []
        for fill in (0x00, 0xFF):
            packed.fill(fill)
            try:
                t.Pack(start, packed, 0, _MPI.COMM_SELF)
            except _MPI.Exception as e:
                if e.Get_error_class() == _MPI.ERR_TYPE:
                    from .requests import MPIError

                    raise MPIError(
                        f"{name}: the derived datatype is not committed (call its "
                        "Commit() before using it in a message)", _MPI.ERR_TYPE) from None
                raise
            got.append(packed.copy())
        written &= got[0] == got[1]
        found |= got[0].astype(np.int64) << (8 * j)
    found += true_lb
    if not written.all():
        known = np.flatnonzero(written)
        if not known.size:
            raise NotImplementedError(f"{name}: a datatype MPI_Pack writes no byte of")
        at = np.maximum.accumulate(np.where(written, np.arange(size), -1))
        at[at < 0] = known[0]  # (before the first byte written: counted back from it)
        found = found[at] + (np.arange(size) - at)
    return found


def _element(t, size: int) -> np.dtype:
    """The numpy type of the elements of ``t``'s signature when they are all alike,
    else bytes."""
    leaves: set = set()
    try:
        _leaves(t, leaves)
    except (ValueError, KeyError, TypeError, NotImplementedError, _MPI.Exception):
        return np.dtype(np.uint8)
    if len(leaves) == 1:
        (e,) = leaves
        if e.itemsize and size % e.itemsize == 0 and e.kind in "biufc":
            return e
    return np.dtype(np.uint8)


def _leaves(t, out: set) -> None:
    """The numpy types of the named datatypes ``t`` is built of, into ``out``."""
    if t.is_predefined:
        def walk(d):
            if d.subdtype is not None:
                walk(d.subdtype[0])
            elif d.fields:
                for f in d.fields.values():
                    walk(f[0])
            else:
                out.add(d)
        walk(to_numpy_dtype(t))
        return
    base, _, params = t.decode()  # (the type it is built of; a struct's: its list)
    subs = params.get("datatypes") or [base]
    for s in subs:
        try:
            _leaves(s, out)
        finally:
            if not s.is_predefined:
                s.Free()  # (MPI_Type_get_contents' new handle)


def is_derived(spec) -> bool:
    """Whether a buffer spec names a derived (not predefined) MPI datatype."""
    if not isinstance(spec, (tuple, list)) or len(spec) < 2:
        return False
    return is_derived_type(spec[-1])


def is_derived_type(t) -> bool:
    return isinstance(t, _MPI.Datatype) and not t.is_predefined and t != _MPI.DATATYPE_NULL


_KEYVAL = None


def layout(t, name: str) -> Layout:
    """The Layout of ``t``, kept as an attribute of the datatype (the MPI underneath
    drops it when the type is freed, and a Dup does not copy it)."""
    global _KEYVAL
    if _KEYVAL is None:
        _KEYVAL = _MPI.Datatype.Create_keyval()
    got = t.Get_attr(_KEYVAL)
    if got is None:
        got = Layout(t, name)
        t.Set_attr(_KEYVAL, got)
    return got


def lower(spec, name: str, kind: str, size: int, writeable: bool = False,
          fill: bool = True):
    """(the same message as a spec of packed bytes in a predefined element type,
    what writes the packed buffer back into the user's: call it once the call's
    result is in it). ``kind``: "whole", "block" or "v" (module docstring);
    ``size``: the communicator's processes; ``writeable``: the buffer will be
    written (checked now, before anything moves); ``fill``: the packed buffer
    starts as the user's contents (else uninitialised: a receive's, whose settle
    unpacks only what it took)."""
    buf, c, d, t = split_spec(spec, name, kind == "v")
    lay = layout(t, name)
    bottom = buf is _MPI.BOTTOM  # (the type's displacements are addresses)
    b, origin = (np.empty(0, np.uint8), 0) if bottom else memory(buf, name)
    if writeable and not b.flags.writeable:
        raise InvalidArgumentError(f"{name}: expected a writeable buffer, got a read-only one")
    k = lay.size // lay.base.itemsize  # (packed elements of the base type per element)
    # (a count left out: the elements the view passed holds, as mpi4py infers it)
    held = 0 if bottom else array_of(buf, name).nbytes
    if c is None and held % lay.extent:
        raise InvalidArgumentError(
            f"{name}: cannot infer the count: {held} bytes are not a whole number of "
            f"the datatype's extent, {lay.extent} bytes")
    fits = held // lay.extent
    if kind == "v":
        counts, displs = spread(_ints(c, name, "counts"), _ints(d, name, "displs"),
                                fits, size, name)
    else:
        n = fits if c is None else whole(c, name, "count")
        start = 0 if d is None else whole(d, name, "displacement") * lay.extent
        if kind == "block" and not size:  # (no neighbours)
            counts, displs = [], []
        elif kind == "block":
            if c is None and n % size:
                raise InvalidArgumentError(
                    f"{name}: {n} elements do not divide evenly among {size} processes")
            per = n // size if c is None else n
            counts, displs = [per] * size, [start // lay.extent + per * i for i in range(size)]
        else:
            counts, displs = [n], [start // lay.extent]
    if bottom:
        b, origin = addressed([lay.reach(cj, dj * lay.extent) for cj, dj in zip(counts, displs)])
    for j, (cj, dj) in enumerate(zip(counts, displs)):
        lo, hi = lay.reach(cj, origin + dj * lay.extent)
        if cj < 0 or cj and (lo < 0 or hi > b.size):  # (a displacement may be < 0)
            what = f"block {j} ({cj} elements at displacement {dj})" if kind != "whole" \
                else f"{cj} elements"
            raise InvalidArgumentError(
                f"{name}: {what} of the derived datatype reach bytes [{lo - origin}, "
                f"{hi - origin}) from the buffer's start, outside its memory (bytes "
                f"[{-origin}, {b.size - origin}))")
    if fill:
        packed = np.concatenate([lay.pack(b, cj, origin + dj * lay.extent)
                                 for cj, dj in zip(counts, displs)])
    else:
        packed = np.empty(sum(counts) * lay.size, np.uint8)
    a = packed.view(lay.base)
    if kind == "whole":
        new = (a, a.size, lay.base)
    elif kind == "block":
        new = (a, counts[0] * k, lay.base)
    else:
        new = (a, ([cj * k for cj in counts], None), lay.base)

    def settle(nbytes=None):
        """Unpack into the user's buffer (``nbytes``: only the first nbytes packed
        bytes, those a receive took, a last element in part as MPI places it)."""
        off = 0
        left = None if nbytes is None else nbytes  # (bytes still to place)
        for cj, dj in zip(counts, displs):
            m, tail = cj, 0
            if left is not None:
                m = min(cj, left // lay.size) if lay.size else 0
                tail = left - m * lay.size if m < cj else 0
                left -= m * lay.size + tail
            lay.unpack(packed[off:], b, m, origin + dj * lay.extent, tail)
            off += cj * lay.size
    return new, settle


def outgoing(buf, name: str, fill: bool = True) -> np.ndarray:
    """A send's bytes: the buffer's own (a view), or a derived datatype's packed
    (``fill`` False: only checked, as a persistent send's at its init)."""
    if is_derived(buf):
        return as_bytes(lower(buf, name, "whole", 1, fill=fill)[0][0])
    return as_bytes(Msg(buf, name).elems())


def landing(buf, name: str) -> tuple:
    """A receive's buffer as bytes, checked writeable before anything is taken, and
    what to call with the bytes received once they are in it (None: nothing to do;
    a derived datatype's: unpack the whole elements received into ``buf``)."""
    if is_derived(buf):
        (a, _, _), settle = lower(buf, name, "whole", 1, writeable=True, fill=False)
        return as_bytes(a), settle
    out = as_bytes(Msg(buf, name).elems())
    if not out.flags.writeable:
        raise InvalidArgumentError(f"{name}: expected a writeable buffer, got a read-only one")
    return out, None


#: roles of a collective's buffer argument: read, written, read or written by the
#: root only, read on the root and written elsewhere
ROLES = ("send", "recv", "root-send", "root-recv", "bcast")


def derived(**arguments):
    """A collective method whose buffer ``arguments`` (name -> (role, kind): ROLES,
    lower's kinds; or (role, kind, "in" / "out"): blocks per in- or out-neighbour of
    a topology, not per process) may name derived datatypes: each such spec is
    lowered to its packed bytes before the method runs, and what the call wrote is unpacked into
    the user's buffer after it (a blocking call's at its return, an I-call's at its
    Wait). Calls without a derived datatype run as they are."""
    import functools
    import inspect

    from .requests import Request

    def deco(fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            for v in (*args, *kwargs.values()):
                if isinstance(v, (tuple, list)) and is_derived(v):
                    break
            else:
                return fn(self, *args, **kwargs)
            bound = sig.bind(self, *args, **kwargs)
            bound.apply_defaults()
            c = self._c
            root = bound.arguments.get("root")
            settles = []
            for name, (role, kind, *over) in arguments.items():
                spec = bound.arguments[name]
                if not is_derived(spec) or role.startswith("root-") and c.rank != root:
                    continue
                writes = role in ("recv", "root-recv") or role == "bcast" and c.rank != root
                n = len(self._inout()[over[0] == "out"]) if over else c.size
                bound.arguments[name], settle = lower(spec, name, kind, n, writes)
                if writes:
                    settles.append(settle)
            res = fn(*bound.args, **bound.kwargs)

            def settle_all():
                for s in settles:
                    s()
            if isinstance(res, Request) and res._run is not None:
                run = res._run
                res._run = lambda: (run(), settle_all())
            elif settles:
                settle_all()
            return res
        return wrapper
    return deco


def memory(buf, name: str) -> tuple[np.ndarray, int]:
    """(the bytes of the whole allocation ``buf`` lies in, the offset of ``buf``'s
    start in them): a derived datatype's elements may reach past the (contiguous)
    view passed (``g[0, 4:]`` with a column type: MPI reads from the address
    alone), within the numpy array it is a view of. A view that is read-only gives
    read-only bytes."""
    a = array_of(buf, name)  # (contiguous, as mpi4py requires)
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root.flags.c_contiguous or root.flags.f_contiguous:
        whole_ = np.ravel(root, order="K").view(np.uint8)
        origin = a.ctypes.data - root.ctypes.data
        if 0 <= origin <= whole_.size and np.shares_memory(whole_, root):
            if not a.flags.writeable and whole_.flags.writeable:
                whole_ = whole_.view()
                whole_.flags.writeable = False
            return whole_, origin
    return as_bytes(array_of(buf, name)), 0


def addressed(reaches) -> tuple[np.ndarray, int]:
    """MPI.BOTTOM's memory: (the bytes from the lowest to the highest address the
    ``reaches`` [lo, hi) touch, the offset of address 0 in them). The addresses
    are the user's (MPI.Get_address of their buffers, in the datatypes), read and
    written only where the typemaps say, as MPI does."""
    import ctypes

    spans = [(lo, hi) for lo, hi in reaches if hi > lo]
    if not spans:
        return np.empty(0, np.uint8), 0
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    if lo <= 0:
        raise InvalidArgumentError("buf: MPI.BOTTOM with a datatype whose displacements "
                                   "are not addresses (MPI.Get_address)")
    return np.frombuffer((ctypes.c_uint8 * (hi - lo)).from_address(lo), np.uint8), -lo
