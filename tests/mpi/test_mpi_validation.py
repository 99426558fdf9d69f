"""Bad calls fail on every rank with a clear InvalidArgumentError (naming the
argument) before any data moves, and leave the input unchanged; ranks that
disagree get CollectiveMismatchError; a forced algorithm that does not apply
raises AlgorithmError."""
from __future__ import annotations

import numpy as np
import pytest

import neuron_mpi as nm
from mpi_helpers import (ALGORITHMS, APPLIES, DTYPES, SMALL_WORLD, WORLD_HINT, assert_same,
                         settled_bytes, table)

pytestmark = pytest.mark.mpi

def _readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def bad_calls(comm):
    """name -> (call, inputs that must stay unchanged, regex the message matches)."""
    n, me = comm.size, comm.rank
    f32 = DTYPES["fp32"]
    x = table(11, n, 2 * n * 3, f32)[me].reshape(2 * n, 3)  # divides into n blocks
    v = x[:2].copy()
    counts = [2] * n
    c = {}
    c["all_reduce-op-unknown"] = (lambda: comm.all_reduce(x, op="mean"), [x], "op")
    c["all_reduce-op-none"] = (lambda: comm.all_reduce(x, op=None), [x], "op")
    c["all_reduce-out-shape"] = (lambda: comm.all_reduce(x, out=np.empty((2 * n, 4), f32)),
                                 [x], "out")
    c["all_reduce-out-dtype"] = (lambda: comm.all_reduce(x, out=np.empty(x.shape, np.float64)),
                                 [x], "out")
    c["all_reduce-out-readonly"] = (lambda: comm.all_reduce(x, out=_readonly(x)), [x], "out")
    c["all_reduce-out-list"] = (lambda: comm.all_reduce(x, out=[0.0] * x.size), [x], "out")
    c["all_reduce-x-list"] = (lambda: comm.all_reduce([1.0, 2.0]), [], "x")
    cx = np.ones(4, np.complex64)
    c["all_reduce-complex64"] = (lambda: comm.all_reduce(cx), [cx], "x: unsupported dtype")
    bx = np.ones(4, np.bool_)
    c["all_gather-bool"] = (lambda: comm.all_gather(bx), [bx], "x: unsupported dtype")
    c["all_reduce-timeout"] = (lambda: comm.all_reduce(x, timeout="soon"), [x], "timeout")
    c["all_gather-0d"] = (lambda: comm.all_gather(np.float32(1.0) * np.ones((), f32)), [], "x")
    c["all_gather-out-shape"] = (lambda: comm.all_gather(v, out=np.empty((2 * n + 1, 3), f32)),
                                 [v], "out")
    c["all_gather-out-readonly"] = (
        lambda: comm.all_gather(v, out=_readonly(np.empty((2 * n, 3), f32))), [v], "out")
    c["reduce_scatter-op"] = (lambda: comm.reduce_scatter(x, op="add"), [x], "op")
    c["reduce_scatter-out-dtype"] = (
        lambda: comm.reduce_scatter(x, out=np.empty((2, 3), np.int32)), [x], "out")
    c["all_gather_v-counts-length"] = (lambda: comm.all_gather_v(v, counts + [2]), [v],
                                       "counts")
    c["all_gather_v-counts-mine"] = (
        lambda: comm.all_gather_v(v, [3] * n), [v], "counts")
    c["all_gather_v-counts-negative"] = (
        lambda: comm.all_gather_v(v, [2] * (n - 1) + [-1] if n > 1 else [-1]), [v], "counts")
    c["all_gather_v-counts-float"] = (lambda: comm.all_gather_v(v, [2.0] * n), [v], "counts")
    c["reduce_scatter_v-counts-length"] = (
        lambda: comm.reduce_scatter_v(v, [2] + [0] * n), [v], "counts")
    c["reduce_scatter_v-counts-sum"] = (
        lambda: comm.reduce_scatter_v(v, [3] + [0] * (n - 1)), [v], "counts")
    c["all_to_all_v-send-length"] = (
        lambda: comm.all_to_all_v(x, [2] * (n + 1), [2] * n), [x], "send_counts")
    c["all_to_all_v-recv-length"] = (
        lambda: comm.all_to_all_v(x, [2] * n, [2] * (n - 1)), [x], "recv_counts")
    c["all_to_all_v-send-sum"] = (
        lambda: comm.all_to_all_v(x, [1] * n, [1] * n), [x], "send_counts")
    c["all_to_all_v-self-mismatch"] = (
        lambda: comm.all_to_all_v(x, [2] * n, [2 if r != me else 1 for r in range(n)]), [x],
        "recv_counts")
    dup = [(0, 0), (0, 0)] if n == 1 else [(0, 1), (1, 1)]
    c["permute-pairs-duplicate"] = (lambda: comm.permute(v, dup), [v], "pairs")
    c["permute-pairs-range"] = (lambda: comm.permute(v, [(0, n)]), [v], "pairs")
    c["permute-pairs-shape"] = (lambda: comm.permute(v, [(0,)]), [v], "pairs")
    c["permute-pairs-none"] = (lambda: comm.permute(v, None), [v], "pairs")
    c["permute-out-readonly"] = (lambda: comm.permute(v, [(0, 0)], out=_readonly(v)), [v],
                                 "out")
    c["broadcast-root-high"] = (lambda: comm.broadcast(v, root=n), [v], "root")
    c["broadcast-root-negative"] = (lambda: comm.broadcast(v, root=-1), [v], "root")
    c["broadcast-root-str"] = (lambda: comm.broadcast(v, root="0"), [v], "root")
    c["broadcast-out-readonly"] = (lambda: comm.broadcast(v, out=_readonly(v)), [v], "out")
    c["send-dst"] = (lambda: comm.send(v, n), [v], "dst")
    c["recv-src"] = (lambda: comm.recv(v.copy(), -1), [v], "src")
    c["recv-out-readonly"] = (lambda: comm.recv(_readonly(v), 0), [v], "out")
    c["split-rank-twice"] = (lambda: comm.split([[0], [0]]), [], "replica_groups")
    c["split-rank-range"] = (lambda: comm.split([[n]]), [], "replica_groups")
    if n > 1:  # every row count divides into 1 block
        odd = np.ones((n + 1, 2), f32)
        c["reduce_scatter-not-divisible"] = (lambda: comm.reduce_scatter(odd), [odd],
                                             "reduce_scatter_v")
        c["all_to_all-not-divisible"] = (lambda: comm.all_to_all(odd), [odd], "all_to_all_v")
    return c


