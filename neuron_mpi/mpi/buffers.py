"""Buffer specs of the mpi4py facade: what mpi4py accepts as a message
(``buf``, ``(buf, datatype)``, ``(buf, count, datatype)``, the -v forms) read into
numpy arrays over the same memory, and the helpers that place -v results."""
from __future__ import annotations

import functools

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
    interface on host memory through mpi4py's own ``MPI.buffer``, in the element
    type the object declares."""
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
        dt = _element_type(obj)  # (as mpi4py infers the datatype from the object)
        if dt is not None and a.size % dt.itemsize == 0:
            a = a.view(dt)
    if a.ndim != 1:
        if not a.flags.c_contiguous:
            raise InvalidArgumentError(f"{name}: expected a contiguous buffer")
        a = a.reshape(-1)
    elif a.strides[0] != a.itemsize and a.size > 1:
        raise InvalidArgumentError(f"{name}: expected a contiguous buffer")
    return a


def _element_type(obj):
    """The element type a DLPack or CUDA-array-interface object declares, or None."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    if isinstance(cai, dict) and "typestr" in cai:
        try:
            return np.dtype(cai["typestr"])
        except TypeError:
            return None
    if hasattr(obj, "__dlpack__"):
        try:
            return _dlpack_dtype(obj.__dlpack__())
        except Exception:  # (an exporter's own failure: mpi4py's buffer reports it)
            return None
    return None


_DL_KINDS = {0: "i", 1: "u", 2: "f", 5: "c"}


def _dlpack_dtype(capsule):
    """The element type in a DLPack capsule's DLTensor, read in place (the capsule
    is not consumed: its destructor frees the tensor, as for any capsule unused)."""
    import ctypes

    is_valid, get_pointer = _capsule_api()
    # DLManagedTensor: the DLTensor first; DLManagedTensorVersioned: after its
    # version, manager context, deleter and flags (32 bytes). In the DLTensor the
    # data type (code, bits, lanes) follows data, device and ndim (20 bytes).
    for name, at in ((b"dltensor", 0), (b"dltensor_versioned", 32)):
        if is_valid(capsule, name):
            base = get_pointer(capsule, name)
            code, bits, lanes = (ctypes.c_uint8.from_address(base + at + 20).value,
                                 ctypes.c_uint8.from_address(base + at + 21).value,
                                 ctypes.c_uint16.from_address(base + at + 22).value)
            if lanes == 2 and code == 2:  # (two float lanes: the complex type)
                return np.dtype(f"c{bits // 4}")
            if lanes != 1:
                return None
            if code == 6 and bits == 8:
                return np.dtype(np.bool_)
            if code == 4 and bits == 16:
                import ml_dtypes
                return np.dtype(ml_dtypes.bfloat16)
            kind = _DL_KINDS.get(code)
            return None if kind is None else np.dtype(f"{kind}{bits // 8}")
    return None


@functools.cache
def _capsule_api() -> tuple:
    """PyCapsule_IsValid and PyCapsule_GetPointer as function pointers of our own,
    made once: setting argtypes on ``ctypes.pythonapi``'s shared ones would change
    them for every other user of ctypes in the process."""
    import ctypes

    api = ctypes.pythonapi
    is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
    return is_valid(("PyCapsule_IsValid", api)), get_pointer(("PyCapsule_GetPointer", api))


def _has_buffer(obj) -> bool:
    try:
        memoryview(obj)
        return True
    except TypeError:
        return False


def split_spec(spec, name, vector=False) -> tuple:
    """A buffer spec's items, as mpi4py reads a list or tuple of 2 to 4: (buffer,
    count(s) or None, displacement(s) or None, datatype or None). ``vector``: a -v
    collective's gathered or scattered buffer, where only a tuple is (counts,
    displs); elsewhere a list is (count, displ) too."""
    items = list(spec)
    if not 2 <= len(items) <= 4:
        raise InvalidArgumentError(
            f"{name}: expected a buffer or 2 to 4 items (buffer, count(s), "
            f"displacement(s), datatype), got {len(items)} items")
    if len(items) == 4:
        return tuple(items)
    buf, c, d, dtype = items[0], items[1], None, None
    if len(items) == 3:
        dtype = items[2]
    elif _is_datatype(c):
        c, dtype = None, c
    pair = isinstance(c, tuple) if vector else isinstance(c, (tuple, list))
    if pair:
        if len(c) != 2:
            raise InvalidArgumentError(
                f"{name}: expected (count(s), displacement(s)), got {c!r}")
        c, d = c
    return buf, c, d, dtype


