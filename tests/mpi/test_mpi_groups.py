"""Replica groups: TP x DP communicators from comm.split (TP: consecutive blocks,
DP: one rank of each block), collectives on both, called by every rank, sync and
async in flight together; nested splits; ranks left out of a split."""
from __future__ import annotations

import functools
import time

import numpy as np
import pytest
from mpi4py import MPI

import neuron_mpi as nm
from mpi_helpers import (DTYPES, LEVELS, applies, assert_same, int_table, reduce_ref,
                         seed_of, table, to_dtype, waited_out)

pytestmark = pytest.mark.mpi

# world -> TP size (DP = world / TP): layouts the hardware accepts (strict)
TP_SIZES = {
    ("trn2.48xlarge", 1, 64): 8,   # TP: 2 chips of 4; DP: 8 ranks, one per chip pair
    ("trn2.48xlarge", 1, 8): 4,
    ("trn2.48xlarge", 1, 2): 1,
    ("trn2.48xlarge", 1, 1): 1,
    ("trn1.32xlarge", 2, 64): 32,  # TP: a node; DP: the same core on both nodes
    ("trn1.32xlarge", 1, 32): 8,   # the seeds' 8 TP x 4 DP; nested DP halves [i, i+8]
}


def tp_size(comm):
    topo = comm.topology
    t = TP_SIZES.get((topo.instance, topo.nodes, comm.size))
    if t is None and not comm.strict and comm.size > 1:
        t = 2  # non-strict: uneven groups are fine ([[0, 1], [2]] on 3 ranks)
    return t


def tp_dp_groups(n, t):
    tp = [list(range(s, min(s + t, n))) for s in range(0, n, t)]
    dp = [list(range(j, n, t)) for j in range(t)]
    return tp, dp


@pytest.fixture(scope="module")
def tpdp(comm):
    t = tp_size(comm)
    if t is None:
        pytest.skip(f"no TP x DP layout listed for {comm.size} ranks of "
                    f"{comm.topology.instance}")
    tp_groups, dp_groups = tp_dp_groups(comm.size, t)
    tp = comm.split(tp_groups)
    dp = comm.split(dp_groups)
    return tp, dp, tp_groups, dp_groups


def _my_group(groups, me):
    return next(g for g in groups if me in g)


def test_split_members(comm, tpdp):
    tp, dp, tp_groups, dp_groups = tpdp
    me = comm.rank
    for sub, groups in ((tp, tp_groups), (dp, dp_groups)):
        g = _my_group(groups, me)
        assert sub.size == len(g)
        assert sub.rank == g.index(me)
        assert tuple(sub.ranks) == tuple(g)
        assert sub.world_rank == me


@pytest.mark.parametrize("op,dn", [("sum", "fp32"), ("max", "bf16"), ("avg", "int32"),
                                   ("prod", "fp8_e4m3"), ("min", "uint8"), ("sum", "fp16")])
def test_all_reduce_tp_then_dp(comm, tpdp, op, dn):
    """Every rank: TP all_reduce, then DP all_reduce (all ranks call both)."""
    tp, dp, tp_groups, dp_groups = tpdp
    n, me = comm.size, comm.rank
    dt = DTYPES[dn]
    ints = int_table(seed_of("tpdp", op, dn, n), n, 2 * n + 1, dt, op)
    x = to_dtype(ints[me], dt)
    got_tp = tp.all_reduce(x, op=op)
    got_dp = dp.all_reduce(x, op=op)
    assert_same(got_tp, reduce_ref(ints[_my_group(tp_groups, me)], op, dt), "TP all_reduce")
    assert_same(got_dp, reduce_ref(ints[_my_group(dp_groups, me)], op, dt), "DP all_reduce")
    if op == "sum" and n % len(tp_groups[0]) == 0:  # a full grid: TP then DP sums the world
        twice = dp.all_reduce(got_tp)
        assert_same(twice, reduce_ref(ints, "sum", dt), "TP then DP == world")


