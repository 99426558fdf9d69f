"""mesh1: the single-step mesh all-reduce (intranode- and internode-collective-comm.rst,
"Single-step Mesh Algorithm"): every rank sends its whole buffer to every other
rank in one step and reduces the copies itself, in group-index order, so every
rank gets the same bits. One step instead of two, for (N-1) x N x C bytes per rank
instead of 2 (N-1) x C.

The runtime uses it where "the extra data transfer time is shorter than 15 us"
(internode-collective-comm.rst): we take that rule for groups of one rank per node,
with the extra (N-1)(N-2) x C bytes over the chip's EFA share. The docs give no
intra-node rule, so inside a node it runs only when forced."""
from __future__ import annotations

from ..schedule import IN, OUT, TMP, Local, Xfer
from . import phases as P
from .registry import Algorithm

EXTRA_US = 15.0  # internode-collective-comm.rst: "each hop is expected to add ~15 us"


def build(op, view, count, avg=False, extra=None):
    n = view.size
    tmps = [n * count] * n
    rounds = [[Xfer(i, j, IN, 0, count, TMP, i * count)
               for i in range(n) for j in range(n) if i != j]] if count and n > 1 else []
    pre = [Local(g, "copy", IN, 0, count, TMP, g * count) for g in range(n) if count]
    post = [Local(g, "copy", TMP, 0, count, OUT, 0) for g in range(n) if count]
    post += [Local(g, "reduce", TMP, i * count, count, OUT, 0)
             for g in range(n) for i in range(1, n) if count]
    return P.sched("all_reduce", "mesh1", n, [count] * n, [count] * n, tmps, pre, rounds,
                   post + P.divide(n, lambda g: (0, count), avg))


def prefer(op, view, nbytes):
    efa = view.topo.spec.efa
    if nbytes is None or not view.one_per_node or efa is None:
        return None
    n = view.size
    extra_bytes = (n - 1) * (n - 2) * nbytes / n
    if extra_bytes / (efa.bandwidth_GBps * 1e3) < EXTRA_US:
        return ("one rank per node, the extra (N-1)(N-2)C bytes take < 15 us over EFA "
                "(internode-collective-comm.rst, Single-step Mesh)")
    return None


ALGORITHM = Algorithm(
    name="mesh1", summary="single-step mesh all-reduce: every rank broadcasts its whole "
    "buffer",
    ops=("all_reduce",), build=build, prefer=prefer, priority=15)
