"""neuron_mpi.tagged: MPI's tag matching over a Communicator's ordered messages
(the mpi4py and torch front-ends' point to point), on an in-memory stand-in."""
from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from neuron_mpi.errors import CollectiveTimeoutError, InvalidArgumentError
from neuron_mpi.tagged import ANY, JOINED, Barrier, Tagged, send_tag


class Wire:
    """``n`` ranks' ordered channels, one per (receiver, sender): send copies, recv
    takes the next message whole (exactly its size, as Communicator.recv)."""

    def __init__(self, n=2):
        self.n = n
        self.q = {(d, s): deque() for d in range(n) for s in range(n)}

    def end(self, me):
        wire = self

        class End:
            size = wire.n

            def send(self, x, dst):
                wire.q[(dst, me)].append(np.array(x, copy=True).view(np.uint8).reshape(-1))

            def recv(self, out, src):
                msg = wire.q[(me, src)].popleft()
                assert msg.nbytes == out.nbytes, "a receive of the wrong size"
                out.reshape(-1).view(np.uint8)[...] = msg
                return out

            def incoming(self, src):
                q = wire.q[(me, src)]
                if not q:  # (one thread: nothing more can come while this waits)
                    raise CollectiveTimeoutError(f"recv from {src}: nothing came")
                return q[0].nbytes

            def arrived(self, src, count=1):
                return len(wire.q[(me, src)]) >= count

            def any_arrived(self, count=1, wait=False, timeout=None, first=0):
                for k in range(wire.n):
                    src = (first + k) % wire.n
                    if self.arrived(src, count):
                        return src
                if wait:  # (one thread: nothing more can come while this waits)
                    raise CollectiveTimeoutError(f"any_arrived: nothing came in {timeout} s")
                return None
        return End()


def _pair():
    w = Wire()
    return Tagged(w.end(0)), Tagged(w.end(1))


def _b(*vals):
    return np.array(vals, np.float64).view(np.uint8)


def test_tags_match_out_of_order_and_in_order_per_tag():
    a, b = _pair()
    for tag, v in ((11, 1.0), (22, 2.0), (11, 3.0), (7, 4.0)):
        a.send(_b(v), 1, tag)
    out = np.zeros(1)
    assert b.recv(out.view(np.uint8), 0, 22) == (22, 8) and out[0] == 2.0
    assert b.recv(out.view(np.uint8), 0, 11) == (11, 8) and out[0] == 1.0
    assert b.recv(out.view(np.uint8), 0, ANY) == (11, 8) and out[0] == 3.0
    assert b.probe(0, ANY) == (7, 8)
    assert b.recv(out.view(np.uint8), 0, 7) == (7, 8) and out[0] == 4.0


def test_small_messages_go_with_their_header_and_large_ones_apart():
    """A message of at most JOINED bytes is one Communicator message (its header,
    then its bytes), a larger one two (the header alone, then the bytes); either is
    received exact, and messages set aside stay intact while later ones of the same
    size come through the same receive buffer."""
    w = Wire()
    a, b = Tagged(w.end(0)), Tagged(w.end(1))
    small = (np.arange(JOINED) % 251).astype(np.uint8)
    big = (np.arange(JOINED + 1) % 241).astype(np.uint8)
    a.send(small, 1, 1)
    assert len(w.q[(1, 0)]) == 1 and w.q[(1, 0)][0].nbytes == 24 + JOINED
    a.send(big, 1, 2)
    assert len(w.q[(1, 0)]) == 3 and w.q[(1, 0)][1].nbytes == 24
    a.send(small[::-1].copy(), 1, 1)
    a.send(big[::-1].copy(), 1, 2)
    out = np.empty(JOINED + 1, np.uint8)
    assert b.recv(out, 0, 2) == (2, JOINED + 1) and (out == big).all()  # (sets 1 aside)
    assert b.recv(out, 0, 2) == (2, JOINED + 1) and (out == big[::-1]).all()
    got = np.empty(JOINED, np.uint8)
    assert b.recv(got, 0, 1) == (1, JOINED) and (got == small).all()
    assert b.recv(got, 0, 1) == (1, JOINED) and (got == small[::-1]).all()
    a.send(small[:0], 1, 3)  # an empty message: its header alone, joined
    assert w.q[(1, 0)][0].nbytes == 24 and b.recv(got, 0, ANY) == (3, 0)
    assert not any(w.q.values())