def test_tp_inside_a_domain_runs_alone_beside_mpi(comm, tpdp, executions_made):
    """A blocking TP call whose group lies inside this rank's shared-memory domain
    is one compiled run on the calling thread (no Execution), also where the job
    reaches other domains over MPI (NEURON_MPI_SHM=node, several hosts): the run
    sleeps on the doorbell between polls of MPI (Engine._run_alone_polling).
    Before, any MPI transport sent every call down the general path (2 x 32 trn1
    ranks, a node's TP all-reduce of 8 KiB: 46 ms a call against 10 ms on one
    domain). The DP calls across the domains interleave, and every result is the
    same; sendrecv inside the group runs alone too."""
    tp, dp, tp_groups, dp_groups = tpdp
    n, me = comm.size, comm.rank
    eng = comm._engine
    inside = eng.native and eng.shm is not None and tp.size > 1 and all(
        eng.shm.reaches(r) for r in tp._ranks)
    made = executions_made
    g_tp, g_dp = _my_group(tp_groups, me), _my_group(dp_groups, me)
    ints = int_table(seed_of("tp-alone", n), n, 3 * n + 1, DTYPES["fp32"], "sum")
    x = to_dtype(ints[me], DTYPES["fp32"])
    out = np.empty(7, np.int64)
    nxt, prv = (tp.rank + 1) % tp.size, (tp.rank - 1) % tp.size
    # between two barriers of MPI's own (nothing comes over this job's MPI transport
    # meanwhile): the first call may find the last test's sends still going out
    MPI.COMM_WORLD.Barrier()
    got, tp_made = [], []
    for _ in range(3):
        made.clear()
        got.append(tp.all_reduce(x))
        tp_made.append(list(made))
    made.clear()
    tp.sendrecv(np.full(7, me, np.int64), nxt, out, prv)
    sr_made = list(made)
    MPI.COMM_WORLD.Barrier()
    got_dp = dp.all_reduce(x)  # across the domains, then inside again
    got.append(tp.all_reduce(got_dp))
    comm.barrier()  # (every rank made every call before anything is asserted)
    want_tp = reduce_ref(ints[g_tp], "sum", DTYPES["fp32"])
    for i in range(3):
        assert_same(got[i], want_tp, "TP all_reduce")
    assert (out == g_tp[prv]).all()
    want_dp = reduce_ref(ints[g_dp], "sum", DTYPES["fp32"])
    assert_same(got_dp, want_dp, "DP all_reduce")
    if len(g_tp) * len(g_dp) == n:  # a full grid: the world's sum
        assert_same(got[3], reduce_ref(ints, "sum", DTYPES["fp32"]), "DP then TP")
    if inside:
        assert tp_made[1:] == [[], []], (tp_made, eng.mpi is not None)
        assert sr_made == [], sr_made


@pytest.mark.parametrize("op,forced", [("all_reduce", None), ("all_reduce", "hierarchical"),
                                       ("all_to_all", None)])
