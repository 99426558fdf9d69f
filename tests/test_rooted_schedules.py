"""The rooted schedules (algorithms/rooted.py) replayed in one process against the
NumPy reference, on the worlds of test_schedules.py, every root position; and the
router lowers them to neighbour hops only."""
from __future__ import annotations

import numpy as np
import pytest

from neuron_mpi.algorithms import rooted
from neuron_mpi.algorithms.select import choose, schedule_for
from neuron_mpi.replay import replay
from neuron_mpi.router import lower
from neuron_mpi.schedule import offsets
from test_schedules import WORLDS, _view

NAMES = [w for w in WORLDS if w not in ("trn2-lnc1-128", "ultraserver-256", "trn2-4nodes-256")]


def _roots(n):
    return sorted({0, n // 2, n - 1})


def _inputs(n, count, rng):
    return [rng.integers(-4, 5, count).astype(np.int64) for _ in range(n)]


@pytest.mark.parametrize("world", NAMES)
@pytest.mark.parametrize("op", ["sum", "max", "avg"])
def test_reduce(world, op):
    view = _view(world)
    n = view.size
    rng = np.random.default_rng(n)
    count = 2 * n + 3
    inputs = _inputs(n, count, rng)
    stack = np.stack(inputs)
    want = stack.sum(0) if op in ("sum", "avg") else stack.max(0)
    if op == "avg":
        want = np.sign(want) * (np.abs(want) // n)
    for root in _roots(n):
        sched = schedule_for(view, "reduce", choose("reduce", view), count, op == "avg", root)
        outs = replay(sched, inputs, "sum" if op == "avg" else op)
        assert np.array_equal(outs[root], want)
        assert all(outs[g].size == 0 for g in range(n) if g != root)


@pytest.mark.parametrize("world", NAMES)
def test_gather_scatter(world):
    view = _view(world)
    n = view.size
    rng = np.random.default_rng(7)
    counts = tuple(int(v) for v in rng.integers(0, 4, n))
    for root in _roots(n):
        inputs = [np.full(counts[g], g + 1, np.int32) for g in range(n)]
        outs = replay(schedule_for(view, "gather", "direct", counts, False, root), inputs)
        assert np.array_equal(outs[root], np.concatenate(inputs))
        src = np.arange(sum(counts), dtype=np.int32)
        inputs = [src if g == root else np.empty(0, np.int32) for g in range(n)]
        outs = replay(schedule_for(view, "scatter", "direct", counts, False, root), inputs)
        offs = offsets(counts)
        for g in range(n):
            assert np.array_equal(outs[g], src[offs[g]:offs[g] + counts[g]])


@pytest.mark.parametrize("world", NAMES)
@pytest.mark.parametrize("op", ["sum", "prod", "min"])
def test_scan_exscan(world, op):
    view = _view(world)
    n = view.size
    rng = np.random.default_rng(3)
    inputs = [rng.integers(-2, 3, 5).astype(np.int64) for _ in range(n)]
    f = {"sum": np.add, "prod": np.multiply, "min": np.minimum}[op]
    incl = list(f.accumulate(np.stack(inputs), axis=0))
    outs = replay(schedule_for(view, "scan", "ring", 5), inputs, op)
    assert all(np.array_equal(outs[g], incl[g]) for g in range(n))
    outs = replay(schedule_for(view, "exscan", "ring", 5), inputs, op)
    assert all(np.array_equal(outs[g], incl[g - 1]) for g in range(1, n))


@pytest.mark.parametrize("world", ["trn2-64", "trn1-2nodes-64"])
@pytest.mark.parametrize("op", rooted.OPS)
def test_lowered_to_neighbour_hops(world, op):
    view = _view(world)
    n = view.size
    sizes = (3,) * n if op in ("gather", "scatter") else 7
    sched = schedule_for(view, op, choose(op, view), sizes, False,
                         None if op in ("scan", "exscan") else n - 1)
    rounds = lower(sched, view, 4)
    hops = [h for r in rounds for h in r]
    assert hops
    topo = view.topo
    for h in hops:  # every hop crosses exactly one link
        assert topo.link_between_ranks(h.src, h.dst) is not None
