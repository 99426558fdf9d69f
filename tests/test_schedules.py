"""Every algorithm's schedule, replayed in one process, equals the NumPy reference;
every lowered hop joins linked chips. No MPI: world shapes up to the full Trn2
UltraServer (256 ranks) and 4 trn2.48xlarge nodes."""
from __future__ import annotations

import numpy as np
import pytest

import neuron_mpi as nm
from neuron_mpi.algorithms.group import GroupView
from neuron_mpi.algorithms.registry import NEURON_OPS
from neuron_mpi.algorithms.select import _APPLIES, choose, schedule_for
from neuron_mpi.errors import AlgorithmError
from neuron_mpi.executor import Plan
from neuron_mpi.replay import replay, replay_plans
from neuron_mpi.router import lower
from neuron_mpi.schedule import offsets

WORLDS = {
    "trn1.2xlarge-2": ("trn1.2xlarge", 1, None, 2),
    "trn2-3": ("trn2.48xlarge", 2, None, 3),
    "trn2-8": ("trn2.48xlarge", 2, None, 8),
    "trn2-12": ("trn2.48xlarge", 2, None, 12),
    "inf2.48xlarge-24": ("inf2.48xlarge", 1, None, 24),
    "trn1.32xlarge-32": ("trn1.32xlarge", 1, None, 32),
    "trn2-64": ("trn2.48xlarge", 2, None, 64),
    "trn1-2nodes-64": ("trn1.32xlarge", 1, 2, 64),
    "trn2-lnc1-128": ("trn2.48xlarge", 1, None, 128),
    "ultraserver-256": ("trn2-ultraserver", 2, None, 256),
    "trn2-4nodes-256": ("trn2.48xlarge", 2, 4, 256),
}
BIG = {"trn2-lnc1-128", "ultraserver-256", "trn2-4nodes-256"}
REDUCING = ("all_reduce", "reduce_scatter", "reduce_scatter_v")


def _view(name, group=None):
    inst, lnc, nodes, ranks = WORLDS[name]
    topo = nm.topology(inst, lnc, nodes, ranks=ranks)
    return GroupView(topo, group if group is not None else range(topo.size))


def _sizes(op, n, rng):
    """Element sizes for an op on n members: uneven and with an empty block."""
    if op == "all_reduce":
        return 2 * n + 3
    if op in ("reduce_scatter", "all_gather"):
        return (3,) * n
    if op in ("reduce_scatter_v", "all_gather_v"):
        c = [int(v) for v in rng.integers(0, 4, n)]
        c[0] = 0
        return tuple(c)
    if op in ("all_to_all", "all_to_all_v"):
        if op == "all_to_all":
            return tuple((2,) * n for _ in range(n))
        return tuple(tuple(int(v) for v in rng.integers(0, 3, n)) for _ in range(n))
    if op in ("permute", "broadcast"):
        return 5
    return 0


def _extra(op, n):
    if op == "permute":
        return tuple((i, (i + 1) % n) for i in range(n) if i % 3 != 2)
    if op == "broadcast":
        return n // 2
    return None


def reference(op, sizes, extra, inputs, reduce_op):
    """What every member should hold, computed plainly with NumPy."""
    n = len(inputs)
    fns = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
    if op in REDUCING:
        acc = inputs[0].copy()
        for a in inputs[1:]:
            acc = fns[reduce_op](acc, a)
        if op == "all_reduce":
            return [acc] * n
        offs = offsets(sizes)
        return [acc[offs[g]:offs[g] + sizes[g]] for g in range(n)]
    if op in ("all_gather", "all_gather_v"):
        full = np.concatenate(inputs)
        return [full] * n
    if op in ("all_to_all", "all_to_all_v"):
        out = []
        for j in range(n):
            parts = []
            for i in range(n):
                o = offsets(sizes[i])
                parts.append(inputs[i][o[j]:o[j] + sizes[i][j]])
            out.append(np.concatenate(parts))
        return out
    if op == "permute":
        out = [np.zeros_like(inputs[g]) for g in range(n)]
        for s, d in extra:
            out[d] = inputs[s]
        return out
    if op == "broadcast":
        return [inputs[extra]] * n
    if op == "barrier":
        return [np.zeros(0, inputs[0].dtype)] * n
    raise AssertionError(op)