# the names, collected without a communicator (same list on every rank)
_NAMES = ["all_reduce-op-unknown", "all_reduce-op-none", "all_reduce-out-shape",
          "all_reduce-out-dtype", "all_reduce-out-readonly", "all_reduce-out-list",
          "all_reduce-x-list", "all_reduce-complex64", "all_gather-bool", "all_reduce-timeout",
          "all_gather-0d", "all_gather-out-shape", "all_gather-out-readonly",
          "reduce_scatter-op", "reduce_scatter-out-dtype", "all_gather_v-counts-length",
          "all_gather_v-counts-mine", "all_gather_v-counts-negative",
          "all_gather_v-counts-float", "reduce_scatter_v-counts-length",
          "reduce_scatter_v-counts-sum", "all_to_all_v-send-length",
          "all_to_all_v-recv-length", "all_to_all_v-send-sum", "all_to_all_v-self-mismatch",
          "permute-pairs-duplicate", "permute-pairs-range", "permute-pairs-shape",
          "permute-pairs-none", "permute-out-readonly", "broadcast-root-high",
          "broadcast-root-negative", "broadcast-root-str", "broadcast-out-readonly",
          "send-dst", "recv-src", "recv-out-readonly", "split-rank-twice", "split-rank-range",
          "reduce_scatter-not-divisible", "all_to_all-not-divisible"]


@pytest.fixture(scope="module")
def settled(comm):
    """One barrier before the tests that move no data: from then on only the
    barrier's own empty messages can pass through a rank (settled_bytes)."""
    comm.barrier()


# the process's own bookkeeping (kept calls, checks of repeats), the same in any
# topology: small worlds only
_small_world_only = pytest.mark.skipif(
    WORLD_HINT > SMALL_WORLD, reason=f"topology-independent; runs at up to {SMALL_WORLD} ranks")


def _first_of_each_op(items, op=lambda item: item.split("-")[0]):
    """Above SMALL_WORLD ranks (mpi_helpers), the first case of each operation: the
    checks do not depend on the topology, and each case costs every rank a round."""
    if WORLD_HINT <= SMALL_WORLD:
        return items
    seen = set()
    return [i for i in items if not (op(i) in seen or seen.add(op(i)))]


@pytest.mark.parametrize("name", _first_of_each_op(_NAMES))
def test_bad_argument_raises_before_data_moves(comm, settled, name):
    calls = bad_calls(comm)
    if name not in calls:
        pytest.skip(f"{name} is not an error on {comm.size} rank(s)")
    call, inputs, match = calls[name]
    before = [a.copy() for a in inputs]
    ledger = settled_bytes(comm, barrier=False)
    with pytest.raises(nm.InvalidArgumentError, match=match):
        call()
    assert settled_bytes(comm, barrier=False) == ledger, "data moved before the error"
    for a, b in zip(inputs, before):
        assert_same(a, b, "input changed")


_FORCED = [(op, algo) for op in APPLIES if op not in ("barrier", "reduce", "gather", "scatter",
                                                     "scan", "exscan")
           for algo in ALGORITHMS + ("tree",) if algo not in APPLIES[op]]


def _call(comm, op, x, algo):
    n = comm.size
    if op in ("all_reduce", "reduce_scatter"):
        return getattr(comm, op)(x, algorithm=algo)
    if op in ("all_gather", "all_to_all", "broadcast"):
        return getattr(comm, op)(x, algorithm=algo)
    if op == "all_gather_v":
        return comm.all_gather_v(x[:2], [2] * n, algorithm=algo)
    if op == "reduce_scatter_v":
        return comm.reduce_scatter_v(x, [2] * n, algorithm=algo)
    if op == "all_to_all_v":
        return comm.all_to_all_v(x, [2] * n, [2] * n, algorithm=algo)
    if op == "permute":
        return comm.permute(x, [(i, i) for i in range(n)], algorithm=algo)
    raise AssertionError(op)


@pytest.mark.parametrize("op,algo", _first_of_each_op(_FORCED, lambda item: item[0]),
                         ids=lambda v: v)
def test_forced_algorithm_that_does_not_apply(comm, settled, op, algo):
    n, me = comm.size, comm.rank
    x = table(12, n, 2 * n * 2, DTYPES["int32"])[me].reshape(2 * n, 2)
    before = x.copy()
    ledger = settled_bytes(comm, barrier=False)
    with pytest.raises(nm.AlgorithmError, match=repr(algo)):
        _call(comm, op, x, algo)
    assert settled_bytes(comm, barrier=False) == ledger
    assert_same(x, before, "input changed")
    with pytest.raises(nm.AlgorithmError):
        comm.algorithm_for(op, algo)


