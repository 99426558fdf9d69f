"""Topology: mapping, links, rings and routes for every catalog entry (no MPI)."""
from __future__ import annotations

import itertools
import random

import pytest

import neuron_mpi
from neuron_mpi import catalog as cat
from neuron_mpi.errors import TopologyError
from neuron_mpi.topology import Topology, resolve

ENV = ("NEURON_MPI_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_MPI_NODES")


def _configs():
    for name, spec in cat.CATALOG.items():
        for lnc in spec.lnc_values:
            for nodes in (1, 2, 4):
                if nodes > 1 and spec.efa is None:
                    continue
                yield pytest.param(name, lnc, nodes, id=f"{name}-lnc{lnc}-n{nodes}")


CONFIGS = list(_configs())


def _expected_degree(spec) -> int:
    if spec.chips == 1:
        return 0
    return sum(2 if d.wrap else 1 for d in spec.dims if d.size > 1)


def _cycle_edges(cycle):
    return {frozenset((cycle[i], cycle[(i + 1) % len(cycle)])) for i in range(len(cycle))}


# --- mapping -------------------------------------------------------------------------
@pytest.mark.parametrize("instance,lnc,nodes", CONFIGS)
def test_mapping_round_trips(instance, lnc, nodes):
    t = neuron_mpi.topology(instance, lnc, nodes)
    spec = cat.CATALOG[instance]
    assert t.ranks_per_chip == spec.cores_per_chip // lnc
    assert t.size == nodes * spec.chips * t.ranks_per_chip == len(t.placements)
    for r in range(t.size):
        p = t.placement(r)
        assert p.rank == r
        assert r == p.node * t.ranks_per_node + p.chip * t.ranks_per_chip + p.core
        assert t.rank_of(p.node, p.chip, p.core) == r
        assert 0 <= p.core < t.ranks_per_chip and 0 <= p.chip < spec.chips
        assert t.chip_at(p.coords) == p.chip
        assert r in t.ranks_on_chip(t.global_chip(r))


# --- links ---------------------------------------------------------------------------
@pytest.mark.parametrize("instance,lnc,nodes", CONFIGS)
def test_chip_degree(instance, lnc, nodes):
    t = neuron_mpi.topology(instance, lnc, nodes)
    want = _expected_degree(t.spec)
    assert want == {1: 0, 6: 2, 12: 2, 16: 4, 64: 6}[t.spec.chips]
    for chip in range(t.chips_per_node):
        assert t.chip_degree(chip) == want
    # the link list agrees: per node, every chip appears in `want` chip-to-chip links
    for n in range(nodes):
        base = n * t.chips_per_node
        for chip in range(t.chips_per_node):
            g = base + chip
            nl = [lk for lk in t.links if g in (lk.a, lk.b) and lk.a != lk.b
                  and lk.kind in (cat.NEURONLINK, cat.NEURONLINK_Z)]
            assert len(nl) == want


@pytest.mark.parametrize("instance,lnc,nodes", CONFIGS)
def test_link_kinds_and_efa_rails(instance, lnc, nodes):
    t = neuron_mpi.topology(instance, lnc, nodes)
    kinds = {lk.kind for lk in t.links}
    assert kinds <= set(cat.LINK_KINDS)
    assert (cat.EFA in kinds) == (nodes > 1)
    for lk in t.links:
        assert lk.bandwidth_GBps > 0 and lk.latency_us > 0
        got = t.link_between_chips(lk.a, lk.b)
        assert got is not None and got.kind == lk.kind
        if lk.kind == cat.EFA:  # rail-aligned: same chip index on both nodes
            assert lk.a % t.chips_per_node == lk.b % t.chips_per_node
            assert lk.a // t.chips_per_node != lk.b // t.chips_per_node


# --- rings ---------------------------------------------------------------------------
@pytest.mark.parametrize("instance,lnc,nodes", CONFIGS)
def test_chip_cycles_are_hamiltonian_and_disjoint(instance, lnc, nodes):
    t = neuron_mpi.topology(instance, lnc, nodes)
    cycles = t.chip_cycles
    assert cycles
    for cyc in cycles:
        assert sorted(cyc) == list(range(t.chips_per_node))
        if len(cyc) > 1:
            for a, b in zip(cyc, cyc[1:] + cyc[:1]):
                assert t.link_between_chips(a, b) is not None, (a, b)
    if t.spec.chips >= 16:  # the tori: two cycles sharing no undirected link
        assert len(cycles) == 2
        assert not _cycle_edges(cycles[0]) & _cycle_edges(cycles[1])


