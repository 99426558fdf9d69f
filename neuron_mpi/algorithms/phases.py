"""Phases shared by the algorithms: ring and recursive halving/doubling rounds,
and assembling a schedule.

``order`` lists group indices by ring position; position k sends to k+1. ``regions``
gives, per position, the (offset, length) regions that position owns: for
reduce-scatter the ones it ends up holding fully reduced, for all-gather the ones it
starts with. Several regions per position let one ring carry non-contiguous blocks
(the hierarchical phases need that). Empty regions send nothing.
"""
from __future__ import annotations

from ..schedule import Xfer, split


def reduce_scatter_rounds(order, regions, buf) -> list[list[Xfer]]:
    """After n-1 rounds, position j holds its regions reduced over the whole ring
    (in ring order starting at position j+1)."""
    n = len(order)
    rounds = []
    for s in range(n - 1):
        rnd = []
        for k in range(n):
            for off, ln in regions[(k - s - 1) % n]:
                if ln:
                    rnd.append(Xfer(order[k], order[(k + 1) % n], buf, off, ln, buf, off, True))
        rounds.append(rnd)
    return rounds if any(rounds) else []


def all_gather_rounds(order, regions, buf) -> list[list[Xfer]]:
    """After n-1 rounds every position holds every position's regions."""
    n = len(order)
    rounds = []
    for s in range(n - 1):
        rnd = []
        for k in range(n):
            for off, ln in regions[(k - s) % n]:
                if ln:
                    rnd.append(Xfer(order[k], order[(k + 1) % n], buf, off, ln, buf, off, False))
        rounds.append(rnd)
    return rounds if any(rounds) else []


def all_reduce_rounds(order, off, length, buf) -> list[list[Xfer]]:
    """Ring all-reduce of one region: reduce-scatter then all-gather of n chunks."""
    chunks = [[(off + o, ln)] for o, ln in split(length, len(order))]
    return reduce_scatter_rounds(order, chunks, buf) + all_gather_rounds(order, chunks, buf)


def sub_block_regions(order, block_offs, block_counts, part, parts):
    """Per position: part ``part`` of ``parts`` of the block of the member there."""
    out = []
    for g in order:
        o, ln = split(block_counts[g], parts)[part]
        out.append([(block_offs[g] + o, ln)])
    return out


def pipeline_rounds(order, off, length, pieces, first_buf, buf) -> list[list[Xfer]]:
    """A chain from order[0] to order[-1], the region cut into ``pieces`` that follow
    each other down the chain (broadcast)."""
    chunks = split(length, max(1, min(pieces, length)))
    n = len(order)
    rounds = []
    for t in range(len(chunks) + n - 2):
        rnd = []
        for p in range(n - 1):
            c = t - p
            if 0 <= c < len(chunks) and chunks[c][1]:
                o, ln = chunks[c]
                rnd.append(Xfer(order[p], order[p + 1], first_buf if p == 0 else buf,
                                off + o, ln, buf, off + o))
        rounds.append(rnd)
    return [r for r in rounds if r]


# --- recursive halving / doubling (RDH) ---------------------------------------------
def _is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def rdh_reduce_scatter_rounds(order, chunk_regions, buf) -> list[list[Xfer]]:
    """Recursive halving over p = len(order) members (a power of two): at distance
    d = p/2, p/4, ..., 1 member i keeps the chunks whose bit d matches its own and
    sends the others to partner i^d, which reduces them. Chunk c (regions
    ``chunk_regions[c]``) ends fully reduced at member order[c]."""
    p = len(order)
    assert _is_pow2(p), p
    owned = [set(range(p)) for _ in range(p)]
    rounds = []
    d = p // 2
    while d:
        rnd = []
        for i in range(p):
            j = i ^ d
            give = sorted(c for c in owned[i] if (c & d) == (j & d))
            for c in give:
                for off, ln in chunk_regions[c]:
                    if ln:
                        rnd.append(Xfer(order[i], order[j], buf, off, ln, buf, off, True))
        for i in range(p):
            owned[i] = {c for c in owned[i] if (c & d) == (i & d)}
        rounds.append(rnd)
        d //= 2
    return [r for r in rounds if r]


def rdh_all_gather_rounds(order, chunk_regions, buf) -> list[list[Xfer]]:
    """Recursive doubling: member order[c] starts with chunk c; at distance
    d = 1, 2, ..., p/2 partners swap everything they hold."""
    p = len(order)
    assert _is_pow2(p), p
    held = [{i} for i in range(p)]
    rounds = []
    d = 1
    while d < p:
        rnd = []
        for i in range(p):
            for c in sorted(held[i]):
                for off, ln in chunk_regions[c]:
                    if ln:
                        rnd.append(Xfer(order[i], order[i ^ d], buf, off, ln, buf, off, False))
        held = [held[i] | held[i ^ d] for i in range(p)]
        rounds.append(rnd)
        d *= 2
    return [r for r in rounds if r]


def rdh_all_reduce_rounds(order, off, length, buf) -> list[list[Xfer]]:
    chunks = [[(off + o, ln)] for o, ln in split(length, len(order))]
    return (rdh_reduce_scatter_rounds(order, chunks, buf)
            + rdh_all_gather_rounds(order, chunks, buf))


# --- assembling a schedule ------------------------------------------------------------
def sched(op, algo, n, ins, outs, tmps, pre, rounds, post=(), slices=1):
    """A Schedule from local steps before, rounds of transfers, local steps after.
    ``slices``: how many slices each round's chunks are sent in (see Round)."""
    from ..schedule import Round

    per_round = slices if isinstance(slices, list) else [slices] * len(rounds)
    return sched_steps(op, algo, n, ins, outs, tmps, pre,
                       [Round(list(r), k) for r, k in zip(rounds, per_round)], post)


def sched_steps(op, algo, n, ins, outs, tmps, pre, steps, post=()):
    """A Schedule from local steps before, built steps (Round and Locals), local
    steps after (an empty ``pre`` or ``post`` adds no step)."""
    from ..schedule import Locals, Schedule

    return Schedule(op, algo, n, list(ins), list(outs), list(tmps),
                    ([Locals(list(pre))] if pre else []) + list(steps)
                    + ([Locals(list(post))] if post else []))


def divide(n, region_of, avg):
    """avg: every member divides its result region by n."""
    from ..schedule import OUT, Local

    if not avg:
        return []
    return [Local(g, "divide", OUT, off, ln, OUT, off, divisor=n)
            for g in range(n) for off, ln in [region_of(g)] if ln]
