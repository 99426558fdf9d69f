"""mesh: the runtime's two-step Mesh (intranode-collective-comm.rst, "Mesh
Algorithm"). Data is written straight to ranks on remote chips and routed through
the chips in between; the chip's ranks share the off-chip work.

All-gather, two steps:
  (0) every chip's chunks go to each other chip, landing on one receiver there
      (receivers spread over the destination chip's ranks), and to the chip-mates;
  (1) intra-chip broadcast: each receiver passes what it received to its mates.
  The doc has one local rank read its mates' chunks and write them out; here each
  rank sends its own chunk to that chip's receiver: the same bytes on every chip
  link, in the same step.
Reduce-scatter, two steps:
  (0) each rank serves a share of the off-chip destinations (split evenly over the
      chip's ranks): its mates hand it their chunk for those destinations and it
      writes the on-chip sum (the intra-chip pre-reduction) to the destination;
      on-chip destinations get their mates' chunks directly;
  (1) each rank reduces the partial sums it received, one per chip, in chip order.
  The pre-reduction is a round of intra-chip transfers before the off-chip one.
All-reduce = mesh reduce-scatter then mesh all-gather (the doc's "Mesh
AllReduce"), so every rank moves O(buffer) bytes, not O(ranks x buffer) as the
single-step variant (mesh1.py) does.

Across nodes the same code is the inter-node mesh (internode-collective-comm.rst):
with one rank per chip, step (0) alone is a direct scatter/broadcast to all peers.
"""
from __future__ import annotations

from ..schedule import IN, OUT, TMP, Local, Locals, Round, Xfer, offsets, split
from . import phases as P
from .rdh import MESH_BELOW
from .registry import Algorithm


class Chips:
    """Members per chip (``lgs``: lists of group indices, chips in order) and who
    serves whom. A whole group's chips are ``GroupView.by_chip``; a stage of a
    two-level schedule passes one node's chips, or one member per "chip" for the
    inter-node mesh."""

    def __init__(self, lgs):
        self.lgs = [list(lg) for lg in lgs]
        self.chip_of = {g: k for k, lg in enumerate(self.lgs) for g in lg}
        self.members = sorted(self.chip_of)

    def receiver(self, src_chip, dst_chip):
        """The rank of dst_chip that receives src_chip's chunks (all-gather)."""
        lg = self.lgs[dst_chip]
        return lg[src_chip % len(lg)]

    def senders(self, k):
        """{destination: sender on chip k} for every off-chip destination: the other
        chips dealt round-robin over chip k's ranks, so each rank serves whole
        chips (about a quarter of the off-chip destinations on a 4-rank chip)."""
        lg = self.lgs[k]
        others = [k2 for k2 in range(len(self.lgs)) if k2 != k]
        server = {k2: lg[i % len(lg)] for i, k2 in enumerate(others)}
        return {d: server[self.chip_of[d]] for d in self.members if self.chip_of[d] != k}


def coalesce(xfers):
    """Merge transfers between the same pair, of the same kind, whose regions follow
    each other on both sides (one message instead of several)."""
    out = []
    last = {}
    for x in xfers:
        key = (x.src, x.dst, x.src_buf, x.dst_buf, x.reduce)
        i = last.get(key)
        if i is not None:
            y = out[i]
            if y.src_off + y.count == x.src_off and y.dst_off + y.count == x.dst_off:
                out[i] = Xfer(y.src, y.dst, y.src_buf, y.src_off, y.count + x.count,
                              y.dst_buf, y.dst_off, y.reduce)
                continue
        last[key] = len(out)
        out.append(x)
    return out


