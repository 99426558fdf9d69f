"""Two-level schedules: a local stage inside each local group (the members on one
chip, or on one node) and a cross stage among the members that share a local
position. ``chip``, ``rdh`` and ``hierarchical`` are these with different local
groups and cross stages (docs/algorithms.md).

All sizes are in elements of the flattened buffers.
"""
from __future__ import annotations

from ..schedule import IN, OUT, TMP, Local, merge_parallel, offsets, split
from . import phases as P


def all_reduce(view, count, algo, lgs, cross_rdh, avg=False):
    """Local reduce-scatter, cross all-reduce per local position, local all-gather."""
    n = view.size
    pre = [Local(g, "copy", IN, 0, count, OUT, 0) for g in range(n) if count]
    m = len(lgs[0])
    chunks = split(count, m)
    regions = [[c] for c in chunks]
    crosses = [[lg[b] for lg in lgs] for b in range(m)]
    cross_ar = P.rdh_all_reduce_rounds if cross_rdh else P.all_reduce_rounds
    rounds = (merge_parallel(*[P.reduce_scatter_rounds(lg, regions, OUT) for lg in lgs])
              + merge_parallel(*[cross_ar(crosses[b], *chunks[b], OUT) for b in range(m)])
              + merge_parallel(*[P.all_gather_rounds(lg, regions, OUT) for lg in lgs]))
    return P.sched("all_reduce", algo, n, [count] * n, [count] * n, [0] * n, pre, rounds,
                   P.divide(n, lambda g: (0, count), avg))


def reduce_scatter(view, counts, algo, lgs, cross_rdh, avg=False, op="reduce_scatter"):
    """Local stage first: member b of each local group reduces, over its group, the
    blocks of every member at local position b; then the cross reduce-scatter."""
    n = view.size
    total = sum(counts)
    boffs = offsets(counts)
    m = len(lgs[0])
    pre = [Local(g, "copy", IN, 0, total, TMP, 0) for g in range(n) if total]

    def block(g):
        return boffs[g], counts[g]

    cross_rs = P.rdh_reduce_scatter_rounds if cross_rdh else P.reduce_scatter_rounds
    phase1 = merge_parallel(*[
        P.reduce_scatter_rounds(lg, [[block(other[b]) for other in lgs] for b in range(m)], TMP)
        for lg in lgs])
    phase2 = merge_parallel(*[
        cross_rs([lg[b] for lg in lgs], [[block(lg[b])] for lg in lgs], TMP)
        for b in range(m)])
    post = [Local(g, "copy", TMP, boffs[g], counts[g], OUT, 0) for g in range(n) if counts[g]]
    return P.sched(op, algo, n, [total] * n, counts, [total] * n, pre, phase1 + phase2,
                   post + P.divide(n, lambda g: (0, counts[g]), avg))


def all_gather(view, counts, algo, lgs, cross_rdh, op="all_gather"):
    """Across first (members at one local position swap their blocks), then inside
    each local group, each member carrying its cross group's blocks."""
    n = view.size
    total = sum(counts)
    boffs = offsets(counts)
    m = len(lgs[0])
    pre = [Local(g, "copy", IN, 0, counts[g], OUT, boffs[g]) for g in range(n) if counts[g]]

    def block(g):
        return boffs[g], counts[g]

    cross_ag = P.rdh_all_gather_rounds if cross_rdh else P.all_gather_rounds
    phase1 = merge_parallel(*[
        cross_ag([lg[b] for lg in lgs], [[block(lg[b])] for lg in lgs], OUT)
        for b in range(m)])
    phase2 = merge_parallel(*[
        P.all_gather_rounds(lg, [[block(other[b]) for other in lgs] for b in range(m)], OUT)
        for lg in lgs])
    return P.sched(op, algo, n, counts, [total] * n, [0] * n, pre, phase1 + phase2)


def build(view, op, sizes, avg, algo, lgs, cross_rdh):
    """The two-level schedule of a reducing/gathering collective."""
    if op == "all_reduce":
        return all_reduce(view, sizes, algo, lgs, cross_rdh, avg)
    if op == "reduce_scatter":
        return reduce_scatter(view, list(sizes), algo, lgs, cross_rdh, avg, op=op)
    if op == "all_gather":
        return all_gather(view, list(sizes), algo, lgs, cross_rdh, op=op)
    raise AssertionError(op)
