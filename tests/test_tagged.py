"""neuron_mpi.tagged: MPI's tag matching over a Communicator's ordered messages
(the mpi4py and torch front-ends' point to point), on an in-memory stand-in."""
from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from neuron_mpi.errors import InvalidArgumentError
from neuron_mpi.tagged import ANY, Tagged, send_tag


class Wire:
    """Two ranks' ordered channels, one per (receiver, sender): send copies, recv
    takes the next message whole (exactly its size, as Communicator.recv)."""

    def __init__(self):
        self.q = {(d, s): deque() for d in (0, 1) for s in (0, 1)}

    def end(self, me):
        wire = self

        class End:
            size = 2

            def send(self, x, dst):
                wire.q[(dst, me)].append(np.array(x, copy=True).view(np.uint8).reshape(-1))

            def recv(self, out, src):
                msg = wire.q[(me, src)].popleft()
                assert msg.nbytes == out.nbytes, "a receive of the wrong size"
                out.reshape(-1).view(np.uint8)[...] = msg
                return out

            def arrived(self, src, count=1):
                return len(wire.q[(me, src)]) >= count
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
    assert my() == (0, 8) and mx() == (0, 8) and my() == (0, 8)  # (made once)
    assert (x[0], y[0]) == (1.0, 2.0)
    b.recv(z.view(np.uint8), 0, ANY)
    assert z[0] == 3.0
    mz = b.post(z.view(np.uint8), 0, 5)
    a.send(_b(8.0), 1, 5)
    a.send(_b(6.0), 1, 6)
    w = np.zeros(1)
    b.recv(w.view(np.uint8), 0, ANY)  # (passes over the message the posted one takes)
    assert (z[0], w[0]) == (3.0, 6.0)  # (z is written when its receive is made)
    assert mz() == (5, 8) and z[0] == 8.0


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
    assert mx() == (5, 8) and x[0] == 5.0
    assert b.recv(y.view(np.uint8), 0, 5) == (5, 8) and y[0] == 5.5


@pytest.mark.parametrize("tag", [-1, 2 ** 31, 1.5, True, "3"])
def test_bad_send_tags_are_refused(tag):
    with pytest.raises(InvalidArgumentError, match="tag: expected an integer"):
        send_tag(tag)


def test_a_posted_receive_is_ready_once_its_messages_are_here_and_iprobe_waits_for_none():
    """ready() and iprobe() never wait: a posted receive is ready once the message
    MPI's matching gives it is here (each receive, in posting order, the first
    that fits), whether or not those posted before it have theirs; iprobe reports only a
    message no posted receive will take, and only once its bytes have begun to
    arrive too."""
    w = Wire()
    a, b = Tagged(w.end(0)), Tagged(w.end(1))
    x, y = np.zeros(1), np.zeros(1)
    mx = b.post(x.view(np.uint8), 0, 5)
    my = b.post(y.view(np.uint8), 0, ANY)
    assert not b.ready(0, mx) and not b.ready(0, my) and b.iprobe(0, ANY) is None
    a.send(_b(7.0), 1, 7)
    # (my takes it: mx, posted first, waits for tag 5)
    assert not b.ready(0, mx) and b.ready(0, my) and b.iprobe(0, 7) is None
    w.q[(1, 0)].append(np.array([5, 8], np.int64).view(np.uint8))  # a header alone
    assert not b.ready(0, mx)
    w.q[(1, 0)].append(_b(5.0))  # and its bytes
    assert b.ready(0, mx) and b.ready(0, my) and b.iprobe(0, ANY) is None
    a.send(_b(9.0, 9.5), 1, 9)
    assert b.iprobe(0, 9) == (9, 16) and b.iprobe(0, ANY) == (9, 16)
    assert b.iprobe(0, 5) is None
    assert my() == (7, 8) and (x[0], y[0]) == (0.0, 7.0)  # (mx not made by it)
    assert mx() == (5, 8) and x[0] == 5.0
    assert b.ready(0, mx) and b.ready(0, my)  # (made)
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
    assert mx() == (3, 8) and x[0] == 3.0


def test_a_posted_receive_does_not_wait_for_an_earlier_ones_message():
    """As MPI: q2 (tag 2) completes once its message is here although q1 (tag 1),
    posted first, has none; an error of q1 (MPI_ERR_TRUNCATE) is q1's, every time
    it is made, and leaves the stream as MPI leaves it."""
    a, b = _pair()
    small, big = np.zeros(1, np.int32), np.zeros(4, np.int32)
    q1 = b.post(small.view(np.uint8), 0, 1)
    q2 = b.post(big.view(np.uint8), 0, 2)
    a.send(np.array([2, 2], np.int32).view(np.uint8), 1, 2)
    assert b.ready(0, q2) and not b.ready(0, q1)
    assert q2() == (2, 8) and big.tolist() == [2, 2, 0, 0]
    a.send(np.array([1, 1], np.int32).view(np.uint8), 1, 1)  # too long for q1
    a.send(np.array([3], np.int32).view(np.uint8), 1, 3)
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match="MPI_ERR_TRUNCATE"):
            q1()
    out = np.zeros(1, np.int32)
    assert b.recv(out.view(np.uint8), 0, ANY) == (3, 4) and out[0] == 3