def reduce_scatter_steps(chips, regions, result, base):
    """Steps of a mesh reduce-scatter among ``chips``' members of the buffer already
    in each member's TMP[0:base]. Member d's block is the list of (off, len) regions
    ``regions[d]`` (several when a two-level stage carries one block per node); the
    reduced region at ``off`` goes to ``result(d, off)`` = (buf, off), which may be
    the region itself in TMP. Slots start at TMP[base]. Returns (steps, {member:
    extra TMP elements}).

    Every delivery lands in its own slot (no two transfers of a round write the same
    region), and the reductions are local steps in a fixed order:
      round 0: chip-mates hand each rank their chunk for every destination it
               serves (and for itself), into slots after the buffer;
      local:   each rank adds the slots into its copy of those chunks;
      round 1: each server writes the chip's partial sum to the destination's slot
               for that chip;
      local:   each destination reduces the partial sums, chip by chip (a result in
               place keeps its own chip's sum and adds the others in chip order)."""
    K = len(chips.lgs)
    length = {d: sum(ln for _, ln in regions[d]) for d in chips.members}

    def parts(d):
        """(off, len, position in the block) of d's non-empty regions."""
        pos = 0
        for off, ln in regions[d]:
            if ln:
                yield off, ln, pos
            pos += ln

    serve = [chips.senders(k) for k in range(K)]
    # what each member reduces on its chip: its own block and the ones it serves
    duty = {g: [g] for g in chips.members}
    for k in range(K):
        for d, s in sorted(serve[k].items()):
            duty[s].append(d)
    # mate j's chunks for t sit together (in duty order), so chunks of neighbouring
    # destinations travel as one message
    pre_off, span, extra = {}, {}, {}
    for t in chips.members:
        m = len(chips.lgs[chips.chip_of[t]])
        off = 0
        for d in duty[t]:
            pre_off[(t, d)] = off
            off += length[d]
        span[t] = off
        extra[t] = (m - 1) * off
    round_a, locals_a = [], []
    for lg in chips.lgs:
        for t in lg:
            mates = [a for a in lg if a != t]
            for j, a in enumerate(mates):
                for d in duty[t]:
                    for off, ln, p in parts(d):
                        slot = base + j * span[t] + pre_off[(t, d)] + p
                        round_a.append(Xfer(a, t, TMP, off, ln, TMP, slot))
            for d in duty[t]:
                for off, ln, p in parts(d):
                    for j in range(len(mates)):
                        slot = base + j * span[t] + pre_off[(t, d)] + p
                        locals_a.append(Local(t, "reduce", TMP, slot, ln, TMP, off))

    def slot(d, k, p):
        j = k if k < chips.chip_of[d] else k - 1
        return base + extra[d] + j * length[d] + p

    round_b = []
    for k in range(K):
        for d, s in serve[k].items():
            for off, ln, p in parts(d):
                round_b.append(Xfer(s, d, TMP, off, ln, TMP, slot(d, k, p)))
    post = []
    for d in chips.members:
        own = chips.chip_of[d]
        for off, ln, p in parts(d):
            buf, roff = result(d, off)
            if (buf, roff) == (TMP, off):  # in place: own chip's sum is there
                post.extend(Local(d, "reduce", TMP, slot(d, k, p), ln, TMP, off)
                            for k in range(K) if k != own)
                continue
            for k in range(K):
                src = off if k == own else slot(d, k, p)
                post.append(Local(d, "copy" if k == 0 else "reduce", TMP, src, ln, buf, roff))
    steps = []
    if round_a:
        steps += [Round(coalesce(round_a)), Locals(locals_a)]
    if round_b:
        steps.append(Round(coalesce(round_b)))
    if post:
        steps.append(Locals(post))
    return steps, {d: extra[d] + (K - 1) * length[d] for d in chips.members}