def test_larger_buffer_takes_the_message_and_smaller_is_refused():
    a, b = _pair()
    a.send(_b(1.0, 2.0), 1, 3)
    a.send(_b(1.0, 2.0, 3.0), 1, 3)
    a.send(_b(9.0), 1, 4)
    big = np.full(4, -1.0)
    assert b.recv(big.view(np.uint8), 0, 3) == (3, 16)
    assert big.tolist() == [1.0, 2.0, -1.0, -1.0]
    with pytest.raises(InvalidArgumentError, match="MPI_ERR_TRUNCATE"):
        b.recv(np.zeros(2).view(np.uint8), 0, 3)
    one = np.zeros(1)
    assert b.recv(one.view(np.uint8), 0, 4) == (4, 8) and one[0] == 9.0  # the stream goes on


def test_posted_receives_match_in_posting_order():
    a, b = _pair()
    x, y, z = np.zeros(1), np.zeros(1), np.zeros(1)
    mx = b.post(x.view(np.uint8), 0, ANY)
    my = b.post(y.view(np.uint8), 0, ANY)
    for v in (1.0, 2.0, 3.0):
        a.send(_b(v), 1, 0)
    assert my() == (0, 0, 8) and mx() == (0, 0, 8) and my() == (0, 0, 8)  # (made once)
    assert (x[0], y[0]) == (1.0, 2.0)
    b.recv(z.view(np.uint8), 0, ANY)
    assert z[0] == 3.0
    mz = b.post(z.view(np.uint8), 0, 5)
    a.send(_b(8.0), 1, 5)
    a.send(_b(6.0), 1, 6)
    w = np.zeros(1)
    b.recv(w.view(np.uint8), 0, ANY)  # (passes over the message the posted one takes)
    assert (z[0], w[0]) == (3.0, 6.0)  # (z is written when its receive is made)
    assert mz() == (0, 5, 8) and z[0] == 8.0


def test_a_blocking_receive_does_not_wait_for_a_posted_receives_message():
    """As MPI: an Irecv for tag 5 posted first does not hold up a Recv for tag 7
    whose message comes while tag 5's never has; a probe passes over the posted
    receive's message too."""
    a, b = _pair()
    x, y = np.zeros(1), np.zeros(1)
    mx = b.post(x.view(np.uint8), 0, 5)
    a.send(_b(7.0), 1, 7)
    assert b.probe(0, ANY) == (7, 8)
    assert b.recv(y.view(np.uint8), 0, ANY) == (7, 8) and y[0] == 7.0
    a.send(_b(5.0), 1, 5)
    a.send(_b(5.5), 1, 5)
    assert b.probe(0, 5) == (5, 8)  # (the second: the posted receive takes the first)
    assert mx() == (0, 5, 8) and x[0] == 5.0
    assert b.recv(y.view(np.uint8), 0, 5) == (5, 8) and y[0] == 5.5


@pytest.mark.parametrize("tag", [-1, 2 ** 31, 1.5, True, "3"])
def test_bad_send_tags_are_refused(tag):
    with pytest.raises(InvalidArgumentError, match="tag: expected an integer"):
        send_tag(tag)