def test_communicator_still_works_after_rejected_calls(comm):
    n, me = comm.size, comm.rank
    t = table(13, n, 9, DTYPES["int64"], "sum")
    assert_same(comm.all_reduce(t[me]), t.sum(axis=0), "all_reduce")


# --- errors that need the other ranks -------------------------------------------------
def _fresh(comm):
    """A throwaway communicator over the same ranks (a failed one must not spoil
    the session's)."""
    return comm.split([list(range(comm.size))])


@pytest.mark.mpi(min_size=2)
def test_bad_argument_on_one_rank_fails_every_rank(comm):
    sub = _fresh(comm)
    x = np.arange(6, dtype=np.float32)
    ledger = settled_bytes(comm)
    with pytest.raises(nm.InvalidArgumentError) as info:
        sub.all_reduce(x, op="mean" if sub.rank == 0 else "sum", timeout=60)
    assert settled_bytes(comm, barrier=False) == ledger
    if sub.rank != 0:
        assert "rank(s) 0" in str(info.value)
    assert_same(x, np.arange(6, dtype=np.float32), "input changed")
    # recorded alike on every rank (the refusing one too): a refusal, not a divergence
    last = [c for c in sub._recorder.calls() if c["comm"] == sub._id][-1]
    assert (last["seq"], last["op"], last["state"]) == (sub._seq, "all_reduce", "refused"), last


@pytest.mark.mpi(min_size=2)
def test_an_async_call_refused_by_one_rank_keeps_the_communicator_everywhere(comm):
    """As the blocking call above, async: rank 0 refuses its own arguments at once;
    on the others the agent finds the refusal while the program sleeps, and wait()
    raises it. Every rank keeps the communicator (as the refusing one does), so the
    next call runs on all of them."""
    import time

    sub = _fresh(comm)
    x = np.arange(6, dtype=np.float32)
    with pytest.raises(nm.InvalidArgumentError) as info:
        h = sub.all_reduce(x, op="mean" if sub.rank == 0 else "sum", async_op=True,
                           timeout=60)
        time.sleep(0.3)  # (the agent runs the agreement meanwhile)
        h.wait()
    if sub.rank != 0:
        assert "rank(s) 0" in str(info.value)
    assert sub._failed is None, f"the communicator failed: {sub._failed}"
    got = sub.all_reduce(x, async_op=True, timeout=60).wait()
    assert_same(got, x * sub.size, "all_reduce after the refused call")


@pytest.mark.mpi(min_size=2)
def test_a_front_ends_refusal_beside_an_all_to_all_v_fails_every_rank_alike(comm):
    """A front-end refuses its call on rank 0 (Communicator.refuse, under the
    front-end's name: the facade's Neighbor_allgather) while the others are in the
    all-to-all-v that call makes, whose agreement carries a word more (its count
    check): every rank raises InvalidArgumentError naming rank 0, on a board and
    where agreements are routed (every member's vector as long there, as on a
    board: the lengths differed, and the others raised a transport error), and
    every rank keeps the communicator."""
    sub = _fresh(comm)
    n = sub.size
    x = np.arange(n, dtype=np.float32)
    # (rank j sends x + j: its element r, r + j, comes to rank r as row j)
    assert_same(sub.all_to_all_v(x + sub.rank, [1] * n, [1] * n, timeout=60),
                x + sub.rank, "all_to_all_v before it")  # (across domains: the next
    with pytest.raises(nm.InvalidArgumentError) as info:  # agreement has two levels)
        if sub.rank == 0:
            sub.refuse("Neighbor_allgather", nm.InvalidArgumentError("recvbuf: too small"))
        sub.all_to_all_v(x, [1] * n, [1] * n, timeout=60)
    if sub.rank != 0:
        assert "rank(s) 0" in str(info.value), str(info.value)
    assert sub._failed is None, f"the communicator failed: {sub._failed}"
    got = sub.all_to_all_v(x + sub.rank, [1] * n, [1] * n, timeout=60)
    assert_same(got, x + sub.rank, "all_to_all_v after it")


@pytest.mark.mpi(min_size=2)
def test_a_refusal_whose_agreement_times_out_fails_the_refusing_rank_too(comm):
    """Rank 0 refuses its arguments and the last rank never makes the call: the
    others time out and fail the communicator, and so does rank 0 (it raises its
    own error), instead of keeping a communicator whose next call would be matched
    against the wrong call numbers."""
    sub = _fresh(comm)
    n, me = sub.size, sub.rank
    x = np.arange(6, dtype=np.float32)
    if me != n - 1:
        with pytest.raises((nm.InvalidArgumentError, nm.CollectiveTimeoutError)) as info:
            sub.all_reduce(x, op="mean" if me == 0 else "sum", timeout=0.5)
        assert isinstance(info.value, nm.InvalidArgumentError) == (me == 0), info.value
        assert isinstance(sub._failed, nm.CollectiveTimeoutError), sub._failed
        with pytest.raises(nm.CommunicatorFailedError):
            sub.all_reduce(x, timeout=5)
    comm.barrier()


@pytest.mark.mpi(min_size=2)
def test_a_split_that_disagrees_fails_the_communicator_on_every_rank(comm):
    """split is collective: groups that differ between ranks raise the mismatch on
    every rank and fail the communicator there, as a collective call's do."""
    sub = _fresh(comm)
    n, me = sub.size, sub.rank
    groups = [list(range(n))] if me != n - 1 else [[r] for r in range(n)]
    with pytest.raises(nm.CollectiveMismatchError):
        sub.split(groups, timeout=60)
    assert isinstance(sub._failed, nm.CollectiveMismatchError), sub._failed
    with pytest.raises(nm.CommunicatorFailedError):
        sub.all_reduce(np.ones(4, np.float32), timeout=5)