@pytest.mark.parametrize("async_op", [False, True])
def test_across_domains_only_the_crossing_pieces_move_in_python(comm, monkeypatch, op,
                                                                 forced, async_op):
    """A collective over ranks on several domains (NEURON_MPI_SHM=node: the 2 x 32
    hierarchical all-reduce, with mesh stages (the default at 8 KiB) or rings
    (forced), the direct all-to-all) moves its pieces inside the
    domain compiled: every piece the Python path sends goes over MPI (the rounds,
    or the all-to-all round's pieces, crossing to the other node), none through
    shared memory. Before, a plan with any MPI hop ran whole on the Python path
    (2 x 32 trn1 ranks, an 8 KiB all-reduce: 524 ms a call, 50 x Open MPI).
    Blocking (the caller runs the compiled parts) and async (the agent does, the
    crossing pieces too, while the rank sleeps outside neuron_mpi)."""
    from neuron_mpi import engine as E

    n, me = comm.size, comm.rank
    eng = comm._engine
    sent = []  # the transport of each data piece the Python path sends
    send = E.Engine.send

    def counting(self, key, dst, payload, total, origin=None):
        if key[1] > 0:  # (the call's data, not the routed agreement's own)
            sent.append(self.hops.decide(self.rank if origin is None else origin,
                                         dst).transport)
        return send(self, key, dst, payload, total, origin)

    monkeypatch.setattr(E.Engine, "send", counting)
    k = 32
    ints = int_table(seed_of("across-domains", n), n, n * k, DTYPES["fp32"], "sum")
    x = to_dtype(ints[me], DTYPES["fp32"])
    call = getattr(comm, op)
    if forced:
        try:
            comm.algorithm_for(op, forced)
        except nm.AlgorithmError:
            pytest.skip(f"{forced} needs ranks on several nodes")
        call = functools.partial(call, algorithm=forced)
    asleep = None
    if async_op:
        h = call(x, async_op=True)
        end = time.monotonic() + 10  # (outside neuron_mpi: only the agent progresses)
        while not h._ex.done and time.monotonic() < end:
            time.sleep(0.05)
        asleep = h._ex.done
        got = h.wait()
    else:
        got = call(x)
    algo = comm.last_call.algorithm
    comm.barrier()
    if op == "all_reduce":
        want = reduce_ref(ints, "sum", DTYPES["fp32"])
    else:  # block j of the result: rank j's block for this rank
        want = to_dtype(ints[:, me * k:(me + 1) * k].reshape(-1), DTYPES["fp32"])
    assert_same(got, want, f"{op} across domains")
    if eng.mpi is not None and eng.shm is not None and eng.native:
        assert algo == (forced or ("hier-mesh" if op == "all_reduce" else "direct")) and sent, \
            (algo, sent)
        assert set(sent) == {"mpi"}, sent
        if async_op and eng.threaded:  # (the agent runs beside MPI only then)
            assert asleep, "the async call did not finish while its rank slept"


def test_tp_and_dp_in_flight_together(comm, tpdp):
    tp, dp, tp_groups, dp_groups = tpdp
    n, me = comm.size, comm.rank
    g_tp, g_dp = _my_group(tp_groups, me), _my_group(dp_groups, me)
    t = table(seed_of("tpdp-ag", n), n, 3, DTYPES["int64"])
    ints = int_table(seed_of("tpdp-rs", n), n, len(g_dp) * 2, DTYPES["fp32"], "sum")
    x_rs = to_dtype(ints[me], DTYPES["fp32"])
    ints_ar = int_table(seed_of("tpdp-ar", n), n, 5, DTYPES["bf16"], "sum")
    x_ar = to_dtype(ints_ar[me], DTYPES["bf16"])
    h1 = tp.all_gather(t[me], async_op=True)
    h2 = dp.reduce_scatter(x_rs, async_op=True)
    h3 = tp.all_reduce(x_ar, async_op=True)
    h4 = dp.all_reduce(x_ar, async_op=True)
    want_rs = reduce_ref(ints[g_dp], "sum", DTYPES["fp32"])[2 * dp.rank:2 * dp.rank + 2]
    assert_same(h4.wait(), reduce_ref(ints_ar[g_dp], "sum", DTYPES["bf16"]), "DP all_reduce")
    assert_same(h2.wait(), want_rs, "DP reduce_scatter")
    assert_same(h1.wait(), t[g_tp].reshape(-1), "TP all_gather")
    assert_same(h3.wait(), reduce_ref(ints_ar[g_tp], "sum", DTYPES["bf16"]), "TP all_reduce")


