"""Checks of neuron_mpi.mpi beyond mpi4py's cco suites, launched with them
(tests/test_outside_mpi4py.py) under ``python -m neuron_mpi.mpi``: the -v forms,
point to point, communicators, and what is refused."""
from __future__ import annotations

import array
import time

import numpy as np
import pytest
from mpi4py import MPI

import neuron_mpi.mpi as facade

W = MPI.COMM_WORLD
R, N = W.Get_rank(), W.Get_size()


def test_the_module_is_the_facade():
    assert MPI is facade
    assert type(W).__module__ == "neuron_mpi.mpi.comm"
    assert W.communicator.size == N
    assert MPI.FLOAT is not None and MPI.SUM is not None  # from the real mpi4py


def test_v_forms():
    counts = [r % 3 + 1 for r in range(N)]
    displs = list(np.cumsum([0] + counts[:-1]))
    mine = np.full(counts[R], R, np.float64)
    out = np.full(sum(counts), -1.0)
    W.Allgatherv(mine, [out, counts, displs, MPI.DOUBLE])
    want = np.concatenate([np.full(c, r, np.float64) for r, c in enumerate(counts)])
    assert np.array_equal(out, want)
    root = N - 1
    g = np.full(sum(counts), -1.0) if R == root else None
    W.Gatherv(mine, [g, (counts, displs), MPI.DOUBLE] if R == root else None, root=root)
    if R == root:
        assert np.array_equal(g, want)
    back = np.empty(counts[R])
    W.Scatterv([want, counts, displs, MPI.DOUBLE] if R == root else None, back, root=root)
    assert np.array_equal(back, mine)
    # all-to-all-v: rank r sends j+1 ints to rank j
    sc = [j + 1 for j in range(N)]
    rc = [R + 1] * N
    send = np.concatenate([np.full(j + 1, 10 * R + j, np.int32) for j in range(N)])
    recv = np.empty(sum(rc), np.int32)
    W.Alltoallv([send, sc, MPI.INT], [recv, rc, MPI.INT])
    assert np.array_equal(recv, np.concatenate([np.full(R + 1, 10 * s + R, np.int32)
                                                for s in range(N)]))


