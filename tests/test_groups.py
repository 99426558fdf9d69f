"""Replica-group rules of the real hardware (neuron_mpi.groups.check_group)."""
from __future__ import annotations

import pytest

import neuron_mpi
from neuron_mpi.errors import TopologyError, UnsupportedGroupError
from neuron_mpi.groups import check_group

MESSAGE = "Unsupported topology. Supported number of Neuron Cores is"


def _ok(topo, group):
    check_group(topo, group)  # raises if refused


def _refused(topo, group) -> str:
    with pytest.raises(UnsupportedGroupError) as info:
        check_group(topo, group)
    msg = str(info.value)
    assert MESSAGE in msg
    assert msg.startswith("replica_groups:")
    return msg


@pytest.fixture(scope="module")
def trn1():
    return neuron_mpi.topology("trn1.32xlarge")


@pytest.fixture(scope="module")
def trn2():
    return neuron_mpi.topology("trn2.48xlarge", lnc=2)


@pytest.fixture(scope="module")
def inf2():
    return neuron_mpi.topology("inf2.48xlarge")


def test_unsupported_group_error_is_a_topology_error():
    assert issubclass(UnsupportedGroupError, TopologyError)


# --- trn1.32xlarge -------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 8, 16, 32])
def test_trn1_accepts_documented_sizes(trn1, n):
    _ok(trn1, range(n))
    if n < 32:
        _ok(trn1, range(n, 2 * n))  # a later aligned block


@pytest.mark.parametrize("n", [3, 4, 6, 12, 24])
def test_trn1_refuses_other_sizes(trn1, n):
    msg = _refused(trn1, range(n))
    assert "1, 2, 8, 16 or a multiple of 32" in msg
    assert "trn1.32xlarge" in msg


def test_trn1_group_must_start_at_a_multiple_of_its_size(trn1):
    msg = _refused(trn1, range(4, 12))
    assert "multiple of 8" in msg and "starts at 4" in msg
    _refused(trn1, range(8, 24))
    _ok(trn1, range(16, 32))


def test_trn1_2xlarge_accepts_one_or_two():
    t = neuron_mpi.topology("trn1.2xlarge")
    _ok(t, [0])
    _ok(t, [1])
    _ok(t, [0, 1])
    assert t.size == 2  # nothing larger exists to refuse


# --- trn2 ----------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32, 64])
def test_trn2_lnc2_accepts_powers_of_two(trn2, n):
    _ok(trn2, range(n))


@pytest.mark.parametrize("n", [3, 6, 12, 48])
def test_trn2_lnc2_refuses_other_sizes(trn2, n):
    msg = _refused(trn2, range(n))
    assert "LNC=2" in msg and "or a multiple of 64" in msg


def test_trn2_lnc1_goes_to_128():
    t = neuron_mpi.topology("trn2.48xlarge", lnc=1)
    _ok(t, range(128))
    _ok(t, range(64))
    _refused(t, range(96))


# --- inf2 ----------------------------------------------------------------------------
@pytest.mark.parametrize("group", [range(2), range(4), range(8), range(12), range(24),
                                   range(2, 8), range(10, 24)])
def test_inf2_accepts_even_consecutive(inf2, group):
    _ok(inf2, group)


@pytest.mark.parametrize("group,why", [
    (range(3), "even"), (range(5), "even"), (range(23), "even"),
    ([0, 1, 4, 5], "consecutive"), ([0, 2], "consecutive"), (range(1, 5), "consecutive"),
])
def test_inf2_refuses_odd_or_non_consecutive(inf2, group, why):
    assert why in _refused(inf2, group)


def test_inf2_single_rank(inf2):
    _ok(inf2, [7])


# --- across nodes ----------------------------------------------------------------------
def test_two_nodes_full_and_symmetric_groups():
    t = neuron_mpi.topology("trn2.48xlarge", 2, 2)
    _ok(t, range(128))  # two full nodes: a multiple of 64
    _ok(t, [0, 64])  # one per node, same local index
    _ok(t, [5, 69])
    _ok(t, list(range(8)) + list(range(64, 72)))  # same 8 local ranks on both nodes


def test_two_nodes_asymmetric_refused():
    t = neuron_mpi.topology("trn2.48xlarge", 2, 2)
    assert "symmetry" in _refused(t, [0, 65])
    _refused(t, list(range(64)) + [64])
    _refused(t, list(range(8)) + list(range(64, 68)))


def test_trn1_two_nodes():
    t = neuron_mpi.topology("trn1.32xlarge", 1, 2)
    _ok(t, range(64))
    _ok(t, [3, 35])
    _refused(t, [0, 1, 32])


# --- strict=False -----------------------------------------------------------------------
@pytest.mark.parametrize("name,group", [
    ("trn1.32xlarge", range(4)), ("trn1.32xlarge", range(4, 12)),
    ("trn2.48xlarge", range(3)), ("inf2.48xlarge", [0, 2, 5]),
])
def test_strict_false_accepts_anything(name, group):
    t = neuron_mpi.topology(name)
    check_group(t, group, strict=False)


def test_strict_false_across_nodes():
    t = neuron_mpi.topology("trn2.48xlarge", 2, 2)
    check_group(t, [0, 65, 70], strict=False)