def test_a_posted_receive_is_ready_once_its_messages_are_here_and_iprobe_waits_for_none():
    """ready() and iprobe() wait for no message that has not come: a posted receive
    is ready once the message MPI's matching gives it is here (each receive, in
    posting order, the first that fits), whether or not those posted before it
    have theirs; iprobe reports only a message no posted receive will take. A
    message is here once its header is (the bytes of one sent apart follow it at
    once: they are read then)."""
    w = Wire()
    a, b = Tagged(w.end(0)), Tagged(w.end(1))
    x, y = np.zeros(1), np.zeros(1)
    mx = b.post(x.view(np.uint8), 0, 5)
    my = b.post(y.view(np.uint8), 0, ANY)
    assert not b.ready(mx) and not b.ready(my) and b.iprobe(0, ANY) is None
    a.send(_b(7.0), 1, 7)
    # (my takes it: mx, posted first, waits for tag 5)
    assert not b.ready(mx) and b.ready(my) and b.iprobe(0, 7) is None
    w.q[(1, 0)].append(np.array([5, 8, 0], np.int64).view(np.uint8))  # a header alone
    w.q[(1, 0)].append(_b(5.0))  # and its bytes, as a message larger than JOINED goes
    assert b.ready(mx) and b.ready(my) and b.iprobe(0, ANY) is None
    a.send(_b(9.0, 9.5), 1, 9)
    assert b.iprobe(0, 9) == (9, 16) and b.iprobe(0, ANY) == (9, 16)
    assert b.iprobe(0, 5) is None
    assert my() == (0, 7, 8) and (x[0], y[0]) == (0.0, 7.0)  # (mx not made by it)
    assert mx() == (0, 5, 8) and x[0] == 5.0
    assert b.ready(mx) and b.ready(my)  # (made)
    out = np.zeros(2)
    assert b.recv(out.view(np.uint8), 0, ANY) == (9, 16) and out.tolist() == [9.0, 9.5]
    assert b.iprobe(0, ANY) is None


def test_receive_and_probe_from_any_source():
    """recv_any/probe_any/iprobe_any take the first message that has arrived from
    any rank (this rank's own included) whose tag matches, passing over what posted
    receives take; a receive that nothing reaches times out."""
    w = Wire()
    a, b = Tagged(w.end(0)), Tagged(w.end(1))
    assert b.iprobe_any(ANY) is None
    with pytest.raises(TimeoutError, match="recv from any source"):
        b.recv_any(np.zeros(1).view(np.uint8), ANY, deadline=0.0)
    x = np.zeros(1)
    mx = b.post(x.view(np.uint8), 0, 3)
    a.send(_b(3.0), 1, 3)  # (the posted receive's)
    b.send(_b(4.0), 1, 4)  # to itself
    a.send(_b(5.0), 1, 5)
    assert b.iprobe_any(3) is None
    assert b.probe_any(5) == (0, 5, 8)
    y = np.zeros(1)
    got = sorted([b.recv_any(y.view(np.uint8), ANY)[:2] + (y[0],) for _ in range(2)])
    assert got == [(0, 5, 5.0), (1, 4, 4.0)]
    assert mx() == (0, 3, 8) and x[0] == 3.0


