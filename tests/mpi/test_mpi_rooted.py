"""Rooted collectives and prefix reductions (algorithms/rooted.py) and the
members-only group constructor, on whatever world the launch gives."""
from __future__ import annotations

import numpy as np
import pytest

from mpi_helpers import assert_same, int_table, reduce_ref, to_dtype

import neuron_mpi as nm

pytestmark = pytest.mark.mpi

CASES = [("sum", "float32"), ("max", "int32"), ("avg", "float64"), ("prod", "int64"),
         ("min", "float16"), ("sum", "bfloat16")]


def _dt(name):
    import ml_dtypes
    return np.dtype(getattr(ml_dtypes, name)) if name == "bfloat16" else np.dtype(name)


@pytest.mark.parametrize("op,dn", CASES)
def test_reduce_every_root(comm, op, dn):
    dt = _dt(dn)
    n = comm.size
    ints = int_table(11, n, 37, dt, op)
    x = to_dtype(ints[comm.rank], dt)
    want = reduce_ref(ints, op, dt)
    for root in sorted({0, n - 1, n // 2}):
        got = comm.reduce(x, root=root, op=op)
        if comm.rank == root:
            assert_same(got, want, f"reduce root {root}")
        else:
            assert got is None


def test_reduce_in_place_and_async(comm):
    n = comm.size
    x = np.arange(10, dtype=np.int64) + comm.rank
    h = comm.reduce(x, root=n - 1, out=x, async_op=True)
    h.wait()
    if comm.rank == n - 1:
        assert_same(x, np.arange(10, dtype=np.int64) * n + n * (n - 1) // 2)
    else:
        assert_same(x, np.arange(10, dtype=np.int64) + comm.rank)


def test_gather_and_gather_v(comm):
    n = comm.size
    x = np.full((2, 3), comm.rank, np.float32)
    for root in sorted({0, n - 1}):
        got = comm.gather(x, root=root)
        if comm.rank == root:
            assert_same(got, np.repeat(np.arange(n, dtype=np.float32), 2)[:, None]
                        .repeat(3, 1))
        else:
            assert got is None
    counts = [r % 3 for r in range(n)]
    xv = np.full((counts[comm.rank], 2), comm.rank + 1, np.int16)
    got = comm.gather(xv, root=0, counts=counts)
    if comm.rank == 0:
        want = np.concatenate([np.full((c, 2), r + 1, np.int16) for r, c in enumerate(counts)])
        assert_same(got, want)


def test_scatter_and_scatter_v(comm):
    n = comm.size
    root = n - 1
    src = np.arange(n * 4, dtype=np.float64).reshape(n * 2, 2) if comm.rank == root else None
    out = np.empty((2, 2), np.float64)
    comm.scatter(src, out, root=root)
    assert_same(out, np.arange(comm.rank * 4, comm.rank * 4 + 4, dtype=np.float64).reshape(2, 2))
    counts = [(r + 1) % 3 for r in range(n)]
    srcv = np.arange(sum(counts), dtype=np.uint8) if comm.rank == 0 else None
    outv = np.empty(counts[comm.rank], np.uint8)
    comm.scatter(srcv, outv, root=0, counts=counts)
    off = sum(counts[:comm.rank])
    assert_same(outv, np.arange(off, off + counts[comm.rank], dtype=np.uint8))


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_scan_exscan(comm, op):
    n = comm.size
    ints = int_table(5, n, 19, np.int64, op)
    x = ints[comm.rank].copy()
    got = comm.scan(x, op=op)
    assert_same(got, reduce_ref(ints[:comm.rank + 1], op, np.int64))
    out = np.full(19, -7, np.int64)
    comm.exscan(x, op=op, out=out)
    if comm.rank == 0:
        assert_same(out, np.full(19, -7, np.int64))
    else:
        assert_same(out, reduce_ref(ints[:comm.rank], op, np.int64))


def test_rooted_bad_root_on_every_rank(comm):
    with pytest.raises(nm.InvalidArgumentError, match="root"):
        comm.reduce(np.ones(3, np.float32), root=comm.size)
    with pytest.raises(nm.InvalidArgumentError, match="op"):
        comm.scan(np.ones(3, np.float32), op="avg")
    comm.barrier()  # still usable


def test_group_members_only(comm):
    """Only the members call group(); the others go on with their own work."""
    n = comm.size
    if n < 2:
        pytest.skip("needs 2 ranks")
    members = [0, 1] if n < 4 else list(range(n // 2))
    if comm.rank in members:
        g = comm.group(members)
        assert g.size == len(members) and g.rank == members.index(comm.rank)
        s = g.all_reduce(np.array([comm.rank], np.int64))
        assert int(s[0]) == sum(members)
        g2 = comm.group(members)  # a second group of the same ranks is a new one
        assert g2._id != g._id
        g2.barrier()
    comm.barrier()


def test_group_refused_by_rules(comm):
    if not comm.strict or comm.size < 4 or comm.topology.spec.family != "trn2":
        pytest.skip("needs >= 4 ranks of trn2 in strict mode")
    if comm.rank < 3:
        with pytest.raises(nm.UnsupportedGroupError, match="replica_groups"):
            comm.group([0, 1, 2])
    comm.barrier()
    with pytest.raises(nm.InvalidArgumentError, match="ranks"):
        comm.group([r for r in range(comm.size) if r != comm.rank][:1] or [comm.size])