@pytest.mark.parametrize("which", ["tp", "dp"])
@pytest.mark.parametrize("algo", list(LEVELS))
def test_forced_algorithms_on_groups(comm, tpdp, which, algo):
    tp, dp, tp_groups, dp_groups = tpdp
    sub, groups = (tp, tp_groups) if which == "tp" else (dp, dp_groups)
    n, me = comm.size, comm.rank
    g = _my_group(groups, me)
    dt = DTYPES["fp32"]
    ints = int_table(seed_of("grp-forced", which, algo, n), n, len(g) * 3, dt, "sum")
    x = to_dtype(ints[me], dt)
    t = table(seed_of("grp-forced-ag", which, algo, n), n, 2, DTYPES["int32"])
    calls = {
        "all_reduce": (lambda: sub.all_reduce(x, algorithm=algo),
                       lambda: reduce_ref(ints[g], "sum", dt)),
        "reduce_scatter": (lambda: sub.reduce_scatter(x, algorithm=algo),
                           lambda: reduce_ref(ints[g], "sum", dt)[3 * sub.rank:3 * sub.rank + 3]),
        "all_gather": (lambda: sub.all_gather(t[me], algorithm=algo),
                       lambda: t[g].reshape(-1)),
    }
    for op, (run, want) in calls.items():
        if not applies(sub, op, algo):  # e.g. mesh1 is all-reduce only
            with pytest.raises(nm.AlgorithmError):
                run()
            continue
        assert_same(run(), want(), f"{which} {op} {algo}")


@pytest.mark.parametrize("which", ["tp", "dp"])
def test_other_collectives_on_groups(comm, tpdp, which):
    tp, dp, tp_groups, dp_groups = tpdp
    sub, groups = (tp, tp_groups) if which == "tp" else (dp, dp_groups)
    n, me = comm.size, comm.rank
    g = _my_group(groups, me)
    k, r = len(g), sub.rank
    # broadcast from the group's last member
    t = table(seed_of("grp-bc", which, n), n, 4, DTYPES["fp16"])
    assert_same(sub.broadcast(t[me], root=k - 1), t[g[k - 1]], "broadcast")
    # all_to_all
    a = table(seed_of("grp-a2a", which, n), n, k * 2, DTYPES["int32"]).reshape(n, k, 2)
    assert_same(sub.all_to_all(a[me]), a[g][:, r], "all_to_all")
    # permute: shift within the group
    p = table(seed_of("grp-perm", which, n), n, 3, DTYPES["fp64"])
    got = sub.permute(p[me], [(i, (i + 1) % k) for i in range(k)])
    assert_same(got, p[g[(r - 1) % k]], "permute")
    # v forms
    c = [(i % 3) + (1 if i == 0 else 0) for i in range(k)]
    v = table(seed_of("grp-agv", which, n), n, 3 * 2, DTYPES["uint8"]).reshape(n, 3, 2)
    assert_same(sub.all_gather_v(v[me, :c[r]], c),
                np.concatenate([v[g[i], :c[i]] for i in range(k)]), "all_gather_v")
    ints = int_table(seed_of("grp-rsv", which, n), n, sum(c) * 2, DTYPES["int64"], "sum")
    xv = to_dtype(ints[me], DTYPES["int64"]).reshape(sum(c), 2)
    off = sum(c[:r])
    assert_same(sub.reduce_scatter_v(xv, c),
                reduce_ref(ints[g], "sum", DTYPES["int64"]).reshape(sum(c), 2)[off:off + c[r]],
                "reduce_scatter_v")
    # send/recv around the group
    s = table(seed_of("grp-p2p", which, n), n, 5, DTYPES["bf16"])
    sub.send(s[me], (r + 1) % k)
    got = sub.recv(np.empty(5, DTYPES["bf16"]), (r - 1) % k)
    assert_same(got, s[g[(r - 1) % k]], "recv")
    sub.barrier()


