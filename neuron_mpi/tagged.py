"""Tagged point to point over a Communicator, for the front-ends (mpi4py's and
torch.distributed's), which match messages by tag as MPI does.

Every message is two: a header (its tag and size, two int64) and its bytes. A
receive takes the first message from its source whose tag matches (ANY: any), in
the order sent, into a buffer at least its size; the messages it passes over wait,
in order, for the receives that match them. Receives posted ahead (``post``) are
made at their wait, in posting order per source, whatever order they are waited
in; a blocking receive first makes the ones posted before it. A send returns once
its bytes have left (Communicator.send), so a receive posted before the matching
send, or two ranks sending to each other, cannot wait for each other.
"""
from __future__ import annotations

import numpy as np

from .errors import InvalidArgumentError

ANY = -1
TAG_UB = 2 ** 31 - 1  # (Open MPI's MPI_TAG_UB; the standard's least is 32767)


def send_tag(tag, name="tag") -> int:
    if isinstance(tag, bool) or not isinstance(tag, (int, np.integer)) or \
            not 0 <= tag <= TAG_UB:
        raise InvalidArgumentError(f"{name}: expected an integer in [0, {TAG_UB}], got {tag!r}")
    return int(tag)


class Tagged:
    """The tagged messages of one Communicator (a front-end's communicator)."""

    def __init__(self, comm):
        self.comm = comm
        self._posted: dict = {}  # source -> receives posted, not yet made
        self._early: dict = {}  # source -> [(tag, bytes)]: messages before their receive

    def send(self, data: np.ndarray, dst: int, tag: int) -> None:
        """``data``: bytes (uint8, contiguous)."""
        self.comm.send(np.array([tag, data.nbytes], np.int64), dst)
        self.comm.send(data, dst)

    def recv(self, out: np.ndarray, src: int, tag: int) -> tuple:
        """Receive into ``out`` (bytes) the first message from ``src`` whose tag
        matches ``tag`` (ANY: any); (its tag, its size)."""
        self._posted_first(src)
        return self._match(src, tag, out)

    def post(self, out: np.ndarray, src: int, tag: int):
        """A receive made later, in posting order: returns ``make()``, which makes
        it (once; the receives posted before it first) and returns (tag, size)."""
        posted = self._posted.setdefault(src, [])
        got: list = []

        def make():
            if not got:
                while posted and posted[0] is not make:
                    posted[0]()  # (an earlier one: it takes itself off the list)
                if posted and posted[0] is make:
                    posted.pop(0)
                got.append(self._match(src, tag, out))
            return got[0]

        make.tag = tag
        posted.append(make)
        return make

    def ready(self, src: int, make) -> bool:
        """Whether the posted receive ``make`` (from ``post``) can be made now
        without waiting: it was made already, or the messages that it and the
        receives posted before it from ``src`` match have arrived (MPI_Test of a
        receive request). Never waits."""
        posted = self._posted.get(src) or []
        if make not in posted:
            return True
        self._pull(src)
        return self._claim(src, posted[:posted.index(make) + 1])[0]

    def iprobe(self, src: int, tag: int):
        """(its tag, its size) of a message from ``src`` with ``tag`` that has
        arrived, left to its receive, or None (MPI_Iprobe). Never waits; messages
        that posted receives will take are passed over, as for ``probe``."""
        self._pull(src)
        for t, data in self._claim(src, self._posted.get(src) or ())[1]:
            if tag == ANY or t == tag:
                return t, data.nbytes
        return None

    def _claim(self, src, receives) -> tuple:
        """Match ``receives`` (posted, in posting order) against the messages set
        aside from ``src`` as MPI does, each taking the first that matches its tag:
        (whether every one found its message, the messages none took)."""
        left = list(self._early.get(src, ()))
        every = True
        for m in receives:
            k = next((i for i, (t, _) in enumerate(left) if m.tag == ANY or t == m.tag), None)
            if k is None:
                every = False  # (it waits for a later message)
            else:
                del left[k]
        return every, left

    def _pull(self, src) -> None:
        """Set aside every message from ``src`` that has arrived (its header and the
        first piece of its bytes), without waiting for one that has not."""
        early = self._early.setdefault(src, [])
        while self.comm.arrived(src, 2):
            early.append(self._next(src))

    def probe(self, src: int, tag: int) -> tuple:
        """Wait for a message from ``src`` with ``tag``; (its tag, its size), left
        to its receive."""
        self._posted_first(src)
        early = self._early.setdefault(src, [])
        while True:
            for t, data in early:
                if tag == ANY or t == tag:
                    return t, data.nbytes
            early.append(self._next(src))

    def _next(self, src) -> tuple:
        hdr = np.empty(2, np.int64)
        self.comm.recv(hdr, src)
        data = np.empty(int(hdr[1]), np.uint8)
        self.comm.recv(data, src)
        return int(hdr[0]), data

    def _match(self, src, tag, out) -> tuple:
        early = self._early.get(src)
        for k, (t, data) in enumerate(early or ()):
            if tag == ANY or t == tag:
                del early[k]
                return _deliver(out, t, data, src)
        hdr = np.empty(2, np.int64)
        while True:
            self.comm.recv(hdr, src)
            t, n = int(hdr[0]), int(hdr[1])
            if (tag == ANY or t == tag) and n <= out.nbytes:
                self.comm.recv(out[:n], src)
                return t, n
            data = np.empty(n, np.uint8)
            self.comm.recv(data, src)
            if tag == ANY or t == tag:
                return _deliver(out, t, data, src)  # (too long: refused)
            self._early.setdefault(src, []).append((t, data))

    def _posted_first(self, src) -> None:
        posted = self._posted.get(src)
        while posted:
            posted[0]()


def _deliver(out: np.ndarray, tag: int, data: np.ndarray, src) -> tuple:
    """A message held aside, into ``out`` (bytes); (its tag, its size)."""
    if data.nbytes > out.nbytes:
        raise InvalidArgumentError(
            f"buf: the message from rank {src} (tag {tag}) has {data.nbytes} bytes, more "
            f"than the {out.nbytes} of the receive buffer (MPI_ERR_TRUNCATE)")
    out[:data.nbytes] = data
    return tag, data.nbytes
