"""Buffer specs of the mpi4py facade: what mpi4py accepts as a message
(``buf``, ``(buf, datatype)``, ``(buf, count, datatype)``, the -v forms) read into
numpy arrays over the same memory, and the helpers that place -v results."""
from __future__ import annotations

import numpy as np
from mpi4py import MPI as _MPI
from mpi4py.util.dtlib import to_numpy_dtype

from ..errors import InvalidArgumentError


def is_in_place(spec) -> bool:
    """MPI.IN_PLACE, or None, which mpi4py reads as MPI.IN_PLACE where it applies."""
    return spec is _MPI.IN_PLACE or spec is None


def array_of(obj, name) -> np.ndarray:
    """A 1-D numpy array over the memory of ``obj`` (no copy): numpy arrays as they
    are, other buffers through the buffer protocol, DLPack and the CUDA array
    interface on host memory through mpi4py's own ``MPI.buffer`` (as bytes)."""
    if isinstance(obj, np.ndarray):
        a = obj
    elif _has_buffer(obj):
        mv = memoryview(obj)
        a = np.asarray(mv) if mv.format not in ("", "B") or mv.ndim > 1 else \
            np.frombuffer(mv, np.uint8) if not mv.readonly else np.frombuffer(mv, np.uint8)
    else:
        try:
            a = np.frombuffer(_MPI.buffer(obj), np.uint8)
        except (TypeError, ValueError, BufferError):
            raise InvalidArgumentError(
                f"{name}: expected a buffer (numpy array, array.array, bytearray, DLPack "
                f"object) or a (buffer, datatype) spec, got {type(obj).__name__}") from None
    if a.ndim != 1:
        if not a.flags.c_contiguous:
            raise InvalidArgumentError(f"{name}: expected a contiguous buffer")
        a = a.reshape(-1)
    elif a.strides[0] != a.itemsize and a.size > 1:
        raise InvalidArgumentError(f"{name}: expected a contiguous buffer")
    return a


def _has_buffer(obj) -> bool:
    try:
        memoryview(obj)
        return True
    except TypeError:
        return False


class Msg:
    """A parsed buffer spec: ``a`` the elements (1-D, the datatype's dtype), the
    explicit count (or None), the -v counts and displacements (or None)."""

    def __init__(self, spec, name):
        self.name = name
        count = counts = displs = dtype = None
        if isinstance(spec, (tuple, list)):
            items = list(spec)
            if not items:
                raise InvalidArgumentError(f"{name}: an empty buffer spec")
            buf, rest = items[0], items[1:]
            if rest and isinstance(rest[-1], _MPI.Datatype):
                dtype = rest.pop()
            elif rest and isinstance(rest[-1], str):
                dtype = np.dtype(rest.pop())  # a typecode: "f", "i", "d" ...
            if len(rest) == 1:
                c = rest[0]
                if isinstance(c, tuple) and len(c) == 2 and not isinstance(c[0], int):
                    counts, displs = c
                elif isinstance(c, tuple) and len(c) == 2:
                    count, displs = c  # (count, displacement) of a block spec
                    displs = None if not displs else displs
                    if displs:
                        raise NotImplementedError(
                            f"{name}: a displacement in a block buffer spec is not emulated")
                elif isinstance(c, (list, tuple, np.ndarray)):
                    counts = c
                elif c is not None:
                    count = whole(c, name, "count")
            elif len(rest) == 2:
                counts, displs = rest
            elif len(rest) > 2:
                raise InvalidArgumentError(f"{name}: too many items in the buffer spec")
        else:
            buf = spec
        if buf is _MPI.BOTTOM or buf is None and count:
            raise NotImplementedError(
                f"{name}: MPI.BOTTOM and absolute addresses (derived datatypes) are not "
                "emulated")
        a = np.empty(0, np.uint8) if buf is None else array_of(buf, name)  # (None: empty)
        if dtype is not None:
            if isinstance(dtype, np.dtype):
                dt = dtype
            elif not dtype.is_predefined:
                raise NotImplementedError(
                    f"{name}: derived datatypes are not emulated (only predefined ones, "
                    f"e.g. MPI.FLOAT); got a derived datatype {dtype!r}")
            else:
                dt = to_numpy_dtype(dtype)
            b = a.view(np.uint8)
            if b.size % dt.itemsize:
                raise InvalidArgumentError(
                    f"{name}: {b.size} bytes is not a whole number of {dt} elements")
            a = b.view(dt)
        self.a = a
        if count is not None and not 0 <= count <= a.size:
            raise InvalidArgumentError(
                f"{name}: count {count} is outside the buffer's {a.size} elements")
        self.count = count
        self.counts = None if counts is None else [whole(c, name, "counts") for c in counts]
        self.displs = None if displs is None else [whole(d, name, "displs") for d in displs]

    @property
    def dtype(self):
        return self.a.dtype

    def block(self, size: int) -> int:
        """Elements per process of a gathered/scattered buffer."""
        if self.count is not None:
            return self.count
        if self.a.size % size:
            raise InvalidArgumentError(
                f"{self.name}: {self.a.size} elements do not divide evenly among {size} "
                "processes")
        return self.a.size // size

    def total(self) -> int:
        return self.a.size if self.count is None else self.count

    def elems(self) -> np.ndarray:
        return self.a[:self.total()]

    def v(self, size: int, default_counts=None):
        counts = self.counts if self.counts is not None else default_counts
        if counts is None:
            b = self.block(size)
            counts = [b] * size
        if len(counts) != size:
            raise InvalidArgumentError(f"{self.name}: expected {size} counts, got {len(counts)}")
        displs = self.displs
        if displs is None:
            displs = list(np.cumsum([0] + list(counts[:-1])))
        elif len(displs) != size:
            raise InvalidArgumentError(
                f"{self.name}: expected {size} displacements, got {len(displs)}")
        counts, displs = [int(c) for c in counts], [int(d) for d in displs]
        for k, (c, d) in enumerate(zip(counts, displs)):
            if c < 0 or d < 0 or d + c > self.a.size:
                raise InvalidArgumentError(
                    f"{self.name}: block {k} (count {c} at displacement {d}) is outside "
                    f"the buffer's {self.a.size} elements")
        return counts, displs


def whole(v, name, what) -> int:
    """A count or displacement of a buffer spec, as an int (a clear error if not)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise InvalidArgumentError(
            f"{name}: {what} must be integers, got {type(v).__name__} {v!r}")
    return int(v)


def as_bytes(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint8)


def real_parts(a: np.ndarray) -> np.ndarray:
    return a.view(np.float32 if a.dtype == np.complex64 else np.float64)


def place(dst: np.ndarray, flat: np.ndarray, counts, displs) -> None:
    off = 0
    for k, d in zip(counts, displs):
        dst[d:d + k] = flat[off:off + k]
        off += k
