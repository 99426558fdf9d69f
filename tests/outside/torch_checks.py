"""Checks of the "neuron" backend itself, launched with torch_suite.py in the same
mpiexec run (tests/test_outside_torch.py): dtypes bit for bit, the rooted and
all-to-all forms, async Work, groups, and the errors on bad input (every rank
raises, before data moves, and the group stays usable)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.distributed as dist

import neuron_mpi as nm
import neuron_mpi.torch  # noqa: F401

if not dist.is_initialized():
    dist.init_process_group("neuron")

R, N = dist.get_rank(), dist.get_world_size()

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.float8_e4m3fn,
          torch.float8_e5m2, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
NP = {torch.bfloat16: ml_dtypes.bfloat16, torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn,
      torch.float8_e5m2: ml_dtypes.float8_e5m2}


def ints(rank, n=24):
    return (np.arange(n) * 3 + rank * 5) % 7 - 3 + (rank % 2)


def as_t(a, dtype):
    return torch.tensor(a, dtype=torch.float64).to(dtype)


# AVG: floating types (torch defines it for those); uint8: no negative data
CASES = [(d, op) for d in DTYPES for op in ("SUM", "MAX", "MIN", "PRODUCT", "AVG")
         if d.is_floating_point or op != "AVG"]


@pytest.mark.parametrize("dtype,op", CASES, ids=[f"{d}-{o}" for d, o in CASES])
def test_all_reduce_dtypes_exact(dtype, op):
    rows = np.stack([np.abs(ints(r)) if dtype == torch.uint8 else ints(r) for r in range(N)])
    if op == "PRODUCT":
        rows = np.clip(rows, -1, 2)
    t = as_t(rows[R], dtype)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    # reference: numpy in the same dtype (numpy / ml_dtypes), reduced exactly
    acc = {"SUM": rows.sum(0), "MAX": rows.max(0), "MIN": rows.min(0),
           "PRODUCT": rows.prod(0), "AVG": rows.sum(0)}[op].astype(np.float64)
    want = as_t(acc, dtype)
    if op == "AVG":
        want = (want.float() / N).to(dtype) if dtype in NP or dtype == torch.float16 else want / N
    assert torch.equal(t.double(), want.double()), (t, want)  # values (0.0 == -0.0)


def test_collective_forms():
    x = torch.arange(4 * N, dtype=torch.int64) + 100 * R
    out = torch.empty(4 * N * N, dtype=torch.int64)
    dist.all_gather_into_tensor(out, x)
    assert torch.equal(out.view(N, -1)[3], torch.arange(4 * N) + 300 % (100 * N) if N > 3
                       else out.view(N, -1)[3])
    rs = torch.empty(4, dtype=torch.int64)
    dist.reduce_scatter_tensor(rs, x)
    assert torch.equal(rs, (torch.arange(4) + 4 * R) * N + 100 * sum(range(N)))
    # all_to_all_single with split sizes: rank r sends r+1 rows to each rank
    send = torch.full(((R + 1) * N, 2), float(R))
    recv = torch.empty((sum(s + 1 for s in range(N)), 2))
    dist.all_to_all_single(recv, send, [s + 1 for s in range(N)], [R + 1] * N)
    want = torch.cat([torch.full((s + 1, 2), float(s)) for s in range(N)])
    assert torch.equal(recv, want)
    # reduce / gather / scatter to the last rank
    root = N - 1
    t = torch.tensor([float(R + 1)])
    dist.reduce(t, dst=root, op=dist.ReduceOp.MAX)
    if R == root:
        assert t.item() == N
    g = [torch.empty(2, dtype=torch.int32) for _ in range(N)] if R == root else None
    dist.gather(torch.tensor([R, -R], dtype=torch.int32), g, dst=root)
    if R == root:
        assert [v.tolist() for v in g] == [[r, -r] for r in range(N)]
    s = torch.empty(3)
    dist.scatter(s, [torch.full((3,), float(i)) for i in range(N)] if R == root else None,
                 src=root)
    assert torch.equal(s, torch.full((3,), float(R)))


def test_async_work_and_future():
    t = torch.ones(5, dtype=torch.bfloat16)
    w = dist.all_reduce(t, async_op=True)
    fut = w.get_future()
    assert w.wait()
    assert fut.wait()[0] is t or torch.equal(fut.wait()[0], t)
    assert torch.equal(t, torch.full((5,), float(N), dtype=torch.bfloat16))
    if N >= 2:
        peer = R ^ 1
        if peer < N:
            buf = torch.empty(3)
            reqs = [dist.isend(torch.full((3,), float(R)), peer), dist.irecv(buf, peer)]
            for q in reqs:
                q.wait()
            assert torch.equal(buf, torch.full((3,), float(peer)))


def test_point_to_point_as_gloo():
    """Messages matched by tag, whatever order they are received in; a receive
    posted before the matching send (irecv then isend, batch_isend_irecv with the
    receive first) completes; a strided view receives in place."""
    if N < 2 or (R ^ 1) >= N:
        pytest.skip("needs a partner rank")
    peer = R ^ 1
    if R % 2 == 0:
        for q in (dist.isend(torch.tensor([1.0]), peer, tag=1),
                  dist.isend(torch.tensor([2.0]), peer, tag=2)):
            q.wait()
    else:
        x, y = torch.zeros(1), torch.zeros(1)
        dist.recv(y, peer, tag=2)
        dist.recv(x, peer, tag=1)
        assert (x.item(), y.item()) == (1.0, 2.0)
    buf = torch.zeros(3)
    ops = [dist.P2POp(dist.irecv, buf, peer), dist.P2POp(dist.isend, torch.full((3,), R + 1.0),
                                                         peer)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert torch.equal(buf, torch.full((3,), peer + 1.0))
    q = dist.irecv(buf, peer, tag=5)
    dist.isend(torch.full((3,), 10.0 * R), peer, tag=5).wait()
    q.wait()
    assert torch.equal(buf, torch.full((3,), 10.0 * peer))
    col = torch.zeros(3, 2)
    q = dist.irecv(col[:, 1], peer)
    dist.send(torch.arange(3.0) + R, peer)
    q.wait()
    assert torch.equal(col[:, 1], torch.arange(3.0) + peer) and not col[:, 0].any()


def test_single_tensor_futures_hold_a_list():
    """As NCCL's and gloo's: the future of all_gather_into_tensor,
    reduce_scatter_tensor and all_to_all_single holds a list (done at the call and
    in flight alike)."""
    for n in (4, 1 << 16):
        out = torch.empty(n * N)
        v = dist.all_gather_into_tensor(out, torch.full((n,), float(R)),
                                        async_op=True).get_future().wait()
        assert isinstance(v, list) and v[0] is out
        small = torch.empty(n)
        v = dist.reduce_scatter_tensor(small, torch.ones(n * N), async_op=True).get_future().wait()
        assert isinstance(v, list) and v[0] is small and torch.equal(small, torch.full((n,), float(N)))
        a2a = torch.empty(n * N)
        v = dist.all_to_all_single(a2a, torch.arange(float(n * N)),
                                   async_op=True).get_future().wait()
        assert isinstance(v, list) and v[0] is a2a


def test_large_calls_are_in_flight_while_torch_computes():
    """all_reduce, all_gather_into_tensor, reduce_scatter_tensor and
    all_to_all_single of at least ASYNC_MIN_BYTES return a Work in flight: it
    finishes while the rank sleeps outside the backend (is_completed() true before
    wait()); one that rank 0 joins 1 s late is not completed on the others right
    after the call, and asking does not block; its get_future() completes by
    itself (and runs its callbacks) once rank 0 joins, with nobody calling wait().
    Small calls, and blocking ones (asyncOp False), complete at the call. Results
    exact."""
    import time

    from neuron_mpi.torch import ASYNC_MIN_BYTES
    from neuron_mpi.torch.work import InFlight as _Work

    k = ASYNC_MIN_BYTES // 4  # float32 elements: the smallest call in flight
    t = torch.full((k,), float(R + 1))
    g_in, g_out = torch.full((k,), float(R)), torch.empty(N * k)
    rs_in, rs_out = torch.arange(N * k, dtype=torch.float32), torch.empty(k)
    a_in, a_out = torch.arange(N * k, dtype=torch.float32) + 1000 * R, torch.empty(N * k)
    dist.barrier()
    works = [dist.all_reduce(t, async_op=True),
             dist.all_gather_into_tensor(g_out, g_in, async_op=True),
             dist.reduce_scatter_tensor(rs_out, rs_in, async_op=True),
             dist.all_to_all_single(a_out, a_in, async_op=True)]
    in_flight = all(isinstance(w, _Work) for w in works)
    # sleep outside the backend until their executions have ended (read without
    # progressing anything), at most 30 s: a fixed sleep is too short on a loaded
    # machine
    end = time.monotonic() + 30
    while time.monotonic() < end and not all(w.ended.is_set() for w in works):
        time.sleep(0.05)
    done_asleep = all(w.is_completed() for w in works)  # done while this rank slept
    waited = all(w.wait() for w in works)  # (every rank, before any assertion)
    assert in_flight and done_asleep and waited and all(w.is_success() for w in works)
    assert torch.all(t == N * (N + 1) / 2)
    assert torch.equal(g_out, torch.arange(N, dtype=torch.float32).repeat_interleave(k))
    assert torch.equal(rs_out, torch.arange(R * k, (R + 1) * k, dtype=torch.float32) * N)
    assert torch.equal(a_out, torch.cat([torch.arange(R * k, (R + 1) * k, dtype=torch.float32)
                                         + 1000 * s for s in range(N)]))
    assert torch.equal(works[0].result()[0], t) and works[0].exception() is None
    # rank 0 joins late: once every other rank has looked at its call (a message
    # each; however long a loaded machine keeps a rank off the cores), on a board
    # and where agreements are routed
    late = torch.full((k,), 1.0)
    if R == 0:
        for r in range(1, N):
            dist.recv(torch.empty(1), src=r, tag=79)
    w = dist.all_reduce(late, async_op=True)
    t0 = time.perf_counter()
    early = (w.is_completed(), w.is_success())
    asked = time.perf_counter() - t0
    fut = w.get_future()  # completes by itself when the call ends (no wait() here)
    chained = fut.then(lambda f: float(f.value()[0].sum()))
    fut_early = fut.done()
    if R != 0:
        dist.send(torch.zeros(1), dst=0, tag=79)
    t0 = time.monotonic()
    while not chained.done() and time.monotonic() - t0 < 20:
        time.sleep(0.01)
    by_itself = chained.done()
    w.wait()  # (every rank, before any assertion)
    if N > 1 and R != 0:  # (rank 0 had not joined: nothing blocked or done)
        assert early == (False, False) and asked < 0.5 and not fut_early, (early, asked)
    assert by_itself, "the future of a call in flight never completed by itself"
    assert w.is_completed() and torch.all(fut.value()[0] == N)
    assert chained.value() == float(N * k) and w.get_future() is fut
    small = torch.ones(4)
    assert not isinstance(dist.all_reduce(small, async_op=True), _Work)  # done at the call
    opts = dist.AllreduceOptions()
    opts.asyncOp = False  # (what dist.all_reduce passes without async_op: waited at once)
    big = torch.ones(k)
    assert not isinstance(dist.group.WORLD.allreduce([big], opts), _Work)  # compiled, here
    assert torch.all(big == N)


def test_ddp_buckets_of_at_least_64_kib_run_in_flight():
    """DDP's gradient all-reduce (from C++, its future taken at once and waited
    at the end of backward) goes in flight for a bucket of 64 KiB or more, and
    the averaged gradients are exact."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from neuron_mpi.torch import NeuronProcessGroup
    from neuron_mpi.torch.work import InFlight as _Work

    seen = []
    orig = NeuronProcessGroup.allreduce

    def spy(self, tensors, opts=None):
        w = orig(self, tensors, opts)
        seen.append(type(w))
        return w

    g = torch.Generator().manual_seed(0)
    model = torch.nn.Linear(256, 128).double()  # 32896 parameters: a 257 KiB bucket
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-2, 3, p.shape, generator=g, dtype=torch.float64))
    NeuronProcessGroup.allreduce = spy
    try:
        ddp = DDP(model)
        ddp(torch.full((4, 256), float(R + 1), dtype=torch.float64)).sum().backward()
    finally:
        NeuronProcessGroup.allreduce = orig
    assert _Work in seen, seen
    assert torch.all(model.weight.grad == 4 * (N + 1) / 2)  # mean over ranks of 4 (R + 1)
    assert torch.all(model.bias.grad == 4)


