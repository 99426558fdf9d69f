"""direct: routed point-to-point transfers in one round (all-to-all and its v form,
permute, a broadcast straight from the root) and a dissemination barrier.

All-to-all is a distributed transpose (intranode-collective-comm.rst, "Collective
Operations"); permute sends each listed source to its target, ranks not named stay
idle (their output is zeroed)."""
from __future__ import annotations

from ..schedule import IN, OUT, Local, Xfer, offsets
from . import phases as P
from . import rooted
from .registry import Algorithm


def all_to_all(view, matrix, op):
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
    return P.sched(op, "direct", n, ins, outs, [0] * n, pre, rounds)


def permute(view, count, pairs):
    n = view.size
    receivers = {d for _, d in pairs}
    pre = [Local(g, "zero", OUT, 0, count, OUT, 0) for g in range(n)
           if g not in receivers and count]
    pre += [Local(s, "copy", IN, 0, count, OUT, 0) for s, d in pairs if s == d and count]
    rounds = [[Xfer(s, d, IN, 0, count, OUT, 0) for s, d in pairs if s != d]]
    rounds = [r for r in rounds if r]
    return P.sched("permute", "direct", n, [count] * n, [count] * n, [0] * n, pre, rounds)


def broadcast(view, count, root):
    n = view.size
    pre = [Local(root, "copy", IN, 0, count, OUT, 0)] if count else []
    rounds = [[Xfer(root, j, IN, 0, count, OUT, 0) for j in range(n) if j != root]]
    rounds = [r for r in rounds if r]
    return P.sched("broadcast", "direct", n, [count] * n, [count] * n, [0] * n, pre, rounds)


def barrier(view, agreed=False):
    """Dissemination barrier: ceil(log2 n) rounds of empty messages. ``agreed``: the
    call's argument agreement runs first, and it is itself a barrier (no member
    passes it before every member has arrived), so no rounds are needed."""
    n = view.size
    rounds, k = [], 1
    while k < n and not agreed:
        rounds.append([Xfer(i, (i + k) % n, IN, 0, 0, OUT, 0) for i in range(n)])
        k *= 2
    return P.sched("barrier", "direct", n, [0] * n, [0] * n, [0] * n, [], rounds)


def build(op, view, sizes, avg=False, extra=None):
    if op in rooted.DIRECT_OPS:
        return rooted.build(view, op, sizes, avg, extra)
    if op in ("all_to_all", "all_to_all_v"):
        return all_to_all(view, [list(r) for r in sizes], op)
    if op == "permute":
        return permute(view, sizes, list(extra))
    if op == "broadcast":
        return broadcast(view, sizes, extra)
    if op == "barrier":
        return barrier(view, bool(extra))
    raise AssertionError(op)


ALGORITHM = Algorithm(
    name="direct", summary="routed point-to-point transfers in one round; "
    "dissemination barrier",
    ops=("all_to_all", "all_to_all_v", "permute", "broadcast", "barrier") + rooted.DIRECT_OPS,
    build=build, prefer=lambda op, view, nbytes: "the only algorithm for point-to-point "
    "operations", priority=95)
