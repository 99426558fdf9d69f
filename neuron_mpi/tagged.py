"""Tagged point to point over a Communicator, for the front-ends (mpi4py's and
torch.distributed's), which match messages by tag and source as MPI does.

Every message has a header: its tag, its size and its synchronous-send number
(three int64). A message of at most JOINED bytes goes as one Communicator message,
its header then its bytes (each side copies them once more, which costs less than
a second message); a larger one as two, the header alone, then its bytes, which
the receive reads straight into its buffer. A receive learns which from the size
of what comes (Communicator.incoming). A receive takes the first message from its
source (ANY: any source) whose tag matches (ANY: any), in the order sent, into a
buffer at least its size; the messages it passes over wait, in order, for the
receives that match them.

Receives posted ahead (``post``) are made at their wait, whatever order they are
waited in, into the messages MPI's matching gives them: a message read is matched
to the first posted receive that fits it and has none, a receive posted to the
first message set aside that fits it and that no receive has (arrival being when
this rank reads a message; a match never changes); a blocking receive or probe
passes over matched messages. A wait reads the one stream it waits for while
every posted receive is from that source; otherwise (a receive or probe from any
source, or receives posted from other sources, whose messages must be matched
meanwhile) it sets aside what has arrived from every source, then sleeps until
more does (``Communicator.any_arrived``), until NEURON_MPI_TIMEOUT.

A send returns once its bytes have left (Communicator.send), so a receive posted
before the matching send, or two ranks sending to each other, cannot wait for
each other. A synchronous send (MPI_Ssend/Issend) is numbered; the receive that
takes it sends back an acknowledgement (a header with tag ``_ACK`` and no bytes),
which the sender sets aside, never matched by a receive.
"""
from __future__ import annotations

import time

import numpy as np

from .errors import CollectiveTimeoutError, InvalidArgumentError

ANY = -1
_ACK = -2  # an acknowledgement of a synchronous send (header: _ACK, 0, its number)
_BARRIER = -3  # the tag of a Tagged's first Barrier (below); the next ones -4, -5, ...
# (the negative tags are the module's own: a receive or probe of ANY tag never
# takes their messages)
TAG_UB = 2 ** 31 - 1  # (Open MPI's MPI_TAG_UB; the standard's least is 32767)
_EMPTY = np.empty(0, np.uint8)
_HEAD = 24  # bytes of a message's header: its tag, size and synchronous-send number
JOINED = 32 * 1024  # a message of at most this many bytes goes with its header, as one
_POOLED = 16  # buffers of joined messages kept per direction (by size: repeated calls)
# the Tagged of this process (one per front-end communicator) with receives posted:
# a wait on one communicator reads the others' streams too, so that their receives
# are matched (and synchronous sends acknowledged) meanwhile
_POSTING: set = set()


def deadline():
    """When a receive or probe from any source gives up: NEURON_MPI_TIMEOUT from
    now (time.monotonic()), or None for none."""
    from . import env

    seconds = env.timeout_seconds()
    return None if seconds is None else time.monotonic() + seconds


def send_tag(tag, name="tag") -> int:
    if isinstance(tag, bool) or not isinstance(tag, (int, np.integer)) or \
            not 0 <= tag <= TAG_UB:
        raise InvalidArgumentError(f"{name}: expected an integer in [0, {TAG_UB}], got {tag!r}")
    return int(tag)


class _Message:
    """A message set aside: its arrival number, source, tag, bytes and
    synchronous-send number (0: an ordinary send)."""
    __slots__ = ("seq", "src", "tag", "data", "sync")

    def __init__(self, seq, src, tag, data, sync):
        self.seq, self.src, self.tag, self.data, self.sync = seq, src, tag, data, sync


class Posted:
    """A receive posted ahead (``Tagged.post``). Calling it makes the receive (once)
    and returns (source, tag, size), or raises its error (again at every call)."""

    def __init__(self, tagged, out, src, tag):
        self.src, self.tag, self.out = src, tag, out
        self._t = tagged
        self._got = None  # ((source, tag, size), error) once made
        self.cancelled = False
        self.detached = False  # nobody will make it: made when matched (``detach``)

    def __call__(self) -> tuple:
        if self._got is None:
            try:
                self._got = (self._t._make(self), None)
            except Exception as e:  # (MPI_ERR_TRUNCATE, a timeout: the receive is over)
                self._t._drop(self)
                self._got = (None, e)
        value, err = self._got
        if err is not None:
            raise err
        return value

    def __repr__(self):
        src = "any" if self.src == ANY else self.src
        return f"<posted receive from {src}, tag {'any' if self.tag == ANY else self.tag}>"