def test_a_receive_of_any_size_takes_what_a_receive_would_and_acknowledges_it():
    """recv_bytes (the pickle-based receives): the message a receive from that
    source (or any) with that tag takes, of any size (joined or apart), its own
    copy; passing over what a posted receive takes; a synchronous send is
    acknowledged."""
    w = Wire()
    a, b = Tagged(w.end(0)), Tagged(w.end(1))
    x = np.zeros(1)
    mx = b.post(x.view(np.uint8), 0, ANY)
    a.send(_b(1.0), 1, 3)  # (the posted receive's)
    big = np.arange(JOINED // 8 + 5, dtype=np.float64)
    n = a.send(big.view(np.uint8), 1, 3, sync=True)
    b.send(_b(2.0), 1, 4)  # to itself
    src, tag, data = b.recv_bytes(0, 3)
    assert (src, tag) == (0, 3) and np.array_equal(data.view(np.float64), big)
    assert a.acked(1, n)
    assert b.recv_bytes(ANY, ANY, None)[:2] == (1, 4)
    assert mx() == (0, 3, 8) and x[0] == 1.0
    a.send(_b(7.0), 1, 9)
    src, tag, data = b.recv_bytes(ANY, 9, None)
    data[...] = 0  # (its own copy: nothing else holds it)
    assert (src, tag, data.nbytes) == (0, 9, 8)
    with pytest.raises(TimeoutError, match="recv from any source"):
        b.recv_bytes(ANY, ANY, 0.0)


def test_a_matched_probe_keeps_its_message_for_its_receive_alone():
    """mprobe/improbe (MPI_Mprobe): the message found is passed over by every other
    receive, probe and posted receive, and taken by mrecv only (a synchronous send
    acknowledged then, not at the probe)."""
    a, b = _pair()
    assert b.improbe(0, ANY) is None
    n = a.send(_b(1.0), 1, 5, sync=True)
    a.send(_b(2.0), 1, 5)
    m = b.mprobe(0, 5)
    assert (m.src, m.tag) == (0, 5) and not a.acked(1, n)
    assert b.probe(0, ANY) == (5, 8)  # (the second message)
    y = np.zeros(1)
    r = b.post(y.view(np.uint8), 0, 5)
    assert r() == (0, 5, 8) and y[0] == 2.0
    x = np.zeros(1)
    assert b.mrecv(m, x.view(np.uint8)) == (0, 5, 8) and x[0] == 1.0 and a.acked(1, n)
    a.send(_b(3.0), 1, 6)
    k = b.improbe(ANY, 6)
    src, tag, data = b.mrecv(k)
    assert (src, tag, data.view(np.float64)[0]) == (0, 6, 3.0)
    assert b.iprobe_any(ANY) is None


def test_a_posted_receive_does_not_wait_for_an_earlier_ones_message():
    """As MPI: q2 (tag 2) completes once its message is here although q1 (tag 1),
    posted first, has none; an error of q1 (MPI_ERR_TRUNCATE) is q1's, every time
    it is made, and leaves the stream as MPI leaves it."""
    a, b = _pair()
    small, big = np.zeros(1, np.int32), np.zeros(4, np.int32)
    q1 = b.post(small.view(np.uint8), 0, 1)
    q2 = b.post(big.view(np.uint8), 0, 2)
    a.send(np.array([2, 2], np.int32).view(np.uint8), 1, 2)
    assert b.ready(q2) and not b.ready(q1)
    assert q2() == (0, 2, 8) and big.tolist() == [2, 2, 0, 0]
    a.send(np.array([1, 1], np.int32).view(np.uint8), 1, 1)  # too long for q1
    a.send(np.array([3], np.int32).view(np.uint8), 1, 3)
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match="MPI_ERR_TRUNCATE"):
            q1()
    out = np.zeros(1, np.int32)
    assert b.recv(out.view(np.uint8), 0, ANY) == (3, 4) and out[0] == 3


def _ranks(n):
    w = Wire(n)
    return [Tagged(w.end(k)) for k in range(n)]


def test_a_receive_posted_from_any_source_matches_in_posting_order():
    """As MPI: receives posted from any source and from named ones take messages
    in posting order, each the first to have arrived that fits it; a later named
    receive is not held up by an earlier any-source one that has its message."""
    a, b, c = _ranks(3)
    x, y, z = np.zeros(1), np.zeros(1), np.zeros(1)
    rx = c.post(x.view(np.uint8), ANY, ANY)
    ry = c.post(y.view(np.uint8), 0, ANY)
    assert not c.ready(rx) and not c.ready(ry)
    b.send(_b(2.0), 2, 5)  # (arrives first: rx's, though ry was posted from 0 only)
    assert c.ready(rx) and not c.ready(ry)
    a.send(_b(1.0), 2, 6)
    assert c.ready(ry)
    assert ry() == (0, 6, 8) and y[0] == 1.0
    assert rx() == (1, 5, 8) and x[0] == 2.0
    # with messages from one source only, the earlier posted takes the first
    rx = c.post(x.view(np.uint8), ANY, ANY)
    ry = c.post(y.view(np.uint8), 0, ANY)
    a.send(_b(3.0), 2, 1)
    a.send(_b(4.0), 2, 1)
    assert ry() == (0, 1, 8) and y[0] == 4.0
    assert rx() == (0, 1, 8) and x[0] == 3.0
    # by tag: the any-source receive for tag 9 passes over tag 8, which a blocking
    # receive from any source then takes
    rz = c.post(z.view(np.uint8), ANY, 9)
    a.send(_b(8.0), 2, 8)
    c.send(_b(9.0), 2, 9)  # (its own)
    w = np.zeros(1)
    assert c.recv_any(w.view(np.uint8), ANY) == (0, 8, 8) and w[0] == 8.0
    assert c.iprobe_any(ANY) is None  # (the tag 9 message is rz's)
    assert rz() == (2, 9, 8) and z[0] == 9.0


