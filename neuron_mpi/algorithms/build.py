"""Algorithms: pure functions from (group view, sizes) to a Schedule.

All sizes are in elements of the flattened buffers. Every member of a group builds
the same schedule from the same arguments (all-to-all-v is the one exception: a
member knows only its own row and column of the count matrix, which is all the
executor needs of it; transfer ids stay positional so members still agree).
"""
from __future__ import annotations

from ..schedule import (IN, OUT, TMP, Local, Locals, Round, Schedule, Xfer,
                        merge_parallel, offsets, split)
from . import ring as R

BROADCAST_PIECES = 8


def _sched(op, algo, n, ins, outs, tmps, pre, rounds, post=()):
    steps = []
    if pre:
        steps.append(Locals(list(pre)))
    steps.extend(Round(list(r)) for r in rounds)
    if post:
        steps.append(Locals(list(post)))
    return Schedule(op, algo, n, list(ins), list(outs), list(tmps), steps)


def _levels(view, algorithm):
    """Local groups for the two-level algorithms and whether the cross stage runs
    recursive halving/doubling (rdh) or a ring. rdh orders chips by chip id, so
    partners i^d are torus neighbours along one axis of the 4-D hypercube view."""
    if algorithm == "hierarchical":
        return view.by_node, False
    if algorithm == "chip":
        return view.by_chip, False
    lgs = sorted(view.by_chip, key=lambda lg: view.topo.global_chip(view.ranks[lg[0]]))
    return lgs, True


def _cross_reduce_scatter(order, chunk_regions, buf, rdh):
    if rdh:
        return R.rdh_reduce_scatter_rounds(order, chunk_regions, buf)
    return R.reduce_scatter_rounds(order, chunk_regions, buf)


def _cross_all_gather(order, chunk_regions, buf, rdh):
    if rdh:
        return R.rdh_all_gather_rounds(order, chunk_regions, buf)
    return R.all_gather_rounds(order, chunk_regions, buf)


def _divide(n, region_of, avg):
    if not avg:
        return []
    return [Local(g, "divide", OUT, off, ln, OUT, off, divisor=n)
            for g in range(n) for off, ln in [region_of(g)] if ln]


# --- all-reduce --------------------------------------------------------------------
def all_reduce(view, count, algorithm, avg=False) -> Schedule:
    n = view.size
    pre = [Local(g, "copy", IN, 0, count, OUT, 0) for g in range(n) if count]
    tmps = [0] * n
    if algorithm == "ring":
        parts = split(count, len(view.rings))
        rounds = merge_parallel(*[R.all_reduce_rounds(order, off, ln, OUT)
                                  for order, (off, ln) in zip(view.rings, parts)])
    elif algorithm in ("hierarchical", "chip", "rdh"):
        lgs, rdh = _levels(view, algorithm)
        m = len(lgs[0])
        chunks = split(count, m)
        regions = [[c] for c in chunks]
        crosses = [[lg[b] for lg in lgs] for b in range(m)]
        cross_ar = R.rdh_all_reduce_rounds if rdh else R.all_reduce_rounds
        rounds = (merge_parallel(*[R.reduce_scatter_rounds(lg, regions, OUT) for lg in lgs])
                  + merge_parallel(*[cross_ar(crosses[b], *chunks[b], OUT) for b in range(m)])
                  + merge_parallel(*[R.all_gather_rounds(lg, regions, OUT) for lg in lgs]))
    elif algorithm == "mesh":
        # everyone sends the whole buffer to everyone; each member reduces the n
        # copies in group-index order, so every member gets the same bits
        tmps = [n * count] * n
        rounds = [[Xfer(i, j, IN, 0, count, TMP, i * count)
                   for i in range(n) for j in range(n) if i != j]] if count and n > 1 else []
        pre = [Local(g, "copy", IN, 0, count, TMP, g * count) for g in range(n) if count]
        post = [Local(g, "copy", TMP, 0, count, OUT, 0) for g in range(n) if count]
        post += [Local(g, "reduce", TMP, i * count, count, OUT, 0)
                 for g in range(n) for i in range(1, n) if count]
        return _sched("all_reduce", algorithm, n, [count] * n, [count] * n, tmps, pre,
                      rounds, post + _divide(n, lambda g: (0, count), avg))
    else:
        raise AssertionError(algorithm)
    return _sched("all_reduce", algorithm, n, [count] * n, [count] * n, tmps, pre, rounds,
                  _divide(n, lambda g: (0, count), avg))