@pytest.mark.parametrize("instance,lnc,nodes", CONFIGS)
def test_rank_rings_visit_every_chip_once_over_links(instance, lnc, nodes):
    t = neuron_mpi.topology(instance, lnc, nodes)
    assert len(t.rings) == len(t.chip_cycles)
    for ring in t.rings:
        assert sorted(ring) == list(range(t.size))
        chips = [t.global_chip(ring[0])]
        for r in ring[1:]:
            g = t.global_chip(r)
            if g != chips[-1]:
                chips.append(g)
        if len(chips) > 1 and chips[-1] == chips[0]:
            chips.pop()
        # each chip once: a chip's ranks are consecutive in the ring
        assert sorted(chips) == list(range(nodes * t.chips_per_node))
        if nodes % 2 == 0 or nodes == 1:  # odd node counts cannot close on a rail
            for a, b in zip(ring, ring[1:] + ring[:1]):
                assert t.link_between_ranks(a, b) is not None, (a, b)


def test_rings_cross_nodes_on_efa_rails():
    t = neuron_mpi.topology("trn2.48xlarge", 2, 2)
    for ring in t.rings:
        crossings = [(a, b) for a, b in zip(ring, ring[1:] + ring[:1])
                     if t.placement(a).node != t.placement(b).node]
        assert len(crossings) == 2
        for a, b in crossings:
            assert t.link_between_ranks(a, b).kind == cat.EFA


# --- routes --------------------------------------------------------------------------
@pytest.mark.parametrize("instance,lnc,nodes", CONFIGS)
def test_routes_step_over_links(instance, lnc, nodes):
    t = neuron_mpi.topology(instance, lnc, nodes)
    rng = random.Random(f"{instance}{lnc}{nodes}")
    pairs = [(rng.randrange(t.size), rng.randrange(t.size)) for _ in range(60)]
    pairs += [(0, t.size - 1), (t.size - 1, 0), (0, 0)]
    for src, dst in pairs:
        path = t.route(src, dst)
        assert path[0] == src and path[-1] == dst
        for a, b in zip(path, path[1:]):
            assert t.link_between_ranks(a, b) is not None, (src, dst, path)
        chips = t.chip_route(t.global_chip(src), t.global_chip(dst))
        assert len(path) == (1 if src == dst else max(2, len(chips)))


def test_route_is_shortest_on_the_torus():
    t = neuron_mpi.topology("trn2.48xlarge")
    for a, b in itertools.product(range(16), repeat=2):
        ya, xa = t.chip_coords(a)
        yb, xb = t.chip_coords(b)
        hops = min((ya - yb) % 4, (yb - ya) % 4) + min((xa - xb) % 4, (xb - xa) % 4)
        assert len(t.chip_route(a, b)) - 1 == hops


# --- small worlds --------------------------------------------------------------------
@pytest.mark.parametrize("instance,ranks,chips", [
    ("trn2.48xlarge", 1, 1), ("trn2.48xlarge", 4, 1), ("trn2.48xlarge", 8, 2),
    ("trn2.48xlarge", 12, 3), ("trn2.48xlarge", 32, 8), ("trn1.32xlarge", 8, 4),
    ("inf2.48xlarge", 6, 3), ("trn2-ultraserver", 64, 16), ("trn2-ultraserver", 128, 32),
])
def test_small_world_occupies_first_chips(instance, ranks, chips):
    t = neuron_mpi.topology(instance, ranks=ranks)
    assert t.size == ranks and t.nodes == 1 and t.chips_used == chips
    assert {t.placement(r).chip for r in range(ranks)} == set(range(chips))
    for ring in t.rings:
        assert sorted(ring) == list(range(ranks))
    for lk in t.links:
        assert lk.a < chips and lk.b < chips
    for src, dst in [(0, ranks - 1), (ranks - 1, 0)]:
        path = t.route(src, dst)
        assert all(r < ranks for r in path)
        for a, b in zip(path, path[1:]):
            assert t.link_between_ranks(a, b) is not None


def test_world_larger_than_a_node_spans_whole_nodes():
    t = neuron_mpi.topology("trn2.48xlarge", ranks=128)
    assert t.nodes == 2 and t.size == 128


# --- configuration -------------------------------------------------------------------
def test_defaults():
    t = neuron_mpi.topology()
    assert (t.instance, t.lnc, t.nodes, t.size) == ("trn2.48xlarge", 2, 1, 64)


def test_env_overrides_defaults(monkeypatch):
    monkeypatch.setenv("NEURON_MPI_INSTANCE", "trn1.32xlarge")
    monkeypatch.setenv("NEURON_MPI_NODES", "2")
    t = neuron_mpi.topology()
    assert (t.instance, t.lnc, t.nodes, t.size) == ("trn1.32xlarge", 1, 2, 64)
    monkeypatch.setenv("NEURON_MPI_INSTANCE", "trn2.48xlarge")
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    assert resolve() == ("trn2.48xlarge", 1, 2)


def test_args_override_env(monkeypatch):
    monkeypatch.setenv("NEURON_MPI_INSTANCE", "trn1.32xlarge")
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    monkeypatch.setenv("NEURON_MPI_NODES", "4")
    assert resolve("trn2.48xlarge", 2, 1) == ("trn2.48xlarge", 2, 1)
    t = neuron_mpi.topology("trn2-ultraserver", 2, 1)
    assert (t.instance, t.lnc, t.nodes, t.size) == ("trn2-ultraserver", 2, 1, 256)