def test_a_named_receive_passes_over_what_an_earlier_any_source_receive_takes():
    a, b, c = _ranks(3)
    x, y = np.zeros(1), np.zeros(1)
    rx = c.post(x.view(np.uint8), ANY, 4)
    a.send(_b(4.0), 2, 4)
    a.send(_b(5.0), 2, 4)
    assert c.probe(0, 4) == (4, 8)
    assert c.recv(y.view(np.uint8), 0, 4) == (4, 8) and y[0] == 5.0
    assert rx() == (0, 4, 8) and x[0] == 4.0


def test_an_any_source_receive_that_nothing_reaches_times_out(monkeypatch):
    monkeypatch.setenv("NEURON_MPI_TIMEOUT", "0.05")
    a, b, c = _ranks(3)
    r = c.post(np.zeros(1).view(np.uint8), ANY, ANY)
    with pytest.raises(TimeoutError, match="recv from any source"):
        r()
    with pytest.raises(TimeoutError):  # (its error, again)
        r()
    a.send(_b(1.0), 2, 0)  # (the stream goes on: the next receive takes it)
    out = np.zeros(1)
    assert c.recv_any(out.view(np.uint8), ANY) == (0, 0, 8) and out[0] == 1.0


def test_cancel_a_posted_receive_before_its_message_only():
    """MPI_Cancel: a posted receive no message has matched is cancelled and takes
    nothing; one whose message is here is not (it completes as usual)."""
    a, b = _pair()
    x, y = np.zeros(1), np.zeros(1)
    rx = b.post(x.view(np.uint8), ANY, ANY)
    ry = b.post(y.view(np.uint8), 0, 3)
    assert b.cancel(rx) and b.ready(rx)
    a.send(_b(3.0), 1, 3)
    assert not b.cancel(ry)
    assert ry() == (0, 3, 8) and (x[0], y[0]) == (0.0, 3.0)
    with pytest.raises(InvalidArgumentError, match="cancelled"):
        rx()


