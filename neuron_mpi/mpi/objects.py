"""mpi4py's lower-case methods, which carry any picklable Python object, on the
facade's communicators (mixed into Comm).

An object is pickled with mpi4py's own serializer (``MPI.pickle``, which a program
may configure, as with mpi4py) into bytes, and the bytes move by the calls the
buffer methods use: tagged point to point for ``send``/``recv`` and their kin. The
collectives ``bcast``, ``allgather``, ``gather`` and ``scatter`` (and the
reductions, over ``allgather``) first exchange slots of SLOT bytes, each a pickle's
size and first bytes (a broadcast, or an all-gather, of the slots), so that a small
object moves in one call; pickles longer than a slot follow whole in a second call
that every rank knows to make. ``alltoall`` and the neighbour forms exchange the
sizes (an all-to-all), then the bytes (an all-to-all-v). Nothing below the
front-end pickles: the emulator moves bytes, as for any buffer
(docs/architecture.md, "Front-ends").

The reductions (``reduce``, ``allreduce``, ``scan``, ``exscan``) apply ``op`` to the
objects in rank order, ``op(op(x0, x1), x2)``..., as mpi4py's do: ``MPI.SUM``,
``MPI.MAXLOC``, ``MPI.REPLACE`` and the rest are callables on Python objects there,
and so is any function of two objects. ``allreduce`` folds the gathered objects on
every rank, so every rank gets the same result.

An argument one rank finds wrong (an object that cannot be pickled, a root out of
range, a sequence of the wrong length) fails every member's call, before any bytes
move; a root out of range raises mpi4py's ``MPI.Exception`` with ``MPI.ERR_ROOT``,
as mpi4py does.
"""
from __future__ import annotations

import warnings

import mpi4py
import numpy as np
from mpi4py import MPI as _MPI

from ..errors import InvalidArgumentError
from ..tagged import ANY, deadline
from .datatypes import landing
from .requests import NULL_RECV, done, posted_request, recv_source, recv_tag, set_status


def loads(data):
    """The object of a message's bytes; None for none (a receive from
    MPI.PROC_NULL, as mpi4py's)."""
    return None if len(data) == 0 else _MPI.pickle.loads(data)


#: bytes per member of the first exchange of bcast, allgather (and the reductions
#: over it), gather and scatter: the pickle's size (int64), then its first bytes; a
#: pickle that fits (a number, a short string or tuple) moves in one call
SLOT = 512
_IRECV_BUFSZ = getattr(mpi4py.rc, "irecv_bufsz", 32768)  # (irecv's default, as mpi4py's)
_HEAD = SLOT - 8
_KEPT_MAX = 64 << 20  # (the kept buffers grow to this; a larger pickle takes new memory)


