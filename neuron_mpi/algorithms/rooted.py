"""Rooted collectives and prefix reductions: reduce, gather, scatter, scan, exscan.

The Neuron collective engine has no rooted operations (NEURON_FACTS.md, "Collective
operations": all-reduce, all-gather, reduce-scatter, all-to-all, permute, send/recv);
the front-ends (torch.distributed, mpi4py) need them, so they are built here from
the same pieces as the rest: ring rounds around the group's Hamiltonian cycles and
routed point-to-point transfers (the router forwards a transfer between chips that
are not neighbours hop by hop). Every member builds the same schedule from the same
arguments.

  reduce   ring reduce-scatter over the group's rings (every member ends with one
           block fully reduced, in the ring order all-reduce uses), then each member
           sends its block to the root: one routed round. "avg" divides at the root.
  gather   one routed round: every member sends its block to the root.
  scatter  one routed round: the root sends every member its block.
  scan     ring all-gather of the inputs into scratch, then member g reduces blocks
           0..g in group order (exscan: 0..g-1; member 0's output is left as it was).

sizes: reduce/scan/exscan: the element count; gather/scatter: per-member element
counts. extra: the root (group index) for reduce, gather and scatter.
"""
from __future__ import annotations

from ..schedule import (IN, OUT, TMP, Local, Locals, Round, Schedule, Xfer,
                        merge_parallel, offsets, split)
from . import phases as R

#: op -> the algorithm that builds it (registered by direct.py and ring.py)
APPLIES = {
    "reduce": ("direct",),
    "gather": ("direct",),
    "scatter": ("direct",),
    "scan": ("ring",),
    "exscan": ("ring",),
}
OPS = tuple(APPLIES)
DIRECT_OPS = tuple(op for op, a in APPLIES.items() if a == ("direct",))
RING_OPS = tuple(op for op, a in APPLIES.items() if a == ("ring",))


def _sched(op, algo, n, ins, outs, tmps, pre, rounds, post=()):
    steps = []
    if pre:
        steps.append(Locals(list(pre)))
    steps.extend(Round(list(r)) for r in rounds if r)
    if post:
        steps.append(Locals(list(post)))
    return Schedule(op, algo, n, list(ins), list(outs), list(tmps), steps)


def reduce(view, count, root, avg=False) -> Schedule:
    n = view.size
    counts = [ln for _, ln in split(count, n)]
    boffs = offsets(counts)
    pre = [Local(g, "copy", IN, 0, count, TMP, 0) for g in range(n) if count]
    parts = len(view.rings)
    rounds = merge_parallel(*[
        R.reduce_scatter_rounds(order, R.sub_block_regions(order, boffs, counts, p, parts), TMP)
        for p, order in enumerate(view.rings)]) if n > 1 else []
    rounds = [r for r in rounds if r]
    rounds.append([Xfer(g, root, TMP, boffs[g], counts[g], OUT, boffs[g])
                   for g in range(n) if g != root and counts[g]])
    post = [Local(root, "copy", TMP, boffs[root], counts[root], OUT, boffs[root])] \
        if counts[root] else []
    if avg and count:
        post.append(Local(root, "divide", OUT, 0, count, OUT, 0, divisor=n))
    outs = [count if g == root else 0 for g in range(n)]
    return _sched("reduce", "direct", n, [count] * n, outs, [count] * n, pre, rounds, post)


def gather(view, counts, root) -> Schedule:
    n = view.size
    total = sum(counts)
    boffs = offsets(counts)
    pre = [Local(root, "copy", IN, 0, counts[root], OUT, boffs[root])] if counts[root] else []
    rounds = [[Xfer(g, root, IN, 0, counts[g], OUT, boffs[g])
               for g in range(n) if g != root and counts[g]]]
    outs = [total if g == root else 0 for g in range(n)]
    return _sched("gather", "direct", n, counts, outs, [0] * n, pre, rounds)


def scatter(view, counts, root) -> Schedule:
    n = view.size
    total = sum(counts)
    boffs = offsets(counts)
    pre = [Local(root, "copy", IN, boffs[root], counts[root], OUT, 0)] if counts[root] else []
    rounds = [[Xfer(root, g, IN, boffs[g], counts[g], OUT, 0)
               for g in range(n) if g != root and counts[g]]]
    ins = [total if g == root else 0 for g in range(n)]
    return _sched("scatter", "direct", n, ins, counts, [0] * n, pre, rounds)


def scan(view, count, exclusive=False) -> Schedule:
    n = view.size
    op = "exscan" if exclusive else "scan"
    pre = [Local(g, "copy", IN, 0, count, TMP, g * count) for g in range(n) if count]
    parts = len(view.rings)
    counts = [count] * n
    boffs = offsets(counts)
    rounds = merge_parallel(*[
        R.all_gather_rounds(order, R.sub_block_regions(order, boffs, counts, p, parts), TMP)
        for p, order in enumerate(view.rings)]) if n > 1 else []
    post = []
    for g in range(n):
        last = g - 1 if exclusive else g
        if last < 0 or not count:
            continue
        post.append(Local(g, "copy", TMP, 0, count, OUT, 0))
        post += [Local(g, "reduce", TMP, i * count, count, OUT, 0) for i in range(1, last + 1)]
    return _sched(op, "ring", n, [count] * n, [count] * n, [n * count] * n, pre, rounds, post)


def build(view, op, sizes, avg=False, extra=None) -> Schedule:
    if op == "reduce":
        return reduce(view, sizes, extra, avg)
    if op == "gather":
        return gather(view, list(sizes), extra)
    if op == "scatter":
        return scatter(view, list(sizes), extra)
    if op in ("scan", "exscan"):
        return scan(view, sizes, op == "exscan")
    raise AssertionError(op)