class Msg:
    """A parsed buffer spec, read as mpi4py reads it: ``a`` the elements (1-D, the
    datatype's dtype; a block spec's displacement already applied), the explicit
    count (or None), the -v counts and displacements (or None; an int for one
    count for every process, or a stride of displacements). ``vector``: the spec
    of a -v collective's gathered or scattered buffer, where ``(buf, (counts,
    displs), type)`` gives counts and displacements; elsewhere ``(buf, (count,
    displ), type)`` is a count after an offset of ``displ`` elements."""

    def __init__(self, spec, name, vector=False):
        self.name = name
        count = displ = counts = displs = dtype = None
        buf = spec
        if isinstance(spec, (tuple, list)):
            buf, c, d, dtype = split_spec(spec, name, vector)
            if isinstance(dtype, str):
                dtype = np.dtype(dtype)  # a typecode: "f", "i", "d" ...
            if vector:
                counts, displs = c, d
            else:
                count = None if c is None else whole(c, name, "count")
                displ = None if d is None else whole(d, name, "displacement")
        if buf is _MPI.BOTTOM or buf is None and count:
            raise NotImplementedError(
                f"{name}: MPI.BOTTOM (or None) takes a derived datatype of addresses "
                "(MPI.Get_address) where derived datatypes are emulated; not here")
        a = np.empty(0, np.uint8) if buf is None else array_of(buf, name)  # (None: empty)
        if dtype is not None:
            dt = dtype if isinstance(dtype, np.dtype) else predefined(dtype, name, "")
            b = a.view(np.uint8)
            if b.size % dt.itemsize:
                raise InvalidArgumentError(
                    f"{name}: {b.size} bytes is not a whole number of {dt} elements")
            a = b.view(dt)
        if displ:
            if not 0 <= displ <= a.size:
                raise InvalidArgumentError(
                    f"{name}: displacement {displ} is outside the buffer's {a.size} elements")
            a = a[displ:]
        if count is not None and not 0 <= count <= a.size:
            raise InvalidArgumentError(
                f"{name}: count {count} is outside the buffer's {a.size} elements")
        self.a = a
        self.count = count
        self.counts = _ints(counts, name, "counts")
        self.displs = _ints(displs, name, "displs")

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

    def v(self, size: int):
        """(counts, displacements) of a -v buffer over ``size`` processes, as mpi4py
        reads them: no counts, the buffer split as evenly as it goes (the first
        processes one more); one count, the same for every process; no
        displacements, contiguous; one displacement, a stride."""
        counts, displs = spread(self.counts, self.displs, self.total(), size, self.name)
        for k, (c, d) in enumerate(zip(counts, displs)):
            if c < 0 or d < 0 or d + c > self.a.size:
                raise InvalidArgumentError(
                    f"{self.name}: block {k} (count {c} at displacement {d}) is outside "
                    f"the buffer's {self.a.size} elements")
        return counts, displs


