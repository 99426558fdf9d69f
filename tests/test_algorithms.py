"""The algorithm registry and the shape of Neuron's algorithms (no MPI): what each
schedule moves, in how many steps, between whom."""
from __future__ import annotations

import collections

import numpy as np
import pytest

import neuron_mpi as nm
from neuron_mpi import agree
from neuron_mpi.algorithms import registry
from neuron_mpi.algorithms.group import GroupView
from neuron_mpi.algorithms.select import ALGORITHMS, _APPLIES, explain, schedule_for
from neuron_mpi.router import lower


def _bytes_sent(sched, view, itemsize=4):
    """Payload bytes each member sends (logical transfers, not hops)."""
    out = collections.Counter()
    for rnd in sched.rounds:
        for x in rnd.xfers:
            out[x.src] += x.count * itemsize
    return out


def test_registry_is_the_one_list():
    names = registry.names()
    assert set(names) == {"ring", "mesh", "mesh1", "rdh", "kangaring", "hierarchical", "hier-mesh",
                          "chip", "direct"}
    assert ALGORITHMS == names
    # fingerprint codes come from the registry and round-trip
    for name in names:
        fp = agree.fingerprint("all_reduce", 1, algorithm=name)
        assert agree._show(agree.ALGO, int(fp[agree.ALGO])) == name
    for op, algos in _APPLIES.items():
        assert algos == tuple(a.name for a in registry.algorithms() if op in a.ops)
    help_text = registry.help_text()
    assert all(n in help_text for n in names)


def test_cli_algorithm_choices_come_from_the_registry():
    from neuron_mpi.bench.cli import build_parser as bench_parser
    from neuron_mpi.model.cli import build_parser as model_parser

    for parser in (bench_parser(), model_parser()):
        act = next(a for a in parser._actions if a.dest == "algorithm")
        assert tuple(act.choices) == registry.names()
        assert "kangaring" in act.help


def test_every_default_names_its_source():
    topo = nm.topology("trn2.48xlarge")
    view = GroupView(topo, range(64))
    for nbytes, want, cite in [(4096, "mesh", "intranode"), (4 << 20, "rdh", "intranode"),
                               (1 << 30, "kangaring", "nccom-test")]:
        algo, why = explain("all_reduce", view, nbytes)
        assert algo == want and cite in why


def test_mesh_all_reduce_moves_o_buffer_per_rank():
    """Two-step mesh (reduce-scatter + all-gather): each rank sends about 2x the
    buffer, the single-step variant (N-1) x the buffer."""
    view = GroupView(nm.topology("trn2.48xlarge"), range(64))
    count = 64 * 1024
    buf = count * 4
    mesh = schedule_for(view, "all_reduce", "mesh", count, False, None)
    one = schedule_for(view, "all_reduce", "mesh1", count, False, None)
    per_rank = _bytes_sent(mesh, view)
    assert max(per_rank.values()) <= 3 * buf
    assert max(_bytes_sent(one, view).values()) == 63 * buf
    # 4 rounds: intra-chip pre-reduction, off-chip partials, off-chip gather,
    # intra-chip broadcast
    assert len(mesh.rounds) == 4 and len(one.rounds) == 1
    assert max(mesh.tmp_elems) <= 3 * count  # the copy, the mates' chunks, the partials


def test_mesh_all_gather_two_steps_one_receiver_per_chip():
    view = GroupView(nm.topology("trn2.48xlarge"), range(64))
    topo = view.topo
    sched = schedule_for(view, "all_gather", "mesh", (16,) * 64, False, None)
    assert len(sched.rounds) == 2
    step0, step1 = sched.rounds
    # step 0: each block reaches every other chip exactly once
    arrivals = collections.Counter()
    for x in step0.xfers:
        a, b = topo.global_chip(x.src), topo.global_chip(x.dst)
        if a != b:
            arrivals[(x.src, b)] += 1
    assert set(arrivals.values()) == {1} and len(arrivals) == 64 * 15
    # step 1 stays on the chip
    assert all(topo.global_chip(x.src) == topo.global_chip(x.dst) for x in step1.xfers)


def test_mesh_reduce_scatter_pre_reduces_on_chip():
    """Off-chip, each destination gets one partial sum per chip; the senders of a
    chip share the destinations evenly."""
    view = GroupView(nm.topology("trn2.48xlarge"), range(64))
    topo = view.topo
    sched = schedule_for(view, "reduce_scatter", "mesh", (8,) * 64, False, None)
    pre, off = sched.rounds
    assert all(topo.global_chip(x.src) == topo.global_chip(x.dst) for x in pre.xfers)
    per_dst_chip = collections.Counter((x.dst, topo.global_chip(x.src)) for x in off.xfers)
    assert set(per_dst_chip.values()) == {1} and len(per_dst_chip) == 64 * 15
    # each rank of a chip serves whole destination chips: 15 chips over 4 ranks
    per_sender = collections.Counter(x.src for x in off.xfers)
    assert sorted(collections.Counter(per_sender.values()).items()) == [(12, 16), (16, 48)]
    # the pre-reduction hands each server one message per destination chip it serves
    per_pair = collections.Counter((x.src, x.dst) for x in pre.xfers)
    assert max(per_pair.values()) <= 5 and len(pre.xfers) <= 64 * 15  # + the mate's own block