def test_nested_split(comm, tpdp):
    _, dp, _, dp_groups = tpdp
    k = dp.size
    if k < 4 or k % 2:
        pytest.skip("DP group too small to halve")
    n, me = comm.size, comm.rank
    halves = [list(range(k // 2)), list(range(k // 2, k))]
    half = dp.split(halves)
    g_dp = _my_group(dp_groups, me)
    mine = [g_dp[i] for i in _my_group(halves, dp.rank)]
    assert tuple(half.ranks) == tuple(mine)
    ints = int_table(seed_of("nested", n), n, 7, DTYPES["int32"], "sum")
    assert_same(half.all_reduce(to_dtype(ints[me], DTYPES["int32"])),
                reduce_ref(ints[mine], "sum", DTYPES["int32"]), "nested all_reduce")


def test_split_leaving_ranks_out(comm):
    """Only the first TP block (or the first half) is in a group: the others get
    None and keep serving traffic while they wait in a world barrier."""
    n, me = comm.size, comm.rank
    t = tp_size(comm) or 1
    k = t if t < n else max(1, n // 2)
    sub = comm.split([list(range(k))])
    if me < k:
        assert sub is not None and sub.size == k
        ints = int_table(seed_of("leftout", n), n, 9, DTYPES["fp32"], "sum")
        assert_same(sub.all_reduce(to_dtype(ints[me], DTYPES["fp32"])),
                    reduce_ref(ints[:k], "sum", DTYPES["fp32"]), "all_reduce")
    else:
        assert sub is None
    comm.barrier()


def test_mpi4py_split_type_groups_each_node(comm):
    """The mpi4py facade's Split_type(MPI.COMM_TYPE_SHARED) gives the ranks of this
    rank's emulated node (both nodes of a 2-node job), in key order."""
    from neuron_mpi.mpi.comm import Comm
    topo = comm.topology
    node = topo.placement(comm.world_rank).node
    mine = [r for r in range(comm.size) if topo.placement(comm.ranks[r]).node == node]
    sub = Comm(comm).Split_type(MPI.COMM_TYPE_SHARED, key=-comm.rank)
    assert sub.Get_size() == len(mine) and sub.Get_rank() == mine[::-1].index(comm.rank)
    v = np.array([comm.rank], np.int64)
    sub.Allreduce(MPI.IN_PLACE, v, MPI.SUM)
    assert v[0] == sum(mine)
    comm.barrier()


def test_refused_layout_on_inf2(comm):
    if comm.topology.instance != "inf2.48xlarge" or comm.size != 24 or not comm.strict:
        pytest.skip("inf2.48xlarge, 24 ranks, strict only")
    # DP across the two halves: ranks not on consecutive devices
    with pytest.raises(nm.UnsupportedGroupError, match="consecutive"):
        comm.split([[r, r + 12] for r in range(12)])
    # TP blocks of 4 ranks (2 devices each) are fine
    tp = comm.split([list(range(s, s + 4)) for s in range(0, 24, 4)])
    ints = int_table(seed_of("inf2-tp", 24), 24, 5, DTYPES["fp32"], "sum")
    g = list(range(comm.rank // 4 * 4, comm.rank // 4 * 4 + 4))
    assert_same(tp.all_reduce(to_dtype(ints[comm.rank], DTYPES["fp32"])),
                reduce_ref(ints[g], "sum", DTYPES["fp32"]), "inf2 TP all_reduce")


# --- the argument agreement across domains, in two levels -------------------------------
def _agreed_once(comm):
    """A new communicator of every rank, after its first call (which decides, alike
    on every member, how it agrees: Control.agree)."""
    sub = comm.split([list(range(comm.size))])
    sub.barrier(timeout=60)
    return sub


def _domains(sub):
    """Every domain's members (member indices, in order), when this job agrees across
    domains in two levels (ranks on several shared-memory domains with the argument
    agreement on), else None."""
    eng = sub._engine
    if eng.shm is None or eng.mpi is None or not nm.env.checking():
        return None
    by: dict = {}
    for m, w in enumerate(sub.ranks):
        by.setdefault(eng.domains[w], []).append(m)
    return list(by.values()) if len(by) > 1 else None


def test_agreement_across_domains_in_two_levels(comm, monkeypatch):
    """Across domains (NEURON_MPI_SHM=node: 2 x 32) a call's agreement after the
    communicator's first runs in two levels: each domain's members meet on a board
    of their own and only each domain's first member (its leader) sends over MPI,
    one message to each other leader. Before, every member took part in a routed
    all-gather with MPI hops, every rank polling MPI (2 x 32 trn1 ranks: a barrier,
    which is the agreement alone, 31-36 ms a call; now 6-8 ms). Results stay right."""
    from neuron_mpi import control as C
    from neuron_mpi import engine as E

    sub = _agreed_once(comm)
    doms = _domains(sub)
    sends = []
    send = E.Engine.send

    def counting(self, key, dst, payload, total, origin=None):
        sends.append((key, self.hops.decide(self.rank if origin is None else origin,
                                            dst).transport))
        return send(self, key, dst, payload, total, origin)

    monkeypatch.setattr(E.Engine, "send", counting)
    for _ in range(3):
        sub.barrier(timeout=60)
    monkeypatch.setattr(E.Engine, "send", send)
    n, me = sub.size, sub.rank
    ints = int_table(seed_of("two-levels", n), n, 5, DTYPES["int32"], "sum")
    got = sub.all_reduce(to_dtype(ints[me], DTYPES["int32"]), timeout=60)
    comm.barrier()
    assert_same(got, reduce_ref(ints, "sum", DTYPES["int32"]), "all_reduce after them")
    if doms is None:
        return
    assert isinstance(sub._control._split, C._Split)
    mine = next(d for d in doms if me in d)
    if me == mine[0]:  # a leader: one message to each other leader per call, over MPI
        want = sorted(sub.ranks[d[0]] for d in doms if d is not mine) * 3
        assert sorted(k[2] for k, _ in sends) == [C.LEADER_XID - me] * len(want), sends
        assert {t for _, t in sends} == {"mpi"}, sends
    else:
        assert sends == [], sends


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("who", ["member", "leader"])
def test_disagreement_across_domains_fails_every_rank_alike(comm, who):
    """A member of the last domain (its leader, or its last member) disagrees on the
    dtype, then rejects its own reduce op: every rank raises the same error naming
    it, before any data moved (the leaders' verdict sends every member to the whole
    table, as on the other paths)."""
    sub = _agreed_once(comm)
    doms = _domains(sub)
    odd = (doms[-1][0] if who == "leader" else doms[-1][-1]) if doms else sub.size - 1
    me = sub.rank
    x = np.ones(4, np.float64 if me == odd else np.float32)
    with pytest.raises(nm.CollectiveMismatchError, match="dtype") as info:
        sub.all_reduce(x, timeout=60)
    assert f"rank {odd}: fp64" in str(info.value), str(info.value)
    assert_same(x, np.ones(4, x.dtype), "input changed")
    with pytest.raises(nm.CommunicatorFailedError):
        sub.all_reduce(np.ones(4, np.float32), timeout=20)
    sub = _agreed_once(comm)
    with pytest.raises(nm.InvalidArgumentError) as info:
        sub.all_reduce(np.ones(4, np.float32), op="mean" if me == odd else "sum",
                       timeout=60)
    if me != odd:  # (the rank that rejected its arguments raises its own error)
        assert f"rank(s) {odd} of the group" in str(info.value), str(info.value)
    got = sub.all_reduce(np.ones(4, np.float32), timeout=60)  # every rank goes on alike
    assert_same(got, np.full(4, sub.size, np.float32), "the call after a rejected one")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("who", ["member", "leader"])
def test_absent_member_across_domains_is_named(comm, who):
    """A member of the last domain (its leader, or its last member) never calls:
    every other rank times out naming it, whether it waits on its domain's board or
    for another domain's leader."""
    sub = _agreed_once(comm)
    doms = _domains(sub)
    absent = (doms[-1][0] if who == "leader" else doms[-1][-1]) if doms else sub.size - 1
    raised = 0
    if sub.rank != absent:
        with pytest.raises(nm.CollectiveTimeoutError) as info:
            sub.all_reduce(np.ones(3, np.float32), timeout=waited_out(3))
        # (named among the members the census did not hear from: on a loaded machine
        # a present member's census may come late and be named too)
        assert absent in getattr(info.value, "absent", ()) and \
            "not heard from: rank" in str(info.value), str(info.value)
        raised = 1
    counts = comm.all_gather(np.array([raised], np.int64))
    assert counts.sum() == comm.size - 1


@pytest.mark.mpi(min_size=2)
def test_all_to_all_v_counts_across_domains(comm):
    """All-to-all-v's count check rides with the two-level agreement (the leaders
    check that the shares sum to 0): counts that agree run; counts that disagree
    (the last rank expects two rows from rank 0, which sends one) fail every rank
    alike, naming the pair; a rank that rejects its own counts fails every rank too,
    and the next call runs everywhere."""
    sub = _agreed_once(comm)
    n, me = sub.size, sub.rank
    last = n - 1
    got = sub.all_to_all_v(np.full(n, me, np.float32), [1] * n, [1] * n, timeout=60)
    assert_same(got, np.arange(n, dtype=np.float32), "all_to_all_v across domains")
    recv = [2 if me == last and j == 0 else 1 for j in range(n)]
    with pytest.raises(nm.CollectiveMismatchError,
                       match=f"rank 0 sends 1 rows to rank {last}, which expects 2"):
        sub.all_to_all_v(np.zeros(n, np.float32), [1] * n, recv, timeout=60)
    sub = _agreed_once(comm)
    send = [-1 if me == last else 1] + [1] * (n - 1)
    with pytest.raises(nm.InvalidArgumentError) as info:
        sub.all_to_all_v(np.zeros(n, np.float32), send, [1] * n, timeout=60)
    if me != last:
        assert f"rank(s) {last} of the group" in str(info.value), str(info.value)
    got = sub.all_to_all_v(np.full(n, me, np.float32), [1] * n, [1] * n, timeout=60)
    assert_same(got, np.arange(n, dtype=np.float32), "all_to_all_v after a rejected one")


@pytest.mark.mpi(min_size=2)
def test_async_calls_agree_across_domains_in_the_background(comm):
    """Across domains (and wherever agreements are routed) an async call returns
    before the other members have called it, as on one board: the last member of
    the last domain calls only after a message from every other rank, which each
    sends once its own call has returned and its handle is not done (a call that
    agreed before returning would wait for that rank for ever: its 30 s deadline).
    The results are exact; a count that differs on that rank in a later pair of
    async calls fails the second call from wait() on every rank, the first one
    completing right (the mismatch found in the background, before any data moved)."""
    sub = _agreed_once(comm)
    doms = _domains(sub)
    n, me = sub.size, sub.rank
    late = doms[-1][-1] if doms else n - 1
    x = np.full(5, me + 1, np.float32)
    want = np.full(5, n * (n + 1) / 2, np.float32)
    token = np.zeros(1, np.int64)
    if me == late:
        for r in range(n):
            if r != late:
                sub.recv(token, r, timeout=60)
    h = sub.all_reduce(x, async_op=True, timeout=30)
    pending = me == late or not h.test()
    if me != late:
        sub.send(token, late, timeout=60)
    assert_same(h.wait(), want, "async all_reduce")
    assert pending, "done before the last member had called"
    h1 = sub.all_reduce(x, async_op=True, timeout=30)
    h2 = sub.all_reduce(x[:4] if me == late else x, async_op=True, timeout=30)
    try:
        assert_same(h1.wait(), want, "the async call before the mismatch")
        with pytest.raises(nm.CollectiveMismatchError, match="count"):
            h2.wait()
    finally:
        comm.barrier()
