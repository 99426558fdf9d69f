"""The transports without mpiexec: futexes, the shared segment, landing slots,
backpressure, the compiled data plane and the next-hop table (one process plays
two ranks of a domain over MPI.COMM_SELF)."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from mpi4py import MPI

from neuron_mpi.kernels import DTYPES, REDUCE_OPS, divide_into, reduce_into
from neuron_mpi.kernels.bytes import CODES, divide_bytes, reduce_bytes
from neuron_mpi.router import NextHops
from neuron_mpi.topology import Topology
from neuron_mpi.transport import futex, native, plane, private_arrival
from neuron_mpi.transport.segment import SHM_DIR, Segment
from neuron_mpi.transport.shm import ShmTransport

pytestmark = pytest.mark.skipif(not futex.available(), reason="needs Linux futexes")


@pytest.fixture()
def pair():
    """Two ranks (world ranks 0 and 1) of one domain, 2 slots of 64 bytes each."""
    seg = Segment(MPI.COMM_SELF, [0, 1], 2, 2, 64)
    yield seg, ShmTransport(seg, 0), ShmTransport(seg, 1)


def head(key, n, total=None, origin=0, dst=1):
    return (*key, n, n if total is None else total, origin, dst)


def test_futex_wait_times_out_and_wakes_across_threads():
    word = np.zeros(4, np.int32)
    t0 = time.monotonic()
    assert futex.wait(word.ctypes.data, 0, 0.05) is False
    assert time.monotonic() - t0 >= 0.04
    assert futex.wait(word.ctypes.data, 1, 1.0) is True  # value differs: at once
    woke = []

    def sleeper():
        woke.append(futex.wait(word.ctypes.data, 0, 5.0))

    th = threading.Thread(target=sleeper)
    th.start()
    time.sleep(0.05)
    word[0] = 1
    futex.wake(word.ctypes.data)
    th.join(2)
    assert woke == [True] and not th.is_alive()


@pytest.mark.parametrize("word", [0, 2])
def test_a_compiled_ring_acts_as_the_python_one(pair, word):
    """engine.Bell with ShmTransport.ringer (one compiled call) adds one to the
    word, as the Python ring does, and wakes a thread asleep on it; with nobody
    asleep it only adds."""
    from neuron_mpi.engine import Bell

    b = pair[2]
    words, index = (b.bell() if word == 0 else b.agent_bell())
    fast, slow = Bell(words, index, ring=b.ringer(word)), Bell(words, index)
    v = fast.value()
    fast.ring()
    slow.ring()
    assert fast.value() == v + 2
    woke = []

    def sleeper(seen):
        t0 = time.monotonic()
        slow.sleep(seen, 5.0)
        woke.append(time.monotonic() - t0)

    th = threading.Thread(target=sleeper, args=(fast.value(),))
    th.start()
    time.sleep(0.1)
    fast.ring()
    th.join(3)
    assert len(woke) == 1 and woke[0] < 3 and fast.value() == v + 3


def test_segment_is_unlinked_once_mapped(pair):
    seg, _, _ = pair
    assert seg.path.startswith(os.path.join(SHM_DIR, "neuron_mpi-"))
    assert not os.path.exists(seg.path)


def test_post_take_release_round_trip(pair):
    _, a, b = pair
    payload = np.arange(16, dtype=np.uint8)
    assert a.post(1, head((7, 3, 2, 0), 16), payload)
    assert b.take((7, 3, 2, 1)) is None  # another piece
    got = b.take((7, 3, 2, 0))
    assert got is not None and got.origin == 0 and got.dst == 1 and got.total == 16
    assert np.array_equal(got.data, payload)
    got.release()
    assert b.take((7, 3, 2, 0)) is None


def test_full_channel_refuses_then_accepts_after_release(pair):
    seg, a, b = pair
    for p in range(2):
        assert a.post(1, head((1, 1, 0, p), 8), np.full(8, p, np.uint8))
    assert not a.post(1, head((1, 1, 0, 2), 8), np.zeros(8, np.uint8))
    assert b.wanted()  # the sender raised its flag
    b.take((1, 1, 0, 0)).release()
    assert not b.wanted()  # the release answered it
    assert a.post(1, head((1, 1, 0, 2), 8), np.full(8, 2, np.uint8))


def test_unblock_copies_aside_pieces_nobody_takes(pair):
    _, a, b = pair
    for p in range(2):
        assert a.post(1, head((1, 9, 0, p), 8), np.full(8, p + 1, np.uint8))
    assert not a.post(1, head((1, 9, 0, 2), 8), np.zeros(8, np.uint8))
    aside: list = []
    b.unblock(aside)
    assert sorted(x.key for x in aside) == [(1, 9, 0, 0), (1, 9, 0, 1)]
    assert all(not x.in_transport for x in aside)
    assert [int(x.data[0]) for x in sorted(aside, key=lambda x: x.key)] == [1, 2]
    assert a.post(1, head((1, 9, 0, 2), 8), np.zeros(8, np.uint8))  # room again


def test_pieces_for_failed_communicators_are_freed_not_copied_aside(pair):
    """drop frees the receiver's slots holding pieces of the communicators given
    (also one left in its sender's buffer, which sees it read), leaving other
    communicators' pieces and pieces passing through; unblock frees them before
    it looks for full channels, so a channel that was full only because of them
    copies nothing aside."""
    _, a, b = pair
    a.enable_reads(1)
    x = np.arange(200, dtype=np.uint8)
    assert a.post(1, head((5, 1, 0, 0), 8), np.ones(8, np.uint8))  # failed comm 5
    assert a.post(1, head((6, 1, 0, 0), 8), np.ones(8, np.uint8))  # live comm 6
    assert b.drop(np.array([3, 5], np.int64)) == 1
    assert b.take((5, 1, 0, 0)) is None
    got = b.take((6, 1, 0, 0))
    assert got is not None
    got.release()
    assert a.post(1, head((5, 2, 0, 0), 200), x)  # left for reading (a private copy)
    assert a.post(1, head((6, 2, 0, 0), 8), np.ones(8, np.uint8))
    assert not a.post(1, head((6, 2, 0, 1), 8), np.ones(8, np.uint8))  # full: 2 slots
    aside: list = []
    b.unblock(aside, np.array([5], np.int64))
    assert aside == []  # the failed one freed: nothing copied aside
    assert b.take((5, 2, 0, 0)) is None
    a.unblock([])
    assert not a._lent  # its sender counts it read
    assert a.post(1, head((6, 2, 0, 1), 8), np.ones(8, np.uint8))  # room again
    for p in range(2):
        b.take((6, 2, 0, p)).release()
    assert a.post(1, head((5, 3, 0, 0), 8, dst=7), np.ones(8, np.uint8))  # passing through
    assert b.drop(np.array([5], np.int64)) == 0
    out: list = []
    b.collect(out)
    assert [x.key for x in out] == [(5, 3, 0, 0)]


def test_a_piece_copied_aside_whose_read_fails_is_filed_with_its_error(pair):
    """unblock (the agent's copy-aside) does not raise when the read of a piece
    left in its sender's buffer fails: the slot is freed (the sender has room), the
    piece comes back with its error and no bytes, and Engine.take raises that error
    for the call that takes it; Engine._file drops pieces of failed communicators."""
    from types import SimpleNamespace

    from neuron_mpi.engine import Engine

    _, a, b = pair
    a.enable_reads(1)
    a.g[native.G_PID] = 2 ** 22 + 12345  # above pid_max: no such process
    for p in range(2):
        assert a.post(1, head((4, 2, 0, p), 200), np.full(200, p, np.uint8))
    assert not a.post(1, head((4, 2, 0, 2), 200), np.zeros(200, np.uint8))
    aside: list = []
    b.unblock(aside)
    assert sorted(x.key for x in aside) == [(4, 2, 0, 0), (4, 2, 0, 1)]
    assert all(x.error is not None and "errno 3" in x.error and x.data.nbytes == 0
               for x in aside)
    assert a.post(1, head((4, 2, 0, 2), 200), np.zeros(200, np.uint8))  # room again
    eng = SimpleNamespace(rank=1, inbox={}, _dead={9}, shm=None)
    Engine._file(eng, aside + [private_arrival(head((9, 1, 0, 0), 8), np.zeros(8, np.uint8))])
    assert sorted(eng.inbox) == [(4, 2, 0, 0), (4, 2, 0, 1)]  # (9: a failed communicator)
    with pytest.raises(RuntimeError, match="from rank 0's buffer failed \\(errno 3"):
        Engine.take(eng, (4, 2, 0, 0))
    assert (4, 2, 0, 0) not in eng.inbox


def test_piece_larger_than_a_slot_is_refused(pair):
    _, a, _ = pair
    with pytest.raises(ValueError, match="slot size"):
        a.post(1, head((1, 1, 1, 0), 65), np.zeros(65, np.uint8))


def test_a_piece_larger_than_a_slot_from_python_is_read_from_a_private_copy(pair):
    """Where receivers read, a Python sender's piece larger than a slot is published
    for reading from a copy of its own (the caller's buffer may change at once),
    kept until the receiver has read it; with no free slot the copy waits for the
    next try of the same piece."""
    seg, a, b = pair
    a.enable_reads(1)
    x = np.arange(200, dtype=np.uint8)
    assert a.post(1, head((1, 1, 1, 0), 200), x)
    x[:] = 0  # the receiver reads the copy, not this buffer
    assert a.post(1, head((1, 1, 1, 1), 200), np.full(200, 7, np.uint8))
    assert not a.post(1, head((1, 1, 1, 2), 200), np.full(200, 9, np.uint8))  # 2 slots
    assert len(a._lent) == 2 and list(a._unposted) == [(1, 1, 1, 2)]
    got = b.take((1, 1, 1, 0))
    assert np.array_equal(got.data, np.arange(200, dtype=np.uint8))
    got.release()
    assert a.post(1, head((1, 1, 1, 2), 200), np.zeros(200, np.uint8))  # the kept copy
    assert len(a._lent) == 2 and not a._unposted  # the read one was given back
    for piece, want in ((1, 7), (2, 9)):
        got = b.take((1, 1, 1, piece))
        assert np.array_equal(got.data, np.full(200, want, np.uint8))
        got.release()
    stuck: list = []
    a.unblock(stuck)  # (every progress pass): the read copies are given back
    assert not a._lent and not stuck


def test_private_copies_read_by_their_receivers_are_reused_within_a_bound(pair, monkeypatch):
    """A private copy whose receiver has read it is kept (up to SPARE_BYTES, the
    largest first) and holds the next piece that fits, so a Python sender does not
    fault fresh pages in for every piece; what the receiver reads is the new piece."""
    from neuron_mpi.transport import shm as SHM

    seg, a, b = pair
    a.enable_reads(1)
    monkeypatch.setattr(SHM, "SPARE_BYTES", 500)
    for p, n in enumerate((300, 200)):
        assert a.post(1, head((2, 1, 1, p), n), np.full(n, p + 1, np.uint8))
    first = [e[2].base if e[2].base is not None else e[2] for e in a._lent]
    for p, n in enumerate((300, 200)):
        got = b.take((2, 1, 1, p))
        assert np.array_equal(got.data, np.full(n, p + 1, np.uint8))
        got.release()
    a.unblock([])  # both read: given back, 500 bytes in all
    assert not a._lent and sorted(x.size for x in a._spare) == [200, 300]
    assert all(any(x is f for f in first) for x in a._spare)
    assert a.post(1, head((2, 1, 2, 0), 250), np.full(250, 9, np.uint8))  # fits the 300
    assert a._lent[0][2].base is first[0] and [x.size for x in a._spare] == [200]
    got = b.take((2, 1, 2, 0))
    assert np.array_equal(got.data, np.full(250, 9, np.uint8))
    got.release()
    assert a.post(1, head((2, 1, 3, 0), 400), np.full(400, 4, np.uint8))  # none fits: new
    assert all(e[2].base is not first[0] and e[2].base is not first[1] for e in a._lent)
    got = b.take((2, 1, 3, 0))
    assert np.array_equal(got.data, np.full(400, 4, np.uint8))
    got.release()
    a.unblock([])  # 400, 300, 200 given back: the 400 and (500 reached) nothing else
    assert [x.size for x in a._spare] == [400]


def test_a_large_receive_is_shown_to_its_sender_while_it_waits(pair):
    """post_receive shows (communicator, transfer) from one sender: that sender's
    ``receiving`` is true for that pair alone, until unpost_receive; a sender
    waiting for it (await_receive, asleep on its doorbell) wakes when it is
    posted, and gives up at its end time when it is not."""
    import threading

    from neuron_mpi.engine import Bell

    seg, a, b = pair  # a: world rank 0, b: world rank 1
    bell = Bell(*a.bell())
    assert not a.receiving(1, 7, 3)
    b.post_receive(0, 7, 3)
    assert a.receiving(1, 7, 3)
    assert not a.receiving(1, 7, 4) and not a.receiving(1, 8, 3)
    assert not b.receiving(0, 7, 3)  # (the other way round: nothing shown)
    b.unpost_receive(0)
    assert not a.receiving(1, 7, 3)
    t0 = time.monotonic()
    assert not a.await_receive(1, 7, 5, bell, time.monotonic() + 0.05)
    assert time.monotonic() - t0 >= 0.04
    later = threading.Timer(0.05, lambda: b.post_receive(0, 7, 5))
    later.start()
    t0 = time.monotonic()
    assert a.await_receive(1, 7, 5, bell, time.monotonic() + 10)
    assert time.monotonic() - t0 < 5  # (woken by the post's ring, not the end time)
    later.join()


def test_copied_transfers_are_cut_at_the_read_piece_size():
    """Plan cuts a copied transfer at ``cut(src, dst)`` bytes and a reduced one at
    the piece size; both ends of a transfer cut it alike."""
    import neuron_mpi as nm
    from neuron_mpi.algorithms.group import GroupView
    from neuron_mpi.algorithms.select import schedule_for
    from neuron_mpi.executor import Plan

    view = GroupView(nm.topology("trn2.48xlarge", ranks=4), range(4))
    count = 10_000  # float32 elements per rank
    for op, sizes, reduced in (("all_gather", (count,) * 4, False),
                               ("reduce_scatter", (count,) * 4, True)):
        sched = schedule_for(view, op, "ring", sizes, False, None)
        plans = [Plan(sched, view, me, 4, 4096, cut=lambda s, d: 16384) for me in range(4)]
        sent = {(s.xid, s.piece): s.count for p in plans for k, st in p.steps
                if k == "round" for s in st.sends}
        got = {(r.xid, r.piece): r.count for p in plans for k, st in p.steps
               if k == "round" for r in st.recvs}
        assert sent == got and sent, op
        assert max(sent.values()) == (1024 if reduced else 4096), op


def test_pieces_passing_through_are_collected(pair):
    _, a, b = pair
    assert a.post(1, head((3, 1, 0, 0), 4, dst=5), np.arange(4, dtype=np.uint8))
    out: list = []
    b.collect(out)
    assert len(out) == 1 and out[0].dst == 5 and np.array_equal(out[0].data, np.arange(4))
    assert b.take((3, 1, 0, 0)) is None  # copied out, slot freed


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("name", list(DTYPES))
def test_reduce_bytes_matches_reduce_into(name, op):
    dt = DTYPES[name]
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 256, 64 * dt.itemsize, dtype=np.uint8)
    d = bits[:32 * dt.itemsize].view(dt).copy()
    s = bits[32 * dt.itemsize:].view(dt).copy()
    want = d.copy()
    reduce_into(want, s, op)
    got = d.copy()
    reduce_bytes(CODES[(op, name)], got.view(np.uint8), s.view(np.uint8))
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("n", [3, 64])
@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("name", list(DTYPES))
def test_divide_bytes_matches_divide_into(name, op, n):
    """An avg's divide in the compiled plane: any of the dtype's reduce codes picks
    its divide kernel, bit for bit divide_into's (random bits: NaNs, infinities,
    subnormals and negative integers among them)."""
    dt = DTYPES[name]
    bits = np.random.default_rng([n, len(name)]).integers(0, 256, 67 * dt.itemsize,
                                                          dtype=np.uint8)
    want = bits.view(dt).copy()
    divide_into(want, n)
    got = bits.copy()
    divide_bytes(CODES[(op, name)], got, n)
    assert np.array_equal(got, want.view(np.uint8))


def test_the_compiled_agreement_compares_the_fingerprint_fields():
    """plane._agreement compares FP_FIELDS words (the words past them are shares);
    the module built ahead of time is not rebuilt when agree.py changes, so the
    number is written in transport/native.py and must match agree.FIELDS."""
    from neuron_mpi import agree
    from neuron_mpi.transport import native

    assert native.FP_FIELDS == len(agree.FIELDS)


def test_codes_cover_every_op_and_dtype():
    assert set(CODES) == {(op, name) for op in REDUCE_OPS for name in DTYPES}
    assert sorted(CODES.values()) == list(range(len(CODES)))


def test_next_hops_one_copy_inside_a_domain_mpi_across():
    topo = Topology("trn1.32xlarge", 1, 2)
    node0 = range(32)
    hops = NextHops(topo, 0, node0, lambda r: r)
    far = 31  # across the node's torus: several links, one copy
    h = hops.decide(0, far)
    path = topo.route(0, far)
    assert h.transport == "shm" and h.to == far and h.links == len(path) - 1
    assert len(h.charges) == 2 * h.links
    across = hops.decide(0, 32 + 5)
    assert across.transport == "mpi" and across.links == 1
    assert topo.link_between_ranks(0, across.to).kind == "efa"
    assert hops.decide(0, 0).transport == "self"
    everyone = NextHops(topo, 0, range(64), lambda r: r)
    assert everyone.decide(0, 32 + 5).transport == "shm"


def test_next_hops_over_mpi_go_straight_into_the_next_domain():
    """Knowing every rank's domain, a message leaving this rank's domain goes over
    MPI to the furthest rank of its route in the next domain (no rank there
    forwards it: a rank busy outside neuron_mpi, or blocked holding the GIL, stalls
    nobody), charging the link it leaves by; its receiver charges the links inside
    its domain (entry). Together they charge every link of the route once, as the
    message forwarded hop by hop was."""
    topo = Topology("trn1.32xlarge", 1, 2)
    domains = [0] * 32 + [32] * 32
    row = lambda r: r  # noqa: E731
    sender = NextHops(topo, 0, range(32), row, domains)
    for dst in (32, 32 + 5, 63):
        path = topo.route(0, dst)
        h = sender.decide(0, dst)
        assert h.transport == "mpi" and h.to == dst and h.links == 1
        receiver = NextHops(topo, dst, range(32, 64), row, domains)
        entry = receiver.entry(0, dst)
        assert len(entry) == 2 * (len(path) - 2)  # every link after the EFA hop
        assert sorted(h.charges + entry) == sorted(
            NextHops(topo, 0, (), row)._charges(path))
        assert receiver.decide(0, dst).transport == "self"
    # a rank with no domain (-1), or no domains known: one hop at a time
    alone = NextHops(topo, 0, (), row, [-1] * 64)
    assert alone.decide(0, 37).to == topo.route(0, 37)[1]
    assert NextHops(topo, 37, (), row).entry(0, 37) == ()


def _waiting_run():
    """A segment and the arguments of a compiled run that waits for a piece that
    never comes."""
    from neuron_mpi.transport.segment import Layout

    lay = Layout(2, 2, 2, 64)
    seg = np.zeros(lay.total, np.uint8)
    g = native.geometry(lay, 0, 0)
    steps = np.array([[0, 0, 1]], np.int64)
    rounds = np.array([[0, 0, 0, 1]], np.int64)
    recvs = np.array([[1, 0, 8, 0, 0, 0, 8]], np.int64)
    keys = np.zeros(1, np.int64)
    b = np.zeros(8, np.uint8)
    args = (seg, g, np.zeros(1, np.int64), native.tables(
            steps, rounds, np.zeros((0, native.SEND_COLS), np.int64), np.zeros(0, np.int64),
            recvs, keys, keys.copy(), np.zeros((0, 6), np.int64)),
            np.zeros(6, np.int64), np.zeros(2, np.uint8),
            b, b.copy(), b.copy(), 1, 1, 0, np.zeros(1, np.int32),
            np.zeros((1, 16), np.int64), 0, 1, np.zeros(1, np.int64), 0, np.zeros(0, np.int64),
            np.zeros((1, 2), np.int64))
    return seg, g, args


def test_exec_run_reports_a_deadline():
    """A compiled run waiting for a piece that never comes returns TIMEOUT at its
    deadline (CLOCK_MONOTONIC)."""
    _, _, args = _waiting_run()
    # (compiled first, outside the timing, where numba compiles the plane itself)
    assert native.exec_run(*args, np.zeros(1, np.int32), 1) == native.TIMEOUT
    t0 = time.monotonic()
    deadline = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + 50_000_000
    assert native.exec_run(*args, np.zeros(1, np.int32), deadline) == native.TIMEOUT
    assert 0.04 <= time.monotonic() - t0 < 2.0


def _stuck_run():
    """_waiting_run with channel 1 -> 0 full of pieces the run cannot use, while
    their sender waits for room."""
    seg, g, args = _waiting_run()
    L, K = int(g[native.G_L]), int(g[native.G_K])
    state = seg[g[native.G_STATE]:g[native.G_STATE] + L * L * K * 8].view(np.int64)
    want = seg[g[native.G_WANT]:g[native.G_WANT] + L * L * 4].view(np.int32)
    state[(0 * L + 1) * K:(0 * L + 1) * K + K] = 5  # channel 1 -> 0: full, of nothing ours
    want[0 * L + 1] = 1
    return seg, g, args


def test_a_full_channel_is_copied_aside_only_after_a_grace():
    """A channel whose slots are all taken by pieces the run cannot use, while their
    sender waits for room: the run first waits STUCK_GRACE_NS for itself to move
    (the call holding them up usually ends), then returns PYTHON so the caller copies
    them aside; it never sleeps on with the sender blocked."""
    _, _, args = _stuck_run()
    assert native.exec_run(*args, np.zeros(1, np.int32), 1) == native.TIMEOUT  # compiled
    t0 = time.monotonic()
    deadline = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + 10_000_000_000
    assert native.exec_run(*args, np.zeros(1, np.int32), deadline) == native.PYTHON
    assert time.monotonic() - t0 >= native.STUCK_GRACE_NS / 1e9 * 0.9


@pytest.mark.parametrize("others", [0, 1])
def test_a_channel_full_of_the_runs_own_later_pieces_is_not_copied_aside(others):
    """A full channel whose sender waits, holding pieces of the run's own call for a
    later round: the run takes them itself once there, and holding them never blocks
    it, so it keeps waiting for its current piece (here until its deadline) instead
    of handing them to be copied aside; one piece of another call among them makes
    the channel stuck again (PYTHON after the grace)."""
    seg, g, args = _stuck_run()
    L, K, H = int(g[native.G_L]), int(g[native.G_K]), native.HDR_WORDS
    hdr = seg[g[native.G_HDR]:g[native.G_HDR] + L * L * K * H * 8].view(np.int64)
    for k in range(K):
        slot = (0 * L + 1) * K + k
        # comm 1, call 1 (the run's), transfer 5 (not this round's), for world rank 0
        hdr[slot * H:slot * H + 8] = (1, 2 if k < others else 1, 5, k, 8, 8, 1, 0)
    assert native.exec_run(*args, np.zeros(1, np.int32), 1) == native.TIMEOUT  # compiled
    t0 = time.monotonic()
    deadline = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + 100_000_000
    got = native.exec_run(*args, np.zeros(1, np.int32), deadline)
    if others:
        assert got == native.PYTHON
    else:
        assert got == native.TIMEOUT and time.monotonic() - t0 >= 0.09


def test_rings_that_move_nothing_do_not_cut_the_grace_short():
    """Rings of the doorbell during the grace (pieces of later rounds, say, with 64
    ranks on 2 cores) wake the run, which moves nothing: it still waits out the
    whole grace before the caller copies anything aside."""
    seg, g, args = _stuck_run()
    assert native.exec_run(*args, np.zeros(1, np.int32), 1) == native.TIMEOUT  # compiled
    stop = threading.Event()

    def ringer():
        while not stop.is_set():
            native.ring(seg, g, 0, 0)
            time.sleep(0.0002)

    th = threading.Thread(target=ringer)
    th.start()
    t0 = time.monotonic()
    try:
        assert native.exec_run(*args, np.zeros(1, np.int32), -1) == native.PYTHON
    finally:
        stop.set()
        th.join()
    assert time.monotonic() - t0 >= native.STUCK_GRACE_NS / 1e9 * 0.9


def test_a_transfer_of_another_size_is_refused_before_its_bytes_move():
    """Recv column 6 holds the transfer's size; a piece whose header says another
    (a point-to-point peer sending another size) is SIZE, with the size sent in
    xs[4], and nothing is copied."""
    _, _, (a, b) = _one_transfer(700, pull=0)
    native.table_views(b[3])[native.TABLES.index("recvs")][0, 6] = 1400
    assert native.exec_pass(*a)[0] == native.DONE
    assert native.exec_pass(*b)[0] == native.SIZE
    assert b[4][4] == 700 and b[4][2] == 0
    assert not b[7].any()


def test_exec_run_hands_over_when_claimed():
    """A run with no deadline, asleep on the doorbell, returns YIELDED once another
    thread raises the claim word and rings; a ring alone does not end it."""
    import threading

    seg, g, args = _waiting_run()
    claim = np.zeros(1, np.int32)
    got = []
    t = threading.Thread(target=lambda: got.append(native.exec_run(*args, claim, -1)))
    t.start()
    time.sleep(0.2)
    native.ring(seg, g, 0, 0)  # a piece of nothing: the run goes back to sleep
    time.sleep(0.2)
    assert t.is_alive() and not got
    claim[0] = 1
    native.ring(seg, g, 0, 0)
    t.join(5)
    assert got == [native.YIELDED]
    assert args[4][0] == 0  # still at its first step: nothing skipped


def test_piece_rings_wake_a_counting_sleeper_only_at_its_count():
    """A compiled run asleep on the doorbell waits for the pieces it is missing
    (control words 4 and 5): the pieces' rings wake it only at that count, a
    forced ring (room, the agreement, a claim) at once."""
    import threading

    from neuron_mpi.transport import futex
    from neuron_mpi.transport.segment import Layout

    lay = Layout(2, 2, 2, 64)
    seg = np.zeros(lay.total, np.uint8)
    g = native.geometry(lay, 1, 1)
    ctl = seg[lay.ctl:lay.ctl + 2 * 16 * 4].view(np.int32)
    addr = ctl.ctypes.data  # rank 0's doorbell

    def sleeper(count):
        seen = int(ctl[0])
        ctl[native.CTL_WAKE_AT] = seen + count
        ctl[native.CTL_COUNTING] += 1
        woke = []
        t = threading.Thread(target=lambda: woke.append(futex.wait(addr, seen, 10.0)))
        t.start()
        time.sleep(0.2)
        return t, woke

    t, woke = sleeper(3)
    for _ in range(2):
        native.ring_piece(seg, g, 0)
        time.sleep(0.2)
        assert t.is_alive() and not woke, "woken before its count"
    native.ring_piece(seg, g, 0)
    t.join(5)
    assert woke == [True]
    ctl[native.CTL_COUNTING] -= 1

    t, woke = sleeper(5)
    native.ring(seg, g, 0, 0)  # forced
    t.join(5)
    assert woke == [True]
    ctl[native.CTL_COUNTING] -= 1


def test_wake_count_survives_the_doorbell_wrapping():
    top, bottom = (1 << 31) - 1, -(1 << 31)
    assert plane._reached(bottom, top)       # one ring past the top wraps to the bottom
    assert not plane._reached(top, bottom)
    assert plane._reached(5, 5) and plane._reached(6, 5) and not plane._reached(4, 5)


def _one_transfer(n, direct=1, reduce=0, pull=1, base=-1):
    """Rank 0 sends n bytes of its input to rank 1's output in one round: the
    arguments of each side's compiled pass over one segment (L = 2). ``reduce``:
    rank 1 adds them (float32 sum, code 0) into its output, or (``base`` = 0) writes
    its input plus them there."""
    from neuron_mpi.transport.segment import Layout

    lay = Layout(2, 2, 2, 1024)
    seg = np.zeros(lay.total, np.uint8)
    steps = np.array([[0, 0, 1]], np.int64)
    keys = np.zeros(1, np.int64)
    sends = np.array([[1, 1, 0, 0, n, 0, 0, n, 0, 0, direct]], np.int64)
    recvs = np.array([[1, 0, n, 0, 0, reduce, n, base, 0]], np.int64)
    no_sends = np.zeros((0, native.SEND_COLS), np.int64)
    no_recvs = np.zeros((0, native.RECV_COLS), np.int64)
    sides = []
    for me, rounds, s, r in ((0, [[0, 1, 0, 0]], sends, no_recvs),
                             (1, [[0, 0, 0, 1]], no_sends, recvs)):
        g = native.geometry(lay, me, me, os.getpid())
        g[native.G_PULL] = pull
        b0 = (np.arange(n) % 251).astype(np.uint8) if me == 0 else np.zeros(n, np.uint8)
        b1 = np.zeros(n, np.uint8)
        if reduce:  # float32 operands: the sender's input, the receiver's input and output
            b0 = (np.arange(n // 4, dtype=np.float32) * (1 if me == 0 else 3)).view(np.uint8)
            b1 = np.full(n // 4, 0.5, np.float32).view(np.uint8)
        args = (seg, g, np.zeros(1, np.int64), native.tables(
                steps, np.array(rounds, np.int64), s, np.zeros(0, np.int64), r, keys,
                keys.copy(), np.zeros((0, 6), np.int64)),
                np.zeros(6, np.int64), np.zeros(2, np.uint8), b0, b1, np.zeros(8, np.uint8),
                1, 1, 0, np.zeros(1, np.int32), np.zeros((1, 16), np.int64), 0, 1,
                np.zeros(1, np.int64), 0, np.zeros(0, np.int64), np.zeros((1, 2), np.int64))
        sides.append(args)
    return lay, seg, sides


def _slot_bytes(lay, seg, n):
    return seg[lay.data:lay.data + lay.L * lay.L * lay.K * lay.S][:n]


def test_a_large_copied_piece_is_read_from_the_senders_buffer():
    """One copy: the sender publishes only a header (its buffer's address and pid),
    stays in its round (flag 2) until the receiver has read the bytes straight into
    its output (process_vm_readv) and freed the slot; nothing lands in the slot."""
    lay, seg, (a, b) = _one_transfer(700)
    assert native.exec_pass(*a) == (native.BLOCKED, True)
    assert a[5][0] == 2 and a[4][4] == 1  # waits for one read
    assert not _slot_bytes(lay, seg, lay.L * lay.L * lay.K * lay.S).any()
    assert native.exec_pass(*b)[0] == native.DONE
    assert np.array_equal(b[7], a[6])
    assert native.exec_pass(*a)[0] == native.DONE


def test_small_reduced_or_forwarded_pieces_still_go_through_the_slot():
    for kw in ({"pull": 701}, {"pull": 0}, {"direct": 0}, {"pull": 701, "reduce": 1},
               {"pull": 0, "reduce": 1}):
        lay, seg, (a, b) = _one_transfer(700, **kw)
        first = b[7].view(np.float32).copy()
        assert native.exec_pass(*a)[0] == native.DONE, kw  # copied out: done at once
        assert _slot_bytes(lay, seg, lay.L * lay.L * lay.K * lay.S).any(), kw
        assert native.exec_pass(*b)[0] == native.DONE
        if kw.get("reduce"):
            assert np.array_equal(b[7].view(np.float32), first + a[6].view(np.float32)), kw
        else:
            assert np.array_equal(b[7], a[6])


def test_the_plan_marks_only_pieces_to_their_final_rank_as_readable():
    """Send column 10: a piece landing on a rank that forwards it is copied into
    the slot; one to its destination, copied or reduced there, may be read."""
    from types import SimpleNamespace

    from neuron_mpi.executor import NativePlan, RoundStep, Send

    class Hops:
        me = 0

        def decide(self, me, dst):
            return SimpleNamespace(to=dst if dst != 3 else 2, charges=(), transport="shm")

    st = RoundStep([Send(0, 0, 1, "in", 0, 4, 4), Send(1, 0, 2, "in", 0, 4, 4, True),
                    Send(2, 0, 3, "in", 0, 4, 4)], [])
    plan = NativePlan([("round", st)], 4, "float32", Hops(), {0: 0, 1: 1, 2: 2, 3: 3})
    assert plan.sends[:, 10].tolist() == [1, 1, 0]
    assert plan.sends[:, 0].tolist() == [1, 2, 2]


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
@pytest.mark.parametrize("me", [0, 37])
def test_a_plan_across_domains_runs_its_rounds_inside_the_domain_compiled(op, me):
    """With ranks on two domains (2 x 32 trn1 ranks, one domain per node), a
    hierarchical plan is cut into parts: the stages inside the node are compiled
    (a NativePlan each), only the rounds that cross to the other node run on the
    Python path. The all-to-all's one round, with pieces of both kinds, is cut in
    two: the crossing pieces in Python, then the others compiled. The parts cover
    every step in order, and the plan moves the same pieces as uncut."""
    from types import SimpleNamespace

    from neuron_mpi.algorithms.group import GroupView
    from neuron_mpi.algorithms.select import schedule_for
    from neuron_mpi.executor import Plan

    topo = Topology("trn1.32xlarge", 1, 2)
    domains = [0] * 32 + [32] * 32
    mine = range(32) if me < 32 else range(32, 64)
    row = {r: i for i, r in enumerate(mine)}
    hops = NextHops(topo, me, mine, lambda r: row[r], domains)
    eng = SimpleNamespace(native=True, hops=hops, shm=SimpleNamespace(local=row),
                          piece_for=lambda s, d: 1 << 18, mpi=object())
    view = GroupView(topo, range(64))
    sizes = 64 * 5 if op == "all_reduce" else (5,) * 64
    algo = "hierarchical"
    if op == "all_to_all":
        sizes, algo = ((5,) * 64,) * 64, "direct"
    sched = schedule_for(view, op, algo, sizes)
    plan = Plan(sched, view, me, 4, 1 << 18, eng, "float32")
    whole = Plan(sched, view, me, 4, 1 << 18, None, "float32", cut=eng.piece_for)

    def moved(p):
        rounds = [st for kind, st in p.steps if kind == "round"]
        return (sorted((s.xid, s.piece, s.dst, s.off) for st in rounds for s in st.sends),
                sorted((r.xid, r.piece, r.src, r.off) for st in rounds for r in st.recvs))

    assert moved(plan) == moved(whole)
    assert plan.native is None and plan.parts is not None
    ends = [0]
    for lo, hi, sub in plan.parts:
        assert lo == ends[-1] < hi
        ends.append(hi)
        rounds = [st for kind, st in plan.steps[lo:hi] if kind == "round"]
        crossing = [[hops.decide(me, s.dst).transport == "mpi" for s in st.sends]
                    + [r.src not in row for r in st.recvs] for st in rounds]
        if sub is None:  # every piece of a Python part crosses, and none of a compiled one
            assert rounds and all(all(c) for c in crossing)
        else:
            assert rounds and not any(any(c) for c in crossing)
            assert sub.steps == plan.steps[lo:hi] and sub.native is not None
    assert ends[-1] == len(plan.steps)
    kinds = [sub is not None for _, _, sub in plan.parts]
    assert kinds == {"all_reduce": [True, False, True], "all_gather": [False, True],
                     "reduce_scatter": [True, False], "all_to_all": [False, True]}[op]


@pytest.mark.parametrize("base", [-1, 0])
@pytest.mark.parametrize("n", [700, 3 * 65536 + 1000])
def test_a_reduced_piece_is_read_from_the_senders_buffer(n, base):
    """A piece reduced on arrival is read too (block by block: one block, and
    several with a partial last one): the sender's slot holds only a header, the
    receiver adds the sender's bytes to its output (``base``: writes its input plus
    them), frees the slot, and the sender's round ends."""
    lay, seg, (a, b) = _one_transfer(n, reduce=1, base=base)
    assert native.exec_pass(*a) == (native.BLOCKED, True)
    assert not _slot_bytes(lay, seg, lay.L * lay.L * lay.K * lay.S).any()
    sent = a[6].view(np.float32).copy()
    first = (b[6] if base == 0 else b[7]).view(np.float32).copy()
    assert native.exec_pass(*b)[0] == native.DONE
    assert np.array_equal(b[7].view(np.float32), first + sent)
    assert np.array_equal(a[6].view(np.float32), sent)  # the sender's input unchanged
    assert native.exec_pass(*a)[0] == native.DONE


def test_a_failed_sender_takes_its_unread_pieces_back():
    """After take_back the receiver never reads the sender's buffer (it may be
    gone): the slot is free and the receiver still waits."""
    _, _, (a, b) = _one_transfer(700)
    native.exec_pass(*a)
    assert native.take_back(a[0], a[1], *native.table_views(a[3])[:2], a[4], a[5], a[19]) == 1
    assert native.exec_pass(*b)[0] == native.BLOCKED
    assert not b[7].any()


@pytest.mark.parametrize("reduce", [0, 1])
def test_a_read_that_fails_is_reported_with_its_errno(reduce):
    import errno

    _, _, (a, b) = _one_transfer(700, reduce=reduce)
    a[1][native.G_PID] = 2 ** 22 + 12345  # above pid_max: no such process
    native.exec_pass(*a)
    assert native.exec_pass(*b)[0] == native.FAULT
    assert b[4][4] == errno.ESRCH and b[4][2] == 0


def test_the_python_path_reads_a_piece_left_in_the_senders_buffer():
    """ShmTransport's arrivals (take, copy-aside) read such a piece into private
    memory and free the slot, which counts as the sender's read."""
    lay, seg, (a, b) = _one_transfer(700)
    native.exec_pass(*a)
    slot = native.find(seg, b[1], 1, 1, 0, 0)
    hdr = seg[lay.hdr:lay.hdr + lay.L * lay.L * lay.K * native.HDR_WORDS * 8].view(np.int64)
    assert slot >= 0 and hdr[slot * native.HDR_WORDS + native.H_ADDR] != 0  # header only
    out = np.zeros(700, np.uint8)
    assert native.read_slot(seg, b[1], slot, out, 0, 700) == 0
    assert np.array_equal(out, a[6])
    assert native.exec_pass(*a)[0] == native.DONE


def _spinning_run(spin):
    """A compiled run with ``spin`` yields before it sleeps, waiting in a thread for
    a piece that never comes; returns (thread, the run's control words, result)."""
    import threading

    seg, g, args = _waiting_run()
    claim = np.zeros(1, np.int32)
    soon = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + 1_000_000
    assert native.exec_run(*args, claim, soon) == native.TIMEOUT  # compiled by now
    g[native.G_SPIN] = spin
    ctl = seg[g[native.G_CTL]:g[native.G_CTL] + 16 * 4].view(np.int32)
    got = []
    t = threading.Thread(target=lambda: got.append(native.exec_run(*args, claim, -1)))
    t.start()
    time.sleep(0.3)
    return t, ctl, got, lambda: (claim.__setitem__(0, 1), native.ring(seg, g, 0, 0))


@pytest.mark.parametrize("spin", [0, 64, 10 ** 12])
def test_a_waiting_run_yields_a_bounded_number_of_times_before_it_sleeps(spin):
    """g[G_SPIN]: a waiting run yields the CPU and looks again that many times
    before it sleeps on its doorbell (control word 4 counts it asleep): 0 sleeps at
    once, 64 soon, and a practically endless spin is still yielding after 0.3 s;
    a claim ends it either way."""
    t, ctl, got, claim = _spinning_run(spin)
    try:
        assert t.is_alive() and not got
        assert ctl[native.CTL_COUNTING] == (0 if spin == 10 ** 12 else 1)
    finally:
        claim()
        t.join(5)
    assert got == [native.YIELDED]


@pytest.mark.parametrize("last", ["python", "compiled"])
def test_the_last_arrival_wakes_a_python_sleeper_on_the_board(last):
    """The Python path sleeps on an agreement board's counter, counted in the word
    beside it; the member that completes the count (Python's arrive or the compiled
    agreement) wakes it, and only then makes that futex call."""
    import threading
    import types

    from neuron_mpi.transport.segment import Board, Layout

    lay = Layout(2, 2, 2, 64)
    seg8 = np.zeros(lay.total, np.uint8)
    fake = types.SimpleNamespace(layout=lay, buf=seg8)
    rung = []
    bells = np.array([0, 1], np.int64)
    me, peer = Board(fake, 0, bells, rung.append), Board(fake, 0, bells, rung.append)
    row = np.arange(3, dtype=np.int64)
    target = me.arrive(0, 0, row)
    got = []
    t = threading.Thread(target=lambda: got.append(me.wait(0, target, 10.0)))
    t.start()
    time.sleep(0.2)
    counter = me.counters[0]
    assert t.is_alive() and counter[1] == 1  # asleep, and counted
    if last == "python":
        peer.arrive(0, 1, row)
    else:
        g = native.geometry(lay, 1, 1)
        xs = np.zeros(6, np.int64)
        xs[3] = 1
        assert plane._agreement(seg8, g, xs, counter, peer.tables[0], 1, 2, row, target,
                                 bells) == native.DONE
    t.join(5)
    assert got == [True] and counter[1] == 0


def test_a_damaged_build_ahead_of_time_falls_back_to_numba(tmp_path):
    """kernels.aot.load() returns None for a file it cannot load (and the data plane
    is then numba's), and NEURON_MPI_AOT=0 never loads one."""
    import subprocess
    import sys

    code = (
        "from neuron_mpi.kernels import aot\n"
        "p = aot.path(); p.parent.mkdir(parents=True); p.write_bytes(b'not a module')\n"
        "from neuron_mpi.transport import native\n"
        "print(aot.load() is None, native.IMPL.__name__)\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    env.pop("NEURON_MPI_AOT", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "neuron_mpi.transport.plane"], out.stdout
    # the suite's own cache, where the warm-up built the module: not loaded either
    env["NEURON_MPI_AOT"] = "0"
    env["NUMBA_CACHE_DIR"] = os.environ.get("NUMBA_CACHE_DIR", str(tmp_path))
    code = ("from neuron_mpi.kernels import aot\n"
            "from neuron_mpi.transport import native\n"
            "print(aot.load() is None, native.IMPL.__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "neuron_mpi.transport.plane"], out.stdout


@pytest.mark.parametrize("max_flags", [1, 7, 8, 9, 40])
def test_scratch_state_is_three_disjoint_arrays_zeroed_in_one(max_flags):
    """A compiled run's state (executor.Scratch): xs, flags and pend share one
    buffer; each has the shape and type the plane expects, none overlaps another,
    and zeroed() clears all of them."""
    from neuron_mpi.executor import Scratch

    sc = Scratch(max_flags, 5, np.float32)
    assert (sc.xs.shape, sc.xs.dtype) == ((6,), np.int64)
    assert (sc.flags.shape, sc.flags.dtype) == ((max_flags,), np.uint8)
    assert (sc.pend.shape, sc.pend.dtype) == ((max_flags, 2), np.int64)
    assert all(a.flags.c_contiguous and a.flags.writeable for a in (sc.xs, sc.flags, sc.pend))
    for a, b in [(sc.xs, sc.flags), (sc.xs, sc.pend), (sc.flags, sc.pend),
                 (sc.tmp, sc.xs), (sc.tmp, sc.flags), (sc.tmp, sc.pend)]:
        assert not np.shares_memory(a, b)
    sc.xs[:] = 3
    sc.flags[:] = 0xFF
    sc.pend[:] = -1
    assert sc.xs.sum() == 18 and sc.flags.all() and (sc.pend == -1).all()  # untouched
    xs, flags, pend = sc.zeroed()
    assert xs is sc.xs and flags is sc.flags and pend is sc.pend
    assert not (xs.any() or flags.any() or pend.any())


@pytest.mark.parametrize("direct", [True, False])
def test_deadline_ns_is_the_same_instant_on_clock_monotonic(monkeypatch, direct):
    """executor.deadline_ns turns a time.monotonic() deadline into CLOCK_MONOTONIC
    nanoseconds for the compiled run: directly where time.monotonic() reads that
    clock, else through the two clocks' offset; -1 for no deadline."""
    from neuron_mpi import executor

    monkeypatch.setattr(executor, "_MONOTONIC", direct)
    assert executor.deadline_ns(None) == -1
    for ahead in (0.0, 1.5, 3600.0):
        want = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + int(ahead * 1e9)
        got = executor.deadline_ns(time.monotonic() + ahead)
        assert abs(got - want) < 50_000_000, (ahead, got - want)