@pytest.mark.mpi(min_size=2)
def test_a_failed_communicator_fails_its_async_calls_in_flight(comm):
    """An async call waits in its agreement for the last rank, which never comes; a
    later call on the same communicator times out and fails it: the async call is
    failed with it and leaves the engine (a call left listed there for ever keeps
    every later call of the rank off its fast path), and wait() raises."""
    sub = _fresh(comm)
    n, me = sub.size, sub.rank
    if me != n - 1:
        # (an async call's agreement runs in the background, on a board and routed)
        h = sub.all_reduce(np.ones(64, np.float32), async_op=True, timeout=60)
        with pytest.raises(nm.CollectiveTimeoutError):
            sub.all_reduce(np.ones(4, np.float32), timeout=0.5)
        eng = sub._engine
        with eng.held():
            left = [(e.op, e.seq) for e in eng.active if e.comm_id == sub._id]
        assert left == [], f"calls of the failed communicator still in flight: {left}"
        with pytest.raises(nm.CommunicatorFailedError):
            h.wait()
    comm.barrier()


@pytest.mark.mpi(min_size=2)
def test_an_async_call_done_before_its_communicator_failed_keeps_its_result(comm):
    """An async call has finished (test() says so) when a later call's mismatch
    fails the communicator: its wait() still returns its result, as a completed MPI
    request's does; a call issued after the failure is refused."""
    import time

    sub = _fresh(comm)
    n, me = sub.size, sub.rank
    x = np.full(64, me + 1, np.float32)
    h = sub.all_reduce(x, async_op=True, timeout=60)
    t0 = time.monotonic()
    while not h.test():
        assert time.monotonic() - t0 < 60, "the async call never finished"
        time.sleep(0.001)
    with pytest.raises(nm.CollectiveMismatchError):
        sub.all_reduce(np.ones(4, np.float64 if me == 0 else np.float32), timeout=60)
    assert_same(h.wait(), np.full(64, n * (n + 1) / 2, np.float32), "the finished call")
    with pytest.raises(nm.CommunicatorFailedError):
        sub.all_reduce(x, async_op=True)


@pytest.mark.mpi(min_size=2)
def test_disagreeing_ranks_get_a_mismatch_error(comm):
    sub = _fresh(comm)
    dt = np.float64 if sub.rank == 0 else np.float32
    x = np.ones(4, dt)
    ledger = settled_bytes(comm)
    with pytest.raises(nm.CollectiveMismatchError, match="dtype"):
        sub.all_reduce(x, timeout=60)
    assert settled_bytes(comm, barrier=False) == ledger
    # the failure is the same on every rank: the communicator is unusable everywhere
    with pytest.raises(nm.CommunicatorFailedError):
        sub.all_reduce(np.ones(4, np.float32), timeout=20)


@_small_world_only
@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("end", ["mismatch", "timeout"])
def test_a_kept_call_run_alone_that_does_not_end_done_fails_as_a_new_one(comm, end):
    """A repeated blocking call takes the lean lone run (Communicator._go_alone);
    when that run ends otherwise than done the general path finishes it as it
    would a new call's: rank 0 repeating a kept all_gather while the last rank
    calls with another count (mismatch) or skips the call (timeout) raises on
    every rank that called, nothing moved into ``out``, and the communicator has
    failed there."""
    sub = _fresh(comm)
    n, me = sub.size, sub.rank
    x = np.full(6, me, np.float32)
    out = np.empty(6 * n, np.float32)
    for _ in range(3):
        assert sub.all_gather(x, out=out, timeout=30.0) is out
    c = sub._kept.get(("all_gather", id(x)))
    assert c is not None, "the call was not kept"
    if c.sh.scratch is not None:  # (a compiled plan: not over MPI)
        assert c.lone, "the repeated call does not run the lean path"
    out[...] = -1
    last = me == n - 1
    if end == "mismatch":
        mine = np.full(4, me, np.float32) if last else x
        with pytest.raises(nm.CollectiveMismatchError):
            sub.all_gather(mine, out=None if last else out, timeout=30.0)
    elif not last:
        with pytest.raises(nm.CollectiveTimeoutError, match="agreement"):
            sub.all_gather(x, out=out, timeout=1.0)
    if end == "mismatch" or not last:
        assert (out == -1).all(), "data moved into out"
        with pytest.raises(nm.CommunicatorFailedError):
            sub.all_gather(x, out=out, timeout=5.0)
    comm.barrier()


@pytest.mark.mpi(min_size=2)
def test_all_to_all_v_counts_that_disagree_between_ranks_fail_every_rank(comm):
    """Each rank's counts are fine alone, but rank 0 sends rank 1 two rows where
    rank 1 expects one: every rank raises the same mismatch, naming the pair, and
    nothing moves. Then counts that agree work on the same communicator's peers."""
    sub = _fresh(comm)
    n = sub.size
    send, recv = [1] * n, [1] * n
    if sub.rank == 0:
        send[1] = 2
    x = np.arange(sum(send), dtype=np.float32)
    ledger = settled_bytes(comm)
    with pytest.raises(nm.CollectiveMismatchError,
                       match="rank 0 sends 2 rows to rank 1, which expects 1"):
        sub.all_to_all_v(x, send, recv, timeout=60)
    assert settled_bytes(comm, barrier=False) == ledger
    assert_same(x, np.arange(sum(send), dtype=np.float32), "input changed")
    sub = _fresh(comm)
    got = sub.all_to_all_v(np.full(n, sub.rank, np.float32), [1] * n, [1] * n, timeout=60)
    assert_same(got, np.arange(n, dtype=np.float32), "all_to_all_v after agreeing counts")


