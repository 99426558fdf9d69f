"""kangaring: the Trn2 runtime's KangaRing (intranode-collective-comm.rst,
"KangaRing Algorithm").

The ranks of a chip are paired (cores 0-1, 2-3, ...); in each pair one rank is the
primary and the other the secondary, and only primaries form the cycle. The buffer
runs on two channels; the pair's roles swap between them, so every rank is primary
on one: with all 16 chips of a trn2.48xlarge the channels follow the torus's two
edge-disjoint Hamiltonian cycles, otherwise the members' chip ring one way and the
other.

Reduce-scatter: at every step a primary sends the partial sum it holds and its
secondary sends its own chunk of the same index to the downstream primary, which
reduces both into its partial; the owner adds its own secondary's chunk in the last
step; a final intra-chip step hands the secondary its block. On the hardware the
secondary moves nothing: the primary's one DMA reads the partial, its own chunk and
its secondary's chunk and writes the sum downstream (the doc's 3-read-1-write). The
emulator needs the secondary's chunk sent, so those transfers and the local steps
adding them are marked ``fold`` (schedule.Xfer): the time model prices them as the
extra read of that reduction, with no DMA of their own. All-gather: in step 0 each primary sends its chunk and its secondary sends
its own chunk downstream; then each primary forwards what it received downstream
and duplicates it to its secondary (the doc's 1-read-2-writes), with one last
intra-chip step for the chunk received last. All-reduce: both, the reduced chunk
staying on the primary in between.

Applies only where every rank of each chip it touches is in the group ("KangaRing
is only relevant for TP replica-groups where all ranks in chip are in same
rank-list"); one-rank-per-chip groups use Ring.
"""
from __future__ import annotations

from ..schedule import (IN, OUT, TMP, Local, Locals, Round, Xfer, merge_parallel,
                        offsets, split)
from . import phases as P
from .rdh import MESH_BELOW
from .registry import Algorithm

CHANNELS = 2


def channels(view):
    """Per channel: (primary cycle as group indices, {primary: secondary})."""
    topo = view.topo
    chip_members = {}
    for lg in view.by_chip:
        gc = topo.global_chip(view.ranks[lg[0]])
        chip_members[gc] = sorted(lg, key=lambda g: topo.placement(view.ranks[g]).core)
    orders = []
    for ring in view.rings[:CHANNELS]:
        seq = []
        for g in ring:
            gc = topo.global_chip(view.ranks[g])
            if gc not in seq:
                seq.append(gc)
        orders.append(seq)
    if len(orders) < CHANNELS:
        orders.append(list(reversed(orders[0])))
    out = []
    for c, seq in enumerate(orders):
        cycle, sec = [], {}
        for gc in seq:
            ms = chip_members[gc]
            for i in range(0, len(ms), 2):
                p, s = ms[i + c % 2], ms[i + 1 - c % 2]
                cycle.append(p)
                sec[p] = s
        out.append((cycle, sec))
    return out


def rs_steps(order, sec, regions, buf, slot_base):
    """Primary-cycle reduce-scatter with the secondaries' chunks added on the way:
    position j ends with regions[j] reduced over every primary and secondary.

    Per ring step: a (transfers, local reductions) pair. The partial sum is reduced
    on arrival; a secondary's chunk lands in a slot of the downstream primary's TMP
    (from ``slot_base[primary]``) and is added by a local step after the round, so
    no two deliveries of a round write the same region. In the last step the owner's
    own secondary hands over its chunk the same way. The secondaries' transfers and
    their local reductions are ``fold``: on the hardware the primary's DMA reads
    them in place (3-read-1-write)."""
    n = len(order)
    width = {}
    for j, p in enumerate(order):
        width[p] = sum(ln for _, ln in regions[j])
    out = []
    for s in range(max(n - 1, 1)):
        xs, los = [], []
        for k in range(n):
            nxt = order[(k + 1) % n]
            r = regions[(k - s - 1) % n]
            slot = slot_base[nxt]
            for off, ln in r if n > 1 else ():
                if ln:
                    xs.append(Xfer(order[k], nxt, buf, off, ln, buf, off, True))
                    xs.append(Xfer(sec[order[k]], nxt, buf, off, ln, TMP, slot, fold=True))
                    los.append(Local(nxt, "reduce", TMP, slot, ln, buf, off, fold=True))
                slot += ln
        if s == max(n - 1, 1) - 1:  # the owner's own secondary, second slot half
            for j, p in enumerate(order):
                slot = slot_base[p] + width[p]
                for off, ln in regions[j]:
                    if ln:
                        xs.append(Xfer(sec[p], p, buf, off, ln, TMP, slot, fold=True))
                        los.append(Local(p, "reduce", TMP, slot, ln, buf, off, fold=True))
                    slot += ln
        out.append((xs, los))
    return out


def _merge_steps(*channels):
    """Side by side: step i of every channel's (transfers, locals) in one Round and
    one Locals."""
    steps = []
    for i in range(max((len(c) for c in channels), default=0)):
        xs = [x for c in channels if i < len(c) for x in c[i][0]]
        los = [lo for c in channels if i < len(c) for lo in c[i][1]]
        if xs:
            steps.append(Round(xs, 2))
        if los:
            steps.append(Locals(los))
    return steps


def _slots(order, regions, base):
    """TMP slot base per primary (2 x its regions: upstream's and own secondary's)."""
    return {p: base for p in order}, max(2 * sum(ln for _, ln in regions[j])
                                         for j in range(len(order)))


