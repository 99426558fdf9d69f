"""neuron_mpi.tagged: MPI's tag matching over a Communicator's ordered messages
(the mpi4py and torch front-ends' point to point), on an in-memory stand-in."""
from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from neuron_mpi.errors import InvalidArgumentError
from neuron_mpi.tagged import ANY, Tagged, send_tag


class Wire:
    """Two ranks' ordered channels: send copies, recv takes the next message whole
    (exactly its size, as Communicator.recv)."""

    def __init__(self):
        self.q = {0: deque(), 1: deque()}  # to rank -> messages from the other

    def end(self, me):
        wire = self

        class End:
            def send(self, x, dst):
                wire.q[dst].append(np.array(x, copy=True).view(np.uint8).reshape(-1))

            def recv(self, out, src):
                msg = wire.q[me].popleft()
                assert msg.nbytes == out.nbytes, "a receive of the wrong size"
                out.reshape(-1).view(np.uint8)[...] = msg
                return out

            def arrived(self, src, count=1):
                return len(wire.q[me]) >= count
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
    b.recv(w.view(np.uint8), 0, ANY)  # (a blocking receive makes the posted one first)
    assert (z[0], w[0]) == (8.0, 6.0) and mz() == (5, 8)


@pytest.mark.parametrize("tag", [-1, 2 ** 31, 1.5, True, "3"])
def test_bad_send_tags_are_refused(tag):
    with pytest.raises(InvalidArgumentError, match="tag: expected an integer"):
        send_tag(tag)


def test_a_posted_receive_is_ready_once_its_messages_are_here_and_iprobe_waits_for_none():
    """ready() and iprobe() never wait: a posted receive is ready once it and the
    receives posted before it have their messages here (matched as MPI matches
    them: each the first that fits, in posting order); iprobe reports only a
    message no posted receive will take, and only once its bytes have begun to
    arrive too."""
    w = Wire()
    a, b = Tagged(w.end(0)), Tagged(w.end(1))
    x, y = np.zeros(1), np.zeros(1)
    mx = b.post(x.view(np.uint8), 0, 5)
    my = b.post(y.view(np.uint8), 0, ANY)
    assert not b.ready(0, mx) and not b.ready(0, my) and b.iprobe(0, ANY) is None
    a.send(_b(7.0), 1, 7)
    # (my would take it, but mx, posted first, waits for tag 5)
    assert not b.ready(0, mx) and not b.ready(0, my) and b.iprobe(0, 7) is None
    w.q[1].append(np.array([5, 8], np.int64).view(np.uint8))  # a header alone
    assert not b.ready(0, mx)
    w.q[1].append(_b(5.0))  # and its bytes
    assert b.ready(0, mx) and b.ready(0, my) and b.iprobe(0, ANY) is None
    a.send(_b(9.0, 9.5), 1, 9)
    assert b.iprobe(0, 9) == (9, 16) and b.iprobe(0, ANY) == (9, 16)
    assert b.iprobe(0, 5) is None
    assert my() == (7, 8) and (x[0], y[0]) == (5.0, 7.0)  # (mx made first)
    assert b.ready(0, mx) and b.ready(0, my)  # (made)
    out = np.zeros(2)
    assert b.recv(out.view(np.uint8), 0, ANY) == (9, 16) and out.tolist() == [9.0, 9.5]
    assert b.iprobe(0, ANY) is None