def test_a_synchronous_send_is_done_once_a_receive_takes_it():
    """MPI_Ssend/Issend: acknowledged by the receive that takes the message (a
    blocking one, or a posted one once matched, before its wait; also when too
    long for it), not by a probe; the acknowledgements are never matched as
    messages."""
    a, b = _pair()
    n1 = a.send(_b(1.0), 1, 7, sync=True)
    n2 = a.send(_b(2.0), 1, 8, sync=True)
    assert n1 != n2 and a.send(_b(0.0), 1, 9) == 0
    assert not a.acked(1, n1)
    assert b.probe(0, 7) == (7, 8) and b.iprobe(0, 8) == (8, 8)
    assert not a.acked(1, n1) and not a.acked(1, n2)
    out = np.zeros(1)
    assert b.recv(out.view(np.uint8), 0, 8) == (8, 8)  # (out of order)
    assert a.acked(1, n2) and not a.acked(1, n1)
    r = b.post(np.zeros(0).view(np.uint8), 0, 7)  # (matched when posted, before its
    a.wait_acked(1, n1)  # wait, as MPI: the send is done; too long for it, though)
    with pytest.raises(InvalidArgumentError, match="MPI_ERR_TRUNCATE"):
        r()
    # a receive posted first matches the synchronous send when it arrives
    r = b.post(out.view(np.uint8), 0, 11)
    n5 = a.send(_b(1.5), 1, 11, sync=True)
    assert not a.acked(1, n5) and b.ready(r) and a.acked(1, n5)
    assert r() == (0, 11, 8) and out[0] == 1.5
    assert b.recv(out.view(np.uint8), 0, ANY) == (9, 8) and out[0] == 0.0
    assert a.iprobe(1, ANY) is None and a.iprobe_any(ANY) is None
    # to itself, as upstream mpi4py's testProbe
    n3 = a.send(_b(5.0), 0, 123, sync=True)
    assert a.probe_any(ANY) == (0, 123, 8) and not a.acked(0, n3)
    assert a.recv(out.view(np.uint8), 0, 123) == (123, 8) and a.acked(0, n3)
    # a message straight into its receive's buffer (no receive posted) is acknowledged too
    n4 = b.send(_b(6.0), 0, 1, sync=True)
    assert a.recv(out.view(np.uint8), 1, 1) == (1, 8) and b.acked(0, n4)


def test_receives_from_any_source_serve_every_sender_in_turn():
    """A busy sender does not hide the others from receives from any source."""
    a, b, c = _ranks(3)
    for v in (1.0, 2.0, 3.0):
        a.send(_b(v), 2, 0)
    b.send(_b(9.0), 2, 0)
    out = np.zeros(1)
    got = [c.recv_any(out.view(np.uint8), ANY)[0] for _ in range(2)]
    assert sorted(got) == [0, 1]


def test_a_wait_on_one_source_still_matches_and_acknowledges_the_others():
    """While c waits for a's acknowledgement, b's synchronous send, which c's
    receive posted from b matches, is read and acknowledged (c does not read a's
    stream alone): a ring of Issend/Ssend with posted receives cannot deadlock."""
    a, b, c = _ranks(3)
    got = np.zeros(1)
    r = c.post(got.view(np.uint8), 1, 0)
    nb = b.send(_b(2.0), 2, 0, sync=True)
    nc = c.send(_b(3.0), 0, 0, sync=True)
    with pytest.raises(CollectiveTimeoutError):  # (a never receives in this test)
        c.wait_acked(0, nc)
    assert b.acked(2, nb) and c.ready(r)
    assert r() == (1, 0, 8) and got[0] == 2.0


def test_acknowledgements_are_let_go():
    """A synchronous send's acknowledgement is dropped once waited for, or when it
    comes after its request was freed (``forget``)."""
    a, b = _pair()
    out = np.zeros(1)
    for _ in range(3):
        n = a.send(_b(1.0), 1, 0, sync=True)
        b.recv(out.view(np.uint8), 0, 0)
        a.wait_acked(1, n)
    n = a.send(_b(1.0), 1, 0, sync=True)
    a.forget(1, n)
    b.recv(out.view(np.uint8), 0, 0)
    n2 = a.send(_b(1.0), 1, 0, sync=True)
    b.recv(out.view(np.uint8), 0, 0)
    a.wait_acked(1, n2)
    assert not a._acks.get(1) and not a._forget.get(1)


def test_a_detached_receive_is_made_when_its_message_comes():
    """``detach`` (a freed request): the receive is made once a message is matched
    to it, at once if one is, else when it is read; a later receive takes the next."""
    a, b = _pair()
    x, y, z = np.zeros(1), np.zeros(1), np.zeros(1)
    rx = b.post(x.view(np.uint8), 0, ANY)
    b.detach(rx)
    a.send(_b(1.0), 1, 0)
    a.send(_b(2.0), 1, 0)
    assert b.recv(y.view(np.uint8), 0, ANY) == (0, 8) and (x[0], y[0]) == (1.0, 2.0)
    a.send(_b(3.0), 1, 0)
    rz = b.post(z.view(np.uint8), 0, ANY)
    assert b.ready(rz)
    b.detach(rz)  # (matched already: made now)
    assert z[0] == 3.0 and not b._posted