class Tagged:
    """The tagged messages of one Communicator (a front-end's communicator)."""

    def __init__(self, comm, name="buf"):
        self.comm = comm
        self.name = name  # what a receive's buffer is called in its errors
        self._posted: list = []  # receives posted, not yet made, in posting order
        self._bound: dict = {}  # posted receive -> the message matched to it
        self._claimed: set = set()  # the messages matched to posted receives
        self._early: dict = {}  # source -> [_Message]: set aside, in the order sent
        self._all: list = []  # every message set aside, in arrival order
        self._seq = 0  # arrival numbers of the messages set aside
        self._last = -1  # the source an arrival was found from last
        self._synced: dict = {}  # destination -> synchronous sends numbered so far
        self._acks: dict = {}  # source -> numbers of our synchronous sends it took
        self._forget: dict = {}  # source -> numbers whose acknowledgement nobody awaits
        self._outs: dict = {}  # size -> (buffer, header, bytes) of joined messages sent
        self._ins: dict = {}  # ... and received (the same arrays again: kept calls)
        self._barriers: list = []  # Barriers in flight, oldest first
        self._nbarriers = 0  # Barriers started (each has a tag of its own)

    # --- sends ------------------------------------------------------------------------
    def send(self, data: np.ndarray, dst: int, tag: int, sync: bool = False) -> int:
        """``data``: bytes (uint8, contiguous). ``sync``: a synchronous send, whose
        number is returned (``acked``/``wait_acked`` say when a receive took it);
        else 0."""
        number = 0
        if sync:
            number = self._synced[dst] = self._synced.get(dst, 0) + 1
        self._post(dst, tag, data, number)
        return number

    def _post(self, dst, tag, data, number) -> None:
        """Send a message: with its header as one Communicator message when it has
        at most JOINED bytes, else the header alone and then its bytes."""
        n = data.nbytes
        if n <= JOINED:
            buf, head, body = _pooled(self._outs, _HEAD + n)
            head[0], head[1], head[2] = tag, n, number
            body[...] = data
            self.comm.send(buf, dst)  # (returns once its bytes have left buf)
        else:
            self.comm.send(np.array([tag, n, number], np.int64), dst)
            self.comm.send(data, dst)

    def acked(self, dst: int, number: int) -> bool:
        """Whether a receive at ``dst`` has taken our synchronous send ``number``.
        Never waits."""
        self._pull_for(dst)
        return number in self._acks.get(dst, ())

    def wait_acked(self, dst: int, number: int) -> None:
        """Wait until a receive at ``dst`` takes our synchronous send ``number``
        (then its acknowledgement is let go)."""
        acks = self._acks.setdefault(dst, set())
        self._wait(lambda: True if number in acks else None, dst, f"ssend to {dst}")
        acks.discard(number)

    def forget(self, dst: int, number: int) -> None:
        """Nobody will wait for synchronous send ``number`` to ``dst`` (its request
        was freed): drop its acknowledgement, now or when it comes."""
        acks = self._acks.get(dst, set())
        if number in acks:
            acks.discard(number)
        else:
            self._forget.setdefault(dst, set()).add(number)

    # --- receives ---------------------------------------------------------------------
    def recv(self, out: np.ndarray, src: int, tag: int) -> tuple:
        """Receive into ``out`` (bytes) the first message from ``src`` whose tag
        matches ``tag`` (ANY: any) and that no receive posted before it takes;
        (its tag, its size). Waits for that message only: a posted receive whose
        message has not come does not hold it up."""
        if not self._posted and not self._others() and not self._barriers:
            return self._take(src, tag, out)[1:]
        m = self._wait(lambda: self._free(src, tag), src, f"recv from {src}")
        return self._deliver(out, m)[1:]

    def recv_any(self, out: np.ndarray, tag: int, deadline=None) -> tuple:
        """Receive from any source (MPI.ANY_SOURCE): the first message that has
        arrived, from any rank (this rank's own too), whose tag matches and that
        no posted receive takes; (its source, its tag, its size).
        CollectiveTimeoutError past ``deadline`` (time.monotonic())."""
        what = _any_what("recv", tag)
        if self._posted or self._others() or self._barriers:
            return self._deliver(out, self._wait(lambda: self._free(ANY, tag), ANY, what,
                                                 deadline))
        return self._take(ANY, tag, out, deadline, what)

    def recv_bytes(self, src: int, tag: int, end=False) -> tuple:
        """A receive of any size (the pickle-based front-end methods): the message a
        receive from ``src`` (ANY: any source) with ``tag`` takes, as ``recv`` and
        ``recv_any`` choose it; (its source, its tag, its bytes: a copy of its own).
        ``end``: as ``_wait``'s."""
        what = _any_what("recv", tag) if src == ANY else f"recv from {src}"
        m = self._wait(lambda: self._free(src, tag), src, what, end)
        self._unlist(m)
        return m.src, m.tag, m.data

    def probe(self, src: int, tag: int) -> tuple:
        """Wait for a message from ``src`` with ``tag`` that no posted receive
        takes; (its tag, its size), left to its receive."""
        m = self._wait(lambda: self._free(src, tag), src, f"probe from {src}")
        return m.tag, m.data.nbytes

    def probe_any(self, tag: int, deadline=None) -> tuple:
        """Wait for a message from any source with ``tag``, left to its receive;
        (its source, its tag, its size)."""
        m = self._wait(lambda: self._free(ANY, tag), ANY, _any_what("probe", tag), deadline)
        return m.src, m.tag, m.data.nbytes

    def iprobe(self, src: int, tag: int):
        """(its tag, its size) of a message from ``src`` with ``tag`` that has
        arrived, left to its receive, or None (MPI_Iprobe). Never waits; messages
        that posted receives will take are passed over, as for ``probe``."""
        self._pull_for(src)
        m = self._free(src, tag)
        return None if m is None else (m.tag, m.data.nbytes)

    def iprobe_any(self, tag: int):
        """(source, tag, size) of a message from any source that has arrived with
        ``tag``, left to its receive, or None. Never waits."""
        self._pull_all()
        m = self._free(ANY, tag)
        return None if m is None else (m.src, m.tag, m.data.nbytes)

    def mprobe(self, src: int, tag: int, end=False) -> _Message:
        """Wait for the message a receive from ``src`` (ANY: any source) with
        ``tag`` would take, and keep it for ``mrecv`` alone (MPI_Mprobe: no other
        receive or probe takes it). ``end``: as ``_wait``'s."""
        what = _any_what("mprobe", tag) if src == ANY else f"mprobe from {src}"
        m = self._wait(lambda: self._free(src, tag), src, what, end)
        self._claimed.add(m)
        return m

    def improbe(self, src: int, tag: int):
        """``mprobe`` without waiting: the message kept, or None (MPI_Improbe)."""
        self._pull_for(src)
        m = self._free(src, tag)
        if m is not None:
            self._claimed.add(m)
        return m

    def mrecv(self, m: _Message, out=None) -> tuple:
        """Receive the message ``mprobe`` or ``improbe`` kept: into ``out`` (bytes;
        (source, tag, size)), or (None) as its own bytes ((source, tag, bytes)). A
        synchronous send is acknowledged now."""
        self._claimed.discard(m)
        if out is None:
            self._unlist(m)
            return m.src, m.tag, m.data
        return self._deliver(out, m)

    def post(self, out: np.ndarray, src: int, tag: int) -> Posted:
        """A receive from ``src`` (ANY: any source) made later: its message is the
        one MPI's matching gives it. The receives posted before it take theirs
        first, but it does not wait for theirs."""
        r = Posted(self, out, src, tag)
        self._posted.append(r)
        _POSTING.add(self)
        m = self._free(src, tag)  # (the first to have come that no receive took)
        if m is not None:
            self._bind(r, m)
        return r

    def ready(self, r: Posted) -> bool:
        """Whether the posted receive ``r`` can be made now without waiting: it was
        made (or cancelled) already, or the message MPI's matching gives it has
        arrived (MPI_Test of a receive request). Never waits."""
        if r not in self._posted:
            return True
        self._pull_for(r.src)
        return r in self._bound

    def cancel(self, r: Posted) -> bool:
        """Cancel the posted receive ``r`` if no message has matched it yet
        (MPI_Cancel): True if it is cancelled (it will take nothing), False if it
        was made or has its message (it completes as usual)."""
        if not self.ready(r):
            self._drop(r)
            r.cancelled = True
            return True
        return False

    def detach(self, r: Posted) -> None:
        """Nobody will wait for the posted receive ``r`` (its request was freed): it
        is made as soon as a message is matched to it, now or when one comes (an
        error, such as MPI_ERR_TRUNCATE, has nobody to go to and is dropped)."""
        if r in self._bound:
            self._quietly(r)
        elif r in self._posted:
            r.detached = True

    def _quietly(self, r: Posted) -> None:
        try:
            r()
        except InvalidArgumentError:
            pass

    # --- matching ---------------------------------------------------------------------
    # A message is matched when it is set aside (to the first receive posted that
    # fits it and has none) and a receive when it is posted (to the first message
    # set aside that fits it and that no receive has): MPI's matching, arrival being
    # when this rank reads the message. A match never changes afterwards.
    def _bind(self, r: Posted, m: _Message) -> None:
        """Match ``m`` to ``r``; a synchronous send is acknowledged now (MPI
        completes an Ssend once a receive matches it, before that receive's Wait)."""
        self._bound[r] = m
        self._claimed.add(m)
        self._ack(m)
        if r.detached:
            self._quietly(r)

    def _make(self, r: Posted) -> tuple:
        """Make the posted receive ``r``: its message, set aside or still to come
        (messages for other receives are set aside meanwhile)."""
        if r.cancelled:
            raise InvalidArgumentError("request: this receive was cancelled (MPI_Cancel)")
        what = f"recv from {'any source' if r.src == ANY else r.src}"
        m = self._wait(lambda: self._bound.get(r) or self._direct(r), r.src, what)
        while m is True:  # (its message is the next from its source that fits it:
            got = self._read(r.src, r.tag, r.out)  # straight into its buffer; one too
            if got is not None:  # long is matched to it when set aside)
                self._drop(r)
                return (r.src,) + got
            m = self._bound.get(r) or True
        self._drop(r)
        return self._deliver(r.out, m)

    def _direct(self, r: Posted):
        """True when the next message from ``r``'s source that fits it is its own,
        to be read straight into its buffer: a named source, read alone
        (``_alone``), and no receive posted before it could take from it; else
        None."""
        if r.src == ANY or not self._alone(r.src):
            return None
        for p in self._posted:
            if p is r:
                return True
            if p not in self._bound:
                return None  # (every posted receive is from r.src: it comes first)
        return None

    def _drop(self, r: Posted) -> None:
        if r in self._posted:
            self._posted.remove(r)
            if not self._posted and not self._barriers:
                _POSTING.discard(self)
        m = self._bound.pop(r, None)
        if m is not None:
            self._claimed.discard(m)

    def _alone(self, src) -> bool:
        """Whether a wait for a message from ``src`` may read that source's stream
        alone: every receive posted is from ``src`` and no other communicator has
        receives posted, so no message from another stream can be matched (and, a
        synchronous send, acknowledged) meanwhile."""
        return all(p.src == src for p in self._posted) and not self._others() and \
            not self._barriers

    def _others(self) -> bool:
        """Whether another communicator of this process has receives posted (or
        barriers in flight)."""
        return len(_POSTING) > (self in _POSTING)

    def _candidates(self, src) -> list:
        """The messages set aside from ``src`` (ANY: from every source, in arrival
        order)."""
        return self._all if src == ANY else self._early.get(src, ())

    def _free(self, src, tag):
        """The first message set aside from ``src`` (ANY: any source) whose tag
        matches ``tag`` and that no posted receive takes, or None."""
        claimed = self._claimed
        return next((m for m in self._candidates(src)
                     if m not in claimed and (m.tag >= 0 if tag == ANY else m.tag == tag)),
                    None)

    def _deliver(self, out: np.ndarray, m: _Message) -> tuple:
        """The message ``m``, set aside, into ``out`` (bytes); (source, tag, size).
        A synchronous send is acknowledged (it is matched, even when too long)."""
        self._unlist(m)
        _fits(m.data.nbytes, out, m.src, m.tag, self.name)
        out[:m.data.nbytes] = m.data
        return m.src, m.tag, m.data.nbytes

    def _unlist(self, m: _Message) -> None:
        """Take ``m`` off the messages set aside, acknowledging it (a receive has it)."""
        self._early[m.src].remove(m)
        self._all.remove(m)
        self._ack(m)

    def _ack(self, m: _Message) -> None:
        """Acknowledge ``m`` if it is a synchronous send not yet acknowledged."""
        if m.sync:
            self._post(m.src, _ACK, _EMPTY, m.sync)
            m.sync = 0

    # --- reading the streams ----------------------------------------------------------
    def _wait(self, find, src, what, end=False):
        """``find()`` once it gives something, reading more messages meanwhile: from
        ``src`` alone (a blocking read) when it is a named source read alone
        (``_alone``), else from every source (what has arrived, then asleep until
        more does; ``end``: the deadline, time.monotonic(), None for none, False
        for NEURON_MPI_TIMEOUT from now)."""
        nap = 20e-6
        while True:
            if self._barriers:
                self._advance_barriers()
            got = find()
            if got is not None:
                return got
            if src != ANY and self._alone(src):
                self._read(src)
                continue
            if end is False:
                end = deadline()
            if not self._others():
                self._read(self._arrival(end, what))
                continue
            self._pull_others()  # (between naps: their receives are posted)
            got = self._arrival(end, what, nap)
            if got is None:
                nap = min(nap * 2, 1e-3)
            else:
                nap = 20e-6
                self._read(got)

    def _arrival(self, end, what, nap=None):
        """A source whose next message has arrived (its header: the bytes of a
        message sent apart follow it), asleep until there is one
        (Communicator.any_arrived);
        CollectiveTimeoutError past ``end``. ``nap``: sleep that long at most,
        then None."""
        src = self._next_arrival()
        if src is not None:
            return src
        now = time.monotonic()
        left = None if end is None else end - now
        try:
            if left is not None and left <= 0:
                raise CollectiveTimeoutError(what)
            wait = left if nap is None else nap if left is None else min(nap, left)
            src = self._last = self.comm.any_arrived(
                wait=True, timeout=0 if wait is None else max(wait, 1e-6),
                first=self._after())  # (timeout 0: none)
            return src
        except CollectiveTimeoutError:
            if nap is not None and (end is None or time.monotonic() < end):
                return None
            raise CollectiveTimeoutError(
                f"{what}: no message came from any of the {self.comm.size} ranks in "
                "time") from None

    def _read(self, src, tag=None, out=None):
        """Read the next message from ``src`` (waiting for it): into ``out`` when
        ``tag`` is given and matches and the message fits (its tag and size
        returned); else set it aside, or note the acknowledgement it is (None)."""
        size = self.comm.incoming(src)
        buf, head, body = _pooled(self._ins, size)
        self.comm.recv(buf, src)
        t, n, number = int(head[0]), int(head[1]), int(head[2])
        joined = size == _HEAD + n  # (else the header alone: its bytes come next)
        if tag is not None and (t >= 0 if tag == ANY else t == tag) and n <= out.nbytes:
            if joined:
                out[:n] = body
            else:
                self.comm.recv(out[:n], src)
            if number:
                self._post(src, _ACK, _EMPTY, number)
            return t, n
        if joined:
            data = body.copy()
        else:
            data = np.empty(n, np.uint8)
            self.comm.recv(data, src)
        self._keep(src, t, data, number)
        return None

    def _keep(self, src, tag, data, number) -> None:
        """Set a message read aside (numbered as it arrives; matched to the first
        posted receive that fits it and has none), or note the acknowledgement it
        is."""
        if tag == _ACK:
            gone = self._forget.get(src)
            if gone and number in gone:
                gone.discard(number)
            else:
                self._acks.setdefault(src, set()).add(number)
            return
        self._seq += 1
        m = _Message(self._seq, src, tag, data, number)
        self._early.setdefault(src, []).append(m)
        self._all.append(m)
        for r in self._posted:
            if r.src in (src, ANY) and (tag >= 0 if r.tag == ANY else r.tag == tag) and \
                    r not in self._bound:
                self._bind(r, m)
                break

    def _pull(self, src) -> None:
        """Set aside every message from ``src`` that has arrived (its header),
        without waiting for one that has not."""
        while self.comm.arrived(src):
            self._read(src)

    def _pull_all(self) -> None:
        """Set aside every message that has arrived, from any source."""
        while True:
            src = self._next_arrival()
            if src is None:
                return
            self._read(src)

    def _next_arrival(self):
        """A source whose next message has arrived, looking first after the one
        found last (so that one busy sender does not hide the others), or None."""
        src = self.comm.any_arrived(first=self._after())
        if src is not None:
            self._last = src
        return src

    def _after(self) -> int:
        return (self._last + 1) % self.comm.size

    def _pull_for(self, src) -> None:
        """Pull what a receive from ``src`` may depend on, and what the receives
        posted from other sources are waiting for: every source unless ``src``
        is read alone (``_alone``)."""
        if src != ANY and self._alone(src):
            self._pull(src)
            return
        self._pull_all()
        self._advance_barriers()
        self._pull_others()

    def _pull_others(self) -> None:
        """Set aside what has arrived on the other communicators with receives
        posted or barriers in flight (matching them, acknowledging their synchronous
        sends, moving their barriers on)."""
        for t in list(_POSTING):
            if t is not self:
                t._pull_all()
                t._advance_barriers()

    def _advance_barriers(self) -> None:
        """Move every Barrier in flight on as far as the messages set aside allow
        (MPI's progress: a wait for anything moves the non-blocking barriers on)."""
        for b in list(self._barriers):
            b._advance()

    def _take(self, src, tag, out, end=None, what="") -> tuple:
        """A blocking receive's message when no receive is posted on any
        communicator, from ``src`` (ANY: any source, waiting for an arrival until
        ``end``): the first set aside that matches, else the next to come, read
        straight into ``out`` when it fits; (source, tag, size)."""
        while True:
            m = self._free(src, tag)  # (set aside: earlier, or too long)
            if m is not None:
                return self._deliver(out, m)
            frm = src if src != ANY else self._arrival(end, what)
            got = self._read(frm, tag, out)
            if got is not None:
                return (frm,) + got


