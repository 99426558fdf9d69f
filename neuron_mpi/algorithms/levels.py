"""Two-level schedules: a local stage inside each local group (the members on one
chip, or on one node) and a cross stage among the members that share a local
position. ``chip``, ``rdh`` and ``hierarchical`` are these with different local
groups and cross stages (docs/algorithms.md).

All sizes are in elements of the flattened buffers.
"""
from __future__ import annotations

from ..schedule import IN, OUT, TMP, Local, Locals, Round, merge_parallel, offsets, split
from . import phases as P


def all_reduce(view, count, algo, lgs, cross_rdh, avg=False, slices=1):
    """Local reduce-scatter, cross all-reduce per local position, local all-gather.
    ``slices``: of the local reducing rounds (Round.slices)."""
    n = view.size
    pre = [Local(g, "copy", IN, 0, count, OUT, 0) for g in range(n) if count]
    m = len(lgs[0])
    chunks = split(count, m)
    regions = [[c] for c in chunks]
    crosses = [[lg[b] for lg in lgs] for b in range(m)]
    cross_ar = P.rdh_all_reduce_rounds if cross_rdh else P.all_reduce_rounds
    rs = merge_parallel(*[P.reduce_scatter_rounds(lg, regions, OUT) for lg in lgs])
    rest = (merge_parallel(*[cross_ar(crosses[b], *chunks[b], OUT) for b in range(m)])
            + merge_parallel(*[P.all_gather_rounds(lg, regions, OUT) for lg in lgs]))
    return P.sched("all_reduce", algo, n, [count] * n, [count] * n, [0] * n, pre, rs + rest,
                   P.divide(n, lambda g: (0, count), avg),
                   slices=[slices] * len(rs) + [1] * len(rest))


def reduce_scatter(view, counts, algo, lgs, cross_rdh, avg=False, op="reduce_scatter",
                   slices=1):
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
                   post + P.divide(n, lambda g: (0, counts[g]), avg),
                   slices=[slices] * len(phase1) + [1] * len(phase2))


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


def build(view, op, sizes, avg, algo, lgs, cross_rdh, slices=1):
    """The two-level schedule of a reducing/gathering collective; ``slices``: of the
    local stage's reducing rounds."""
    if op == "all_reduce":
        return all_reduce(view, sizes, algo, lgs, cross_rdh, avg, slices)
    if op == "reduce_scatter":
        return reduce_scatter(view, list(sizes), algo, lgs, cross_rdh, avg, op, slices)
    if op == "all_gather":
        return all_gather(view, list(sizes), algo, lgs, cross_rdh, op=op)
    raise AssertionError(op)


# --- mesh stages (hierarchical with intra-node Mesh + inter-node Mesh) -------------
# (mesh.py is imported where used: it imports rdh.py, which imports this module)
def _local_chips(view, lgs):
    """The chips of each local group (a node's chips, in ``by_chip`` order)."""
    from .mesh import Chips

    out = []
    for lg in lgs:
        mine = set(lg)
        out.append(Chips([c for c in view.by_chip if c[0] in mine]))
    return out


def _cross_chips(lgs, b):
    """The members at local position b, one per "chip": the inter-node mesh."""
    from .mesh import Chips

    return Chips([[lg[b]] for lg in lgs])


def _together(stages):
    """Steps of stages that run at the same time on disjoint members, merged step by
    step (each a list of Round/Locals of one shape; empty ones carry no data)."""
    stages = [s for s in stages if s]
    if not stages:
        return []
    shape = [type(st) for st in stages[0]]
    assert all([type(st) for st in s] == shape for s in stages), "stages differ in shape"
    return [Round([x for s in stages for x in s[i].xfers]) if kind is Round
            else Locals([op for s in stages for op in s[i].ops])
            for i, kind in enumerate(shape)]


def _mesh_rs(chips_list, regions, result, base):
    from .mesh import reduce_scatter_steps

    extra = {}
    stages = []
    for ch in chips_list:
        steps, ex = reduce_scatter_steps(ch, regions, result, base)
        stages.append(steps)
        extra.update(ex)
    return _together(stages), extra


def _mesh_ag(chips_list, regions, src):
    from .mesh import all_gather_steps

    return _together([all_gather_steps(ch, regions, src) for ch in chips_list])


