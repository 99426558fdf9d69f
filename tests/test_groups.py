"""Replica-group rules of the real hardware (neuron_mpi.groups.check_group)."""
from __future__ import annotations

import pytest

import neuron_mpi
from neuron_mpi.errors import TopologyError, UnsupportedGroupError
from neuron_mpi.groups import SOURCES, check_group, verdict

CC = "CC not permitted on this group"
JOB = "Unsupported topology. Supported number of Neuron Cores is"


def _ok(topo, group):
    check_group(topo, group)  # raises if refused
    v = verdict(topo, group)
    assert v.accepted and v.source and v.message == ""
    return v


def _refused(topo, group, message=CC) -> str:
    with pytest.raises(UnsupportedGroupError) as info:
        check_group(topo, group)
    msg = str(info.value)
    assert message in msg
    assert msg.startswith("replica_groups:")
    v = verdict(topo, group)
    assert not v.accepted and v.source in msg
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


def test_every_rule_has_a_source():
    assert all(SOURCES[k] for k in SOURCES)
    assert "issue 761" in SOURCES["cc-trn1"] and "issue 619" in SOURCES["job-trn1"]
    assert "get_logic_chosen" in SOURCES["nxd-trn2"]


# --- trn1.32xlarge -------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 8, 16, 32])
def test_trn1_accepts_aligned_blocks(trn1, n):
    _ok(trn1, range(n))
    if n < 32:
        _ok(trn1, range(n, 2 * n))  # a later aligned block


def test_trn1_8_tp_x_4_dp_layout(trn1):
    """The seeds' own example: TP [0..7], [8..15], ...; DP [0, 8, 16, 24], ..."""
    for s in range(0, 32, 8):
        assert _ok(trn1, range(s, s + 8)).rule == "seed-trn1"
    for i in range(8):
        v = _ok(trn1, [i, i + 8, i + 16, i + 24])
        assert "torus column" in v.why
    # TP 8 x DP 2 x PP 2: DP pairs on neighbouring chips of a column
    _ok(trn1, [3, 11])
    _ok(trn1, [19, 27])


@pytest.mark.parametrize("group", [[1, 3, 5, 7, 9, 11, 13, 15], [0, 2, 4, 6, 8, 10, 12, 14],
                                   range(4), range(6), range(12), range(24), [0, 16],
                                   [0, 1, 8, 9]])
def test_trn1_refuses_other_groups(trn1, group):
    msg = _refused(trn1, group)
    assert "trn1.32xlarge" in msg and "optimum-neuron issue 761" in msg


def test_trn1_job_size_is_a_job_rule():
    """The 1/2/8/16/32 message is about the job (the world), not a group."""
    t = neuron_mpi.topology("trn1.32xlarge", ranks=4)
    msg = _refused(t, range(4), JOB)
    assert "1, 2, 8, 16 or a multiple of 32" in msg and "issue 619" in msg
    _ok(neuron_mpi.topology("trn1.32xlarge", ranks=16), range(16))
    # init checks the world under its own name: the user passed no replica groups
    with pytest.raises(UnsupportedGroupError, match=f"^world: {JOB}"):
        check_group(t, range(4), name="world")
    with pytest.raises(UnsupportedGroupError, match="^world: CC not permitted"):
        check_group(neuron_mpi.topology("trn2.48xlarge", ranks=3), range(3), name="world")


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
    assert "LNC=2" in msg and "not a power of two" in msg


@pytest.mark.parametrize("tp", [4, 8, 16, 64])
def test_trn2_tp_with_dp_layouts(trn2, tp):
    for s in range(0, 64, tp):
        _ok(trn2, range(s, s + tp))
    for i in range(tp):
        _ok(trn2, range(i, 64, tp))


def test_trn2_tp32_layouts():
    """TP=32 at LNC=2: the blocks [0..31], [32..63] leave DP pairs two rows apart
    (refused); neuronx-distributed's layout pairs rows 0+3 and 1+2 (accepted)."""
    t = neuron_mpi.topology("trn2.48xlarge", lnc=2)
    _ok(t, range(32))
    assert "not linked" in _refused(t, [0, 32])
    _ok(t, list(range(16)) + list(range(48, 64)))
    _ok(t, range(16, 48))
    _ok(t, [0, 16])
    _ok(t, [32, 48])
    # two chips linked through the torus's wrap-around: a column's (chips 0 and 12),
    # a row's (chips 0 and 3)
    _ok(t, [0, 48])
    _ok(t, [1, 13])
    t1 = neuron_mpi.topology("trn2.48xlarge", lnc=1)
    _ok(t1, list(range(32)) + list(range(96, 128)))
    _refused(t1, [0, 64])


def test_trn2_uneven_or_irregular_refused(trn2):
    assert "same cores" in _refused(trn2, [0, 1, 4, 6])
    assert "evenly spaced" in _refused(trn2, [0, 4, 12, 20])


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