def check(view, op, algorithm, reduce_op="sum", dtype=np.int64, seed=0):
    rng = np.random.default_rng(seed)
    n = view.size
    sizes = _sizes(op, n, rng)
    extra = _extra(op, n)
    sched = schedule_for(view, op, algorithm, sizes, False, extra)
    inputs = [rng.integers(-3, 4, sched.in_elems[g]).astype(dtype) for g in range(n)]
    if reduce_op == "prod":
        inputs = [np.where(a == 0, 1, a) for a in inputs]
    outs = replay(sched, inputs, reduce_op)
    want = reference(op, sizes, extra, inputs, reduce_op)
    for g in range(n):
        np.testing.assert_array_equal(outs[g], want[g], err_msg=f"{op}/{algorithm} member {g}")
    if n <= 64:  # the members' executor plans, cut in pieces of 2 elements, as they run
        item = np.dtype(dtype).itemsize
        plans = [Plan(sched, view, g, item, 2 * item) for g in range(n)]
        outs = replay_plans(plans, view, sched, inputs, reduce_op, seed)
        for g in range(n):
            np.testing.assert_array_equal(outs[g], want[g],
                                          err_msg=f"{op}/{algorithm} plan of {g}")
    hops = {(h.src, h.dst, h.link): h for rnd in lower(sched, view, np.dtype(dtype).itemsize)
            for h in rnd}
    for (src, dst, kind), hop in hops.items():  # (each distinct hop once)
        link = view.topo.link_between_ranks(src, dst)
        assert link is not None and link.kind == kind, hop
    return sched


def _cases():
    for world in WORLDS:
        for op, algos in _APPLIES.items():
            if op not in NEURON_OPS:
                continue  # rooted operations: tests/test_rooted_schedules.py
            for algo in algos:
                marks = [pytest.mark.slow] if world in BIG and algo == "mesh" else []
                yield pytest.param(world, op, algo, id=f"{world}-{op}-{algo}", marks=marks)


@pytest.mark.parametrize("world,op,algorithm", list(_cases()))
def test_schedule_matches_numpy(world, op, algorithm):
    view = _view(world)
    try:
        algo = choose(op, view, algorithm)
    except AlgorithmError:
        # the algorithm does not apply to this world: make sure it says why
        with pytest.raises(AlgorithmError, match="algorithm"):
            choose(op, view, algorithm)
        return
    check(view, op, algo)


@pytest.mark.parametrize("reduce_op", ["sum", "prod", "max", "min"])
@pytest.mark.parametrize("algorithm", ["ring", "chip", "mesh", "kangaring"])
def test_reduce_ops_trn2_64(reduce_op, algorithm):
    view = _view("trn2-64")
    for op in ("all_reduce", "reduce_scatter"):
        check(view, op, algorithm, reduce_op, dtype=np.int32)


@pytest.mark.parametrize("world", ["trn1-2nodes-64", "trn2-4nodes-256"])
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter"])
def test_hierarchical_is_default_across_nodes(world, op):
    view = _view(world)
    assert choose(op, view) == "hierarchical"
    sched = check(view, op, "hierarchical")
    # the in-node reducing rounds send each chunk in two slices, as the Ring does;
    # the inter-node rounds and the gathering ones in one
    topo = view.topo
    for rnd in sched.rounds:
        efa = any(topo.placement(view.ranks[x.src]).node != topo.placement(view.ranks[x.dst]).node
                  for x in rnd.xfers)
        want = 2 if (not efa and any(x.reduce for x in rnd.xfers)) else 1
        assert rnd.slices == want, (op, rnd.slices, efa)
    # the inter-node stage talks only between ranks that share a local index
    for rnd in lower(sched, view, 8):
        for hop in rnd:
            if hop.link == "efa":
                assert topo.placement(hop.src).chip == topo.placement(hop.dst).chip