def _position_blocks(lgs, boffs, counts):
    """Member at local position b of each local group: the blocks of every member at
    position b (one per local group), as its regions of the local stage."""
    return {lg[b]: [(boffs[other[b]], counts[other[b]]) for other in lgs]
            for lg in lgs for b in range(len(lg))}


def _in_place(d, off):
    return TMP, off


def _at(d, off):
    return OUT, off


def mesh_all_reduce(view, count, algo, lgs, avg=False):
    """In-node mesh reduce-scatter (member b of each node ends with chunk b summed
    over its node, in place in TMP), inter-node mesh all-reduce of chunk b among the
    members at position b, in-node mesh all-gather."""
    n = view.size
    m = len(lgs[0])
    chunks = split(count, m)
    local = _local_chips(view, lgs)
    regions = {lg[b]: [chunks[b]] for lg in lgs for b in range(m)}
    pre = [Local(g, "copy", IN, 0, count, TMP, 0) for g in range(n) if count]
    st1, ex1 = _mesh_rs(local, regions, _in_place, count)
    cross = [_cross_chips(lgs, b) for b in range(m)]
    sub = {}
    for b, (off, ln) in enumerate(chunks):
        for lg, (o, ln2) in zip(lgs, split(ln, len(lgs))):
            sub[lg[b]] = [(off + o, ln2)]
    st2, ex2 = _mesh_rs(cross, sub, _at, count)
    st3 = _mesh_ag(cross, sub, _at)
    st4 = _mesh_ag(local, regions, _at)
    return P.sched_steps("all_reduce", algo, n, [count] * n, [count] * n,
                         [count + max(ex1.get(g, 0), ex2.get(g, 0)) for g in range(n)], pre,
                         st1 + st2 + st3 + st4, P.divide(n, lambda g: (0, count), avg))


def mesh_reduce_scatter(view, counts, algo, lgs, avg=False, op="reduce_scatter"):
    """In-node mesh reduce-scatter first (member b of each node reduces, over its
    node, the blocks of every member at position b, in place in TMP), then the
    inter-node mesh reduce-scatter of those blocks among the members at position b."""
    n = view.size
    total = sum(counts)
    boffs = offsets(counts)
    m = len(lgs[0])
    pre = [Local(g, "copy", IN, 0, total, TMP, 0) for g in range(n) if total]
    st1, ex1 = _mesh_rs(_local_chips(view, lgs), _position_blocks(lgs, boffs, counts),
                        _in_place, total)
    own = {g: [(boffs[g], counts[g])] for g in range(n)}
    st2, ex2 = _mesh_rs([_cross_chips(lgs, b) for b in range(m)], own,
                        lambda d, off: (OUT, off - boffs[d]), total)
    return P.sched_steps(op, algo, n, [total] * n, counts,
                         [total + max(ex1.get(g, 0), ex2.get(g, 0)) for g in range(n)], pre,
                         st1 + st2, P.divide(n, lambda g: (0, counts[g]), avg))


def mesh_all_gather(view, counts, algo, lgs, op="all_gather"):
    """Inter-node mesh all-gather among the members at each position first, then the
    in-node mesh all-gather, each member carrying its position's blocks."""
    n = view.size
    total = sum(counts)
    boffs = offsets(counts)
    m = len(lgs[0])
    pre = [Local(g, "copy", IN, 0, counts[g], OUT, boffs[g]) for g in range(n) if counts[g]]
    own = {g: [(boffs[g], counts[g])] for g in range(n)}
    st1 = _mesh_ag([_cross_chips(lgs, b) for b in range(m)], own, _at)
    st2 = _mesh_ag(_local_chips(view, lgs), _position_blocks(lgs, boffs, counts), _at)
    return P.sched_steps(op, algo, n, counts, [total] * n, [0] * n, pre, st1 + st2)


def build_mesh(view, op, sizes, avg, algo, lgs):
    """The two-level schedule with mesh stages of a reducing/gathering collective."""
    if op == "all_reduce":
        return mesh_all_reduce(view, sizes, algo, lgs, avg)
    if op == "reduce_scatter":
        return mesh_reduce_scatter(view, list(sizes), algo, lgs, avg, op=op)
    if op == "all_gather":
        return mesh_all_gather(view, list(sizes), algo, lgs, op=op)
    raise AssertionError(op)