def test_dlpack_objects_in_their_element_type_and_ctypes_left_as_found():
    """An object with only __dlpack__ (no buffer protocol) is read in the element
    type its capsule declares, and reading the capsule changes nothing in the
    process's shared ``ctypes.pythonapi`` (other libraries set their own argtypes
    on it)."""
    import ctypes

    class Only:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    api = ctypes.pythonapi
    funcs = (api.PyCapsule_IsValid, api.PyCapsule_GetPointer)
    found = [(f.restype, f.argtypes) for f in funcs]
    try:
        funcs[1].argtypes = [ctypes.py_object]  # (someone else's choice)
        shared = [(f.restype, f.argtypes) for f in funcs]
        x = np.arange(5, dtype=np.float64) * (R + 1)
        out = np.zeros(5)
        W.Allreduce(Only(x), Only(out), op=MPI.SUM)
        assert np.array_equal(out, np.arange(5) * (N * (N + 1) // 2))
        assert [(f.restype, f.argtypes) for f in funcs] == shared
    finally:
        for f, (res, args) in zip(funcs, found):
            f.restype, f.argtypes = res, args


def test_rooted_v_forms_in_flight():
    """Igatherv, Iscatterv and Ireduce_scatter (and Gatherv_init) are in flight
    (on a board and where agreements are routed): rank 1 calls each only after a
    message that rank 0 sends after its own call, as an MPI program may (they
    exchanged counts at the call before, and waited out the deadline). In place at
    the root; counts that disagree (a sender's and the root's) fail every rank's
    Wait, nothing written."""
    counts = [r % 3 + 1 for r in range(N)]
    displs = [int(d) for d in np.cumsum([0] + counts[:-1])]
    want = np.concatenate([np.full(k, r, np.float64) for r, k in enumerate(counts)])
    mine = slice(displs[R], displs[R] + counts[R])
    root = N - 1
    g = np.full(sum(counts), -1.0)
    back = np.full(counts[R], -1.0)
    rs = np.full(counts[R], -1, np.int64)
    p = W.Gatherv_init(np.full(counts[R], R, np.float64),
                       [g, counts, displs, MPI.DOUBLE] if R == 0 else None, root=0)
    for tag, call in enumerate((
            lambda: W.Igatherv(np.full(counts[R], R, np.float64),
                               [g, counts, displs, MPI.DOUBLE] if R == root else None,
                               root=root),
            lambda: W.Iscatterv([want, counts, displs, MPI.DOUBLE] if R == root else None,
                                back, root=root),
            lambda: W.Ireduce_scatter(np.arange(sum(counts), dtype=np.int64), rs, counts),
            lambda: (p.Start(), p)[1])):
        if R == 1:
            W.Recv(np.zeros(1), 0, tag=50 + tag)
        q = call()
        if R == 0 and N > 1:
            W.Send(np.zeros(1), 1, tag=50 + tag)
        q.Wait()
        if tag in (0, 3) and R == (root if tag == 0 else 0):
            assert np.array_equal(g, want)
            g[:] = -1
    p.Free()
    assert np.array_equal(back, want[mine])
    assert np.array_equal(rs, np.arange(sum(counts), dtype=np.int64)[mine] * N)
    # in place at the root: its own block stays where it is
    g = want.copy() if R == root else None
    W.Igatherv(MPI.IN_PLACE if R == root else np.full(counts[R], R, np.float64),
               [g, counts, displs, MPI.DOUBLE] if R == root else None, root=root).Wait()
    if R == root:
        assert np.array_equal(g, want)
    s = want.copy()
    back[:] = -1
    W.Iscatterv([s, counts, displs, MPI.DOUBLE] if R == root else None,
                MPI.IN_PLACE if R == root else back, root=root).Wait()
    assert np.array_equal(s, want)
    if R != root:
        assert np.array_equal(back, want[mine])
    # a sender's count the root does not expect: every rank's Wait fails
    if N > 1:
        d = W.Dup()
        g = np.full(2 * N, -1.0)
        with pytest.raises(Exception, match="send_counts and recv_counts disagree"):
            d.Igatherv(np.full(3 if R == 1 else 2, R, np.float64),
                       [g, [2] * N, MPI.DOUBLE] if R == 0 else None, root=0).Wait()
        assert (g == -1).all()


def test_scan_and_reductions_on_array_array():
    a = array.array("i", [R + 1] * 3)
    b = array.array("i", [0] * 3)
    W.Scan([a, MPI.INT], [b, MPI.INT], MPI.SUM)
    assert list(b) == [(R + 1) * (R + 2) // 2] * 3
    x = np.array([R + 1.5], np.longdouble)  # not a Neuron type: gathered, reduced in order
    y = np.empty(1, np.longdouble)
    W.Allreduce(x, y, MPI.MAX)
    assert y[0] == N + 0.5


def _late_rank0(tag):
    """Rank 0 joins the next call late (an async call returns at once): once every
    other rank has told it, by a message on ``tag`` (``_release_rank0``), that it
    has looked at its call."""
    if R == 0:
        for r in range(1, N):
            W.Recv(np.empty(1, np.int64), source=r, tag=tag)


def _release_rank0(tag):
    """Tell rank 0, waiting in ``_late_rank0``, that this rank has looked."""
    if R != 0:
        W.Send(np.zeros(1, np.int64), 0, tag=tag)


def test_nonblocking_collectives_progress_while_the_rank_sleeps():
    """Iallreduce, Iallgather, Ialltoall, Ireduce_scatter_block, Ibcast,
    Iallgatherv, Igather, Iscatter, Ialltoallv, Igatherv, Iscatterv and
    Ireduce_scatter are in flight when they return: the rank's agent finishes them
    while the program sleeps outside MPI, so Test is already true afterwards
    (without blocking); Wait leaves the results in recvbuf. Test of one still in
    flight is False and does not block, nor does Testall's."""
    import time

    from neuron_mpi.comm import Handle

    n = 1 << 14
    x = np.arange(n, dtype=np.float32) + R
    s_out = np.empty(n, np.float32)
    g_in = np.full(4, R, np.int32)
    g_out = np.empty(4 * N, np.int32)
    a_in = np.arange(2 * N, dtype=np.int64) + 100 * R
    a_out = np.empty(2 * N, np.int64)
    rs_in = np.arange(3 * N, dtype=np.float64)
    rs_out = np.empty(3, np.float64)
    b = np.arange(5, dtype=np.float64) if R == 0 else np.zeros(5)
    counts = [r % 3 + 1 for r in range(N)]
    displs = list(np.cumsum([0] + counts[:-1]))
    v_out = np.full(sum(counts), -1.0)
    gat = np.full(2 * N, -1, np.int32) if R == N - 1 else None
    sca = np.empty(2, np.int64)
    sc = [j + 1 for j in range(N)]
    av_in = np.concatenate([np.full(j + 1, 10 * R + j, np.int32) for j in range(N)])
    av_out = np.empty((R + 1) * N, np.int32)
    gv_out = np.full(sum(counts), -1.0)
    sv_in = np.arange(sum(counts), dtype=np.float64)
    sv_out = np.full(counts[R], -1.0)
    rv_in = np.arange(sum(counts), dtype=np.int64) * (R + 1)
    rv_out = np.full(counts[R], -1, np.int64)
    W.Barrier()
    reqs = [W.Iallreduce(x, s_out, MPI.SUM), W.Iallgather(g_in, g_out),
            W.Ialltoall(a_in, a_out), W.Ireduce_scatter_block(rs_in, rs_out, MPI.SUM),
            W.Ibcast(b, root=0),
            W.Iallgatherv(np.full(counts[R], R, np.float64), [v_out, counts, displs, MPI.DOUBLE]),
            W.Igather(np.full(2, R, np.int32), gat, root=N - 1),
            W.Iscatter(np.arange(2 * N, dtype=np.int64) if R == 0 else None, sca, root=0),
            W.Ialltoallv([av_in, sc, MPI.INT], [av_out, [R + 1] * N, MPI.INT]),
            W.Igatherv(np.full(counts[R], R, np.float64),
                       [gv_out, counts, displs, MPI.DOUBLE] if R == 0 else None, root=0),
            W.Iscatterv([sv_in, counts, displs, MPI.DOUBLE] if R == N - 1 else None, sv_out,
                        root=N - 1),
            W.Ireduce_scatter(rv_in, rv_out, counts, MPI.SUM)]
    in_flight = all(isinstance(q._handle, Handle) for q in reqs)
    # sleep outside MPI until the agent has finished them (read without progressing
    # anything), at most 30 s: a fixed sleep is too short on a loaded machine
    end = time.monotonic() + 30
    while time.monotonic() < end and not all(
            q._handle is None or q._handle._ex.done for q in reqs):
        time.sleep(0.05)
    t0 = time.perf_counter()
    done_asleep = all(q.Test() for q in reqs)  # done while this rank slept
    test_took = time.perf_counter() - t0
    MPI.Request.Waitall(reqs)  # (every rank completes them before any assertion)
    assert in_flight or N == 1
    assert done_asleep and test_took < 0.5, (done_asleep, test_took)
    assert np.array_equal(s_out, np.arange(n, dtype=np.float32) * N + N * (N - 1) / 2)
    assert np.array_equal(g_out, np.repeat(np.arange(N, dtype=np.int32), 4))
    assert np.array_equal(a_out, np.array([2 * R + k + 100 * s for s in range(N)
                                           for k in range(2)], np.int64))
    assert np.array_equal(rs_out, np.arange(3 * R, 3 * R + 3, dtype=np.float64) * N)
    assert np.array_equal(b, np.arange(5, dtype=np.float64))
    assert np.array_equal(v_out, np.concatenate([np.full(c, r, np.float64)
                                                 for r, c in enumerate(counts)]))
    if R == N - 1:
        assert np.array_equal(gat, np.repeat(np.arange(N, dtype=np.int32), 2))
    assert np.array_equal(sca, np.arange(2 * R, 2 * R + 2, dtype=np.int64))
    assert np.array_equal(av_out, np.concatenate([np.full(R + 1, 10 * s + R, np.int32)
                                                  for s in range(N)]))
    if R == 0:
        assert np.array_equal(gv_out, v_out)
    mine = slice(displs[R], displs[R] + counts[R])
    assert np.array_equal(sv_out, sv_in[mine])
    assert np.array_equal(rv_out, np.arange(sum(counts), dtype=np.int64)[mine] *
                          (N * (N + 1) // 2))
    # one still in flight: rank 0 joins only once every other rank has tested it
    # (told by a message each, not by a sleep: on a loaded machine another rank can
    # be held off the cores for longer than any sleep of rank 0's), on a board and
    # where agreements are routed
    y = np.full(8, R + 1, np.int64)
    out = np.empty(8, np.int64)
    _late_rank0(77)
    q = W.Iallreduce(y, out, MPI.MAX)
    t0 = time.perf_counter()
    early = (q.Test(), MPI.Request.Testall([q]), q._handle is not None)
    asked = time.perf_counter() - t0
    _release_rank0(77)
    index = MPI.Request.Waitany([q])
    # (a Test that found it done completed it: Waitany then has no active request)
    assert index == (MPI.UNDEFINED if early[0] or early[1] else 0)
    assert np.array_equal(out, np.full(8, N, np.int64))
    if N > 1 and R != 0:  # (rank 0 had not joined: nothing blocked)
        assert early == (False, False, True) and asked < 0.5, (early, asked)


def test_point_to_point():
    if N < 2:
        pytest.skip("needs 2 ranks")
    right, left = (R + 1) % N, (R - 1) % N
    out = np.empty(4, np.int64)
    W.Sendrecv(np.full(4, R, np.int64), right, recvbuf=out, source=left)
    assert np.array_equal(out, np.full(4, left))
    st = MPI.Status()
    reqs = [W.Irecv(out, source=left), W.Isend(np.full(4, 2 * R, np.int64), right)]
    MPI.Request.Waitall(reqs)
    assert np.array_equal(out, np.full(4, 2 * left))
    if R == 0:
        W.Send(np.arange(3.0), 1)
    elif R == 1:
        got = np.empty(3)
        W.Recv(got, 0, status=st)
        assert np.array_equal(got, np.arange(3.0)) and st.Get_source() == 0


def test_tags_sizes_and_statuses_as_mpi():
    """Messages are matched by tag (in the order sent, per tag), a buffer larger
    than the message takes it (Get_count says how much came), a smaller one is
    refused (MPI_ERR_TRUNCATE), statuses carry the source and tag that came, and
    receives posted with Irecv match in posting order whatever order they are
    waited in. Probe reports the next matching message without taking it."""
    if N < 2:
        pytest.skip("needs 2 ranks")
    if R == 0:
        W.Send(np.array([1.0]), 1, tag=11)
        W.Send(np.array([2.0]), 1, tag=22)
        W.Send(np.arange(3, dtype=np.int32), 1, tag=5)
        W.Send(np.arange(8, dtype=np.int32), 1, tag=5)
        W.Send(np.array([10.0]), 1, tag=7)
        W.Send(np.array([20.0]), 1, tag=7)
        W.Send(np.arange(5.0), 1, tag=9)
        W.Send(np.array([0.5]), 1, tag=9)  # (after the refused one: still delivered)
    elif R == 1:
        st = MPI.Status()
        a = np.zeros(1)
        W.Recv(a, 0, tag=22, status=st)
        assert a[0] == 2.0 and (st.Get_source(), st.Get_tag()) == (0, 22)
        W.Recv(a, 0, tag=MPI.ANY_TAG, status=st)
        assert a[0] == 1.0 and st.Get_tag() == 11
        big = np.full(8, -1, np.int32)
        W.Recv(big, 0, tag=5, status=st)
        assert big.tolist() == [0, 1, 2, -1, -1, -1, -1, -1] and st.Get_count(MPI.INT) == 3
        with pytest.raises(ValueError, match="MPI_ERR_TRUNCATE"):
            W.Recv(np.zeros(3, np.int32), 0, tag=5)
        qa, qb = np.zeros(1), np.zeros(1)
        ra, rb = W.Irecv(qa, 0, tag=7), W.Irecv(qb, 0, tag=7)
        sb = MPI.Status()
        rb.Wait(sb)
        ra.Wait()
        assert (qa[0], qb[0]) == (10.0, 20.0) and sb.Get_tag() == 7
        W.Probe(0, tag=9, status=st)
        assert st.Get_count(MPI.DOUBLE) == 5 and st.Get_tag() == 9
        got = np.empty(st.Get_count(MPI.DOUBLE))
        W.Recv(got, 0, tag=9)
        assert got.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
        W.Recv(a, 0, tag=9)
        assert a[0] == 0.5
    with pytest.raises(ValueError, match="tag: expected an integer"):
        W.Send(np.zeros(1), (R + 1) % N, tag=-5)
    # as mpi4py over Open MPI: ERR_TAG outside [0, TAG_UB] (a receive from
    # MPI.PROC_NULL too), OverflowError past a C int
    for bad in (lambda: W.Send(np.zeros(1), MPI.PROC_NULL, tag=-2),
                lambda: W.Recv(np.zeros(1), MPI.PROC_NULL, tag=-2),
                lambda: W.Irecv(np.zeros(1), R, tag=-5)):
        with pytest.raises(MPI.Exception) as e:
            bad()
        assert e.value.Get_error_class() == MPI.ERR_TAG
    for bad in (lambda: W.Send(np.zeros(1), MPI.PROC_NULL, tag=2 ** 31),
                lambda: W.Recv(np.zeros(1), MPI.PROC_NULL, tag=2 ** 31)):
        with pytest.raises(OverflowError):
            bad()
    ring = np.full(3, float(R))
    st = MPI.Status()
    W.Sendrecv_replace(ring, (R + 1) % N, 4, (R - 1) % N, 4, status=st)
    assert ring.tolist() == [float((R - 1) % N)] * 3 and st.Get_tag() == 4
    W.Barrier()


def test_requests_as_mpi():
    """Waitany completes each request once, then says MPI.UNDEFINED; Waitall fills
    every status of its receives."""
    outs = [np.zeros(2) for _ in range(3)]
    reqs = [W.Iallreduce(np.full(2, float(k + R)), outs[k], MPI.SUM) for k in range(3)]
    done = [MPI.Request.Waitany(reqs) for _ in range(3)]
    assert sorted(done) == [0, 1, 2] and MPI.Request.Waitany(reqs) == MPI.UNDEFINED
    for k in range(3):
        assert outs[k].tolist() == [float(N * k + N * (N - 1) // 2)] * 2
    if N > 1:
        right, left = (R + 1) % N, (R - 1) % N
        got = np.zeros(4)
        reqs = [W.Irecv(got, left, tag=3), W.Isend(np.full(4, float(R)), right, tag=3)]
        sts = [MPI.Status(), MPI.Status()]
        MPI.Request.Waitall(reqs, sts)
        assert got.tolist() == [float(left)] * 4
        assert (sts[0].Get_source(), sts[0].Get_tag(), sts[0].Get_count(MPI.DOUBLE)) == (
            left, 3, 4)


def test_collectives_mpi_takes():
    """Scatterv in place at the root, Bcast from a read-only root buffer, Create
    called by every rank (MPI.COMM_NULL for those outside the group), the lower-case
    barrier, and an op out of scope named in its error."""
    root = N - 1
    counts = [r + 1 for r in range(N)]
    displs = [sum(counts[:r]) for r in range(N)]
    full = np.arange(float(sum(counts)))
    if R == root:
        W.Scatterv([full, counts, displs, MPI.DOUBLE], MPI.IN_PLACE, root=root)
    else:
        mine = np.empty(counts[R])
        W.Scatterv(None, mine, root=root)
        assert mine.tolist() == full[displs[R]:displs[R] + counts[R]].tolist()
    msg = np.frombuffer(b"hello!!!", np.uint8) if R == 0 else np.zeros(8, np.uint8)
    W.Bcast(msg, root=0)
    assert msg.tobytes() == b"hello!!!"
    sub = W.Create(W.Get_group().Incl([0]))
    if R == 0:
        assert sub.Get_size() == 1
    else:
        assert sub == MPI.COMM_NULL
    W.barrier()
    from neuron_mpi.mpi import MPI as same
    assert same is facade
    W.Barrier()


def test_every_op_of_mpi():
    """Ops beyond the kernels' four, reduced by the MPI underneath after an
    all-gather: LAND / LOR on flags, BAND / BOR / BXOR on integers, MAXLOC and
    MINLOC on DOUBLE_INT pairs (ties to the lower rank), a user's non-commutative
    Op.Create (its function gets the datatype the call named; the fold is in rank
    order) in Allreduce, Scan, Reduce and Iallreduce; MPI.OP_NULL refused with
    ERR_OP."""
    flag = np.array([R != 1], np.bool_)
    every, some = np.empty(1, np.bool_), np.empty(1, np.bool_)
    W.Allreduce(flag, every, op=MPI.LAND)
    W.Allreduce(flag, some, op=MPI.LOR)
    assert every[0] == (N == 1) and some[0]
    x = np.array([R + 1, 2 * R + 1], np.int32)
    y = np.empty(2, np.int32)
    band, bor, bxor = x * 0 - 1, x * 0, x * 0
    for r in range(N):
        mine = np.array([r + 1, 2 * r + 1], np.int32)
        band &= mine
        bor |= mine
        bxor ^= mine
    for op, w in ((MPI.BAND, band), (MPI.BOR, bor), (MPI.BXOR, bxor)):
        W.Allreduce(x, y, op=op)
        assert y.tolist() == w.tolist(), op
    pair = np.dtype([("v", "f8"), ("i", "i4")], align=True)
    v = np.zeros(3, pair)
    v["v"], v["i"] = [R % 2, -R, 5.0], R
    got = np.zeros_like(v)
    W.Allreduce([v, MPI.DOUBLE_INT], [got, MPI.DOUBLE_INT], op=MPI.MAXLOC)
    assert got["v"].tolist() == [min(N - 1, 1), 0, 5] and got["i"].tolist() == \
        [min(N - 1, 1), 0, 0]
    W.Allreduce([v, MPI.DOUBLE_INT], [got, MPI.DOUBLE_INT], op=MPI.MINLOC)
    assert got["v"].tolist() == [0, 1 - N, 5] and got["i"].tolist() == [0, N - 1, 0]
    seen = []

    def left(a, b, dt):  # b = a op b := a: the fold of a row keeps row 0
        seen.append(dt == MPI.INT64_T or dt == MPI.LONG)  # (LONG: inferred, as mpi4py)
        np.frombuffer(b, np.int64)[:] = np.frombuffer(a, np.int64)
    op = MPI.Op.Create(left, commute=False)
    z, r = np.array([R + 10], np.int64), np.zeros(1, np.int64)
    W.Allreduce([z, MPI.INT64_T], [r, MPI.INT64_T], op=op)
    assert r[0] == 10
    W.Scan([z, MPI.INT64_T], [r, MPI.INT64_T], op=op)
    assert r[0] == 10
    r[0] = -1
    W.Reduce([z, MPI.INT64_T], [r, MPI.INT64_T], op=op, root=N - 1)
    assert r[0] == (10 if R == N - 1 else -1)
    W.Iallreduce(z, r, op=op).Wait()
    assert r[0] == 10
    op.Free()
    assert all(seen) and (seen or N == 1)
    with pytest.raises(MPI.Exception) as e:
        W.Allreduce(z, r, op=MPI.OP_NULL)
    assert e.value.Get_error_class() == MPI.ERR_OP
    W.Barrier()


def test_communicators():
    d = W.Dup()
    assert d.Get_size() == N and d != W
    d.Barrier()
    d.Free()
    half = W.Split(color=R % 2, key=-R)  # reversed order inside each half
    members = [r for r in range(N) if r % 2 == R % 2]
    assert half.Get_size() == len(members)
    assert half.Get_rank() == sorted(members, reverse=True).index(R)
    v = np.array([R], np.int64)
    half.Allreduce(MPI.IN_PLACE, v, MPI.SUM)
    assert v[0] == sum(members)
    if R < 2 or N == 1:
        ranks = [0, 1] if N > 1 else [0]
        g = W.Create_group(W.Get_group().Incl(ranks))
        assert g.Get_size() == len(ranks)
        g.Barrier()
    W.Barrier()
    s = MPI.COMM_SELF
    assert s.Get_size() == 1 and s.Get_rank() == 0


def test_pickled_objects():
    """The lower-case methods carry any picklable object: collectives whose
    reductions fold in rank order with any op, an object larger than a joined
    message (32 KiB), receives from any source with their status, an irecv into
    mpi4py's default 32 KiB (a longer message fails its wait) or a size given, a
    matched probe's message taken by its Message alone."""
    assert W.bcast({"r": R} if R == 0 else None, root=0) == {"r": 0}
    assert W.allgather((R, "x" * R)) == [(r, "x" * r) for r in range(N)]
    big = np.arange(50_000, dtype=np.float64) * (R + 1)  # 400 KB pickled
    # a slot (512 bytes) each, then the rest of what is longer: on some ranks only
    assert W.allgather("x" * (1000 if R == 0 else R)) == ["x" * 1000] + ["x" * r
                                                                      for r in range(1, N)]
    first = W.allgather(np.arange(3) * R)  # (its own memory: the next call reuses the slots)
    W.allgather(np.full(3, -1))
    assert all(np.array_equal(a, np.arange(3) * r) for r, a in enumerate(first))
    assert np.array_equal(W.bcast(big if R == 0 else None), np.arange(50_000))
    assert np.array_equal(W.allreduce(big), np.arange(50_000) * (N * (N + 1) // 2))
    assert W.allreduce(str(R), op=lambda a, b: a + b) == "".join(map(str, range(N)))
    assert W.scan(str(R), op=lambda a, b: a + b) == "".join(map(str, range(R + 1)))
    assert W.exscan(1) == (None if R == 0 else R)
    root = N - 1
    g = W.gather({R}, root=root)
    assert g == ([{r} for r in range(N)] if R == root else None)
    assert W.scatter([[r] * r for r in range(N)] if R == root else None, root=root) == [R] * R
    assert W.alltoall([(R, j) for j in range(N)]) == [(r, R) for r in range(N)]
    mixed = ["y" * (600 * (r % 2)) + str(r) for r in range(N)]  # (odd ranks': over a slot)
    assert W.scatter(mixed if R == root else None, root=root) == mixed[R]
    assert W.gather(mixed[R], root=root) == (mixed if R == root else None)
    assert W.reduce((R, -R), op=MPI.MAXLOC, root=0) == ((N - 1, 1 - N) if R == 0 else None)
    nxt, prv = (R + 1) % N, (R - 1) % N
    req = W.irecv(source=prv, tag=7)
    W.send(("hi", R), nxt, tag=7)
    assert req.wait() == ("hi", prv) and not req
    W.send(big, nxt, tag=8)  # (a send leaves at the call: a ring of them cannot wait)
    st = MPI.Status()
    got = W.recv(source=MPI.ANY_SOURCE, tag=8, status=st)
    assert st.Get_source() == prv and st.Get_tag() == 8 and st.Get_count(MPI.BYTE) > 400_000
    assert np.array_equal(got, np.arange(50_000) * (prv + 1))
    small, sized = W.irecv(source=prv, tag=9), W.irecv(2 ** 20, source=prv, tag=10)
    W.send(big, nxt, tag=9)
    W.send(big, nxt, tag=10)
    with pytest.raises(ValueError, match="MPI_ERR_TRUNCATE"):
        small.wait()
    assert np.array_equal(sized.wait(), got)
    assert W.sendrecv(R, nxt, source=prv) == prv
    assert W.recv(source=MPI.PROC_NULL) is None
    # a matched probe keeps its message: a receive of any tag passes over it
    W.send("kept", nxt, tag=11)
    W.send("next", nxt, tag=12)
    m = W.mprobe(MPI.ANY_SOURCE, 11, st)
    assert st.Get_source() == prv and st.Get_tag() == 11 and m
    assert W.recv(source=prv, tag=MPI.ANY_TAG) == "next"
    assert m.recv() == "kept" and not m and m == MPI.MESSAGE_NULL
    W.Send(np.zeros(4), nxt, tag=13)  # a matched message too long for its Recv is gone
    m = W.Mprobe(prv, 13)
    with pytest.raises(ValueError, match="MPI_ERR_TRUNCATE"):
        m.Recv(np.zeros(2))
    assert m == MPI.MESSAGE_NULL and W.Iprobe(prv, 13) is False
    noproc = W.Mprobe(MPI.PROC_NULL)
    noproc.Recv(np.zeros(1), st)
    assert noproc == MPI.MESSAGE_NULL and st.Get_source() == MPI.PROC_NULL
    # None for scatter's / alltoall's sequence: a None each; a bad source, at once
    assert W.scatter(None, root=root) is None and W.alltoall(None) == [None] * N
    for bad in (N, -7):
        with pytest.raises(ValueError, match="source: expected a rank"):
            W.Irecv(np.zeros(1), source=bad)
        with pytest.raises(ValueError, match="source: expected a rank"):
            W.improbe(source=bad)
        with pytest.raises(ValueError, match="source: expected a rank"):
            W.recv(source=bad)
    W.Barrier()


def test_an_object_argument_error_fails_every_rank():
    """One rank's object that cannot be pickled, a root's sequence of the wrong
    length, a root out of range (mpi4py's MPI.Exception, MPI.ERR_ROOT): every
    rank's call fails before bytes move, and the communicator works after."""
    import threading

    bad = N - 1
    theirs = f"rank\\(s\\) {bad} of the group rejected"
    with pytest.raises(ValueError, match="sendobj: cannot be pickled" if R == bad else theirs):
        W.allgather(threading.Lock() if R == bad else R)
    with pytest.raises(ValueError, match="sendobj: expected a sequence of" if R == bad
                       else theirs):
        W.scatter([1] * (N + 1) if R == bad else None, root=bad)
    with pytest.raises(MPI.Exception) as e:
        W.bcast(1, root=N)
    assert e.value.Get_error_class() == MPI.ERR_ROOT
    assert W.allreduce(1) == N


def test_refused_clearly():
    with pytest.raises(MPI.Exception):  # (as mpi4py: the predefined ones are not freed)
        W.Free()
    d = W.Dup()
    d.Free()
    assert d == MPI.COMM_NULL and not d and repr(d).endswith("null>")
    assert d.Get_name() == "MPI_COMM_NULL" and W.Get_size() == N
    with pytest.raises(MPI.Exception):
        d.Free()
    # (a null communicator's every call: MPI.ERR_COMM, and a ValueError naming comm)
    for call in (d.Dup, lambda: d.Split(0, 0), lambda: d.Allreduce(np.zeros(1), np.zeros(1)),
                 lambda: MPI.Comm.Compare(MPI.COMM_NULL, W)):
        with pytest.raises(MPI.Exception) as e:
            call()
        assert e.value.Get_error_class() == MPI.ERR_COMM and isinstance(e.value, ValueError)
        assert "comm" in str(e.value)
    eh = W.Get_errhandler()  # (a reference of the caller's, freed without harm)
    assert eh == MPI.ERRORS_RETURN
    eh.Free()
    with pytest.raises(MPI.Exception):
        W.Set_errhandler(MPI.ERRHANDLER_NULL)
    t = MPI.INT.Create_contiguous(2).Commit()  # (a predefined op over it: ERR_OP, as
    # the Open MPI underneath refuses it)
    with pytest.raises(MPI.Exception) as e:
        W.Allreduce([np.zeros(4, np.int32), 2, t], [np.zeros(4, np.int32), 2, t])
    assert e.value.Get_error_class() == MPI.ERR_OP
    t.Free()
    W.Barrier()  # still usable


def test_bad_buffer_names_the_argument():
    with pytest.raises(ValueError, match="sendbuf"):
        W.Allreduce(object(), np.zeros(1), MPI.SUM)
    W.Barrier()


def test_a_root_only_argument_error_fails_every_rank():
    """An error in arguments only the root reads (its send buffer of Scatter, its
    counts and datatypes of Scatterv / Gatherv, blocking or not; a root out of
    range on one rank) is raised on every rank before data moves: the
    others' calls fail naming the root instead of waiting for it. After it the
    communicator works."""
    if N == 1:
        pytest.skip("needs 2 ranks")
    root = N - 1
    theirs = f"rank\\(s\\) {root} of the group rejected"
    cases = [
        ("sendbuf: .* elements do not divide",
         lambda: W.Scatter(np.zeros(N * 2 + 1) if R == root else None, np.zeros(2),
                           root=root)),
        ("sendbuf: counts .* do not match",
         lambda: W.Scatterv([np.zeros(3 * N), [3] * N, MPI.DOUBLE] if R == root else None,
                            np.zeros(2), root=root)),
        ("recvbuf: counts .* do not match",
         lambda: W.Gatherv(np.zeros(2), [np.zeros(3 * N), [3] * N, MPI.DOUBLE]
                           if R == root else None, root=root)),
        ("recvbuf: block 1 .* is outside",
         lambda: W.Gatherv(np.zeros(2), [np.zeros(2 * N), ([2] * N, [0] + [2 * N] * (N - 1)),
                                         MPI.DOUBLE] if R == root else None, root=root)),
        ("sendbuf: counts must be integers",
         lambda: W.Scatterv([np.zeros(2 * N), [2.0] * N, MPI.DOUBLE] if R == root else None,
                            np.zeros(2), root=root)),
        ("recvbuf: datatype float32 differs",
         lambda: W.Gatherv(np.zeros(2), [np.zeros(2 * N, np.float32), [2] * N, MPI.FLOAT]
                           if R == root else None, root=root)),
        ("recvbuf: datatype float32 differs",
         lambda: W.Scatterv([np.zeros(2 * N), [2] * N, MPI.DOUBLE] if R == root else None,
                            np.zeros(2, np.float32), root=root)),
        ("recvbuf: datatype float32 differs",
         lambda: W.Iscatterv([np.zeros(2 * N), [2] * N, MPI.DOUBLE] if R == root else None,
                             np.zeros(2, np.float32), root=root).Wait()),
        ("root: expected an integer",
         lambda: W.Igatherv(np.zeros(2), [np.zeros(2 * N), [2] * N, MPI.DOUBLE]
                            if R == 0 else None, root=N if R == root else 0).Wait()),
    ]
    for mine, fn in cases:
        with pytest.raises(ValueError, match=mine if R == root else theirs):
            fn()
    v = np.array([float(R)])
    W.Allreduce(MPI.IN_PLACE, v, MPI.SUM)
    assert v[0] == N * (N - 1) / 2


def test_persistent_requests_and_request_lists():
    """Send_init / Recv_init started again each step (the send takes the buffer's
    bytes at its Start); Waitany, Testany, Waitsome and Testsome give every active
    request's index once (a send done at its call included), then say none is
    active; Get_status does not complete."""
    right, left = (R + 1) % N, (R - 1) % N
    sbuf, rbuf = np.zeros(4), np.zeros(4)
    reqs = [W.Recv_init(rbuf, left, tag=6), W.Send_init(sbuf, right, tag=6)]
    assert MPI.Request.Waitany(reqs) == MPI.UNDEFINED  # (not started: inactive)
    for step in range(3):
        sbuf[:] = 100 * step + R
        MPI.Prequest.Startall(reqs)
        with pytest.raises(ValueError, match="persistent request is active"):
            reqs[0].Start()
        MPI.Request.Waitall(reqs)
        assert rbuf.tolist() == [float(100 * step + left)] * 4
    outs = [np.zeros(1) for _ in range(4)]
    reqs = [W.Iallreduce(np.full(1, float(k)), outs[k], MPI.SUM) for k in range(4)]
    reqs.append(W.Isend(np.full(2, float(R)), right, tag=8))
    got = np.zeros(2)
    reqs.append(W.Irecv(got, left, tag=8))
    assert reqs[4].Get_status() and reqs[4].Get_status()  # (still active after)
    seen = []
    i, flag = MPI.Request.Testany(reqs)
    if flag:
        seen.append(i)
    seen += MPI.Request.Testsome(reqs) or []
    while True:
        some = MPI.Request.Waitsome(reqs)
        if some is None:
            break
        assert some
        seen += some
    assert sorted(seen) == list(range(6))
    assert MPI.Request.Testany(reqs) == (MPI.UNDEFINED, True)
    assert MPI.Request.Testsome(reqs) is None and MPI.Request.Waitany(reqs) == MPI.UNDEFINED
    assert [o[0] for o in outs] == [float(k * N) for k in range(4)]
    assert got.tolist() == [float(left)] * 2


def test_persistent_collectives():
    """Allreduce_init and the other X_init (MPI 4.0): inactive until Start; each
    Start reads the buffers as they are then and is in flight (Test false while
    a member has not started; the agent finishes it while the rank sleeps); Wait
    leaves the result and the request inactive, startable again; Startall starts
    several in order; Start of an active one or of a freed one is refused; info
    is taken by position or keyword; an argument error on one rank fails its
    Start and the others' Wait, and leaves the request inactive."""
    x, out = np.zeros(3, np.float64), np.zeros(3, np.float64)
    g_out = np.zeros(2 * N, np.int32)
    g_in = np.zeros(2, np.int32)
    ar = W.Allreduce_init(x, out, MPI.SUM, MPI.INFO_NULL)
    ag = W.Allgather_init(g_in, g_out, info=MPI.INFO_NULL)
    assert isinstance(ar, MPI.Prequest) and ar and ar != MPI.REQUEST_NULL
    assert ar.Test() and MPI.Request.Waitany([ar, ag]) == MPI.UNDEFINED  # (inactive)
    for step in range(3):
        x[:] = [step, R, 1]
        g_in[:] = [R, step]
        MPI.Prequest.Startall([ar, ag])
        with pytest.raises(ValueError, match="persistent request is active"):
            ar.Start()
        time.sleep(0.2)
        MPI.Request.Waitall([ar, ag])
        assert out.tolist() == [step * N, N * (N - 1) / 2, N]
        assert g_out.tolist() == [v for r in range(N) for v in (r, step)]
    # one member starts late: the others' Test says False without waiting (on a
    # board and where agreements are routed, rank 0 starts once every other rank
    # has tested, told by a message)
    _late_rank0(78)
    ar.Start()
    t0 = time.perf_counter()
    early = ar.Test()
    asked = time.perf_counter() - t0
    _release_rank0(78)
    ar.Wait()
    if N > 1 and R != 0:
        assert not early and asked < 0.5, (early, asked)
    # an active persistent collective is neither cancelled nor freed (ERR_REQUEST)
    ar.Start()
    for what in (ar.Cancel, ar.Free):
        with pytest.raises(MPI.Exception) as e:
            what()
        assert e.value.Get_error_class() == MPI.ERR_REQUEST
    ar.Wait()
    ar.Free()
    ag.Free()
    assert ar == MPI.REQUEST_NULL
    with pytest.raises(MPI.Exception, match="freed"):
        ar.Start()
    with pytest.raises(MPI.Exception) as e:  # (a root out of range: at init)
        W.Bcast_init(np.zeros(1), root=N)
    assert e.value.Get_error_class() == MPI.ERR_ROOT
    b = np.arange(3.0) if R == 0 else np.zeros(3)
    q = W.Bcast_init(b, root=np.int64(0))  # (a NumPy integer root, as mpi4py takes)
    q.Start()
    q.Wait()
    q.Free()
    assert b.tolist() == [0.0, 1.0, 2.0]
    # the rooted, -v, scan and barrier forms, with the keyword names of mpi4py
    b = np.arange(4.0) if R == N - 1 else np.zeros(4)
    counts = [r + 1 for r in range(N)]
    v_out = np.zeros(sum(counts), np.int64)
    sc = np.zeros(1, np.int64)
    reqs = [W.Bcast_init(b, root=N - 1), W.Barrier_init(),
            W.Allgatherv_init(np.full(R + 1, R, np.int64), [v_out, counts, MPI.INT64_T]),
            W.Scan_init(np.array([R + 1], np.int64), sc, op=MPI.SUM),
            W.Reduce_scatter_init(np.ones(sum(counts)), np.zeros(counts[R]), counts)]
    MPI.Prequest.Startall(reqs)
    MPI.Request.Waitall(reqs)
    assert b.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert v_out.tolist() == [r for r in range(N) for _ in range(r + 1)]
    assert sc[0] == (R + 1) * (R + 2) // 2
    # an argument error on one rank: its Start fails, the others' Wait (as an
    # Iallreduce's); nothing moved, the request inactive after
    bad = N - 1
    theirs = f"rank\\(s\\) {bad} of the group rejected"
    short = np.full(2 if R == bad else 3, -1.0)
    q = W.Allreduce_init(np.ones(3), short)
    with pytest.raises(ValueError, match="recvbuf: 2 elements" if R == bad else theirs):
        q.Start()
        q.Wait()
    assert short.tolist() == [-1.0] * short.size and q.Test()  # (inactive)
    q.Free()
    with pytest.raises(TypeError, match="info"):
        W.Barrier_init(info="hints")
    # in flight: rank 1 starts it only after a message rank 0 sends after its own
    # Start
    grid = W.Create_cart([N], periods=[True])
    got = np.full(2, -1, np.int32)
    q = grid.Neighbor_allgather_init(np.array([R], np.int32), got)
    if R == 1:
        W.Recv(np.zeros(1), 0, tag=32)
    q.Start()
    if R == 0 and N > 1:
        W.Send(np.zeros(1), 1, tag=32)
    q.Wait()
    assert got.tolist() == [(R - 1) % N, (R + 1) % N]
    grid.Free()


def test_alltoallw_with_a_datatype_per_rank():
    """Alltoallw (and Ialltoallw, in flight, and Alltoallw_init): rank j's block in
    a datatype of its own, at displacements in bytes; IN_PLACE; a wrong number of
    datatypes on one rank fails every rank."""
    types = [MPI.INT32_T if j % 2 else MPI.DOUBLE for j in range(N)]
    npt = [np.int32 if j % 2 else np.float64 for j in range(N)]
    size = [np.dtype(t).itemsize for t in npt]
    counts = [2] * N
    # send block j: two elements of types[j], value 10 * R + j, 8-byte aligned
    displs = [16 * j for j in range(N)]
    sbuf = np.zeros(16 * N, np.uint8)
    for j in range(N):
        sbuf[displs[j]:displs[j] + 2 * size[j]].view(npt[j])[:] = 10 * R + j
    # receive from rank j in the type rank j sent this rank: types[R], reversed order
    rdispls = [16 * (N - 1 - j) for j in range(N)]
    rbuf = np.zeros(16 * N, np.uint8)
    W.Alltoallw([sbuf, (counts, displs), types], [rbuf, counts, rdispls, [types[R]] * N])
    for j in range(N):
        got = rbuf[rdispls[j]:rdispls[j] + 2 * size[R]].view(npt[R])
        assert got.tolist() == [10 * j + R] * 2
    # in flight: rank 1 calls it only after a message rank 0 sends after its own
    # call
    again = np.zeros(16 * N, np.uint8)
    if R == 1:
        W.Recv(np.zeros(1), 0, tag=31)
    q = W.Ialltoallw([sbuf, (counts, displs), types], [again, counts, rdispls,
                                                        [types[R]] * N])
    if R == 0 and N > 1:
        W.Send(np.zeros(1), 1, tag=31)
    q.Wait()
    assert np.array_equal(again, rbuf)
    inplace = np.zeros(4 * N, np.uint8)
    inplace.view(np.int32)[:] = [100 * R + j for j in range(N)]
    q = W.Alltoallw_init(MPI.IN_PLACE, [inplace, ([1] * N, [4 * j for j in range(N)]),
                                        [MPI.INT32_T] * N])
    q.Start()
    q.Wait()
    assert inplace.view(np.int32).tolist() == [100 * j + R for j in range(N)]
    bad = N - 1
    theirs = f"rank\\(s\\) {bad} of the group rejected"
    with pytest.raises(ValueError, match="expected 1 datatypes" if N == 1 and R == bad else
                       f"expected {N} datatypes" if R == bad else theirs):
        W.Alltoallw([sbuf, (counts, displs), types + [MPI.INT] if R == bad else types],
                    [rbuf, counts, rdispls, [types[R]] * N])
    W.Barrier()


def test_derived_datatypes():
    """Messages of derived datatypes (vector, subarray, resized, struct, made by the
    MPI underneath) travel packed, as MPI moves them: a column halo exchange of a
    2-d grid with a vector type reaching past the row view passed, a vector
    received as contiguous doubles (its Status counts both), Irecv / Isend,
    persistent sends that read the buffer at each Start, Sendrecv_replace, a 2-d
    decomposition gathered and scattered with a resized subarray type (Gatherv,
    Scatterv, Allgather), the transpose's Alltoall of resized column types (and
    Ialltoall, unpacked at Wait), Bcast of a struct and Bcast_init, a pencil
    transpose by Alltoallw of subarray types (as mpi4py-fft's), a column halo by
    Neighbor_alltoallw and the other neighbourhood collectives, a struct of two
    arrays' addresses over MPI.BOTTOM, a receive ending inside an element; an
    uncommitted type (ERR_TYPE) and a count reaching past the array are refused
    before anything moves."""
    right, left = (R + 1) % N, (R - 1) % N
    g = np.arange(24, dtype=np.float64).reshape(4, 6) + 100 * R
    col = MPI.DOUBLE.Create_vector(4, 1, 6).Commit()
    W.Sendrecv([g[0, 4:], 1, col], right, 7, [g[0, 0:], 1, col], left, 7)
    assert g[:, 0].tolist() == (np.arange(4) * 6 + 4 + 100 * left).tolist()
    if N > 1 and R < 2:
        st = MPI.Status()
        if R == 0:
            W.Send([g[0, 3:], 1, col], 1, 3)
        else:
            c = np.zeros(4)
            W.Recv([c, MPI.DOUBLE], 0, 3, st)
            assert c.tolist() == (np.arange(4) * 6 + 3).tolist()
            assert st.Get_count(col) == 1 and st.Get_count(MPI.DOUBLE) == 4
    h = np.zeros((4, 6))
    q = W.Irecv([h[0, 2:], 1, col], left, 9)
    W.Isend([g[0, 5:], 1, col], right, 9).Wait()
    q.Wait()
    assert h[:, 2].tolist() == (np.arange(4) * 6 + 5 + 100 * left).tolist()
    assert not h[:, [0, 1, 3, 4, 5]].any()
    ps, pr = W.Send_init([g[0, 3:], 1, col], right, 11), W.Recv_init([h[0, 1:], 1, col], left, 11)
    for step in range(2):
        g[:, 3] = step + R
        MPI.Prequest.Startall([pr, ps])
        MPI.Request.Waitall([pr, ps])
        assert h[:, 1].tolist() == [step + left] * 4
    ps.Free()
    pr.Free()
    z = np.arange(12, dtype=np.float64).reshape(3, 4) + 10 * R
    c3 = MPI.DOUBLE.Create_vector(3, 1, 4).Commit()
    W.Sendrecv_replace([z[0, 1:], 1, c3], right, 1, left, 1)
    assert z[:, 1].tolist() == (np.arange(3) * 4 + 1 + 10 * left).tolist()
    assert z[:, 0].tolist() == (np.arange(3) * 4 + 10 * R).tolist()
    # a 2 x 2N grid, rank R's 2 x 2 block in columns 2R, 2R + 1
    sub = MPI.DOUBLE.Create_subarray([2, 2 * N], [2, 2], [0, 0]).Create_resized(0, 16).Commit()
    blk = np.full((2, 2), float(R))
    owners = np.repeat(np.arange(N, dtype=np.float64), 2)[None, :].repeat(2, 0)
    grid = np.full((2, 2 * N), -1.0) if R == 0 else None
    W.Gatherv(blk, [grid, [1] * N, list(range(N)), sub] if R == 0 else None, root=0)
    if R == 0:
        assert np.array_equal(grid, owners)
        grid[:] = np.arange(4 * N).reshape(2, 2 * N)
    back = np.zeros((2, 2))
    W.Scatterv([grid, [1] * N, list(range(N)), sub] if R == 0 else None, back, root=0)
    assert np.array_equal(back, np.arange(4 * N, dtype=np.float64).reshape(2, 2 * N)[
        :, 2 * R:2 * R + 2])
    every = np.zeros((2, 2 * N))
    W.Allgather(blk, [every, 1, sub])
    assert np.array_equal(every, owners)
    # the transpose: column j of each rank's N x N block to rank j, as a row
    a = np.arange(N * N, dtype=np.float64).reshape(N, N) + 1000 * R
    colt = MPI.DOUBLE.Create_vector(N, 1, N).Create_resized(0, 8).Commit()
    want = np.concatenate([np.arange(N) * N + R + 1000 * s for s in range(N)])
    for nonblocking in (False, True):
        rows = np.zeros(N * N)
        if nonblocking:
            W.Ialltoall([a, 1, colt], [rows, N, MPI.DOUBLE]).Wait()
        else:
            W.Alltoall([a, 1, colt], [rows, N, MPI.DOUBLE])
        assert np.array_equal(rows, want)
    pair = MPI.Datatype.Create_struct([1, 2], [0, 8], [MPI.INT, MPI.DOUBLE]).Commit()
    rec = np.zeros(3, dtype=[("i", "i4"), ("pad", "i4"), ("d", "f8", 2)])
    if R == 0:
        rec["i"], rec["pad"] = [1, 2, 3], 99
        rec["d"] = [[1.5, 2.5], [3.5, 4.5], [5.5, 6.5]]
    W.Bcast([rec, 3, pair], root=0)
    assert rec["i"].tolist() == [1, 2, 3]
    assert rec["d"].tolist() == [[1.5, 2.5], [3.5, 4.5], [5.5, 6.5]]
    assert (rec["pad"] == (99 if R == 0 else 0)).all()  # (a gap of the type: untouched)
    q = W.Bcast_init([g[0, 3:], 1, col], root=0)
    if R == 0:
        g[:, 3] = 42
    q.Start()
    q.Wait()
    q.Free()
    assert g[:, 3].tolist() == [42.0] * 4
    # a pencil transpose as mpi4py-fft makes it: Alltoallw of one subarray element
    # per rank, x-slabs of a 2N x 2N grid to y-slabs and back (and Ialltoallw)
    grid2 = np.arange(4 * N * N, dtype=np.float64).reshape(2 * N, 2 * N)
    slab = grid2[2 * R:2 * R + 2].copy()
    xs = [MPI.DOUBLE.Create_subarray([2, 2 * N], [2, 2], [0, 2 * j]).Commit()
          for j in range(N)]
    ys = [MPI.DOUBLE.Create_subarray([2 * N, 2], [2, 2], [2 * j, 0]).Commit()
          for j in range(N)]
    one = ([1] * N, [0] * N)
    pencil = np.zeros((2 * N, 2))
    W.Alltoallw([slab, one, xs], [pencil, one, ys])
    assert np.array_equal(pencil, grid2[:, 2 * R:2 * R + 2])
    back = np.zeros_like(slab)
    W.Ialltoallw([pencil, one, ys], [back, one, xs]).Wait()
    assert np.array_equal(back, slab)
    # a halo exchange of columns with Neighbor_alltoallw on a periodic ring: column 1
    # to the left, column 2 to the right; ghosts 0 and 3 from them
    ring = W.Create_cart([N], periods=[True])
    h3 = np.arange(12, dtype=np.float64).reshape(3, 4) + 100 * R
    c34 = MPI.DOUBLE.Create_vector(3, 1, 4).Commit()
    ring.Neighbor_alltoallw([h3, ([1, 1], [8, 16]), [c34] * 2], [h3, ([1, 1], [0, 24]), [c34] * 2])
    assert h3[:, 0].tolist() == (np.arange(3) * 4 + 2 + 100 * left).tolist()
    assert h3[:, 3].tolist() == (np.arange(3) * 4 + 1 + 100 * right).tolist()
    # the other neighbourhood collectives with blocks of derived types (resized
    # columns): Neighbor_alltoall, Neighbor_allgather, Ineighbor_alltoallv
    cr3 = MPI.DOUBLE.Create_vector(3, 1, 4).Create_resized(0, 8).Commit()
    cr2 = MPI.DOUBLE.Create_vector(3, 1, 2).Create_resized(0, 8).Commit()
    from_left = (np.arange(3) * 4 + 100 * left).tolist()
    from_right = (np.arange(3) * 4 + 100 * right).tolist()
    g2 = np.zeros((3, 2))
    ring.Neighbor_alltoall([h3[0, 1:], 1, cr3], [g2, 1, cr2])  # (columns 1, 2 of each)
    assert g2[:, 0].tolist() == [v + 2 for v in from_left]
    assert g2[:, 1].tolist() == [v + 1 for v in from_right]
    ring.Neighbor_allgather([h3[0, 1:], 1, cr3], [g2, 1, cr2])
    assert g2[:, 0].tolist() == [v + 1 for v in from_left]
    assert g2[:, 1].tolist() == [v + 1 for v in from_right]
    ring.Ineighbor_alltoallv([h3, ([1, 1], [1, 2]), cr3], [g2, ([1, 1], [1, 0]), cr2]).Wait()
    assert g2[:, 1].tolist() == [v + 2 for v in from_left]  # (displacements swapped)
    assert g2[:, 0].tolist() == [v + 1 for v in from_right]
    ring.Free()
    for t in xs + ys + [c34, cr3, cr2]:
        t.Free()
    # a message ending inside an element: the basic elements that came are placed
    if N > 1 and R < 2:
        pairs = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
        if R == 0:
            W.Send(np.array([7.0, 8.0, 9.0]), 1, 17)
        else:
            part = np.full(6, -1.0)
            st = MPI.Status()
            W.Irecv([part, 2, pairs], 0, 17).Wait(st)
            assert part.tolist() == [7, -1, 8, 9, -1, -1] and st.Get_count(MPI.DOUBLE) == 3
        pairs.Free()
    # MPI.BOTTOM: a struct of the addresses of two arrays, sent and received whole
    ints, reals = np.arange(3, dtype=np.int32) + 10 * R, np.arange(2.0) + R
    addr = MPI.Datatype.Create_struct([3, 2], [MPI.Get_address(ints), MPI.Get_address(reals)],
                                      [MPI.INT32_T, MPI.DOUBLE]).Commit()
    got_i, got_r = np.zeros(3, np.int32), np.zeros(2)
    into = MPI.Datatype.Create_struct([3, 2], [MPI.Get_address(got_i), MPI.Get_address(got_r)],
                                      [MPI.INT32_T, MPI.DOUBLE]).Commit()
    W.Sendrecv([MPI.BOTTOM, 1, addr], right, 13, [MPI.BOTTOM, 1, into], left, 13)
    assert got_i.tolist() == (np.arange(3) + 10 * left).tolist()
    assert got_r.tolist() == (np.arange(2.0) + left).tolist()
    addr.Free()
    into.Free()
    loose = MPI.DOUBLE.Create_vector(4, 1, 6)
    with pytest.raises(MPI.Exception) as e:
        W.Send([g, 1, loose], right, 5)
    assert e.value.Get_error_class() == MPI.ERR_TYPE and "not committed" in str(e.value)
    with pytest.raises(ValueError, match="outside its memory"):
        W.Bcast([g, 2, col], root=0)  # (a second column element starts past the grid)
    for t in (loose, col, c3, sub, colt, pair):
        t.Free()
    W.Barrier()


def test_derived_typemaps_pack_as_the_mpi_underneath_does():
    """The facade's packing of a derived datatype (datatypes.Layout: the typemap
    read once from the real MPI) gives MPI_Pack's bytes, and its unpacking
    MPI_Unpack's buffer, for each combiner (vector, hvector, indexed, struct,
    subarray in C and Fortran order, darray, resized, a negative lower bound, x87
    long doubles that Open MPI packs 10 bytes of), with the runs copied one by one
    and through an index array; a freed type's handle reused by another gets the
    new typemap; a sparse type's typemap is decoded, not probed over its span."""
    from neuron_mpi.mpi import datatypes as D

    real_self = D._MPI.COMM_SELF  # (the real mpi4py's, which its Pack takes)
    types = [MPI.DOUBLE.Create_vector(3, 2, 5), MPI.INT.Create_hvector(4, 1, 12),
             MPI.FLOAT.Create_indexed([2, 1, 3], [5, 0, 9]),
             MPI.Datatype.Create_struct([1, 2], [0, 8], [MPI.INT, MPI.DOUBLE]),
             MPI.DOUBLE.Create_subarray([4, 6], [2, 3], [1, 2]),
             MPI.INT.Create_subarray([4, 6], [2, 3], [1, 2], order=MPI.ORDER_FORTRAN),
             MPI.DOUBLE.Create_darray(2, 1, [4, 6], [MPI.DISTRIBUTE_BLOCK] * 2,
                                      [MPI.DISTRIBUTE_DFLT_DARG] * 2, [1, 2]),
             MPI.DOUBLE.Create_vector(4, 1, 4).Create_resized(0, 8),
             MPI.DOUBLE.Create_hindexed([1, 1], [-8, 16]),
             MPI.LONG_DOUBLE.Create_vector(2, 1, 3),
             MPI.LONG_DOUBLE.Create_darray(2, 1, [4], [MPI.DISTRIBUTE_CYCLIC], [1], [2])]
    doubles80 = types[-2:]  # (long doubles: Open MPI packs 10 bytes of 16)
    rng = np.random.default_rng(R)
    runs = D.RUNS
    try:
        for t in types:
            t.Commit()
            ext = t.Get_extent()[1]
            for count in (1, 3):
                start = 16
                src = rng.integers(0, 256, start + ext * count + 256, dtype=np.uint8)
                want = np.zeros(t.Get_size() * count, np.uint8)
                t.Pack(src[start:start + ext * count], want, 0, real_self)
                for D.RUNS in (runs, 0):
                    lay = D.Layout(t, "buf")  # (RUNS 0: through the index array)
                    got = lay.pack(src, count, start)
                    mine, theirs = np.zeros_like(src), np.zeros_like(src)
                    lay.unpack(got, mine, count, start)
                    t.Unpack(want, 0, theirs[start:start + lay.extent * count], real_self)
                    if t in doubles80:
                        keep = np.tile(np.arange(16) < 10, want.size // 16)
                        at = (start + np.arange(count)[:, None] * lay.extent +
                              lay.map[None, :]).reshape(-1)[keep]
                        assert np.array_equal(got[keep], want[keep])
                        assert np.array_equal(mine[at], theirs[at])
                    else:
                        assert np.array_equal(got, want), t.decode()[1]
                        assert np.array_equal(mine, theirs), t.decode()[1]
            if t is types[-1]:  # (read by a probe: the 6 bytes MPI_Pack leaves travel
                # as the padding they are, one run of each element)
                assert D.Layout(t, "buf").ln.tolist() == [16, 16]
            t.Free()
    finally:
        D.RUNS = runs
    # a type freed and another made in its handle: the new one's typemap, not a kept one
    x = np.arange(4.0)
    for shape in ([0, 1, 3], [0, 2, 3]):
        t = MPI.DOUBLE.Create_indexed([1, 1, 1], shape).Commit()
        assert D.lower([x, 1, t], "buf", "whole", 1)[0][0].tolist() == x[shape].tolist()
        t.Free()
    # a sparse type (4 doubles 8 MB apart) is decoded, not probed over its span
    far = MPI.DOUBLE.Create_vector(4, 1, 1 << 20).Commit()
    assert D.layout(far, "buf").ln.tolist() == [8] * 4
    far.Free()


def test_attributes_and_what_windows_say():
    """Predefined attributes on COMM_WORLD and its Dups and Create_groups (MPI.TAG_UB:
    the largest tag a send takes), none on Split's or COMM_SELF; a user keyval's
    value shared by every handle of a communicator, copied by Dup and Create_group
    through copy_fn, deleted
    through delete_fn by Set_attr over it, Delete_attr and Free; a window or a
    file raises NotImplementedError (and mpi4py's TypeError no more)."""
    from neuron_mpi.tagged import TAG_UB

    assert W.Get_attr(MPI.TAG_UB) == TAG_UB
    d = W.Dup()
    assert d.Get_attr(MPI.TAG_UB) == TAG_UB and MPI.COMM_SELF.Get_attr(MPI.TAG_UB) is None
    req = W.Isend(np.full(1, 7.0), R, tag=TAG_UB)
    got = np.zeros(1)
    W.Recv(got, R, tag=TAG_UB)
    req.Wait()
    assert got[0] == 7.0
    s = W.Split(0, R)
    assert s.Get_attr(MPI.TAG_UB) is None
    deleted = []
    k = MPI.Comm.Create_keyval(copy_fn=lambda c, key, v: v + [len(v)],
                               delete_fn=lambda c, key, v: deleted.append(list(v)))
    s.Set_attr(k, [0])
    assert MPI.Comm(s).Get_attr(k) == [0]  # (another handle of it)
    s.Set_attr(k, [1])  # (over a value: its delete_fn first)
    assert deleted == [[0]]
    s2 = s.Dup()
    assert s2.Get_attr(k) == [1, 1] and s.Get_attr(k) == [1]
    s2.Free()
    s3 = s.Create_group(s.Get_group())  # (copied as Dup copies, as over Open MPI)
    assert s3.Get_attr(k) == [1, 1]
    s3.Free()
    whole = W.Create_group(W.Get_group())
    assert whole.Get_attr(MPI.TAG_UB) == TAG_UB
    whole.Free()
    s.Delete_attr(k)
    assert deleted == [[0], [1, 1], [1, 1], [1]] and s.Get_attr(k) is None
    with pytest.raises(MPI.Exception):
        s.Set_attr(MPI.TAG_UB, 1)  # (predefined: not set by the user, as Open MPI)
    assert MPI.Comm.Free_keyval(k) == MPI.KEYVAL_INVALID
    assert s.Get_attr(k) is None  # (a freed keyval: None, as over Open MPI)
    with pytest.raises(MPI.Exception) as e:
        s.Get_attr(MPI.KEYVAL_INVALID)
    assert e.value.Get_error_class() == MPI.ERR_KEYVAL
    # a delete_fn that raises: Delete_attr raises (the attribute gone all the same);
    # Set_attr over it keeps the new value; Free frees
    def bad(c, key, v):
        raise RuntimeError("delete_fn of the check")
    kb = MPI.Comm.Create_keyval(delete_fn=bad)
    s.Set_attr(kb, "a")
    with pytest.raises(MPI.Exception):
        s.Delete_attr(kb)
    assert s.Get_attr(kb) is None
    s.Set_attr(kb, "b")
    s.Set_attr(kb, "c")
    assert s.Get_attr(kb) == "c"
    s.Free()
    assert s == MPI.COMM_NULL
    kp = MPI.Comm.Create_keyval(nopython=True)
    with pytest.raises(TypeError):
        d.Set_attr(kp, 3.5)
    d.Set_attr(kp, -5)
    assert d.Get_attr(kp) == 2 ** 64 - 5  # (a C pointer, as mpi4py reads it back)
    d.Free()
    with pytest.raises(NotImplementedError, match="Win.Allocate: RMA windows"):
        MPI.Win.Allocate(8, 1, MPI.INFO_NULL, W)
    with pytest.raises(NotImplementedError, match="File.Open"):
        MPI.File.Open(W, "/tmp/neuron-mpi-no-such-file", MPI.MODE_RDONLY)
    assert MPI.Win.__bases__ == (type(MPI.WIN_NULL),)  # (mpi4py's own Win underneath)


def test_split_type_names_and_what_is_not_emulated():
    c = W.communicator  # the ranks of this rank's emulated node, reversed
    mine = [r for r in range(N) if c.topology.placement(c.ranks[r]).node ==
            c.topology.placement(c.ranks[R]).node]
    node = W.Split_type(MPI.COMM_TYPE_SHARED, key=-R)
    assert node.Get_size() == len(mine) and node.Get_rank() == mine[::-1].index(R)
    assert W.Split_type(MPI.UNDEFINED) == MPI.COMM_NULL
    assert W.Get_name() == "MPI_COMM_WORLD" and MPI.COMM_SELF.Get_name() == "MPI_COMM_SELF"
    d = W.Dup()
    d.Set_name("mine")
    assert d.Get_name() == "mine" and d.name == "mine"
    W.Set_errhandler(MPI.ERRORS_RETURN)
    assert W.Get_errhandler() == MPI.ERRORS_RETURN
    with pytest.raises(NotImplementedError, match="errhandler"):
        W.Set_errhandler(MPI.ERRORS_ARE_FATAL)
    assert not hasattr(W, "Create_intercomm") and not hasattr(W, "no_such_method")
    with pytest.raises(NotImplementedError, match="Intracomm.Create_intercomm: not emulated"):
        W.Create_intercomm(0, W, 0)
    with pytest.raises(NotImplementedError, match="Request.py2f: not emulated"):
        W.Ibarrier().py2f()
    W.Barrier()


def test_test_and_iprobe_never_wait():
    """Test of a receive and Iprobe say False while its message has not come (the
    sender waits in a barrier), True once it is here; Iprobe passes over a message
    an Irecv posted earlier will take; Test then completes the receive."""
    if N < 2:
        pytest.skip("needs 2 ranks")
    if R == 0:
        got, st = np.zeros(3), MPI.Status()
        req = W.Irecv(got, 1, tag=5)
        assert not req.Test() and not W.Iprobe(1, 5) and not W.iprobe(1)
        assert not MPI.Request.Testany([req])[1] and MPI.Request.Testsome([req]) == []
        W.Barrier()
        deadline = time.monotonic() + 30
        while not W.Iprobe(1, MPI.ANY_TAG, st):  # (tag 6: the Irecv takes tag 5)
            assert time.monotonic() < deadline, "the message never showed"
            time.sleep(0.001)
        assert st.Get_tag() == 6 and st.Get_count(MPI.DOUBLE) == 2
        while not req.Test(st):
            assert time.monotonic() < deadline, "the receive never completed"
            time.sleep(0.001)
        assert got.tolist() == [1.0, 2.0, 3.0] and st.Get_tag() == 5
        two = np.zeros(2)
        W.Recv(two, 1, tag=6)
        assert two.tolist() == [4.0, 5.0]
    else:
        W.Barrier()
        if R == 1:
            W.Send(np.array([1.0, 2.0, 3.0]), 0, tag=5)
            W.Send(np.array([4.0, 5.0]), 0, tag=6)
    W.Barrier()


def test_any_source_and_proc_null():
    """Recv, Probe and Iprobe from MPI.ANY_SOURCE (the defaults, as mpi4py's) take
    a message from whichever rank sent one, the status naming it; MPI.PROC_NULL
    sends and receives do nothing (status: PROC_NULL, ANY_TAG, 0 elements); a
    request completed is MPI.REQUEST_NULL and false, a persistent one only once
    freed."""
    st = MPI.Status()
    W.Send(None, MPI.PROC_NULL, 3)
    W.Recv(None, MPI.PROC_NULL, status=st)
    assert (st.Get_source(), st.Get_tag(), st.Get_count(MPI.BYTE)) == (
        MPI.PROC_NULL, MPI.ANY_TAG, 0)
    W.Sendrecv(None, MPI.PROC_NULL, 0, None, MPI.PROC_NULL, 0)
    W.Isendrecv_replace(np.zeros(2), MPI.PROC_NULL, 0, MPI.PROC_NULL, 0).Wait()
    req = W.Irecv(None, MPI.PROC_NULL)
    assert req and req != MPI.REQUEST_NULL
    req.Wait()
    assert not req and req == MPI.REQUEST_NULL
    p = W.Send_init(None, MPI.PROC_NULL)
    p.Start()
    p.Wait()
    assert p != MPI.REQUEST_NULL
    p.Free()
    assert p == MPI.REQUEST_NULL
    if N < 2:
        return
    if R == 0:
        probed, received = set(), set()
        for _ in range(N - 1):
            W.Probe(status=st)  # (any source, any tag)
            src = st.Get_source()
            assert st.Get_tag() == 10 + src and st.Get_count(MPI.INT) == src
            got = np.zeros(src, np.int32)
            W.Recv(got, src, status=st)
            assert got.tolist() == [src] * src and src not in probed
            probed.add(src)
        W.Barrier()  # (then the second messages)
        for _ in range(N - 1):
            got = np.zeros(N, np.int32)
            W.Recv(got, status=st)  # (any source, any tag, a buffer large enough)
            src = st.Get_source()
            assert st.Get_count(MPI.INT) == src and got[:src].tolist() == [-src] * src
            received.add(src)
        assert probed == received == set(range(1, N)) and not W.Iprobe()
    else:
        W.Send(np.full(R, R, np.int32), 0, tag=10 + R)
        W.Barrier()
        W.Send(np.full(R, -R, np.int32), 0, tag=20 + R)
    W.Barrier()


def test_waitany_waits_for_whichever_finishes_and_read_only_receives_are_refused():
    """Waitany over two receives returns the one whose message comes (the other's
    comes only after rank 0 answers); a receive into a read-only buffer is refused
    before it takes anything, and the message is still there for the next one."""
    if N < 2:
        pytest.skip("needs 2 ranks")
    if R == 0:
        a, b = np.zeros(1), np.zeros(1)
        reqs = [W.Irecv(a, 1, tag=1), W.Irecv(b, 1, tag=2)]
        assert MPI.Request.Waitany(reqs) == 1 and b[0] == 2.0
        W.Send(np.zeros(1), 1, tag=5)
        assert MPI.Request.Waitany(reqs) == 0 and a[0] == 1.0
        with pytest.raises(ValueError, match="buf: expected a writeable buffer"):
            W.Recv(bytes(8), 1, tag=3)
        W.Recv(a, 1, tag=3)
        assert a[0] == 3.0
    elif R == 1:
        W.Send(np.array([2.0]), 0, tag=2)
        W.Recv(np.zeros(1), 0, tag=5)
        W.Send(np.array([1.0]), 0, tag=1)
        W.Send(np.array([3.0]), 0, tag=3)
    W.Barrier()


def test_synchronous_sends_any_source_receives_posted_and_cancel():
    """Issend is done only once a receive has taken its message (Ssend returns
    then); Irecv from MPI.ANY_SOURCE takes a message from whichever rank sends,
    its status naming it; Cancel of a posted receive nothing matched cancels it,
    Cancel of a send does not."""
    st = MPI.Status()
    r = W.Irecv(np.zeros(1), MPI.ANY_SOURCE, tag=99)  # (nothing will come)
    r.Cancel()
    r.Wait(st)
    assert st.Is_cancelled() and not r
    if N < 2:
        return
    if R == 0:
        W.Barrier()  # (rank 1 tests its Issend before this)
        x = np.zeros(1)
        W.Recv(x, 1, tag=4)
        assert x[0] == 7.0
        got = [np.zeros(1, np.int64) for _ in range(N - 1)]
        reqs = [W.Irecv(g, MPI.ANY_SOURCE, 9) for g in got]
        W.Barrier()  # (the others send after it)
        statuses = [MPI.Status() for _ in reqs]
        MPI.Request.Waitall(reqs, statuses)
        srcs = sorted(s.Get_source() for s in statuses)
        assert srcs == list(range(1, N))
        assert sorted(int(g[0]) for g in got) == [10 * s for s in range(1, N)]
        W.Recv(x, 1, tag=5)  # (rank 1's Ssend returns only after this)
    else:
        if R == 1:
            req = W.Issend(np.array([7.0]), 0, tag=4)
            assert not req.Test() and not req.Get_status()
            req.Cancel()  # (a send is not cancelled)
            W.Barrier()
            req.Wait(st)
            assert not st.Is_cancelled()
        else:
            W.Barrier()
        W.Barrier()
        W.Send(np.array([10 * R], np.int64), 0, tag=9)
        if R == 1:
            W.Ssend(np.array([8.0]), 0, tag=5)
    W.Barrier()
    # a freed receive goes on: the first message lands in its buffer, the next
    # receive takes the second
    if R == 0:
        first, second = np.zeros(1), np.zeros(1)
        req = W.Irecv(first, 1, tag=7)
        req.Free()
        assert not req
        W.Barrier()
        W.Recv(second, 1, tag=7)
        assert (first[0], second[0]) == (1.0, 2.0)
    else:
        W.Barrier()
        if R == 1:
            W.Send(np.array([1.0]), 0, tag=7)
            W.Send(np.array([2.0]), 0, tag=7)
    W.Barrier()


def test_sparse_exchange_with_synchronous_sends_and_ibarrier():
    """The NBX pattern of sparse data exchange (Hoefler et al.): each rank Issends
    to the ranks it has data for, receives whatever Iprobe(ANY_SOURCE) shows, and
    enters Ibarrier once its own sends are taken; when the barrier completes every
    message has been received. It relies on Issend completing only when the
    receive has taken the message."""
    def dests(r):
        return sorted({(r + 1) % N, (r + 3) % N, r})

    st = MPI.Status()
    reqs = [W.Issend(np.array([100 * R + d], np.int64), d, tag=77) for d in dests(R)]
    got, barrier = {}, None
    end = time.monotonic() + 60
    while True:
        if W.Iprobe(MPI.ANY_SOURCE, 77, st):
            buf = np.zeros(1, np.int64)
            W.Recv(buf, st.Get_source(), 77)
            assert st.Get_source() not in got
            got[st.Get_source()] = int(buf[0])
        if barrier is None:
            if MPI.Request.Testall(reqs):
                barrier = W.Ibarrier()
        elif barrier.Test():
            break
        assert time.monotonic() < end, f"stuck: got {got}, barrier {barrier}"
        time.sleep(0.0002)
    assert got == {s: 100 * s + R for s in range(N) if R in dests(s)}
    W.Barrier()


def test_cartesian_grid_halo_exchange_and_neighbour_collectives():
    """Create_cart lays a grid over the ranks in row-major order: Shift names the
    neighbours (MPI.PROC_NULL past a non-periodic edge), a halo exchange with
    Sendrecv along each dimension gets each neighbour's value, Neighbor_alltoall
    and Neighbor_allgather put neighbour k's block in slot k (per dimension, behind
    then ahead; a PROC_NULL slot untouched), also call after call with the same
    arrays and beside an async one in flight, and Sub keeps a row; bad grids are
    refused on every rank."""
    dims = MPI.Compute_dims(N, 2)
    for periods in ([True, True], [False, True]):
        g = W.Create_cart(dims, periods=periods)
        assert isinstance(g, MPI.Cartcomm) and g.topology == MPI.CART
        me = g.Get_coords(g.rank)
        assert g.coords == me and me == [R // dims[1], R % dims[1]]
        assert g.Get_cart_rank(me) == R and g.topo == (dims, [int(p) for p in periods], me)
        nb = g.inedges
        for i in range(2):
            src, dst = g.Shift(i, 1)
            assert [src, dst] == nb[2 * i:2 * i + 2]
            for d, r in ((-1, src), (1, dst)):
                c = list(me)
                c[i] += d
                if not periods[i] and not 0 <= c[i] < dims[i]:
                    assert r == MPI.PROC_NULL
                else:
                    c[i] %= dims[i]
                    assert r == g.Get_cart_rank(c)
            # halo exchange: my value to dst, the value of src into got
            got = np.full(1, -1.0)
            g.Sendrecv(np.array([float(R)]), dst, 5, got, src, 5)
            assert got[0] == (-1.0 if src == MPI.PROC_NULL else float(src))
        send = np.array([100.0 * R + k for k in range(4)])
        out = np.full(4, -1.0)
        g.Neighbor_alltoall(send, out)
        for k, src in enumerate(nb):  # src sent me its block in the opposite direction
            assert out[k] == (-1.0 if src == MPI.PROC_NULL else 100.0 * src + (k ^ 1)), (k, out)
        out2 = np.full((4, 2), -1, np.int32)
        g.Neighbor_allgather(np.array([R, -R], np.int32), out2)
        for k, src in enumerate(nb):
            assert out2[k].tolist() == ([-1, -1] if src == MPI.PROC_NULL else [src, -src])
        # a step loop: the same arrays call after call, their contents changing (the
        # facade keeps a blocking call's own byte arrays with its layout), and an
        # Ineighbor_alltoall of that shape in flight beside a blocking one: each
        # call gets the blocks sent at its own step
        ahead = np.full(4, -1.0)
        for step in range(4):
            send[:] = [1000.0 * step + 100.0 * R + k for k in range(4)]
            if step == 2:
                held = send.copy()
                q = g.Ineighbor_alltoall(held, ahead)
                send += 0.5
            out[:] = -1.0
            g.Neighbor_alltoall(send, out)
            for k, src in enumerate(nb):
                want = -1.0 if src == MPI.PROC_NULL else \
                    1000.0 * step + 100.0 * src + (k ^ 1) + (0.5 if step == 2 else 0.0)
                assert out[k] == want, (step, k, out)
            if step == 2:
                q.Wait()
                for k, src in enumerate(nb):
                    assert ahead[k] == (-1.0 if src == MPI.PROC_NULL else
                                        2000.0 + 100.0 * src + (k ^ 1)), (k, ahead)
        # the kept arrays are bounded (topo.KEEP_BYTES a communicator): a call larger
        # than that gets arrays of its own, and smaller ones of new shapes push the
        # oldest out, results exact either way
        from neuron_mpi.mpi import topo
        bound = topo.KEEP_BYTES
        topo.KEEP_BYTES = 512
        try:
            for m in (2, 40, 3, 4, 5, 40):  # (40 doubles a neighbour: 2 x 1280 bytes)
                big = np.repeat(np.arange(4.0), m) + 100.0 * R
                got = np.full(4 * m, -1.0)
                g.Neighbor_alltoall(big, got)
                for k, src in enumerate(nb):
                    want = -1.0 if src == MPI.PROC_NULL else 100.0 * src + (k ^ 1)
                    assert (got[k * m:(k + 1) * m] == want).all(), (m, k, got)
                assert g._kept_bytes <= 512
            assert all((bufs is None) == (sum(sc) + sum(rc) > 512)
                       for _, sc, rc, _, bufs in g._layouts.values())
        finally:
            topo.KEEP_BYTES = bound
        row = g.Sub([False, True])
        assert row.dims == [dims[1]] and row.Get_size() == dims[1]
        assert row.Get_rank() == me[1]
        d = g.Dup()
        assert d.dims == dims and d.coords == me
        for c in (row, d, g):
            c.Free()
    # counts are per neighbour and in elements, as mpi4py reads them (a ring: k = 2)
    ring = W.Create_cart([N], periods=[True])
    nb = ring.inedges
    recv = np.full(6, -1, np.int32)
    ring.Neighbor_allgather([np.array([R, R, 7], np.int32), 2, MPI.INT], [recv, 2, MPI.INT])
    assert recv.tolist() == [nb[0], nb[0], nb[1], nb[1], -1, -1]
    send = np.arange(6, dtype=np.int32) + 10 * R
    for count in (1, 2):
        recv[:] = -1
        ring.Neighbor_alltoall([send, count, MPI.INT], [recv, count, MPI.INT])
        want = [10 * nb[k] + count * (k ^ 1) + e for k in range(2) for e in range(count)]
        assert recv.tolist()[:2 * count] == want and recv[2 * count:].tolist() == \
            [-1] * (6 - 2 * count), (count, recv)
    with pytest.raises(ValueError, match="3 elements do not divide evenly among 2"):
        ring.Neighbor_alltoall(np.arange(3, dtype=np.int32), np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="datatype"):
        ring.Neighbor_allgather(np.zeros(1, np.int32), np.zeros(2))
    ring.Free()
    if N > 1:  # a buffer error on one rank fails every rank's call, not only its own
        g = W.Create_cart([N], periods=[True])
        with pytest.raises(ValueError, match="recvbuf: .* fewer than" if R == 0 else
                           "rank\\(s\\) 0 of the group rejected"):
            g.Neighbor_allgather(np.zeros(2), np.zeros(2 if R == 0 else 4))
        g.Free()
    with pytest.raises(ValueError, match="periods"):
        W.Create_cart([N], [True, False])
    with pytest.raises(ValueError, match="does not fit"):
        W.Create_cart([N + 1])
    assert W.Cart_map([N]) == R and W.topology == MPI.UNDEFINED
    W.Barrier()


def _blocks_from(me_in, outs, me):
    """What Neighbor_alltoall puts in each in-slot of ``me`` (its in-neighbours
    ``me_in``), each rank s sending 100 * s + k as its block k to ``outs[s][k]``: the
    i-th slot from s takes the block of s's i-th edge to ``me`` (MPI's order)."""
    seen: dict = {}
    want = []
    for s in me_in:
        i = seen[s] = seen.get(s, -1) + 1
        want.append(100.0 * s + [k for k, d in enumerate(outs[s]) if d == me][i])
    return want


def test_graph_topologies_and_their_neighbour_collectives():
    """Create_graph (a ring: each node's neighbours on both sides; index with or
    without its leading 0), Create_dist_graph_adjacent (each rank receives from r-1
    and r-2 and sends to r+1 and r+2, weighted) and Create_dist_graph (edges given
    by any rank): their neighbour lists, and Neighbor_alltoall / Neighbor_allgather
    put in-neighbour k's block in slot k (the i-th slot from a rank takes its i-th
    edge here); a rank without neighbours takes part (a chain, also in the -v
    forms); a bad argument on one rank fails every rank's call."""
    ring = lambda r: [(r - 1) % N, (r + 1) % N]  # noqa: E731
    index = [2 * (i + 1) for i in range(N)]
    edges = [e for i in range(N) for e in ring(i)]
    for idx in (index, [0] + index):
        g = W.Create_graph(idx, edges)
        assert isinstance(g, MPI.Graphcomm) and g.topology == MPI.GRAPH and g.is_topo
        assert g.topo == (index, edges) and g.dims == (N, 2 * N) and g.neighbors == ring(R)
        assert g.Get_neighbors(N - 1) == ring(N - 1) and g.inoutedges == (ring(R), ring(R))
        out = np.full(2, -1.0)
        g.Neighbor_allgather(np.array([float(R)]), out)
        assert out.tolist() == [float(s) for s in ring(R)], out
        g.Neighbor_alltoall(np.array([100.0 * R, 100.0 * R + 1]), out)
        assert out.tolist() == _blocks_from(ring(R), [ring(s) for s in range(N)], R), out
        assert W.Graph_map(idx, edges) == R
        g.Free()
    ins = lambda r: [(r - 2) % N, (r - 1) % N]  # noqa: E731
    outs = lambda r: [(r + 1) % N, (r + 2) % N]  # noqa: E731
    d = W.Create_dist_graph_adjacent(ins(R), outs(R), [7, 8], [9, 10])
    assert isinstance(d, MPI.Distgraphcomm) and d.topology == MPI.DIST_GRAPH
    assert d.Get_dist_neighbors() == (ins(R), outs(R), ([7, 8], [9, 10]))
    assert d.Get_dist_neighbors_count() == (2, 2, True) and d.degrees == (2, 2)
    out = np.full(2, -1.0)
    d.Neighbor_alltoall(np.array([100.0 * R, 100.0 * R + 1]), out)
    assert out.tolist() == _blocks_from(ins(R), [outs(s) for s in range(N)], R), out
    d.Neighbor_allgather(np.array([float(R)]), out)
    assert out.tolist() == [float(s) for s in ins(R)]
    twice = W.Create_dist_graph_adjacent([R, R], [R, R])  # (a neighbour twice: two objects)
    got = twice.neighbor_allgather([R])
    assert got == [[R], [R]] and got[0] is not got[1]
    twice.Free()
    d2 = d.Dup()
    assert d2.Get_dist_neighbors() == d.Get_dist_neighbors()
    for c in (d, d2):
        c.Free()
    # edges given by their source, then all of them by rank 0
    for mine in (True, False):
        src = [R] if mine else (list(range(N)) if R == 0 else [])
        dg = W.Create_dist_graph(src, [1] * len(src), [(s + 1) % N for s in src],
                                 [s + 1 for s in src])
        assert dg.Get_dist_neighbors() == ([(R - 1) % N], [(R + 1) % N],
                                           ([(R - 1) % N + 1], [R + 1]))
        dg.Free()
    dg = W.Create_dist_graph([], [], [], MPI.UNWEIGHTED)
    assert dg.Get_dist_neighbors_count() == (0, 0, False)
    dg.Neighbor_allgather(np.zeros(1), np.zeros(0))  # (no neighbours anywhere)
    dg.Free()
    # a chain: rank 0 receives from nobody, the last rank sends to nobody
    chain_in = [R - 1] if R > 0 else []
    chain_out = [R + 1] if R < N - 1 else []
    c = W.Create_dist_graph_adjacent(chain_in, chain_out)
    got = np.full(len(chain_in), -1, np.int32)
    c.Neighbor_allgather(np.array([R], np.int32), got)
    assert got.tolist() == chain_in
    # the -v forms, counts and displacements per neighbour: rank r sends r + 1
    # values; two values from offset 3
    wide = np.full(R + 1, -1, np.int32)
    c.Neighbor_allgatherv(np.full(R + 1, R, np.int32),
                          [wide, [R] * len(chain_in), [1] * len(chain_in), MPI.INT])
    assert wide.tolist() == [-1] + [R - 1] * R
    two = np.full(3, -1, np.int32)
    c.Neighbor_alltoallv([np.arange(10, dtype=np.int32) + 100 * R, [2] * len(chain_out),
                          [3] * len(chain_out), MPI.INT],
                         [two, [2] * len(chain_in), [0] * len(chain_in), MPI.INT])
    assert two.tolist() == ([100 * R - 97, 100 * R - 96, -1] if R > 0 else [-1] * 3)
    c.Free()
    with pytest.raises(ValueError, match="empty weights but nonzero degree"):
        MPI.COMM_SELF.Create_dist_graph_adjacent([0], [0], MPI.WEIGHTS_EMPTY,
                                                 MPI.WEIGHTS_EMPTY)
    with pytest.raises(TypeError):
        MPI.Cartcomm(W.Create_graph(index, edges))
    if N > 1:  # a bad argument on one rank fails every rank's call, not only its own
        with pytest.raises(ValueError, match="sources: rank .* is not in" if R == 0 else
                           "rank\\(s\\) 0 of the group rejected"):
            W.Create_dist_graph_adjacent([N] if R == 0 else [], [])
    with pytest.raises(ValueError, match="does not fit"):
        W.Create_graph([1] * (N + 1), [0])
    W.Barrier()