def test_a_wait_on_one_communicator_matches_the_receives_posted_on_another(monkeypatch):
    """Rank 0 posts a receive on communicator A, then waits on communicator W: the
    synchronous send on A that the receive matches is read and acknowledged
    meanwhile (a program whose ranks pass a message on W only after an A.Ssend
    returns completes)."""
    import neuron_mpi.tagged as T

    monkeypatch.setattr(T, "_POSTING", set())
    monkeypatch.setenv("NEURON_MPI_TIMEOUT", "0.05")
    wa, ww = Wire(3), Wire(3)
    a0, a1 = Tagged(wa.end(0)), Tagged(wa.end(1))
    w0 = Tagged(ww.end(0))
    got = np.zeros(1)
    r = a0.post(got.view(np.uint8), 1, 0)
    n = a1.send(_b(5.0), 0, 0, sync=True)
    with pytest.raises(CollectiveTimeoutError):  # (rank 2 never sends on W here)
        w0.recv(np.zeros(1).view(np.uint8), 2, 0)
    assert a1.acked(0, n) and a0.ready(r)
    assert r() == (1, 0, 8) and got[0] == 5.0
    assert not T._POSTING  # (no receive posted any more)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_a_barrier_of_messages_is_over_once_every_rank_started_it(n):
    """Barrier (dissemination rounds of point-to-point messages): while one rank has
    not started it, no rank's poll says it is over, however often polled; once it
    has, polling every rank ends it on every rank. A second barrier after it works
    alike (its messages match in order); and a receive or probe of ANY tag never
    takes a barrier's messages."""
    w = Wire(n)
    ts = [Tagged(w.end(r)) for r in range(n)]
    late = n - 1
    for _ in range(2):
        bs = {r: Barrier(ts[r], r, n) for r in range(n) if r != late}
        for _ in range(3):
            assert not any(b.poll() for b in bs.values())
        out = np.zeros(1)
        for r in range(n - 1):  # (a user's message beside the barrier's)
            ts[late].send(_b(float(r)), r, 9)
            assert ts[r].probe(late, ANY) == (9, 8)
            assert ts[r].recv(out.view(np.uint8), late, ANY) == (9, 8) and out[0] == r
        assert ts[late].iprobe_any(ANY) is None  # (barrier messages are there)
        bs[late] = Barrier(ts[late], late, n)
        for _ in range(n):
            done = [b.poll() for b in bs.values()]
        assert all(done)
        for b in bs.values():
            b.wait()  # (over: returns at once)
    assert not any(w.q.values()) and all(not t._posted for t in ts)


@pytest.mark.parametrize("n", [3, 4, 5])
def test_barriers_in_flight_each_match_their_own_and_any_wait_moves_them_on(n):
    """Two barriers in flight at once: the second is not over on any rank while rank
    0 has not started it, even where the first has moved on further (each barrier
    has its own tag: a later one's round must not take an earlier one's message);
    and polling only the second moves the first on too (MPI's progress rule: rank
    0 waits on the first while the others test only the second)."""
    w = Wire(n)
    ts = [Tagged(w.end(r)) for r in range(n)]
    a = {r: Barrier(ts[r], r, n) for r in range(n)}
    b = {r: Barrier(ts[r], r, n) for r in range(1, n)}  # (rank 0: not yet)
    for _ in range(2 * n):
        assert not any(b[r].poll() for r in b)
        a[0].poll()
    assert all(x.done for x in a.values()), "polling the second did not move the first"
    assert not any(x.done for x in b.values())
    b[0] = Barrier(ts[0], 0, n)
    for _ in range(n):
        done = [x.poll() for x in b.values()]
    assert all(done) and not any(w.q.values())