class Barrier:
    """A barrier of point-to-point messages, in flight from its start: in round k
    every rank sends to rank + 2**k and takes the message of rank - 2**k
    (dissemination: ceil(log2 n) rounds). Each Barrier of a Tagged has a tag of its
    own (the n-th started: _BARRIER - n; every rank starts them in the same order,
    as MPI_Ibarrier's calls), which no receive of ANY tag takes. Its messages are
    set aside as they are read, and every wait or test of the Tagged moves every
    barrier in flight on (``_advance``): a wait for anything lets them progress, as
    MPI's do. ``poll`` says whether it is over without waiting; ``wait`` waits
    (NEURON_MPI_TIMEOUT: CollectiveTimeoutError)."""

    def __init__(self, tagged: Tagged, rank: int, size: int):
        self._t, self._me, self._n = tagged, rank, size
        self._tag = _BARRIER - tagged._nbarriers
        tagged._nbarriers += 1
        self._step = 1
        self.done = size <= 1
        if not self.done:
            tagged._barriers.append(self)
            _POSTING.add(tagged)
            tagged.send(_EMPTY, (rank + 1) % size, self._tag)

    def _advance(self) -> None:
        """Take each round's message that is set aside and send the next round's."""
        t = self._t
        while not self.done:
            m = t._free((self._me - self._step) % self._n, self._tag)
            if m is None:
                return
            t._deliver(_EMPTY, m)
            self._step *= 2
            if self._step >= self._n:
                self.done = True
                t._barriers.remove(self)
                if not t._posted and not t._barriers:
                    _POSTING.discard(t)
                return
            t.send(_EMPTY, (self._me + self._step) % self._n, self._tag)

    def poll(self) -> bool:
        """Move on without waiting for a message that has not come; whether the
        barrier is over (every rank has started it)."""
        if not self.done:
            self._t._pull_for(ANY)
        return self.done

    def wait(self) -> None:
        if not self.done:
            self._t._wait(lambda: True if self.done else None, ANY,
                          f"Ibarrier (tag {self._tag})")


def _pooled(pool: dict, size: int) -> tuple:
    """A buffer of ``size`` bytes from ``pool`` (the same one for every message of
    that size, so that the Communicator's kept calls repeat), with views of its
    header (int64) and of its bytes."""
    got = pool.get(size)
    if got is None:
        if len(pool) >= _POOLED:
            pool.clear()
        buf = np.empty(size, np.uint8)
        got = pool[size] = (buf, buf[:_HEAD].view(np.int64), buf[_HEAD:])
    return got


def _fits(n: int, out: np.ndarray, src, tag, name) -> None:
    if n > out.nbytes:
        raise InvalidArgumentError(
            f"{name}: the message from rank {src} (tag {tag}) has {n} bytes, more than "
            f"the {out.nbytes} of the receive buffer (MPI_ERR_TRUNCATE)")


def _any_what(what, tag) -> str:
    return f"{what} from any source (tag {'any' if tag == ANY else tag})"