def ag_rounds(order, sec, regions, buf):
    """Primary-cycle all-gather with duplication to the secondaries. regions[j]:
    (off, len, from_secondary) - the secondary's own chunks start on the
    secondary, which sends them downstream and to its primary in step 0."""
    n = len(order)
    rounds = []
    for s in range(n):
        rnd = []
        for k in range(n):
            p, q = order[k], sec[order[k]]
            for off, ln, from_sec in regions[(k - s) % n]:
                if not ln:
                    continue
                first_sec = s == 0 and from_sec
                if s < n - 1:
                    rnd.append(Xfer(q if first_sec else p, order[(k + 1) % n], buf, off, ln,
                                    buf, off))
                rnd.append(Xfer(q, p, buf, off, ln, buf, off) if first_sec
                           else Xfer(p, q, buf, off, ln, buf, off))
        rounds.append(rnd)
    return rounds


def all_reduce(view, count, avg):
    n = view.size
    pre = [Local(g, "copy", IN, 0, count, OUT, 0) for g in range(n) if count]
    rs, ag, tmp = [], [], [0] * n
    for (order, sec), (off, ln) in zip(channels(view), split(count, CHANNELS)):
        regions = [[(off + o, l2)] for o, l2 in split(ln, len(order))]
        base, width = _slots(order, regions, 0)
        for p in order:
            tmp[p] = max(tmp[p], width)
        rs.append(rs_steps(order, sec, regions, OUT, base))
        ag.append(ag_rounds(order, sec, [[(o, l2, False) for o, l2 in r] for r in regions],
                            OUT))
    return P.sched_steps("all_reduce", "kangaring", n, [count] * n, [count] * n, tmp, pre,
                         _merge_steps(*rs) + [Round(r) for r in merge_parallel(*ag) if r],
                         P.divide(n, lambda g: (0, count), avg))


def _pair_regions(order, sec, boffs, counts, c):
    """Per position: part c of the primary's block, then of its secondary's."""
    out = []
    for p in order:
        regs = []
        for g, from_sec in ((p, False), (sec[p], True)):
            o, ln = split(counts[g], CHANNELS)[c]
            regs.append((boffs[g] + o, ln, from_sec))
        out.append(regs)
    return out


def reduce_scatter(view, counts, avg, op):
    n = view.size
    total = sum(counts)
    boffs = offsets(counts)
    pre = [Local(g, "copy", IN, 0, total, TMP, 0) for g in range(n) if total]
    rs, give, tmp = [], [], [total] * n
    for c, (order, sec) in enumerate(channels(view)):
        regs = _pair_regions(order, sec, boffs, counts, c)
        plain = [[(o, ln) for o, ln, _ in r] for r in regs]
        base, width = _slots(order, plain, total)
        for p in order:
            tmp[p] = max(tmp[p], total + width)
        rs.append(rs_steps(order, sec, plain, TMP, base))
        give.append([[Xfer(p, sec[p], TMP, o, ln, TMP, o)
                      for p, r in zip(order, regs) for o, ln, from_sec in r
                      if from_sec and ln]])
    post = [Local(g, "copy", TMP, boffs[g], counts[g], OUT, 0) for g in range(n) if counts[g]]
    return P.sched_steps(op, "kangaring", n, [total] * n, counts, tmp, pre,
                         _merge_steps(*rs) + [Round(r) for r in merge_parallel(*give) if r],
                         post + P.divide(n, lambda g: (0, counts[g]), avg))


def all_gather(view, counts, op):
    n = view.size
    total = sum(counts)
    boffs = offsets(counts)
    pre = [Local(g, "copy", IN, 0, counts[g], OUT, boffs[g]) for g in range(n) if counts[g]]
    ag = merge_parallel(*[ag_rounds(order, sec, _pair_regions(order, sec, boffs, counts, c),
                                    OUT)
                          for c, (order, sec) in enumerate(channels(view))])
    return P.sched(op, "kangaring", n, counts, [total] * n, [0] * n, pre,
                   [r for r in ag if r])


def build(op, view, sizes, avg=False, extra=None):
    if op == "all_reduce":
        return all_reduce(view, sizes, avg)
    if op in ("reduce_scatter", "reduce_scatter_v"):
        return reduce_scatter(view, list(sizes), avg, op)
    if op in ("all_gather", "all_gather_v"):
        return all_gather(view, list(sizes), op)
    raise AssertionError(op)


def applies(op, view):
    topo = view.topo
    if topo.spec.family != "trn2":
        return f"needs a trn2 instance (pairs among the chip's ranks), not {topo.instance}"
    if len(view.by_node) != 1:
        return "needs members on one node"
    if not view.whole_chips or topo.ranks_per_chip % 2 or \
            any(len(lg) != topo.ranks_per_chip for lg in view.by_chip):
        return ("needs every rank of each chip it touches (KangaRing is for TP groups "
                f"holding whole chips); this group of {view.size} is not")
    if len(view.by_chip) < 2 and topo.ranks_per_chip < 4:
        return "needs at least 2 pairs"
    return None


def prefer(op, view, nbytes):
    if op in ("all_reduce", "reduce_scatter", "all_gather") and nbytes is not None \
            and nbytes >= MESH_BELOW:
        return ("trn2 group of whole chips above the RDH range (intranode-collective-"
                "comm.rst summary: KangaRing '>56MB'; nccom-test.rst 16-rank trn2 run: "
                "kangaring at 32 MiB)")
    return None


ALGORITHM = Algorithm(
    name="kangaring", summary="Trn2 ring over primary ranks, secondaries paired on the "
    "chip, roles alternating between two channels",
    ops=("all_reduce", "reduce_scatter", "all_gather", "reduce_scatter_v", "all_gather_v"),
    build=build, applies=applies, prefer=prefer, priority=40)