def _slotted(data: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """Write ``data``'s size and first bytes into ``slot``; ``data`` back."""
    slot[:8].view(np.int64)[0] = data.size
    k = min(data.size, _HEAD)
    slot[8:8 + k] = data[:k]
    return data


def _unslotted(rows: np.ndarray, over: list, rest) -> list:
    """The objects of gathered slots (``rows``), those longer than a slot from
    ``rest`` (their whole pickles end to end, ``over`` bytes each; 0: in its
    slot)."""
    ends = np.cumsum(over).tolist()
    return [loads(rest[e - k:e]) if k else
            loads(row[8:8 + int(row[:8].view(np.int64)[0])])
            for row, k, e in zip(rows, over, ends)]


def _fold(items, op):
    """``items`` reduced by ``op`` left to right (rank order)."""
    acc = items[0]
    for x in items[1:]:
        acc = op(acc, x)
    return acc


def _sizes(parts) -> np.ndarray:
    return np.array([p.size for p in parts], np.int64)


def split_pickles(data: np.ndarray, sizes) -> list:
    """The objects of ``data``, the pickles of ``sizes`` bytes laid end to end."""
    ends = np.cumsum(sizes)
    return [loads(data[e - k:e]) for k, e in zip(sizes.tolist(), ends.tolist())]


class Objects:
    """The lower-case (pickle-based) methods of the facade's communicators."""

    # --- what every collective checks first ------------------------------------------
    def _dumped(self, obj, name, op, single=False, apart=False) -> np.ndarray:
        """``obj`` pickled (bytes; ``single``: in the kept buffer, ``_writable``;
        ``apart``: a list whose items are pickled each on its own, then the list
        of their bytes, so that no two share an object when unpickled, as mpi4py
        pickles each); one that cannot be fails every member's ``op``."""
        try:
            raw = _MPI.pickle.dumps([_MPI.pickle.dumps(x) for x in obj] if apart else obj)
        except Exception as e:  # (pickle raises PicklingError, TypeError, AttributeError...)
            err = InvalidArgumentError(f"{name}: cannot be pickled: {type(e).__name__}: {e}")
            err.__cause__ = e
            self._c.refuse(op, err)
        return self._writable(raw) if single else np.frombuffer(raw, np.uint8)

    def _writable(self, raw) -> np.ndarray:
        """A pickle's bytes copied into this communicator's kept buffer for what is
        sent, one pickle at a time: the compiled run takes writable arrays as they
        are, while a read-only one (pickle's bytes) is copied into new memory at
        every call and takes the general path (a 1 MB all-gather-v at 2 ranks: 2.4
        ms against 0.4)."""
        out = self._kept("out", len(raw))
        out[...] = np.frombuffer(raw, np.uint8)
        return out

    def _kept(self, which: str, n: int) -> np.ndarray:
        """``n`` bytes of this communicator's kept buffer ``which`` ("out": a pickle
        sent; "in": what is received), grown as needed and kept, so that its pages
        are not new at every call; new memory above 64 MiB."""
        if n > _KEPT_MAX:
            return np.empty(n, np.uint8)
        pool = self.__dict__.setdefault("_obj_kept", {})
        buf = pool.get(which)
        if buf is None or buf.size < n:
            grown = 2 * buf.size if buf is not None else 4096
            buf = pool[which] = np.empty(max(n, min(grown, _KEPT_MAX)), np.uint8)
        return buf[:n]

    def _root_of(self, root, op) -> int:
        """``root``, checked on every rank: out of range it fails every member's
        ``op`` with mpi4py's MPI.Exception(MPI.ERR_ROOT)."""
        if not hasattr(root, "__index__"):  # (an int, a NumPy integer, a bool: as mpi4py)
            self._c.refuse(op, InvalidArgumentError(
                f"root: expected a rank (int), got {type(root).__name__}"))
        root = root.__index__()
        if not 0 <= root < self._c.size:
            self._c.refuse(op, _MPI.Exception(_MPI.ERR_ROOT))
        return root

    def _sequence(self, sendobj, n: int, whom: str, op) -> list:
        """``sendobj`` as a list of ``n`` objects, one per ``whom`` (None: n Nones,
        as mpi4py reads it); anything else fails every member's ``op``."""
        if sendobj is None:
            return [None] * n
        try:
            items = list(sendobj)
        except TypeError:
            items = None
        if items is None or len(items) != n:
            got = type(sendobj).__name__ if items is None else f"{len(items)} objects"
            self._c.refuse(op, InvalidArgumentError(
                f"sendobj: expected a sequence of {n} objects (one per {whom}), got {got}"))
        return items

    def _each(self, sendobj, op) -> list:
        """A sequence of one object per member (scatter's, alltoall's), pickled."""
        return [self._dumped(x, "sendobj", op)
                for x in self._sequence(sendobj, self._c.size, "rank", op)]

    # --- collectives -----------------------------------------------------------------
    def _slots(self) -> tuple:
        """This communicator's slot of SLOT bytes and table of one slot per member
        (made once: the calls over them repeat, as kept calls)."""
        got = self.__dict__.get("_obj_slots")
        if got is None:
            got = self._obj_slots = (np.empty(SLOT, np.uint8),
                                     np.empty(self._c.size * SLOT, np.uint8))
        return got

    def bcast(self, obj=None, root=0):
        """The root's ``obj`` on every rank (a copy on the root too, as mpi4py's):
        one broadcast of a slot (its size and first bytes), a second of the rest
        for a longer pickle."""
        c = self._c
        root = self._root_of(root, "broadcast")
        mine = c.rank == root
        slot = self._slots()[0]
        data = _slotted(self._dumped(obj, "obj", "broadcast", True), slot) if mine else None
        c.broadcast(slot, root, out=slot)
        size = int(slot[:8].view(np.int64)[0])
        if size <= _HEAD:
            return loads(slot[8:8 + size])
        whole = data if mine else self._kept("in", size)  # (the whole pickle again)
        c.broadcast(whole, root, out=None if mine else whole)
        return loads(whole)

    def allgather(self, sendobj):
        """Every rank's ``sendobj``, a list in rank order, on every rank: one
        all-gather of slots (each pickle's size and first bytes), and an
        all-gather-v of the whole pickles longer than a slot holds."""
        c = self._c
        data, rows, over = self._slots_gathered(sendobj)
        rest = c.all_gather_v(data[:over[c.rank]], over, out=self._kept("in", sum(over))) \
            if any(over) else None
        return _unslotted(rows, over, rest)

    def gather(self, sendobj, root=0):
        """Every rank's ``sendobj``, a list in rank order, on the root; None
        elsewhere: the slots all-gathered (every rank learns whether a second call
        is needed), then the whole pickles longer than a slot gathered to the
        root."""
        c = self._c
        root = self._root_of(root, "all_gather")
        mine = c.rank == root
        data, rows, over = self._slots_gathered(sendobj)
        rest = None
        if any(over):
            rest = c.gather(data[:over[c.rank]], root, counts=over,
                            out=self._kept("in", sum(over)) if mine else None)
        return _unslotted(rows, over, rest) if mine else None

    def _slots_gathered(self, sendobj) -> tuple:
        """``sendobj`` pickled (kept), and every member's slot all-gathered: (its
        bytes, the slots' rows, the sizes of the pickles longer than a slot holds,
        0 for the others)."""
        c = self._c
        slot, table = self._slots()
        data = _slotted(self._dumped(sendobj, "sendobj", "all_gather", True), slot)
        rows = c.all_gather(slot, out=table).reshape(c.size, SLOT)
        sizes = rows[:, :8].copy().view(np.int64).reshape(-1).tolist()
        return data, rows, [k if k > _HEAD else 0 for k in sizes]

    def scatter(self, sendobj=None, root=0):
        """Item i of the root's ``sendobj`` (a sequence of one object per rank) on
        rank i: the root's slots broadcast (each pickle's size and first bytes),
        then the whole pickles longer than a slot holds scattered."""
        c = self._c
        root = self._root_of(root, "broadcast")
        mine = c.rank == root
        table = self._slots()[1]
        rows = table.reshape(c.size, SLOT)
        parts = self._each(sendobj, "broadcast") if mine else None
        for row, p in zip(rows, parts or ()):
            _slotted(p, row)
        c.broadcast(table, root, out=table)
        over = [k if k > _HEAD else 0
                for k in rows[:, :8].copy().view(np.int64).reshape(-1).tolist()]
        if not any(over):
            return _unslotted(rows[c.rank:c.rank + 1], [0], None)[0]
        out = self._kept("in", over[c.rank])
        x = np.concatenate([p for p, k in zip(parts, over) if k]) if mine else None
        c.scatter(x, out, root, counts=over)
        return _unslotted(rows[c.rank:c.rank + 1], [over[c.rank]], out)[0]

    def alltoall(self, sendobj):
        """Item i of every rank's ``sendobj`` (a sequence of one object per rank) on
        rank i, a list in rank order."""
        c = self._c
        parts = self._each(sendobj, "all_to_all")
        sent = _sizes(parts)
        sizes = c.all_to_all(sent)
        got = c.all_to_all_v(np.concatenate(parts), sent.tolist(), sizes.tolist(),
                             out=self._kept("in", int(sizes.sum())))
        return split_pickles(got, sizes)

    def reduce(self, sendobj, op=_MPI.SUM, root=0):
        """``op`` over every rank's ``sendobj`` in rank order, on the root; None
        elsewhere."""
        items = self.gather(sendobj, root)
        return None if items is None else _fold(items, op)

    def allreduce(self, sendobj, op=_MPI.SUM):
        """``op`` over every rank's ``sendobj`` in rank order, the same on every rank."""
        return _fold(self.allgather(sendobj), op)

    def scan(self, sendobj, op=_MPI.SUM):
        """``op`` over the ``sendobj`` of ranks 0 to this one, in rank order."""
        return _fold(self.allgather(sendobj)[:self._c.rank + 1], op)

    def exscan(self, sendobj, op=_MPI.SUM):
        """``op`` over the ``sendobj`` of ranks 0 to the one before this one; None on
        rank 0."""
        items = self.allgather(sendobj)[:self._c.rank]
        return _fold(items, op) if items else None

    # --- point to point --------------------------------------------------------------
    def _obj_bytes(self, obj):
        """What _send_bytes sends for ``obj``: its pickle (made only for a real
        destination; a send's bytes have left when it returns)."""
        return lambda: self._writable(_MPI.pickle.dumps(obj))

    def send(self, obj, dest, tag=0) -> None:
        """Send ``obj`` (its bytes have left at return, as Send's)."""
        self._send_bytes(self._obj_bytes(obj), dest, tag)

    bsend = send

    def ssend(self, obj, dest, tag=0) -> None:
        """Send ``obj`` and return once a receive at ``dest`` has taken it."""
        self._sent_synced(self._send_bytes(self._obj_bytes(obj), dest, tag, True), dest)

    def isend(self, obj, dest, tag=0):
        """Send ``obj``; a Request done at the call (its bytes have left)."""
        self.send(obj, dest, tag)
        return done()

    ibsend = isend

    def issend(self, obj, dest, tag=0):
        """Send ``obj``; a Request done once a receive at ``dest`` has taken it."""
        return self._issued(self._send_bytes(self._obj_bytes(obj), dest, tag, True), dest)

    def recv(self, buf=None, source=_MPI.ANY_SOURCE, tag=_MPI.ANY_TAG, status=None):
        """The object of the message MPI's matching gives a receive from ``source``
        with ``tag``, of any size. ``buf`` (deprecated in mpi4py, which warns so
        too): receive into that buffer, or into that many bytes, instead."""
        if buf is not None:
            warnings.warn("the 'buf' argument is deprecated", UserWarning, stacklevel=2)
        return self._recv_obj(buf, source, recv_tag(tag), status)

    def _recv_obj(self, buf, source, tag, status):
        """recv's object (``tag``: checked, tagged.ANY for any)."""
        source = recv_source(source, self._c.size)
        if source == _MPI.PROC_NULL:
            set_status(status, *NULL_RECV)
            return None
        if buf is not None:
            out = self._obj_landing(buf)
            return loads(out[:self._receive((out, None), source, tag, status)])
        if source == _MPI.ANY_SOURCE:
            src, t, data = self._t.recv_bytes(ANY, tag, deadline())
        else:
            src, t, data = self._t.recv_bytes(source, tag)
        set_status(status, src, t, data.size)
        return loads(data)

    @staticmethod
    def _obj_landing(buf) -> np.ndarray:
        """Where a lower-case receive given ``buf`` lands: that many bytes (an
        int), or the buffer itself."""
        if isinstance(buf, (int, np.integer)) and not isinstance(buf, bool):
            if buf < 0:
                raise InvalidArgumentError(f"buf: expected a size of at least 0, got {buf}")
            return np.empty(int(buf), np.uint8)
        out, settle = landing(buf, "buf")
        if settle is not None:
            raise NotImplementedError("buf: a pickled object lands as bytes; a buffer of a "
                                      "derived datatype is not emulated here")
        return out

    def sendrecv(self, sendobj, dest, sendtag=0, recvbuf=None, source=_MPI.ANY_SOURCE,
                 recvtag=_MPI.ANY_TAG, status=None):
        """Send ``sendobj`` to ``dest``, then return the object received from
        ``source`` (a send leaves at the call, so two ranks exchanging cannot wait
        for each other)."""
        recvtag = recv_tag(recvtag)  # (checked before anything is sent)
        if recvbuf is not None:
            warnings.warn("the 'buf' argument is deprecated", UserWarning, stacklevel=2)
        self.send(sendobj, dest, sendtag)
        return self._recv_obj(recvbuf, source, recvtag, status)

    def irecv(self, buf=None, source=_MPI.ANY_SOURCE, tag=_MPI.ANY_TAG):
        """A receive posted now, made at the Request's wait (or a test that finds
        its message), whose ``wait()`` returns the object. As mpi4py's, it lands in
        ``buf``: a buffer, a number of bytes, or (None) mpi4py.rc.irecv_bufsz bytes
        (32 KiB, read when mpi4py.MPI was imported, as mpi4py does); a longer
        message fails its wait (MPI_ERR_TRUNCATE)."""
        if buf is None:
            buf = _IRECV_BUFSZ
        out = self._obj_landing(buf)
        req = posted_request(self._posted(out, source, tag))
        req._load = lambda: loads(out[:req._info[2]])
        return req