def test_kangaring_primaries_alternate_between_channels():
    view = GroupView(nm.topology("trn2.48xlarge"), range(64))
    from neuron_mpi.algorithms.kangaring import channels

    (c0, s0), (c1, s1) = channels(view)
    assert len(c0) == len(c1) == 32
    assert set(c0) | set(c1) == set(range(64)) and not set(c0) & set(c1)
    assert all(s0[p] in c1 and s1[s0[p]] == p for p in c0)  # roles swap
    topo = view.topo
    # the two channels follow the two edge-disjoint Hamiltonian cycles
    for (cyc, _), chips in zip(((c0, s0), (c1, s1)), topo.chip_cycles):
        seq = []
        for g in cyc:
            if topo.global_chip(g) not in seq:
                seq.append(topo.global_chip(g))
        assert tuple(seq) == tuple(chips)
    # the cycle hops only between primaries; secondaries send only within their chip
    # or to the next primary
    sched = schedule_for(view, "all_reduce", "kangaring", 64 * 8, False, None)
    primaries = {0: set(c0), 1: set(c1)}
    for st in sched.rounds:
        for x in st.xfers:
            assert x.dst in primaries[0] | primaries[1]
    rs_rounds = [st for st in sched.rounds if st.slices == 2]
    assert len(rs_rounds) == 31  # the primary cycle of 32, one step fewer


def test_ring_reducing_rounds_are_sliced_in_two():
    view = GroupView(nm.topology("trn2.48xlarge", 2, ranks=8), range(8))
    sched = schedule_for(view, "all_reduce", "ring", 64, False, None)
    assert [st.slices for st in sched.rounds] == [2] * 7 + [1] * 7
    for st in sched.rounds:
        assert all(x.reduce for x in st.xfers) == (st.slices == 2)


@pytest.mark.parametrize("world", [("trn2.48xlarge", 2, 1), ("trn2.48xlarge", 1, 1),
                                   ("trn2-ultraserver", 2, 1), ("trn2.48xlarge", 2, 4)])
def test_default_algorithms_replay_at_scale(world):
    """The defaults over the sizes that select every algorithm, up to 256 ranks,
    replayed against NumPy (fp32 integer-valued: exact in any order)."""
    from neuron_mpi.replay import replay

    topo = nm.topology(*world)
    view = GroupView(topo, range(topo.size))
    rng = np.random.default_rng(0)
    seen = set()
    for nbytes in (4096, 4 << 20, 1 << 30):
        algo = explain("all_reduce", view, nbytes)[0]
        if algo in seen:
            continue
        seen.add(algo)
        count = 3 * view.size + 1
        sched = schedule_for(view, "all_reduce", algo, count, False, None)
        ins = [rng.integers(-3, 4, count).astype(np.float32) for _ in range(view.size)]
        want = np.sum(ins, axis=0)
        for o in replay(sched, ins):
            np.testing.assert_array_equal(o, want)
        for rnd in lower(sched, view, 4):
            for hop in rnd:
                assert topo.link_between_ranks(hop.src, hop.dst) is not None
    assert len(seen) >= (2 if world[2] == 1 else 1)


def test_one_new_file_is_a_new_algorithm(tmp_path, monkeypatch):
    """A module defining ALGORITHM in the package's path is picked up: forced by
    name, replayed, listed for its ops; no other edit."""
    from neuron_mpi import algorithms as pkg
    from neuron_mpi.algorithms import select
    from neuron_mpi.replay import replay

    (tmp_path / "zz_reverse_ring.py").write_text(
        "from neuron_mpi.algorithms import ring\n"
        "from neuron_mpi.algorithms.registry import Algorithm\n"
        "def build(op, view, sizes, avg=False, extra=None):\n"
        "    s = ring.all_reduce(view, sizes, avg)\n"
        "    s.algorithm = 'zz_reverse_ring'\n"
        "    return s\n"
        "ALGORITHM = Algorithm(name='zz_reverse_ring', summary='test', ops=('all_reduce',),\n"
        "                      build=build, priority=99)\n")
    monkeypatch.setattr(pkg, "__path__", list(pkg.__path__) + [str(tmp_path)])
    registry._load.cache_clear()
    try:
        assert "zz_reverse_ring" in registry.names()
        assert "zz_reverse_ring" in registry.applies_to("all_reduce")
        assert "zz_reverse_ring" not in registry.applies_to("all_gather")
        view = GroupView(nm.topology("trn2.48xlarge", 2, ranks=8), range(8))
        assert select.choose("all_reduce", view, "zz_reverse_ring") == "zz_reverse_ring"
        sched = select.schedule_for(view, "all_reduce", "zz_reverse_ring", 17, False, None)
        ins = [np.arange(17, dtype=np.float32) * (g + 1) for g in range(8)]
        for o in replay(sched, ins):
            np.testing.assert_array_equal(o, np.sum(ins, axis=0))
    finally:
        monkeypatch.undo()
        registry._load.cache_clear()
        select.schedule_for.cache_clear()
    assert "zz_reverse_ring" not in registry.names()