@pytest.mark.parametrize("world", ["trn1-2nodes-64", "trn2-4nodes-256"])
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter"])
def test_hierarchical_with_mesh_stages_below_1_mib(world, op):
    """Below 1 MiB the runtime's hierarchical runs mesh stages (internode docs: "intra-
    node Mesh + inter-node Mesh" for small sizes): two rounds per in-node stage (one
    intra-chip, one off-chip) and one per inter-node mesh step, where the rings take a
    round per member."""
    view = _view(world)
    assert choose(op, view, nbytes=(1 << 20) - 1) == "hier-mesh"
    assert choose(op, view, nbytes=1 << 20) == "hierarchical"
    sched = check(view, op, "hier-mesh")
    rounds = {"all_reduce": 6, "all_gather": 3, "reduce_scatter": 3}[op]
    assert len(sched.rounds) == rounds
    topo = view.topo
    efa = 0
    for rnd in lower(sched, view, 8):
        for hop in rnd:
            if hop.link == "efa":  # the inter-node stage: same local index only
                efa += 1
                src, dst = topo.placement(hop.src), topo.placement(hop.dst)
                assert (src.chip, src.core) == (dst.chip, dst.core) and src.node != dst.node
    assert efa
    # uneven blocks with empty ones, and every reduction op
    rng = np.random.default_rng(5)
    n = view.size
    counts = tuple(int(c) for c in rng.integers(0, 3, n))
    for reduce_op in ("sum", "max"):
        for o, sizes in (("reduce_scatter", counts), ("all_gather", counts),
                         ("all_reduce", 5), ("all_reduce", 0)):
            s = schedule_for(view, o, "hier-mesh", sizes, False, None)
            ins = [rng.integers(-3, 4, s.in_elems[g]) for g in range(n)]
            outs = replay(s, ins, reduce_op)
            want = reference(o, sizes, None, ins, reduce_op)
            for g in range(n):
                np.testing.assert_array_equal(outs[g], want[g], err_msg=f"{o} {sizes} {g}")


def test_hierarchical_with_mesh_stages_on_a_sub_group():
    """A group of 4 ranks on each of 2 nodes, one per chip on two chips and two on a
    third: the in-node mesh serves whole chips, the inter-node mesh pairs local
    indices."""
    topo = nm.topology("trn2.48xlarge", 2, 2)
    local = [0, 4, 8, 9]
    view = GroupView(topo, local + [64 + r for r in local])
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        assert choose(op, view, nbytes=4096) == "hier-mesh"
        check(view, op, "hier-mesh")


def test_two_edge_disjoint_rings_carry_half_each():
    view = _view("trn2-64")
    assert len(view.rings) == 2
    sched = schedule_for(view, "all_reduce", "ring", 640, False, None)
    # every transfer of ring 0 covers the first half of the buffer, ring 1 the second
    first = {x.src_off < 320 for st in sched.rounds for x in st.xfers}
    assert first == {True, False}
    for st in sched.rounds:
        for x in st.xfers:
            assert (x.src_off < 320) == (x.src_off + x.count <= 320)


@pytest.mark.parametrize("group_kind", ["tp", "dp"])
def test_replica_groups_tp_dp(group_kind):
    topo = nm.topology("trn2.48xlarge")
    groups = ([list(range(i, i + 8)) for i in range(0, 64, 8)] if group_kind == "tp"
              else [list(range(i, 64, 8)) for i in range(8)])
    for g in groups[:3]:
        view = GroupView(topo, g)
        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "permute"):
            check(view, op, choose(op, view))
    # DP members sit on every other chip: their traffic is forwarded through chips of
    # ranks outside the group, one link per hop
    view = GroupView(topo, groups[0])
    sched = schedule_for(view, "all_reduce", choose("all_reduce", view), 64, False, None)
    hops = [h for rnd in lower(sched, view, 4) for h in rnd]
    if group_kind == "dp":
        assert any(h.src not in groups[0] or h.dst not in groups[0] for h in hops)
    else:
        assert all(h.src in groups[0] and h.dst in groups[0] for h in hops)