@pytest.mark.mpi(min_size=2)
def test_an_async_all_to_all_v_is_in_flight_and_its_count_mismatch_is_raised_by_wait(comm):
    """An async all_to_all_v returns before the other members have called it (its
    agreement, with the pairwise count check, is run by the agent: rank 1 calls it
    only after a point-to-point message that rank 0 sends after its own call, as
    an MPI program may; it agreed at the call before, and both waited out the
    deadline); counts that disagree fail wait() on every rank, naming send_counts
    and recv_counts, with nothing moved."""
    sub = _fresh(comm)
    n, me = sub.size, sub.rank
    x = np.full(2 * n, me, np.float32)
    token = np.zeros(1, np.int64)
    if me == 1:
        sub.recv(token, 0, timeout=20)
    h = sub.all_to_all_v(x, [2] * n, [2] * n, async_op=True, timeout=20)
    if me == 0:
        sub.send(np.ones(1, np.int64), 1, timeout=20)
    got = h.wait()
    assert_same(got, np.repeat(np.arange(n, dtype=np.float32), 2), "async all_to_all_v")
    send = [1] * n
    if me == 0:
        send[1] = 2
    y = np.arange(sum(send), dtype=np.float32)
    out = np.full(n, -1.0, np.float32)
    ledger = settled_bytes(comm)
    with pytest.raises(nm.CollectiveMismatchError, match="send_counts and recv_counts"):
        sub.all_to_all_v(y, send, [1] * n, out=out, async_op=True, timeout=60).wait()
    assert settled_bytes(comm, barrier=False) == ledger
    assert_same(out, np.full(n, -1.0, np.float32), "out written by a refused call")


@pytest.mark.mpi(min_size=2)
def test_strict_groups_refused_on_every_rank(comm):
    if not comm.strict:
        pytest.skip("non-strict world")
    n = comm.size
    if n < 3:
        pytest.skip("no refused group of this size")
    groups = [[0, 1, 2]] + ([list(range(3, n))] if n > 3 else [])  # 3 ranks: never valid
    with pytest.raises(nm.UnsupportedGroupError, match="CC not permitted on this group"):
        comm.split(groups)


@pytest.mark.mpi(min_size=2)
def test_rejected_call_leaves_every_rank_in_the_same_state(comm):
    """After one rank's arguments were rejected (nothing moved), every rank is in the
    same state: the next call works everywhere (it once timed out on the offending
    rank while the others had marked the communicator failed)."""
    sub = _fresh(comm)
    x = np.ones(4, np.float32)
    with pytest.raises(nm.InvalidArgumentError):
        sub.all_reduce(x, op="mean" if sub.rank == 0 else "sum", timeout=60)
    try:
        got = sub.all_reduce(x, timeout=30)
        outcome = 0 if np.array_equal(got, np.full(4, sub.size, np.float32)) else 3
    except nm.CommunicatorFailedError:
        outcome = 1
    except nm.CollectiveTimeoutError:
        outcome = 2
    outcomes = comm.all_gather(np.array([outcome], np.int64))
    assert set(outcomes.tolist()) == {0}, (
        f"next call after a rejected one: outcomes per rank (0 ok, 1 failed, 2 timeout, 3 wrong): "
        f"{outcomes.tolist()}")


# --- a call repeated with the same arrays -----------------------------------------------
def _repeated(comm, op):
    """(x, out, the call on them with keyword arguments, its reference result) for
    ``op`` on 2-d arrays."""
    n, me = comm.size, comm.rank
    t = table(14, n, 2 * n * 3, DTYPES["int32"], "sum")
    total = t.sum(axis=0, dtype=t.dtype).reshape(2 * n, 3)  # (wraps, as the call does)
    x = t[me].reshape(2 * n, 3).copy()
    if op == "all_reduce":
        out, want = np.empty_like(x), total
    elif op == "all_gather":
        x = x[:2].copy()
        out, want = np.empty((2 * n, 3), x.dtype), t[:, :6].reshape(2 * n, 3)
    elif op == "reduce_scatter":
        out = np.empty((2, 3), x.dtype)
        want = total[2 * me:2 * me + 2]
    elif op == "permute":
        pairs = tuple((i, (i + 1) % n) for i in range(n))  # (a tuple of tuples: kept)
        out, want = np.empty_like(x), t[(me - 1) % n].reshape(2 * n, 3)
        return x, out, (lambda **kw: comm.permute(x, pairs, out=out, **kw)), want
    elif op == "broadcast":
        out, want = np.empty_like(x), t[n - 1].reshape(2 * n, 3)
        return x, out, (lambda **kw: comm.broadcast(x, n - 1, out=out, **kw)), want
    else:
        out = np.empty_like(x)
        want = t.reshape(n, n, 6)[:, me].reshape(2 * n, 3)
    return x, out, (lambda **kw: getattr(comm, op)(x, out=out, **kw)), want


# the kept call is this process's own bookkeeping, the same in any topology: small
# worlds only (each case is a dozen barriers and calls: 5-11 s at 64 ranks)
_REPEATED = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "permute")