def all_gather_steps(chips, regions, src):
    """Rounds of a mesh all-gather among ``chips``' members into OUT: member a's
    block is the list of (off, len) regions ``regions[a]``, each read from
    ``src(a, off)`` = (buf, off) and written to the same offset of OUT."""
    K = len(chips.lgs)
    round_a, round_b = [], []
    for k, lg in enumerate(chips.lgs):
        for a in lg:
            for off, ln in regions[a]:
                if not ln:
                    continue
                buf, soff = src(a, off)
                for b in lg:
                    if b != a:
                        round_a.append(Xfer(a, b, buf, soff, ln, OUT, off))
                for k2 in range(K):
                    if k2 != k:
                        round_a.append(Xfer(a, chips.receiver(k, k2), buf, soff, ln, OUT, off))
    for k2, lg2 in enumerate(chips.lgs):
        for k in range(K):
            if k == k2:
                continue
            r = chips.receiver(k, k2)
            for a in chips.lgs[k]:
                for off, ln in regions[a]:
                    if ln:
                        round_b.extend(Xfer(r, b, OUT, off, ln, OUT, off)
                                       for b in lg2 if b != r)
    return [Round(coalesce(r)) for r in (round_a, round_b) if r]


def all_reduce(view, count, avg):
    n = view.size
    chips = Chips(view.by_chip)
    blocks = split(count, n)
    regions = [[b] for b in blocks]
    pre = [Local(g, "copy", IN, 0, count, TMP, 0) for g in range(n) if count]
    rs, extra = reduce_scatter_steps(chips, regions, lambda d, off: (OUT, off), count)
    ag = all_gather_steps(chips, regions, lambda a, off: (OUT, off))
    return P.sched_steps("all_reduce", "mesh", n, [count] * n, [count] * n,
                         [count + extra[g] for g in range(n)], pre, rs + ag,
                         P.divide(n, lambda g: (0, count), avg))


def reduce_scatter(view, counts, avg, op):
    n = view.size
    chips = Chips(view.by_chip)
    total = sum(counts)
    boffs = offsets(counts)
    regions = [[b] for b in zip(boffs, counts)]
    pre = [Local(g, "copy", IN, 0, total, TMP, 0) for g in range(n) if total]
    rs, extra = reduce_scatter_steps(chips, regions, lambda d, off: (OUT, 0), total)
    return P.sched_steps(op, "mesh", n, [total] * n, counts,
                         [total + extra[g] for g in range(n)], pre, rs,
                         P.divide(n, lambda g: (0, counts[g]), avg))


def all_gather(view, counts, op):
    n = view.size
    chips = Chips(view.by_chip)
    total = sum(counts)
    boffs = offsets(counts)
    regions = [[b] for b in zip(boffs, counts)]
    pre = [Local(g, "copy", IN, 0, counts[g], OUT, boffs[g]) for g in range(n) if counts[g]]
    return P.sched_steps(op, "mesh", n, counts, [total] * n, [0] * n, pre,
                         all_gather_steps(chips, regions, lambda a, off: (IN, 0)))


def build(op, view, sizes, avg=False, extra=None):
    if op == "all_reduce":
        return all_reduce(view, sizes, avg)
    if op in ("reduce_scatter", "reduce_scatter_v"):
        return reduce_scatter(view, list(sizes), avg, op)
    if op in ("all_gather", "all_gather_v"):
        return all_gather(view, list(sizes), op)
    raise AssertionError(op)


def prefer(op, view, nbytes):
    if op not in ("all_reduce", "reduce_scatter", "all_gather") or nbytes is None:
        return None
    if len(view.by_node) == 1 and view.size > 1 and nbytes < MESH_BELOW:
        return ("one node, buffer < 1 MiB (intranode-collective-comm.rst summary: Mesh "
                "'< 1MB'; nccom-test.rst: trn2 16 ranks mesh up to 128 KiB, trn1 32-rank "
                "all-gather of 1 KiB in 6.16 us)")
    return None


ALGORITHM = Algorithm(
    name="mesh", summary="two-step mesh: routed writes to every chip with the chip's "
    "ranks sharing the destinations, then an intra-chip stage",
    ops=("all_reduce", "reduce_scatter", "all_gather", "reduce_scatter_v", "all_gather_v"),
    build=build, prefer=prefer, priority=20)