def test_avg_divides_once():
    view = _view("trn2-8")
    sched = schedule_for(view, "all_reduce", "ring", 16, True, None)
    inputs = [np.full(16, 8.0 * (g + 1), np.float32) for g in range(8)]
    outs = replay(sched, inputs, "sum")
    for o in outs:
        np.testing.assert_array_equal(o, np.full(16, 36.0, np.float32))


def test_float_results_identical_on_every_member():
    """Random (non-exact) float data: all members still get the same bits."""
    for world, algo in [("trn2-64", "ring"), ("trn2-64", "chip"), ("trn2-64", "mesh"),
                        ("trn2-64", "mesh1"), ("trn2-64", "kangaring"), ("trn2-64", "rdh"),
                        ("trn1-2nodes-64", "hierarchical")]:
        view = _view(world)
        rng = np.random.default_rng(1)
        sched = schedule_for(view, "all_reduce", algo, 300, False, None)
        inputs = [rng.standard_normal(300).astype(np.float32) for _ in range(view.size)]
        outs = replay(sched, inputs, "sum")
        for o in outs[1:]:
            assert o.tobytes() == outs[0].tobytes()


def test_offsets_beyond_2_31_bytes():
    """A buffer over 2**31 bytes: offsets stay exact Python ints in the schedule."""
    view = _view("trn2-8")
    count = (1 << 31) // 4 + 1234  # fp32 elements: > 2**31 bytes
    sched = schedule_for(view, "all_reduce", "ring", count, False, None)
    ends = [x.src_off + x.count for st in sched.rounds for x in st.xfers]
    assert max(ends) == count
    hops = lower(sched, view, 4)
    assert max(h.nbytes for rnd in hops for h in rnd) > 0
    assert sum(h.nbytes for h in hops[0]) == sum(x.count for x in sched.rounds[0].xfers) * 4


def test_forced_algorithm_errors_name_the_argument(monkeypatch):
    view = _view("trn2-8")
    with pytest.raises(AlgorithmError, match="algorithm: 'hierarchical' needs"):
        choose("all_reduce", view, "hierarchical")
    with pytest.raises(AlgorithmError, match="algorithm: 'ring' does not apply to all_to_all"):
        choose("all_to_all", view, "ring")
    with pytest.raises(AlgorithmError, match="unknown algorithm 'tree'"):
        choose("all_reduce", view, "tree")
    monkeypatch.setenv("NEURON_MPI_ALGO", "mesh")
    assert choose("all_reduce", view) == "mesh"
    assert choose("all_to_all", view) == "direct"  # env preference that does not apply
    monkeypatch.setenv("NEURON_MPI_ALGO", "bogus")
    with pytest.raises(AlgorithmError, match="NEURON_MPI_ALGO: unknown algorithm"):
        choose("all_reduce", view)


# nccom-test.rst, --show-algorithm example: 16 ranks of trn2 (4 whole chips, LNC=2)
NCCOM_16_TRN2 = [(4, "mesh"), (32, "mesh"), (512, "mesh"), (8192, "mesh"),
                 (131072, "mesh"), (2097152, "rdh"), (33554432, "kangaring"),
                 (536870912, "kangaring")]


@pytest.mark.parametrize("nbytes,want", NCCOM_16_TRN2)
def test_selection_matches_published_trn2_16_rank_run(nbytes, want):
    topo = nm.topology("trn2.48xlarge", 2, ranks=16)
    assert choose("all_reduce", GroupView(topo, range(16)), nbytes=nbytes) == want