def test_another_instance_than_the_variables_takes_its_own_defaults(monkeypatch):
    """neuron-mpirun sets up trn2.48xlarge (LNC 2, 1 node); a program asking for
    trn1.32xlarge by argument takes trn1's LNC and the nodes its world needs, not the
    variables', which belong to their instance."""
    from neuron_mpi.topology import resolve

    for k, v in {"NEURON_MPI_INSTANCE": "trn2.48xlarge", "NEURON_LOGICAL_NC_CONFIG": "2",
                 "NEURON_MPI_NODES": "1"}.items():
        monkeypatch.setenv(k, v)
    assert resolve("trn1.32xlarge") == ("trn1.32xlarge", 1, None)
    assert neuron_mpi.topology("trn1.32xlarge", ranks=64).nodes == 2
    assert resolve("trn1.32xlarge", nodes=2) == ("trn1.32xlarge", 1, 2)
    # the same instance: the variables apply
    assert resolve("trn2.48xlarge") == ("trn2.48xlarge", 2, 1)
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    assert resolve("trn2.48xlarge") == ("trn2.48xlarge", 1, 1)


@pytest.mark.parametrize("kwargs,env,needle", [
    ({"instance": "trn9.huge"}, {}, "instance"),
    ({"instance": "trn2.48xlarge", "lnc": 3}, {}, "lnc"),
    ({"instance": "trn1.32xlarge", "lnc": 2}, {}, "lnc"),
    ({"instance": "inf2.48xlarge", "nodes": 2}, {}, "nodes"),
    ({"instance": "trn1.2xlarge", "nodes": 2}, {}, "nodes"),
    ({"instance": "trn2.48xlarge", "nodes": 0}, {}, "nodes"),
    ({"instance": "trn2.48xlarge", "nodes": 2, "ranks": 100}, {}, "ranks"),
    ({"instance": "trn2.48xlarge", "ranks": 100}, {}, "ranks"),
    ({"instance": "trn2.48xlarge", "nodes": 1, "ranks": 65}, {}, "ranks"),
    ({"instance": "trn2.48xlarge", "ranks": 0}, {}, "ranks"),
    # a variable's value: its name (docs/api.md), not an argument's never passed
    ({}, {"NEURON_MPI_INSTANCE": "nope"}, "NEURON_MPI_INSTANCE: unknown instance 'nope'"),
    ({}, {"NEURON_LOGICAL_NC_CONFIG": "two"}, "NEURON_LOGICAL_NC_CONFIG"),
    ({}, {"NEURON_LOGICAL_NC_CONFIG": "3"}, "NEURON_LOGICAL_NC_CONFIG: trn2.48xlarge supports"),
    ({}, {"NEURON_MPI_NODES": "x"}, "NEURON_MPI_NODES"),
    ({}, {"NEURON_MPI_NODES": "-1"}, "NEURON_MPI_NODES: expected a positive integer, got -1"),
])
def test_bad_configuration_names_the_argument(monkeypatch, kwargs, env, needle):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(TopologyError) as info:
        neuron_mpi.topology(**kwargs)
    assert str(info.value).startswith(needle)


# --- done-when checks ----------------------------------------------------------------
def test_trn2_48xlarge_json():
    j = neuron_mpi.topology("trn2.48xlarge").to_json()
    assert len(j["ranks"]) == 64
    assert len({(r["node"], r["chip"]) for r in j["ranks"]}) == 16
    assert sum(lk["kind"] == "neuronlink" for lk in j["links"]) == 32
    assert len(j["rings"]) == 2


def test_trn2_lnc1_has_128_ranks():
    assert neuron_mpi.topology("trn2.48xlarge", lnc=1).size == 128


def test_ultraserver_3d_torus():
    t = neuron_mpi.topology("trn2-ultraserver")
    assert t.size == 256 and t.chips_per_node == 64
    assert all(t.chip_degree(c) == 6 for c in range(64))
    z = [lk for lk in t.links if lk.kind == cat.NEURONLINK_Z]
    assert len(z) == 64
    for lk in z:  # Z links join equal (y, x) in neighbouring layers
        assert t.chip_coords(lk.a)[1:] == t.chip_coords(lk.b)[1:]


def test_inf2_48xlarge_one_ring():
    t = neuron_mpi.topology("inf2.48xlarge")
    assert t.size == 24 and t.chips_per_node == 12
    assert t.chip_cycles == (tuple(range(12)),)
    assert len(t.rings) == 1
    assert t.link_between_chips(11, 0) is not None


def test_single_chip_topologies():
    for name in ("trn1.2xlarge", "inf2.xlarge", "inf2.8xlarge"):
        t = Topology(name, 1)
        assert t.size == 2 and t.chip_degree(0) == 0
        assert t.rings == ((0, 1),)
        assert t.route(0, 1) == [0, 1]
