"""ring: reduce-scatter then all-gather around directed cycles of the members.

intranode-collective-comm.rst, "Ring Algorithm": ranks form a directed cycle; several
cycles on disjoint wires run in parallel (a full 4x4 torus or the UltraServer: two
edge-disjoint Hamiltonian cycles, each carrying half of the buffer); each chunk is
sent in two slices so the reduction of one overlaps the transfer of the other
(Round.slices = 2 on the reducing rounds). Sub-groups use one ring visiting the
members in the first cycle's order, routed where members are not neighbours.

Across nodes this is the runtime's flat ring (internode-collective-comm.rst, "Flat
Ring Algorithm"): each node's ranks form a chain, joined to the next node's chain
over EFA (Topology.rings alternates the direction per node so each join is one rail
link). The runtime enables it "only on Trn1 for large message size cases"; the doc
gives no threshold, we pick the KangaRing boundary (hierarchical.py).
"""
from __future__ import annotations

from ..schedule import IN, OUT, TMP, Local, merge_parallel, offsets, split
from . import phases as P
from . import rooted
from .registry import Algorithm

SLICES = 2  # per chunk on reducing rounds (intranode-collective-comm.rst)


def _slices(n_reduce, n_total):
    return [SLICES] * n_reduce + [1] * (n_total - n_reduce)


def all_reduce(view, count, avg):
    n = view.size
    pre = [Local(g, "copy", IN, 0, count, OUT, 0) for g in range(n) if count]
    parts = split(count, len(view.rings))
    rs = merge_parallel(*[P.reduce_scatter_rounds(order, [[(off + o, ln)] for o, ln in
                                                           split(l2, len(order))], OUT)
                          for order, (off, l2) in zip(view.rings, parts)])
    ag = merge_parallel(*[P.all_gather_rounds(order, [[(off + o, ln)] for o, ln in
                                                       split(l2, len(order))], OUT)
                          for order, (off, l2) in zip(view.rings, parts)])
    return P.sched("all_reduce", "ring", n, [count] * n, [count] * n, [0] * n, pre, rs + ag,
                   P.divide(n, lambda g: (0, count), avg), slices=_slices(len(rs), len(rs + ag)))


def reduce_scatter(view, counts, avg, op):
    n = view.size
    total = sum(counts)
    boffs = offsets(counts)
    pre = [Local(g, "copy", IN, 0, total, TMP, 0) for g in range(n) if total]
    parts = len(view.rings)
    rounds = merge_parallel(*[
        P.reduce_scatter_rounds(order, P.sub_block_regions(order, boffs, counts, p, parts), TMP)
        for p, order in enumerate(view.rings)])
    post = [Local(g, "copy", TMP, boffs[g], counts[g], OUT, 0) for g in range(n) if counts[g]]
    return P.sched(op, "ring", n, [total] * n, counts, [total] * n, pre, rounds,
                   post + P.divide(n, lambda g: (0, counts[g]), avg), slices=SLICES)


def all_gather(view, counts, op):
    n = view.size
    total = sum(counts)
    boffs = offsets(counts)
    pre = [Local(g, "copy", IN, 0, counts[g], OUT, boffs[g]) for g in range(n) if counts[g]]
    parts = len(view.rings)
    rounds = merge_parallel(*[
        P.all_gather_rounds(order, P.sub_block_regions(order, boffs, counts, p, parts), OUT)
        for p, order in enumerate(view.rings)])
    return P.sched(op, "ring", n, counts, [total] * n, [0] * n, pre, rounds)


BROADCAST_PIECES = 8


def broadcast(view, count, root):
    """A chain from the root along the first ring, the buffer in 8 pieces."""
    n = view.size
    pre = [Local(root, "copy", IN, 0, count, OUT, 0)] if count else []
    order = view.rings[0]
    k = order.index(root)
    order = order[k:] + order[:k]
    rounds = P.pipeline_rounds(order, 0, count, BROADCAST_PIECES, IN, OUT) if n > 1 else []
    return P.sched("broadcast", "ring", n, [count] * n, [count] * n, [0] * n, pre, rounds)


def build(op, view, sizes, avg=False, extra=None):
    if op in rooted.RING_OPS:
        return rooted.build(view, op, sizes, avg, extra)
    if op == "all_reduce":
        return all_reduce(view, sizes, avg)
    if op in ("reduce_scatter", "reduce_scatter_v"):
        return reduce_scatter(view, list(sizes), avg, op)
    if op in ("all_gather", "all_gather_v"):
        return all_gather(view, list(sizes), op)
    if op == "broadcast":
        return broadcast(view, sizes, extra)
    raise AssertionError(op)


def prefer(op, view, nbytes):
    return ("the fallback (intranode-collective-comm.rst, Algorithm Summary: "
            "Ring 'Fallback only')")


ALGORITHM = Algorithm(
    name="ring", summary="reduce-scatter + all-gather around the torus's Hamiltonian "
    "cycles, two slices per chunk; across nodes the flat ring",
    ops=("all_reduce", "reduce_scatter", "all_gather", "reduce_scatter_v", "all_gather_v",
         "broadcast") + rooted.RING_OPS,
    build=build, prefer=prefer, priority=90)