def test_a_mismatch_in_flight_is_raised_by_wait_on_every_rank():
    from neuron_mpi.torch import ASYNC_MIN_BYTES

    g = dist.new_group(list(range(N)))  # a mismatch fails its communicator for good
    k = ASYNC_MIN_BYTES // 4 + (1 if R == 0 and N > 1 else 0)
    w = dist.all_reduce(torch.ones(k), group=g, async_op=True)
    if N > 1:
        with pytest.raises(nm.CollectiveMismatchError, match="count"):
            w.wait()
        assert w.is_completed() and not w.is_success()
        assert isinstance(w.exception(), nm.CollectiveMismatchError)
        with pytest.raises(nm.CollectiveMismatchError):
            w.get_future().wait()
    t = torch.ones(4)
    dist.all_reduce(t)  # the default group is untouched
    assert t[0].item() == N


def test_groups_and_names():
    pairs = [[i, i + 1] for i in range(0, N - 1, 2)]
    groups = [dist.new_group(p) for p in pairs]
    for p, g in zip(pairs, groups):
        if R in p:
            t = torch.tensor([R])
            dist.all_reduce(t, group=g)
            assert t.item() == sum(p)
            assert isinstance(g.group_name, str) and g.group_name
    sub, _ = dist.new_subgroups(group_size=2)
    t = torch.tensor([1])
    dist.all_reduce(t, group=sub)
    assert t.item() == 2