# --- reduce-scatter (equal or v counts) -------------------------------------------
def reduce_scatter(view, counts, algorithm, avg=False, op="reduce_scatter") -> Schedule:
    n = view.size
    total = sum(counts)
    boffs = offsets(counts)
    if algorithm == "mesh":
        tmps = [n * counts[g] for g in range(n)]
        rounds = [[Xfer(i, j, IN, boffs[j], counts[j], TMP, i * counts[j])
                   for i in range(n) for j in range(n) if i != j and counts[j]]]
        rounds = [r for r in rounds if r]
        pre = [Local(g, "copy", IN, boffs[g], counts[g], TMP, g * counts[g])
               for g in range(n) if counts[g]]
        post = [Local(g, "copy", TMP, 0, counts[g], OUT, 0) for g in range(n) if counts[g]]
        post += [Local(g, "reduce", TMP, i * counts[g], counts[g], OUT, 0)
                 for g in range(n) for i in range(1, n) if counts[g]]
        return _sched(op, algorithm, n, [total] * n, counts, tmps, pre, rounds,
                      post + _divide(n, lambda g: (0, counts[g]), avg))
    pre = [Local(g, "copy", IN, 0, total, TMP, 0) for g in range(n) if total]
    if algorithm == "ring":
        parts = len(view.rings)
        rounds = merge_parallel(*[
            R.reduce_scatter_rounds(order, R.sub_block_regions(order, boffs, counts, p, parts), TMP)
            for p, order in enumerate(view.rings)])
    elif algorithm in ("hierarchical", "chip", "rdh"):
        lgs, rdh = _levels(view, algorithm)
        m = len(lgs[0])
        block = lambda g: (boffs[g], counts[g])  # noqa: E731
        # local stage first: member b of each local group reduces, over its group,
        # the blocks of every member at local position b
        phase1 = merge_parallel(*[
            R.reduce_scatter_rounds(lg, [[block(other[b]) for other in lgs] for b in range(m)], TMP)
            for lg in lgs])
        phase2 = merge_parallel(*[
            _cross_reduce_scatter([lg[b] for lg in lgs], [[block(lg[b])] for lg in lgs], TMP, rdh)
            for b in range(m)])
        rounds = phase1 + phase2
    else:
        raise AssertionError(algorithm)
    post = [Local(g, "copy", TMP, boffs[g], counts[g], OUT, 0) for g in range(n) if counts[g]]
    return _sched(op, algorithm, n, [total] * n, counts, [total] * n, pre, rounds,
                  post + _divide(n, lambda g: (0, counts[g]), avg))