def test_trn2_default_follows_runtime_size_selection():
    view = _view("trn2-64")
    assert choose("all_reduce", view, nbytes=4096) == "mesh"
    assert choose("all_reduce", view, nbytes=(1 << 20) - 1) == "mesh"
    assert choose("all_reduce", view, nbytes=1 << 20) == "rdh"
    assert choose("all_gather", view, nbytes=56 << 20) == "rdh"  # 896 KiB per rank
    assert choose("reduce_scatter", view, nbytes=(56 << 20) + 64) == "kangaring"
    # trn1 and inf2: mesh below 1 MiB, ring above
    assert choose("all_gather", _view("trn1.32xlarge-32"), nbytes=1024) == "mesh"
    assert choose("all_reduce", _view("trn1.32xlarge-32"), nbytes=4 << 20) == "ring"
    assert choose("all_reduce", _view("inf2.48xlarge-24"), nbytes=4 << 20) == "ring"
    # 3 whole chips: no rdh (not a power of two), KangaRing holds whole chips
    assert choose("all_reduce", _view("trn2-12"), nbytes=4 << 20) == "kangaring"
    with pytest.raises(AlgorithmError, match="'rdh' needs"):
        choose("all_reduce", _view("trn2-12"), "rdh")
    # one rank per chip (a DP group): no KangaRing, ring
    dp = GroupView(nm.topology("trn2.48xlarge"), range(0, 64, 4))
    assert choose("all_reduce", dp, nbytes=1 << 30) == "ring"
    with pytest.raises(AlgorithmError, match="'kangaring' needs every rank of each chip"):
        choose("all_reduce", dp, "kangaring")
    # across nodes: hierarchical, with mesh stages below 1 MiB; trn1's flat ring for
    # large buffers
    assert choose("all_reduce", _view("trn1-2nodes-64"), nbytes=4096) == "hier-mesh"
    assert choose("all_gather", _view("trn1-2nodes-64"), nbytes=(1 << 20) - 1) == "hier-mesh"
    assert choose("all_reduce", _view("trn1-2nodes-64"), nbytes=1 << 20) == "hierarchical"
    assert choose("all_reduce", _view("trn1-2nodes-64"), nbytes=1 << 30) == "ring"
    assert choose("all_reduce", _view("trn2-4nodes-256"), nbytes=1 << 30) == "hierarchical"


def test_one_rank_per_node_selection():
    topo = nm.topology("trn2.48xlarge", 2, 4)
    view = GroupView(topo, [5, 69, 133, 197])
    assert view.one_per_node and view.rdh_ok
    # single-step mesh while its extra traffic (N-1)(N-2)C takes < 15 us over EFA
    assert choose("all_reduce", view, nbytes=8192) == "mesh1"
    assert choose("all_gather", view, nbytes=8192) == "rdh"
    assert choose("all_reduce", view, nbytes=2 << 20) == "rdh"
    assert choose("all_reduce", view, nbytes=1 << 30) == "ring"
    for algo in ("mesh1", "rdh", "mesh", "ring", "hierarchical"):
        check(view, "all_reduce", algo)


def test_rdh_partners_are_hypercube_neighbours():
    """The cross-chip stage pairs chips whose ids differ in one bit: on the 4x4
    torus that is one hop (bit 0, 2) or two hops along one axis (bit 1, 3)."""
    view = _view("trn2-64")
    sched = schedule_for(view, "all_reduce", "rdh", 4096, False, None)
    topo = view.topo
    for st in sched.rounds:
        for x in st.xfers:
            a, b = topo.global_chip(x.src), topo.global_chip(x.dst)
            if a != b:
                assert bin(a ^ b).count("1") == 1
    # 3 intra-chip + 4 halving + 4 doubling + 3 intra-chip rounds
    assert len(sched.rounds) == 14


@pytest.mark.parametrize("n", [2, 3, 8, 64])
def test_barrier_after_an_agreement_needs_no_rounds(n):
    """A barrier whose argument agreement runs first (extra set: the agreement is a
    barrier already) has no rounds; without it, a dissemination barrier of
    ceil(log2 n) rounds in which every member sends one empty message per round."""
    view = GroupView(nm.topology("trn2.48xlarge", ranks=64), range(n))
    agreed = schedule_for(view, "barrier", "direct", 0, False, 1)
    assert agreed.steps == []
    plain = schedule_for(view, "barrier", "direct", 0, False, None)
    rounds = [s for s in plain.steps if getattr(s, "xfers", None)]
    assert len(rounds) == (n - 1).bit_length()
    for r in rounds:
        assert sorted(x.src for x in r.xfers) == list(range(n))
        assert all(x.count == 0 for x in r.xfers)