def test_bad_device_refused_on_every_rank():
    with pytest.raises(nm.InvalidArgumentError, match="tensor: .*CPU tensors.*meta"):
        dist.all_reduce(torch.empty(4, device="meta"))
    t = torch.ones(2)
    dist.all_reduce(t)  # the group is still usable
    assert t[0].item() == N


def test_one_rank_bad_device_fails_everyone():
    t = torch.empty(4, device="meta") if R == 0 else torch.ones(4)
    with pytest.raises(nm.NeuronMPIError) as e:
        dist.all_reduce(t)
    if R == 0:
        assert "meta" in str(e.value)
    else:
        assert "rank(s) 0" in str(e.value)
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t[0].item() == N


def test_bool_tensors_reduce_as_logical_or_and():
    """As gloo: SUM and MAX of bool tensors are a logical or, PRODUCT and MIN a
    logical and; AVG is refused on every rank; bool tensors move as they are."""
    mine = [R == 0, True, False, R % 2 == 1]
    any_, all_ = [True, True, False, N > 1], [N == 1, True, False, False]
    for op, want in ((dist.ReduceOp.SUM, any_), (dist.ReduceOp.MAX, any_),
                     (dist.ReduceOp.PRODUCT, all_), (dist.ReduceOp.MIN, all_)):
        t = torch.tensor(mine)
        dist.all_reduce(t, op=op)
        assert t.dtype == torch.bool and t.tolist() == want, (op, t)
        x = torch.tensor(mine * N)
        o = torch.zeros(4, dtype=torch.bool)
        dist.reduce_scatter_tensor(o, x, op=op)
        assert o.tolist() == want
    with pytest.raises(nm.InvalidArgumentError, match="bool tensors reduce with"):
        dist.all_reduce(torch.tensor(mine), op=dist.ReduceOp.AVG)
    g = torch.zeros(4 * N, dtype=torch.bool)
    dist.all_gather_into_tensor(g, torch.tensor(mine))
    assert g.tolist() == [v for r in range(N) for v in [r == 0, True, False, r % 2 == 1]]