@_small_world_only
@pytest.mark.parametrize("op", _REPEATED)
def test_a_repeated_call_is_validated_again_when_anything_changed(comm, settled, op,
                                                                  monkeypatch):
    """A call repeating the previous one on the same arrays skips its validation
    (Communicator._repeat) only while nothing the validation looked at changed: an
    output made read-only, an input reshaped in place, a bad timeout or a bad
    NEURON_MPI_TIMEOUT since are refused on every rank, before any data moves; the
    kept call holds its arrays by weak reference only."""
    import gc
    import weakref

    x, out, call, want = _repeated(comm, op)
    for _ in range(3):
        assert call(timeout=30.0) is out
        assert_same(out, want, op)
    kept = comm._kept.get((op, id(x)))
    assert kept is not None and kept.x() is x and kept.out() is out, "the call was not kept"
    before = x.copy()

    def refused(match, setting=None, **kw):
        ledger = settled_bytes(comm)  # (a barrier: the calls before have moved their data)
        if setting is not None:  # (set after the barrier, which reads it too)
            monkeypatch.setenv(*setting)
        with pytest.raises(nm.InvalidArgumentError, match=match):
            call(**kw)
        assert settled_bytes(comm, barrier=False) == ledger, "data moved before the error"
        assert_same(x.reshape(before.shape), before, "input changed")

    out.flags.writeable = False
    refused("out: expected a writeable array", timeout=30.0)
    out.flags.writeable = True
    x.shape = (x.size,)
    refused("out: expected shape", timeout=30.0)
    x.shape = before.shape
    for _ in range(2):
        assert call(timeout=0) is out  # (kept with timeout 0: no deadline)
    refused("timeout: expected seconds", timeout=False)  # (False == 0: equal, not alike)
    for _ in range(2):
        assert call() is out
    # another argument compared with the kept one: refused by the validation, not by
    # an array's ambiguous truth value
    refused("algorithm", algorithm=np.array(["ring", "mesh"]))
    if op in ("all_reduce", "reduce_scatter"):
        refused("op", op=np.array(["sum", "max"]))
    refused("NEURON_MPI_TIMEOUT", setting=("NEURON_MPI_TIMEOUT", "soon"))
    monkeypatch.delenv("NEURON_MPI_TIMEOUT")
    out[...] = 0
    assert call(timeout=30.0) is out and call(timeout=30.0) is out
    assert_same(out, want, f"{op} after the refused calls")
    # the kept call keeps neither array alive
    xref, oref = weakref.ref(x), weakref.ref(out)
    del x, out, call, before
    gc.collect()  # (the refused calls' tracebacks hold frames that held the arrays)
    assert xref() is None and oref() is None, "a kept call holds its arrays"


@pytest.mark.mpi(min_size=2)
def test_a_repeated_call_on_a_failed_communicator_is_refused(comm):
    sub = _fresh(comm)
    x = np.ones(4, np.float32)
    for _ in range(3):
        assert_same(sub.all_reduce(x), np.full(4, sub.size, np.float32), "all_reduce")
    sub._failed = nm.CollectiveTimeoutError("an earlier call timed out")  # (as _fail sets)
    with pytest.raises(nm.CommunicatorFailedError, match="an earlier call timed out"):
        sub.all_reduce(x)


def test_a_permute_with_a_list_of_pairs_repeats_by_value(comm, settled):
    """Pairs given as a list can change in place between calls: a permute on one is
    kept under the pairs' value, repeated by a list holding the same ints (the same
    list or a new one), and validated again when they changed: a pair made bad
    since, or a rank given as True where it was 1, is refused on every rank."""
    n, me = comm.size, comm.rank
    x = table(15, n, 6, DTYPES["fp32"])[me]
    want = table(15, n, 6, DTYPES["fp32"])[(me - 1) % n]
    pairs = [[i, (i + 1) % n] for i in range(n)]
    for _ in range(3):
        assert_same(comm.permute(x, pairs), want, "permute")
    kept = comm._kept.get(("permute", id(x)))
    assert kept is not None and kept.x() is x
    again = [(s, d) for s, d in pairs]  # a new list of the same value
    assert_same(comm.permute(x, again), want, "permute, a new list")
    assert comm._kept.get(("permute", id(x))) is kept, "the same pairs were not repeated"
    ledger = settled_bytes(comm)
    if n > 1:
        bad = [[s, True if d == 1 else d] for s, d in pairs]
        with pytest.raises(nm.InvalidArgumentError, match="pairs"):
            comm.permute(x, bad)
        assert settled_bytes(comm, barrier=False) == ledger, "data moved before the error"
    pairs[0] = [0, n]
    with pytest.raises(nm.InvalidArgumentError, match="pairs"):
        comm.permute(x, pairs)
    assert settled_bytes(comm, barrier=False) == ledger, "data moved before the error"


def _v_case(comm, op, counts):
    """(call(counts), want) for v operation ``op`` with per-rank ``counts`` (lists the
    call reads at every call; all_to_all_v: this rank's send and receive counts),
    rows of 2 float32 whose values name their sender and receiver."""
    n, me = comm.size, comm.rank
    if op == "all_gather_v":
        x = np.full((counts[0][me], 2), me, np.float32)
        want = np.concatenate([np.full((counts[0][i], 2), i, np.float32) for i in range(n)])
        return (lambda c: comm.all_gather_v(x, c[0])), want, x
    if op == "reduce_scatter_v":
        rows = sum(counts[0])
        x = np.repeat(np.arange(rows, dtype=np.float32)[:, None] + me, 2, axis=1)
        lo = sum(counts[0][:me])
        want = (np.arange(lo, lo + counts[0][me], dtype=np.float32)[:, None] * n +
                sum(range(n))).repeat(2, axis=1)
        return (lambda c: comm.reduce_scatter_v(x, c[0])), want, x
    send, recv = counts
    x = np.concatenate([np.full((send[j], 2), 100 * me + j, np.float32) for j in range(n)])
    want = np.concatenate([np.full((recv[i], 2), 100 * i + me, np.float32) for i in range(n)])
    return (lambda c: comm.all_to_all_v(x, c[0], c[1])), want, x