# --- all-gather (equal or v counts) -----------------------------------------------
def all_gather(view, counts, algorithm, op="all_gather") -> Schedule:
    n = view.size
    total = sum(counts)
    boffs = offsets(counts)
    pre = [Local(g, "copy", IN, 0, counts[g], OUT, boffs[g]) for g in range(n) if counts[g]]
    if algorithm == "ring":
        parts = len(view.rings)
        rounds = merge_parallel(*[
            R.all_gather_rounds(order, R.sub_block_regions(order, boffs, counts, p, parts), OUT)
            for p, order in enumerate(view.rings)])
    elif algorithm in ("hierarchical", "chip", "rdh"):
        lgs, rdh = _levels(view, algorithm)
        m = len(lgs[0])
        block = lambda g: (boffs[g], counts[g])  # noqa: E731
        # across first (members at one local position swap their blocks), then
        # inside each local group, each member carrying its cross group's blocks
        phase1 = merge_parallel(*[
            _cross_all_gather([lg[b] for lg in lgs], [[block(lg[b])] for lg in lgs], OUT, rdh)
            for b in range(m)])
        phase2 = merge_parallel(*[
            R.all_gather_rounds(lg, [[block(other[b]) for other in lgs] for b in range(m)], OUT)
            for lg in lgs])
        rounds = phase1 + phase2
    elif algorithm == "mesh":
        rounds = [[Xfer(i, j, IN, 0, counts[i], OUT, boffs[i])
                   for i in range(n) for j in range(n) if i != j and counts[i]]]
        rounds = [r for r in rounds if r]
    else:
        raise AssertionError(algorithm)
    return _sched(op, algorithm, n, counts, [total] * n, [0] * n, pre, rounds)


# --- all-to-all (equal or v counts) -----------------------------------------------
def all_to_all(view, matrix, algorithm="direct", op="all_to_all") -> Schedule:
    """matrix[i][j]: elements member i sends to member j. One round; every pair has
    a transfer (possibly empty) so transfer ids are the same for every member."""
    n = view.size
    send_offs = [offsets(row) for row in matrix]
    recv_offs = [offsets([matrix[i][j] for i in range(n)]) for j in range(n)]
    pre = [Local(g, "copy", IN, send_offs[g][g], matrix[g][g], OUT, recv_offs[g][g])
           for g in range(n) if matrix[g][g]]
    rounds = [[Xfer(i, j, IN, send_offs[i][j], matrix[i][j], OUT, recv_offs[j][i])
               for i in range(n) for j in range(n) if i != j]]
    rounds = [r for r in rounds if r]
    ins = [sum(row) for row in matrix]
    outs = [sum(matrix[i][j] for i in range(n)) for j in range(n)]
    return _sched(op, algorithm, n, ins, outs, [0] * n, pre, rounds)


# --- permute, broadcast, barrier -----------------------------------------------------
def permute(view, count, pairs, algorithm="direct") -> Schedule:
    n = view.size
    receivers = {d for _, d in pairs}
    pre = [Local(g, "zero", OUT, 0, count, OUT, 0) for g in range(n)
           if g not in receivers and count]
    pre += [Local(s, "copy", IN, 0, count, OUT, 0) for s, d in pairs if s == d and count]
    rounds = [[Xfer(s, d, IN, 0, count, OUT, 0) for s, d in pairs if s != d]]
    rounds = [r for r in rounds if r]
    return _sched("permute", algorithm, n, [count] * n, [count] * n, [0] * n, pre, rounds)


def broadcast(view, count, root, algorithm) -> Schedule:
    n = view.size
    pre = [Local(root, "copy", IN, 0, count, OUT, 0)] if count else []
    if algorithm == "ring":
        order = view.rings[0]
        k = order.index(root)
        order = order[k:] + order[:k]
        rounds = R.pipeline_rounds(order, 0, count, BROADCAST_PIECES, IN, OUT) if n > 1 else []
    elif algorithm == "direct":
        rounds = [[Xfer(root, j, IN, 0, count, OUT, 0) for j in range(n) if j != root]]
        rounds = [r for r in rounds if r]
    else:
        raise AssertionError(algorithm)
    return _sched("broadcast", algorithm, n, [count] * n, [count] * n, [0] * n, pre, rounds)


def barrier(view, algorithm="direct") -> Schedule:
    """Dissemination barrier: ceil(log2 n) rounds of empty messages."""
    n = view.size
    rounds, k = [], 1
    while k < n:
        rounds.append([Xfer(i, (i + k) % n, IN, 0, 0, OUT, 0) for i in range(n)])
        k *= 2
    return _sched("barrier", algorithm, n, [0] * n, [0] * n, [0] * n, [], rounds)