def spread(counts, displs, n: int, size: int, name: str) -> tuple[list, list]:
    """A -v spec's counts and displacements (as _ints read them) over ``size``
    processes, as mpi4py reads them: no counts, ``n`` elements split as evenly as
    they go (the first processes one more); one count, every process's; no
    displacements, contiguous; one displacement, a stride."""
    if counts is None:
        counts = [n // size + (n % size > i) for i in range(size)]
    elif isinstance(counts, int):
        counts = [counts] * size
    if len(counts) != size:
        raise InvalidArgumentError(f"{name}: expected {size} counts, got {len(counts)}")
    if displs is None:
        displs = [int(v) for v in np.cumsum([0] + list(counts[:-1]))]
    elif isinstance(displs, int):
        displs = [displs * i for i in range(size)]
    elif len(displs) != size:
        raise InvalidArgumentError(f"{name}: expected {size} displacements, got {len(displs)}")
    return counts, displs


class WSpec:
    """A -w buffer spec over ``blocks`` processes, as mpi4py reads one: ``(buf,
    datatypes)`` (one element of each at displacement 0), ``(buf, (counts, displs),
    datatypes)`` or ``(buf, counts, displs, datatypes)``, displacements in bytes, a
    datatype per process: predefined, or derived (neuron_mpi.mpi.datatypes: its
    elements packed). ``sizes``: the bytes each block moves; ``parts()``: each
    block's bytes as they are now; ``place(flat, skip)``: the blocks' bytes, in
    order, written into the buffer (but those of the blocks in ``skip``)."""

    def __init__(self, spec, name, blocks: int, writeable: bool = False):
        from .datatypes import addressed, is_derived_type, layout, memory

        if not isinstance(spec, (tuple, list)) or not 2 <= len(spec) <= 4:
            raise InvalidArgumentError(
                f"{name}: expected (buffer, datatypes), (buffer, (counts, displs), "
                f"datatypes) or (buffer, counts, displs, datatypes), got "
                f"{type(spec).__name__}")
        if len(spec) == 2:
            buf, types = spec
            counts = displs = None
        elif len(spec) == 3:
            buf, pair, types = spec
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise InvalidArgumentError(f"{name}: expected (counts, displs), got {pair!r}")
            counts, displs = pair
        else:
            buf, counts, displs, types = spec
        if (counts is None) != (displs is None):
            raise InvalidArgumentError(f"{name}: expected both counts and displs, or neither")
        counts = [1] * blocks if counts is None else _per_process(counts, blocks, name,
                                                                  "counts")
        displs = [0] * blocks if displs is None else _per_process(displs, blocks, name,
                                                                  "displs")
        try:
            types = list(types)
        except TypeError:  # (TypeError, as mpi4py's)
            raise TypeError(f"{name}: expected a sequence of {blocks} datatypes, got "
                            f"{type(types).__name__}") from None
        if len(types) != blocks:
            raise InvalidArgumentError(f"{name}: expected {blocks} datatypes, got {len(types)}")
        bottom = buf is _MPI.BOTTOM or buf is None  # (displacements: addresses)
        lays = [layout(t, name) if is_derived_type(t) else None for t in types]
        items = [predefined(t, name, f" {k}").itemsize if lay is None else 0
                 for k, (t, lay) in enumerate(zip(types, lays))]
        if bottom:
            b = np.empty(0, np.uint8)
            whole_, origin = addressed([(d, d + c * i) if lay is None else lay.reach(c, d)
                                        for lay, i, c, d in zip(lays, items, counts, displs)
                                        if c > 0])
        else:
            b = as_bytes(array_of(buf, name))
            whole_, origin = memory(buf, name) if any(lays) else (b, 0)
        if writeable and not whole_.flags.writeable:
            raise InvalidArgumentError(
                f"{name}: expected a writeable buffer, got a read-only one")
        self.whole, self.blocks = whole_, []
        for k, (lay, i, c, d) in enumerate(zip(lays, items, counts, displs)):
            if lay is not None:
                lo, hi = lay.reach(c, origin + d)
                if c < 0 or c and (lo < 0 or hi > whole_.size):
                    raise InvalidArgumentError(
                        f"{name}: block {k} ({c} elements of a derived datatype at byte "
                        f"{d}) reaches outside the buffer's memory")
                self.blocks.append((lay, c, origin + d, c * lay.size))
            else:
                n = c * i
                at = origin + d if bottom else d  # (in whole_, in the view b)
                if c < 0 or n and (at < 0 or at + n > (whole_.size if bottom else b.size)):
                    raise InvalidArgumentError(
                        f"{name}: block {k} ({c} elements at byte {d}) is outside the "
                        f"buffer's {b.size} bytes")
                self.blocks.append((None, c, origin + d, n))
        self.sizes = [n for *_, n in self.blocks]
        self.derived = any(lays)

    def parts(self) -> list:
        return [self.whole[d:d + n] if lay is None else lay.pack(self.whole, c, d)
                for lay, c, d, n in self.blocks]

    def place(self, flat: np.ndarray, skip=()) -> None:
        off = 0
        for k, (lay, c, d, n) in enumerate(self.blocks):
            if k not in skip:
                if lay is None:
                    self.whole[d:d + n] = flat[off:off + n]
                else:
                    lay.unpack(flat[off:off + n], self.whole, c, d)
            off += n


def predefined(dtype, name, which) -> np.dtype:
    """The numpy dtype of a predefined MPI datatype (``which``: " k" for a -w spec's
    k-th); a derived one raises NotImplementedError, anything else
    InvalidArgumentError."""
    if not isinstance(dtype, _MPI.Datatype):
        raise InvalidArgumentError(
            f"{name}: expected an MPI datatype{which}, got {type(dtype).__name__}")
    if not dtype.is_predefined:
        raise NotImplementedError(
            f"{name}: derived datatypes are emulated in point to point and the "
            f"collectives that move data, not here; got a derived datatype{which} "
            f"{dtype!r}")
    return to_numpy_dtype(dtype)


def _per_process(v, blocks, name, what) -> list:
    got = _ints(v, name, what)
    if not isinstance(got, list) or len(got) != blocks:
        raise InvalidArgumentError(f"{name}: expected {blocks} {what}, got {v!r}")
    return got


def _is_datatype(obj) -> bool:
    return isinstance(obj, (_MPI.Datatype, str))


def _ints(v, name, what):
    """-v counts or displacements: None, one int, or a list of ints."""
    if v is None:
        return None
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return int(v)
    try:
        items = list(v)
    except TypeError:
        raise InvalidArgumentError(
            f"{name}: {what} must be an integer or a sequence of integers, got "
            f"{type(v).__name__} {v!r}") from None
    return [whole(c, name, what) for c in items]


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
