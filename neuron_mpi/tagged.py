"""Tagged point to point over a Communicator, for the front-ends (mpi4py's and
torch.distributed's), which match messages by tag as MPI does.

Every message is two: a header (its tag and size, two int64) and its bytes. A
receive takes the first message from its source whose tag matches (ANY: any), in
the order sent, into a buffer at least its size; the messages it passes over wait,
in order, for the receives that match them. Receives posted ahead (``post``) are
made at their wait, in posting order per source, whatever order they are waited
in; a blocking receive or probe passes over the messages they take (as MPI's
matching: a receive posted earlier matches first), without waiting for theirs. A
receive or probe from any source polls every source (``Communicator.arrived``,
which never waits). A send returns once
its bytes have left (Communicator.send), so a receive posted before the matching
send, or two ranks sending to each other, cannot wait for each other.
"""
from __future__ import annotations

import numpy as np

from .errors import CollectiveTimeoutError, InvalidArgumentError

ANY = -1
TAG_UB = 2 ** 31 - 1  # (Open MPI's MPI_TAG_UB; the standard's least is 32767)


def deadline():
    """When a receive or probe from any source gives up: NEURON_MPI_TIMEOUT from
    now (time.monotonic()), or None for none."""
    import time

    from . import env

    seconds = env.timeout_seconds()
    return None if seconds is None else time.monotonic() + seconds


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
        self._last_any = -1  # the source a receive from any source served last

    def send(self, data: np.ndarray, dst: int, tag: int) -> None:
        """``data``: bytes (uint8, contiguous)."""
        self.comm.send(np.array([tag, data.nbytes], np.int64), dst)
        self.comm.send(data, dst)

    def recv(self, out: np.ndarray, src: int, tag: int) -> tuple:
        """Receive into ``out`` (bytes) the first message from ``src`` whose tag
        matches ``tag`` (ANY: any) and that no receive posted before it takes;
        (its tag, its size). Waits for that message only: a posted receive whose
        message has not come does not hold it up."""
        if not self._posted.get(src):
            return self._match(src, tag, out)
        early = self._early.setdefault(src, [])
        while True:
            k = self._free(src, tag)
            if k is not None:
                t, data = early.pop(k)
                return _deliver(out, t, data, src)
            early.append(self._next(src))

    def recv_any(self, out: np.ndarray, tag: int, deadline=None) -> tuple:
        """Receive from any source (MPI.ANY_SOURCE): the first message that has
        arrived, from any rank (this rank's own too), whose tag matches and that
        no posted receive takes; (its source, its tag, its size). Polls the
        sources (``Communicator.arrived``), sleeping between rounds (20 us up to
        1 ms); CollectiveTimeoutError past ``deadline`` (time.monotonic())."""
        src, _ = self._wait_any(tag, deadline, "recv")
        t, data = self._early[src].pop(self._free(src, tag))
        return (src,) + _deliver(out, t, data, src)

    def probe_any(self, tag: int, deadline=None) -> tuple:
        """Wait for a message from any source with ``tag``, left to its receive;
        (its source, its tag, its size)."""
        src, (t, data) = self._wait_any(tag, deadline, "probe")
        return src, t, data.nbytes

    def iprobe_any(self, tag: int):
        """(source, tag, size) of a message from any source that has arrived with
        ``tag``, left to its receive, or None. Never waits."""
        for src in self._sources():
            got = self.iprobe(src, tag)
            if got is not None:
                return (src,) + got
        return None

    def _wait_any(self, tag, deadline, what) -> tuple:
        import time

        pause = 20e-6
        while True:
            for src in self._sources():
                self._pull(src)
                k = self._free(src, tag)
                if k is not None:
                    return src, self._early[src][k]
            if deadline is not None and time.monotonic() >= deadline:
                raise CollectiveTimeoutError(
                    f"{what} from any source (tag {'any' if tag == ANY else tag}): no "
                    f"message came from any of the {self.comm.size} ranks in time")
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)

    def _sources(self):
        """Every source, starting after the one served last (so that one busy
        sender does not hide the others)."""
        n = self.comm.size
        first = self._last_any + 1
        for k in range(n):
            src = (first + k) % n
            self._last_any = src
            yield src

    def post(self, out: np.ndarray, src: int, tag: int):
        """A receive made later: returns ``make()``, which makes it (once) and
        returns (tag, size), or raises its error (again at every call). Its
        message is the one MPI's matching gives it: the receives posted before it
        from ``src`` take theirs first, but it does not wait for theirs."""
        posted = self._posted.setdefault(src, [])
        got: list = []

        def make():
            if not got:
                try:
                    got.append((self._take(src, make, out), None))
                except BaseException as e:  # (MPI_ERR_TRUNCATE, a timeout: the receive is over)
                    if make in posted:
                        posted.remove(make)
                    got.append((None, e))
            value, err = got[0]
            if err is not None:
                raise err
            return value

        make.tag = tag
        posted.append(make)
        return make

    def _take(self, src, make, out) -> tuple:
        """Make the posted receive ``make``: the message its claim gives it, set
        aside or still to come (messages for other receives are set aside)."""
        posted = self._posted[src]
        early = self._early.setdefault(src, [])
        while True:
            k = self._claims(src, posted)[posted.index(make)]
            if k is not None:
                posted.remove(make)
                t, data = early.pop(k)
                return _deliver(out, t, data, src)
            if posted[0] is make:  # (first posted, nothing set aside for it: the next
                posted.pop(0)  # matching message is its own, straight into out)
                return self._match(src, make.tag, out)
            early.append(self._next(src))

    def ready(self, src: int, make) -> bool:
        """Whether the posted receive ``make`` (from ``post``) can be made now
        without waiting: it was made already, or the message MPI's matching gives
        it has arrived (MPI_Test of a receive request). Never waits."""
        posted = self._posted.get(src) or []
        if make not in posted:
            return True
        self._pull(src)
        return self._claims(src, posted)[posted.index(make)] is not None

    def probe(self, src: int, tag: int) -> tuple:
        """Wait for a message from ``src`` with ``tag`` that no posted receive
        takes; (its tag, its size), left to its receive."""
        early = self._early.setdefault(src, [])
        while True:
            k = self._free(src, tag)
            if k is not None:
                return early[k][0], early[k][1].nbytes
            early.append(self._next(src))

    def iprobe(self, src: int, tag: int):
        """(its tag, its size) of a message from ``src`` with ``tag`` that has
        arrived, left to its receive, or None (MPI_Iprobe). Never waits; messages
        that posted receives will take are passed over, as for ``probe``."""
        self._pull(src)
        k = self._free(src, tag)
        if k is None:
            return None
        t, data = self._early[src][k]
        return t, data.nbytes

    def _pull(self, src) -> None:
        """Set aside every message from ``src`` that has arrived (its header and the
        first piece of its bytes), without waiting for one that has not."""
        early = self._early.setdefault(src, [])
        while self.comm.arrived(src, 2):
            early.append(self._next(src))

    def _claims(self, src, receives) -> list:
        """Match ``receives`` (posted, in posting order) against the messages set
        aside from ``src`` as MPI does, each taking the first that matches its tag
        and that no receive before it took: the index each takes (None: it waits
        for a later message)."""
        early = self._early.get(src, ())
        taken: list = []
        for m in receives:
            taken.append(next((i for i, (t, _) in enumerate(early)
                               if i not in taken and (m.tag == ANY or t == m.tag)), None))
        return taken

    def _free(self, src, tag):
        """The index of the first message set aside from ``src`` whose tag matches
        ``tag`` and that no posted receive takes, or None."""
        taken = self._claims(src, self._posted.get(src) or ())
        return next((i for i, (t, _) in enumerate(self._early.get(src, ()))
                     if i not in taken and (tag == ANY or t == tag)), None)

    def _next(self, src) -> tuple:
        hdr = np.empty(2, np.int64)
        self.comm.recv(hdr, src)
        data = np.empty(int(hdr[1]), np.uint8)
        self.comm.recv(data, src)
        return int(hdr[0]), data

    def _match(self, src, tag, out) -> tuple:
        """The first posted receive's (or a blocking receive's, when none is
        posted) message: the first set aside that matches, else the next to come."""
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


def _deliver(out: np.ndarray, tag: int, data: np.ndarray, src) -> tuple:
    """A message held aside, into ``out`` (bytes); (its tag, its size)."""
    if data.nbytes > out.nbytes:
        raise InvalidArgumentError(
            f"buf: the message from rank {src} (tag {tag}) has {data.nbytes} bytes, more "
            f"than the {out.nbytes} of the receive buffer (MPI_ERR_TRUNCATE)")
    out[:data.nbytes] = data
    return tag, data.nbytes