def test_unsupported_dtype_names_the_argument():
    with pytest.raises(nm.InvalidArgumentError,
                       match="tensor: unsupported dtype torch.float8_e5m2fnuz"):
        dist.all_reduce(torch.ones(3).to(torch.float8_e5m2fnuz))
    with pytest.raises(nm.InvalidArgumentError, match="op"):
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND)


def test_mismatched_shapes_fail_on_every_rank():
    g = dist.new_group(list(range(N)))  # a mismatch fails its communicator for good
    t = torch.ones(3 if R == 0 else 4)
    with pytest.raises(nm.CollectiveMismatchError, match="count: rank 0: 3"):
        dist.all_reduce(t, group=g)
    with pytest.raises(nm.CommunicatorFailedError):
        dist.all_reduce(torch.ones(4), group=g)
    t = torch.ones(4)
    dist.all_reduce(t)  # the default group is untouched
    assert t[0].item() == N


def test_refused_group_raises_on_its_members():
    if N < 4:
        pytest.skip("needs 4 ranks")
    if R < 3:
        with pytest.raises(nm.UnsupportedGroupError, match=r"group \[0, 1, 2\] of 3 ranks"):
            dist.new_group([0, 1, 2])
    else:
        dist.new_group([0, 1, 2])  # torch creates nothing on a non-member
    dist.barrier()