@pytest.mark.parametrize("op", ["all_gather_v", "reduce_scatter_v", "all_to_all_v"])
def test_a_v_operation_with_counts_in_lists_repeats_by_value(comm, settled, op):
    """Counts given as lists can change in place between calls, as permute's pairs
    can: a v operation on them is kept under the counts' value, repeated by lists
    holding the same ints (the same lists or new ones), and validated again when
    they changed: counts made bad since are refused on every rank, no data moved."""
    n, me = comm.size, comm.rank
    if op == "all_to_all_v":
        counts = [[1 + (me + j) % 3 for j in range(n)], [1 + (i + me) % 3 for i in range(n)]]
    else:
        counts = [[1 + i % 3 for i in range(n)]]
    call, want, x = _v_case(comm, op, counts)
    for _ in range(3):
        assert_same(call(counts), want, op)
    kept = comm._kept.get((op, id(x)))
    assert kept is not None and kept.x() is x, "not kept"
    assert_same(call([list(c) for c in counts]), want, f"{op}, new lists")
    assert comm._kept.get((op, id(x))) is kept, "the same counts were not repeated"
    ledger = settled_bytes(comm)
    counts[0][0] += 1  # (every rank: the rows no longer add up, or rank 0's do not)
    with pytest.raises(nm.InvalidArgumentError, match="counts|rank.s. 0 of the group"):
        call(counts)
    assert settled_bytes(comm, barrier=False) == ledger, "data moved before the error"
    counts[0][0] -= 1
    assert_same(call(counts), want, f"{op}, the counts as they were")


def _compiled_p2p(comm, dst, nsend, src, nrecv) -> bool:
    """Whether this rank's sendrecv (``dst`` None: recv) with these sizes ran as a
    compiled round (both peers in its shared-memory domain): the calls kept to
    repeat are those."""
    kept = comm._plans.get(("p2p", dst, nsend, src, nrecv))
    return kept is not None and kept[0].native is not None


@_small_world_only
@pytest.mark.mpi(min_size=2)
def test_a_repeated_sendrecv_and_recv_are_validated_again_when_anything_changed(
        comm, settled, monkeypatch):
    """A sendrecv or recv repeating an earlier one on the same arrays and peers skips
    its checks (Communicator._p2p_again): every message still arrives in order and
    exact, anything the checks looked at changed since is refused on every rank
    before any data moves, a message of another size still raises naming out on
    the kept path, and the kept calls hold their arrays by weak reference only."""
    import gc
    import weakref

    # (a sendrecv needs no agreement: without this barrier a rank done with the test
    # before would send while a slower one still compares its ledger there)
    comm.barrier()
    n, me = comm.size, comm.rank
    dst, src = (me + 1) % n, (me - 1) % n
    x, out = np.zeros((2, 6), np.float32), np.zeros((2, 6), np.float32)

    def exchange(k, **kw):
        x[...] = 100 * me + k
        assert comm.sendrecv(x, dst, out, src, **kw) is out
        assert_same(out, np.full((2, 6), 100 * src + k, np.float32), f"sendrecv {k}")

    for k in range(4):
        exchange(k, timeout=30.0)
    if _compiled_p2p(comm, dst, x.nbytes, src, out.nbytes):
        kept = comm._p2p_kept.get((id(x), id(out), dst, src))
        assert kept is not None and kept.x() is x and kept.out() is out, "not kept"

    def refused(match, setting=None, **kw):
        ledger = settled_bytes(comm)
        if setting is not None:
            monkeypatch.setenv(*setting)
        with pytest.raises(nm.InvalidArgumentError, match=match):
            comm.sendrecv(x, dst, out, src, **kw)
        assert settled_bytes(comm, barrier=False) == ledger, "data moved before the error"

    out.flags.writeable = False
    refused("out: expected a writeable array", timeout=30.0)
    out.flags.writeable = True
    refused("timeout: expected seconds", timeout=False)  # (False == 0: equal, not alike)
    refused("NEURON_MPI_TIMEOUT", setting=("NEURON_MPI_TIMEOUT", "soon"))
    monkeypatch.delenv("NEURON_MPI_TIMEOUT")
    comm.barrier()  # (every rank has compared its ledger before the next send)
    x.shape = (12,)  # (the same bytes: the message is the same)
    exchange(4, timeout=30.0)
    exchange(5, timeout=30.0)
    x.shape = (2, 6)
    for k in range(6, 9):
        exchange(k)  # (no timeout argument: the default deadline)
    # several pieces a message (renumbered through the plan), and empty messages
    big = (80_000 if n <= 8 else 20_000) + 3
    bx, bout, e = np.zeros(big, np.float32), np.zeros(big, np.float32), np.zeros(0, np.int8)
    for k in range(3):
        bx[...] = (np.arange(big, dtype=np.float32) + 1000 * me + k) % 65521
        assert comm.sendrecv(bx, dst, bout, src) is bout
        assert_same(bout, (np.arange(big, dtype=np.float32) + 1000 * src + k) % 65521,
                    f"large sendrecv {k}")
        assert comm.sendrecv(e, dst, e, src).size == 0

    # recv kept too, in order with the sends of the other side; then a message of
    # another size reaching a kept recv and a kept sendrecv
    peer = me ^ 1
    if peer < n:
        box = np.zeros(5, np.int64)
        for k in range(4):
            if me % 2 == 0:
                comm.send(np.full(5, 10 * me + k, np.int64), peer)
            else:
                assert comm.recv(box, peer) is box
                assert_same(box, np.full(5, 10 * peer + k, np.int64), f"recv {k}")
        if me % 2 and _compiled_p2p(comm, None, -1, peer, box.nbytes):
            assert comm._p2p_kept.get((0, id(box), -1, peer)) is not None, "recv not kept"
        if me % 2 == 0:
            comm.send(np.full(7, me, np.int64), peer)
            comm.send(np.full(5, me, np.int64), peer)
        else:
            with pytest.raises(nm.InvalidArgumentError, match=f"out: rank {peer} sent 56 "):
                comm.recv(box, peer)
            assert_same(comm.recv(box, peer), np.full(5, peer, np.int64), "the next message")
        a, b = np.full(3, me, np.int32), np.zeros(3, np.int32)
        for k in range(3):
            assert_same(comm.sendrecv(a, peer, b, peer), np.full(3, peer, np.int32), "pair")
        if me % 2 == 0:  # one message of another size into the odd rank's kept out
            comm.sendrecv(np.full(4, me, np.int32), peer, np.zeros(3, np.int32), peer)
        else:
            with pytest.raises(nm.InvalidArgumentError, match=f"out: rank {peer} sent 16 "):
                comm.sendrecv(a, peer, b, peer)
        b[...] = -1
        assert_same(comm.sendrecv(a, peer, b, peer), np.full(3, peer, np.int32), "after")
    comm.barrier()
    # the kept calls keep no array alive
    xref, oref = weakref.ref(x), weakref.ref(out)
    del x, out, exchange, refused
    gc.collect()
    assert xref() is None and oref() is None, "a kept sendrecv holds its arrays"


@_small_world_only
@pytest.mark.mpi(min_size=2)
def test_a_send_up_to_a_slot_returns_once_copied_and_repeats_checked(comm, settled,
                                                                      monkeypatch):
    """A send of up to a landing slot's bytes inside a shared-memory domain is one
    compiled round copying its pieces into their slots: it returns before its
    receiver reads, also past the size from which receivers read pieces from the
    sender's buffer (every rank sends three such messages before receiving, and
    changes x in between); a send repeating one on the same array and peer is kept
    (by weak reference) and still refuses what changed, on every rank before any
    data moves."""
    import gc
    import weakref

    comm.barrier()  # (no agreement: see the test above)
    n, me = comm.size, comm.rank
    dst, src = (me + 1) % n, (me - 1) % n
    words = 30_000  # 117 KiB: read from the sender's buffer were it a sendrecv
    # (the calls earlier tests kept could crowd this one's out: at most KEPT are)
    comm._p2p_kept.clear()
    comm._p2p_seen.clear()

    def msg(r, k):
        return (np.arange(words, dtype=np.float32) + 1000 * r + k) % 65521

    x, box = np.empty(words, np.float32), np.empty(words, np.float32)
    for k in range(3):
        x[...] = msg(me, k)
        assert comm.send(x, dst, timeout=30.0) is None
    x[...] = -1
    for k in range(3):
        assert_same(comm.recv(box, src), msg(src, k), f"message {k}")
    for k in range(3, 5):  # (kept again with the default deadline, for the checks below)
        x[...] = msg(me, k)
        comm.send(x, dst)
        assert_same(comm.recv(box, src), msg(src, k), f"message {k}")
    shm = comm._engine.shm
    if comm._engine.native and shm.reaches(comm._ranks[dst]) and \
            x.nbytes <= shm.S:  # (a peer in this domain: compiled, then kept)
        plan = comm._plans.get(("p2p", dst, x.nbytes, None, -1))
        assert plan is not None and plan[0].native is not None, "send not compiled"
        kept = comm._p2p_kept.get((id(x), 0, dst, -1))
        assert kept is not None and kept.x() is x, "send not kept"

    def refused(match, setting=None, **kw):
        ledger = settled_bytes(comm)
        if setting is not None:
            monkeypatch.setenv(*setting)
        with pytest.raises(nm.InvalidArgumentError, match=match):
            comm.send(x, dst, **kw)
        assert settled_bytes(comm, barrier=False) == ledger, "data moved before the error"

    refused("timeout: expected seconds", timeout=False)
    refused("NEURON_MPI_TIMEOUT", setting=("NEURON_MPI_TIMEOUT", "soon"))
    monkeypatch.delenv("NEURON_MPI_TIMEOUT")
    comm.barrier()
    x[...] = -1
    x.flags.writeable = False  # (a read-only x is sent too, from a copy)
    x.shape = (words // 2, 2)
    comm.send(x, dst, timeout=30.0)
    assert_same(comm.recv(np.empty((words // 2, 2), np.float32), src),
                np.full((words // 2, 2), -1, np.float32), "read-only x")
    comm.barrier()
    xref = weakref.ref(x)
    del x
    gc.collect()
    assert xref() is None, "a kept send holds its array"


@pytest.mark.mpi(min_size=2)
def test_a_repeated_sendrecv_on_a_failed_communicator_is_refused(comm):
    sub = _fresh(comm)
    n, me = sub.size, sub.rank
    x, out = np.full(4, me, np.float32), np.zeros(4, np.float32)
    for _ in range(3):
        assert_same(sub.sendrecv(x, (me + 1) % n, out, (me - 1) % n),
                    np.full(4, (me - 1) % n, np.float32), "sendrecv")
    sub._failed = nm.CollectiveTimeoutError("an earlier call timed out")  # (as _fail sets)
    with pytest.raises(nm.CommunicatorFailedError, match="an earlier call timed out"):
        sub.sendrecv(x, (me + 1) % n, out, (me - 1) % n)
    with pytest.raises(nm.CommunicatorFailedError, match="an earlier call timed out"):
        sub.recv(out, (me - 1) % n)