def _example(name):
    import importlib
    import sys
    from pathlib import Path
    examples = str(Path(__file__).resolve().parents[2] / "examples")
    if examples not in sys.path:
        sys.path.insert(0, examples)
    return importlib.import_module(name)


@pytest.mark.parametrize("name", ["ddp_train", "fsdp2_train"])
def test_example_identical_to_gloo(name, capsys):
    """examples/ddp_train.py and fsdp2_train.py with --compare gloo, in this launch
    (their run(): the default group is already the neuron one)."""
    assert _example(name).run(steps=4, compare="gloo")
    if R == 0:
        line = capsys.readouterr().out.strip().splitlines()[-1]
        assert line.endswith("identical on every rank, identical to gloo"), line
        assert f"on {N} ranks" in line


def test_irecv_is_completed_polls_without_waiting():
    """is_completed() of an irecv is False while its message has not come (the
    sender waits in a barrier) and turns True by itself once it is here."""
    if N < 2:
        pytest.skip("needs 2 ranks")
    import time

    if R == 0:
        t = torch.zeros(3)
        w = dist.irecv(t, src=1, tag=4)
        assert not w.is_completed()
        dist.barrier()
        deadline = time.monotonic() + 30
        while not w.is_completed():
            assert time.monotonic() < deadline, "the receive never completed"
            time.sleep(0.001)
        assert t.tolist() == [1.0, 2.0, 3.0]
        w.wait()
    else:
        dist.barrier()
        if R == 1:
            dist.send(torch.tensor([1.0, 2.0, 3.0]), dst=0, tag=4)
    dist.barrier()


def test_receive_from_any_source():
    """recv(src=None) returns the sender of the message it took; an irecv from any
    source names it by _source_rank() and its is_completed() turns True once a
    message has come."""
    if N < 2:
        pytest.skip("needs 2 ranks")
    import time

    if R == 0:
        senders = []
        for k in range(N - 1):
            t = torch.zeros(2)
            if k % 2:
                w = dist.irecv(t)
                deadline = time.monotonic() + 30
                while not w.is_completed():
                    assert time.monotonic() < deadline, "the receive never completed"
                    time.sleep(0.001)
                src = w._source_rank()
            else:
                src = dist.recv(t)
            assert t.tolist() == [float(src)] * 2
            senders.append(src)
        assert sorted(senders) == list(range(1, N))
    else:
        dist.send(torch.full((2,), float(R)), dst=0)
    dist.barrier()


def test_a_failed_receive_raises_its_error_again_and_mixed_bool_reductions_are_refused():
    """A receive whose message has the wrong size raises that error at every wait
    (it does not take the next message); one reduction over bool and float tensors
    is refused on every rank."""
    if N >= 2:
        if R == 0:
            w = dist.irecv(torch.zeros(2))  # (any source)
            import time

            deadline = time.monotonic() + 30
            while not w.is_completed():  # (True once over, its error left to wait)
                assert time.monotonic() < deadline, "the receive never completed"
                time.sleep(0.001)
            for _ in range(2):
                with pytest.raises(nm.InvalidArgumentError, match="tensor: .* has 12 bytes"):
                    w.wait()
            t = torch.zeros(2)
            dist.recv(t, 1)
            assert t.tolist() == [8.0, 8.0]
        elif R == 1:
            dist.send(torch.zeros(3), 0)
            dist.send(torch.full((2,), 8.0), 0)
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    with pytest.raises(nm.InvalidArgumentError, match="cannot mix them"):
        dist.group.WORLD.allreduce([torch.ones(2, dtype=torch.bool), torch.ones(2)], opts)
    dist.barrier()
