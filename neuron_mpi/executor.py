"""The executor: runs one rank's part of any schedule on the engine.

It never knows which algorithm made the schedule. ``Plan`` is this rank's slice of
a schedule, cut into pieces the transports carry (built once per schedule, piece
size and item size, and cached); ``Execution`` is one run of a plan on real
buffers, a small state machine the engine advances, so several collectives (async
ones) progress together. A plan runs compiled (``NativePlan``) when all of it stays
in the rank's shared-memory domain; a plan that also crosses to other domains is
cut into parts (``Plan.parts``): compiled ones for the rounds inside the domain,
the Python path for the pieces that cross.

The round contract of schedule.py holds piece by piece: a round's pieces are posted
(their bytes copied out) when the round starts; deliveries are applied as their
pieces arrive, straight from the transport's landing slot, except in a round whose
deliveries overlap each other, where they are applied in listed order. Where a
round's deliveries overlap its own sends' sources, or a round ends with a send that
found no room yet, the waiting pieces are copied aside first, so a later write can
never change bytes a send has yet to move.
"""
from __future__ import annotations

import bisect
import time

import numpy as np

from .kernels.codes import CODES
from .kernels.dtypes import dtype_name
from .schedule import IN, OUT, TMP, Locals, Round
from .transport import native


class Send:
    __slots__ = ("xid", "piece", "dst", "buf", "off", "count", "total", "reduce")

    def __init__(self, xid, piece, dst, buf, off, count, total, reduce=False):
        self.xid, self.piece, self.dst = xid, piece, dst
        self.buf, self.off, self.count, self.total = buf, off, count, total
        self.reduce = reduce  # the receiver reduces it into its buffer


class Recv:
    __slots__ = ("xid", "piece", "src", "buf", "off", "count", "reduce", "total", "base")

    def __init__(self, xid, piece, src, buf, off, count, reduce, total, base=None):
        self.xid, self.piece, self.src = xid, piece, src
        self.buf, self.off, self.count, self.reduce = buf, off, count, reduce
        self.total = total  # bytes of the whole transfer (its sender's Send.total)
        # a reduced piece whose destination still owes a leading copy: (buffer,
        # offset) of the input region it reduces with, into the destination
        # (destination = base op piece); None: destination op= piece
        self.base = base


_BUF_ID = {IN: 0, OUT: 1, TMP: 2}


class RoundStep:
    __slots__ = ("sends", "recvs", "ordered", "hazard")

    def __init__(self, sends, recvs):
        self.sends = sends
        self.recvs = recvs
        dst = [(r.buf, r.off, r.off + r.count) for r in recvs if r.count]
        src = [(s.buf, s.off, s.off + s.count) for s in sends if s.count]
        self.ordered = _overlap(dst, dst)
        self.hazard = _overlap(src, dst)


class NativePlan:
    """A plan as the tables of transport.native (see there): every send of every
    round goes straight into a landing slot of this rank's domain, and no round's
    deliveries overlap each other or its sends."""

    def __init__(self, steps, itemsize: int, dtype_name: str, hops, local,
                 charge: bool = True):
        from .transport.native import KEY_SHIFT, RECV_COLS, SEND_COLS, table_views, tables

        step_rows, rounds, sends, recvs, locs, charges = [], [], [], [], [], []
        keys, order = [], []
        self.max_flags = 1
        for kind, st in steps:
            if kind == "locals":
                lo = len(locs)
                for lop in st:  # (a divide's source offset: its divisor)
                    locs.append((_LOCAL_KIND[lop.kind], _BUF_ID[lop.src_buf],
                                 lop.divisor if lop.kind == "divide" else lop.src_off * itemsize,
                                 _BUF_ID[lop.dst_buf], lop.dst_off * itemsize,
                                 lop.count * itemsize))
                step_rows.append((1, lo, len(locs)))
                continue
            s_lo, r_lo = len(sends), len(recvs)
            for s in st.sends:
                hop = hops.decide(hops.me, s.dst)
                c_lo = len(charges)
                if charge:
                    charges.extend(hop.charges)
                sends.append((local[hop.to], s.dst, _BUF_ID[s.buf], s.off * itemsize,
                              s.count * itemsize, s.xid, s.piece, s.total, c_lo, len(charges),
                              int(hop.to == s.dst)))
            rk = []
            for i, r in enumerate(st.recvs):
                base = r.base
                recvs.append((_BUF_ID[r.buf], r.off * itemsize, r.count * itemsize, r.xid,
                              r.piece, int(r.reduce), r.total,
                              -1 if base is None else _BUF_ID[base[0]],
                              0 if base is None else base[1] * itemsize))
                rk.append(((r.xid << KEY_SHIFT) | r.piece, r_lo + i))
            rk.sort()
            keys.extend(k for k, _ in rk)
            order.extend(i for _, i in rk)
            step_rows.append((0, len(rounds), len(rounds) + 1))
            rounds.append((s_lo, len(sends), r_lo, len(recvs)))
            self.max_flags = max(self.max_flags, len(st.sends) + len(st.recvs))

        def table(rows, cols):
            return np.array(rows, np.int64).reshape(len(rows), cols)

        # one array for the compiled run (native.tables); the tables are views of it
        self.tab = tables(table(step_rows, 3), table(rounds, 4), table(sends, SEND_COLS),
                          np.array(charges, np.int64), table(recvs, RECV_COLS),
                          np.array(keys, np.int64), np.array(order, np.int64), table(locs, 6))
        (self.steps, self.rounds, self.sends, self.charges, self.recvs, self.keys, self.order,
         self.locs) = table_views(self.tab)
        self.dtype_name = dtype_name

    @staticmethod
    def fits(steps, hops) -> bool:
        for kind, st in steps:
            if kind == "locals":
                continue
            if st.ordered or st.hazard:
                return False
            if not all(hops.decide(hops.me, s.dst).transport == "shm" for s in st.sends):
                return False
        return True


_LOCAL_KIND = {"copy": 0, "reduce": 1, "divide": 2, "zero": 3}


def _overlap(a, b) -> bool:
    """Do two lists of (buffer, start, end) regions overlap (share an element)?
    With a is b: does any region overlap another one of the same list. O(n log n):
    a 64-rank mesh round has thousands of pieces, and every plan checks each of its
    rounds twice (RoundStep)."""
    if a is b:
        if len(a) < 2:
            return False
        buf_, reach = None, 0
        for buf, lo, hi in sorted(a):  # each against the furthest end before it
            if buf != buf_:
                buf_, reach = buf, hi
            elif lo < reach:
                return True
            elif hi > reach:
                reach = hi
        return False
    if not a or not b:
        return False
    starts: dict = {}  # buffer -> (a's starts, sorted; the furthest end up to each)
    for buf, lo, hi in sorted(a):
        los, ends = starts.setdefault(buf, ([], []))
        los.append(lo)
        ends.append(hi if not ends or hi > ends[-1] else ends[-1])
    for buf, lo, hi in b:  # some region of a starts before hi and ends after lo
        got = starts.get(buf)
        if got is not None:
            i = bisect.bisect_left(got[0], hi) - 1
            if i >= 0 and got[1][i] > lo:
                return True
    return False


# --- reading the input where it lies -------------------------------------------------
# Many schedules start by copying the input into the buffer they work in (a leading
# Locals step of copies from IN), which the time model charges nothing: the
# hardware's first step reads the input where it lies (docs/model.md). A plan does
# the same (elide_leading_copies): a region such a copy owes is never copied while
# nothing needs it there. A send of it reads IN; the first reduced delivery into it
# computes destination = input op piece in one pass (Recv.base); a copied delivery
# overwrites it; any other use, and whatever OUT still owes at the end, gets the
# copy first. On a 64-rank 8 MiB reduce-scatter (rdh) that is the whole 8 MiB copy
# of a rank's input, a third of its memory traffic.


def _owed_overlap(owed, buf, lo, hi) -> bool:
    return any(b == buf and a < hi and lo < e for b, a, e, _ in owed)


def _owed_cover(owed, buf, lo, hi):
    """The input offset less the buffer offset of the owed region holding all of
    [lo, hi) of ``buf``, or None."""
    for b, a, e, shift in owed:
        if b == buf and a <= lo and hi <= e:
            return shift
    return None


def _owed_cut(owed, buf, lo, hi) -> list:
    """Take [lo, hi) of ``buf`` out of the owed regions; returns the parts taken."""
    taken, keep = [], []
    for b, a, e, shift in owed:
        if b != buf or e <= lo or hi <= a:
            keep.append((b, a, e, shift))
            continue
        if a < lo:
            keep.append((b, a, lo, shift))
        if hi < e:
            keep.append((b, hi, e, shift))
        taken.append((b, max(a, lo), min(e, hi), shift))
    owed[:] = keep
    return taken


def _copies(me, parts) -> list:
    from .schedule import Local

    return [Local(me, "copy", IN, a + shift, e - a, b, a) for b, a, e, shift in parts]


def _owed_round(me, st, owed, out) -> "RoundStep":
    """One round of an elided plan: the copies it needs first go to ``out``."""
    if not owed:  # (nothing owed any more: the round as it is)
        return st
    dsts = [(r.buf, r.off, r.off + r.count) for r in st.recvs if r.count]
    need = []
    if st.ordered:  # overlapping deliveries: none of them may be the first
        for i, d in enumerate(dsts):
            if _overlap([d], dsts[:i] + dsts[i + 1:]):
                need += _owed_cut(owed, *d)
    regions = [(s.buf, s.off, s.off + s.count) for s in st.sends if s.count] + dsts
    changed = True
    while changed:  # a region partly owed gets its copy (a cut may split another)
        changed = False
        for buf, lo, hi in regions:
            if _owed_overlap(owed, buf, lo, hi) and _owed_cover(owed, buf, lo, hi) is None:
                need += _owed_cut(owed, buf, lo, hi)
                changed = True
    if need:
        out.append(("locals", _copies(me, need)))
    sends = []
    for s in st.sends:
        shift = _owed_cover(owed, s.buf, s.off, s.off + s.count) if s.count else None
        sends.append(s if shift is None else
                     Send(s.xid, s.piece, s.dst, IN, s.off + shift, s.count, s.total, s.reduce))
    recvs = []
    for r in st.recvs:
        shift = _owed_cover(owed, r.buf, r.off, r.off + r.count) if r.count else None
        if shift is not None:
            _owed_cut(owed, r.buf, r.off, r.off + r.count)
            if r.reduce:
                r = Recv(r.xid, r.piece, r.src, r.buf, r.off, r.count, True, r.total,
                         (IN, r.off + shift))
        recvs.append(r)
    return RoundStep(sends, recvs)


def elide_leading_copies(steps, me: int) -> list:
    """``steps`` (a Plan's) without the copies of a leading Locals step of copies
    from IN that nothing needs where they land (see above); the same results."""
    if not steps or steps[0][0] != "locals" or not all(
            lo.kind == "copy" and lo.src_buf == IN and lo.dst_buf != IN for lo in steps[0][1]):
        return steps
    owed = [(lo.dst_buf, lo.dst_off, lo.dst_off + lo.count, lo.src_off - lo.dst_off)
            for lo in steps[0][1] if lo.count]
    spans = [(b, a, e) for b, a, e, _ in owed]
    if _overlap(spans, spans):
        return steps
    out: list = []
    for kind, st in steps[1:]:
        if kind == "locals":
            need = []
            for lo in st:
                need += _owed_cut(owed, lo.src_buf, lo.src_off, lo.src_off + lo.count)
                need += _owed_cut(owed, lo.dst_buf, lo.dst_off, lo.dst_off + lo.count)
            if need:
                out.append(("locals", _copies(me, need)))
            out.append((kind, st))
        else:
            out.append(("round", _owed_round(me, st, owed, out)))
    tail = [p for p in owed if p[0] == OUT]  # what the result still owes (TMP: nothing)
    if tail:
        out.append(("locals", _copies(me, tail)))
    return out


def pieces(count: int, per_piece: int) -> list[tuple[int, int]]:
    """(offset, length) pieces of ``count`` elements; one empty piece for 0."""
    if count <= 0:
        return [(0, 0)]
    return [(o, min(per_piece, count - o)) for o in range(0, count, per_piece)]


class Plan:
    """Member ``me``'s steps: ("locals", [Local]) or a RoundStep of pieces (world
    ranks as peers, transfer ids positional over the whole schedule)."""

    def __init__(self, schedule, view, me: int, itemsize: int = 1, piece_bytes: int = 1 << 18,
                 engine=None, dtype_name: str = "", control: bool = False, cut=None,
                 elide: bool = True):
        """``control``: the control plane's own traffic (the routed agreement), which
        the link ledger does not count: link_stats() is the user's traffic. ``cut``:
        bytes per piece of a copied (not reduced) transfer between two world ranks
        (``Engine.piece_for``, also the default with an ``engine``); reduced
        transfers, and all without either, are cut at ``piece_bytes``. ``elide``:
        read the input where it lies instead of copying it first
        (elide_leading_copies)."""
        size = max(1, itemsize)
        per = max(1, piece_bytes // size)
        if cut is None and engine is not None:
            cut = engine.piece_for
        self.steps = []
        xid = 0
        for step in schedule.steps:
            if isinstance(step, Locals):
                mine = [lo for lo in step.ops if lo.rank == me]
                if mine:
                    self.steps.append(("locals", mine))
            elif isinstance(step, Round):
                sends, recvs = [], []
                for x in step.xfers:
                    if x.src != me and x.dst != me:
                        xid += 1
                        continue
                    each = per if x.reduce or cut is None else \
                        max(1, cut(view.ranks[x.src], view.ranks[x.dst]) // size)
                    if x.src == me:
                        total = x.count * itemsize
                        for p, (o, n) in enumerate(pieces(x.count, each)):
                            sends.append(Send(xid, p, view.ranks[x.dst], x.src_buf,
                                              x.src_off + o, n, total, x.reduce))
                    if x.dst == me:
                        for p, (o, n) in enumerate(pieces(x.count, each)):
                            recvs.append(Recv(xid, p, view.ranks[x.src], x.dst_buf,
                                              x.dst_off + o, n, x.reduce, x.count * itemsize))
                    xid += 1
                if sends or recvs:
                    self.steps.append(("round", RoundStep(sends, recvs)))
        if elide:
            self.steps = elide_leading_copies(self.steps, me)
        self.tmp_elems = schedule.tmp_elems[me]
        self.native = None
        self.parts = None
        if engine is not None and engine.native:
            if NativePlan.fits(self.steps, engine.hops):
                self.native = NativePlan(self.steps, itemsize, dtype_name, engine.hops,
                                         engine.shm.local, charge=not control)
            else:
                cut = _parts(self.steps, self.tmp_elems, itemsize, dtype_name, engine,
                             not control)
                if cut is not None:
                    self.steps, self.parts = cut


def _send_inside(s, hops) -> bool:
    return hops.decide(hops.me, s.dst).transport == "shm"


def _recv_inside(r, hops) -> bool:
    return hops.inside(r.src, hops.me)


def _inside(st, hops) -> bool:
    """Does a round fit the compiled data plane with every piece it receives coming
    from inside this rank's domain too (a compiled part then waits on nothing that
    comes over MPI)?"""
    return NativePlan.fits([("round", st)], hops) and all(
        _recv_inside(r, hops) for r in st.recvs)


def _split_mixed(steps, hops) -> list:
    """``steps`` with each round that has pieces both inside this rank's domain and
    across it cut in two: first the crossing pieces (the Python path's), then the
    inside ones (compiled). The same results: such a round's deliveries overlap
    neither each other nor its sends' sources (else it stays whole), so the order
    in which its pieces move does not matter."""
    out = []
    for kind, st in steps:
        if kind == "round" and not (st.ordered or st.hazard):
            ins = [_send_inside(s, hops) for s in st.sends]
            inr = [_recv_inside(r, hops) for r in st.recvs]
            inside = ins + inr
            if any(inside) and not all(inside):
                out.append(("round", RoundStep(
                    [s for s, k in zip(st.sends, ins) if not k],
                    [r for r, k in zip(st.recvs, inr) if not k])))
                out.append(("round", RoundStep(
                    [s for s, k in zip(st.sends, ins) if k],
                    [r for r, k in zip(st.recvs, inr) if k])))
                continue
        out.append((kind, st))
    return out


def _parts(steps, tmp_elems, itemsize, dtype_name, engine, charge):
    """A plan with sends over MPI (ranks on several domains) cut into parts of
    consecutive steps: (steps, [(first step, end, sub)]), ``sub`` a Plan of the
    steps whose rounds stay inside this rank's domain (_inside: a hierarchical
    schedule's stages inside a node, the pieces of an all-to-all between
    domain-mates), run compiled, None for those the Python path runs (the pieces
    crossing domains). ``steps`` are the plan's, rounds with pieces of both kinds
    cut in two (_split_mixed). A locals step joins the part before it; leading
    locals join the first round's part. None when no round fits: the whole plan is
    Python's."""
    hops = engine.hops
    steps = _split_mixed(steps, hops)
    kinds = [None if kind == "locals" else _inside(st, hops) for kind, st in steps]
    if not any(kinds):
        return None
    first = next(k for k in kinds if k is not None)  # (leading locals: the first round's)
    for i, k in enumerate(kinds):
        if k is None:
            kinds[i] = kinds[i - 1] if i else first
    parts, lo = [], 0
    for i in range(1, len(steps) + 1):
        if i == len(steps) or kinds[i] != kinds[lo]:
            sub = None
            if kinds[lo]:
                sub = Plan.__new__(Plan)
                sub.steps, sub.tmp_elems, sub.parts = steps[lo:i], tmp_elems, None
                sub.native = NativePlan(sub.steps, itemsize, dtype_name, hops,
                                        engine.shm.local, charge=charge)
            parts.append((lo, i, sub))
            lo = i
    return steps, parts


def sendrecv_plan(engine, dst: int, sxid: int, nsend: int, src: int, rxid: int,
                  nrecv: int, may_read: bool = False) -> Plan:
    """Point-to-point send and receive as one round (item size 1: bytes): ``nsend``
    bytes of IN to world rank ``dst`` as transfer ``sxid`` (``dst`` None: a receive
    alone), and ``nrecv`` bytes from world rank ``src`` into OUT as transfer
    ``rxid`` (``src`` None: a send alone, whose pieces are copied into their
    slots, not read from IN, as a send returns once its bytes have left; unless
    ``may_read``: its receiver waits for it, and the send waits for the reads).
    Compiled (``.native``) only when both directions stay in this rank's
    shared-memory domain and neither is this rank itself. ``.post``: for a large
    receive alone that a sender may leave in its buffer (more than a slot, where
    receivers read), ``src``, whose sends look for it (ShmTransport.post_receive);
    else -1."""
    me = engine.rank
    plan = Plan.__new__(Plan)
    plan.steps = [("round", RoundStep(
        [] if dst is None else
        [Send(sxid, p, dst, IN, o, n, nsend)
         for p, (o, n) in enumerate(pieces(nsend, engine.piece_for(me, dst)))],
        [] if src is None else
        [Recv(rxid, p, src, OUT, o, n, False, nrecv)
         for p, (o, n) in enumerate(pieces(nrecv, engine.piece_for(src, me)))]))]
    plan.tmp_elems = 0
    plan.native = plan.parts = None
    plan.post = -1
    hops = engine.hops
    if engine.native and _inside(plan.steps[0][1], hops):
        plan.native = NativePlan(plan.steps, 1, "uint8", hops, engine.shm.local)
        if src is None and not may_read:
            plan.native.sends[:, native.S_MAY_READ] = 0
        if dst is None and nrecv > engine.shm.S and engine.shm.reads():
            plan.post = src
    return plan


def retag_sendrecv(plan: Plan, sxid: int, rxid: int) -> None:
    """Give a sendrecv_plan (kept for reuse) the transfer numbers of another call."""
    st = plan.steps[0][1]
    for s in st.sends:
        s.xid = sxid
    for r in st.recvs:
        r.xid = rxid
    if plan.native is not None:
        retag_native(plan.native, sxid, rxid)


def retag_native(np_, sxid: int, rxid: int) -> None:
    """retag_sendrecv's part in the compiled tables alone (all a run that ends done
    reads)."""
    sends, keys = np_.sends, np_.keys
    if len(sends) + len(keys) <= 4:  # (a small message's one or two pieces: item
        for i in range(len(sends)):  # by item costs less than numpy's slicing)
            sends[i, 5] = sxid
        for i in range(len(keys)):
            keys[i] = (rxid << native.KEY_SHIFT) | i
    else:
        sends[:, 5] = sxid
        keys[:] = (rxid << native.KEY_SHIFT) | np.arange(len(keys))


class Scratch:
    """A native plan's run state (``xs``, ``flags``, ``pend``) and ``tmp`` buffer,
    kept per call shape (``comm._Shape``) for blocking calls: calls on one
    communicator are made one at a time, so a blocking call of a shape never
    overlaps the previous one, and reusing them spares an allocation (and its cold
    pages) per call."""

    __slots__ = ("xs", "flags", "pend", "tmp", "tmp8", "state")

    def __init__(self, max_flags: int, tmp_elems: int, dtype):
        # the three state arrays are views of one buffer, zeroed in one fill
        nflag = (max_flags + 7) // 8
        self.state = st = np.zeros(6 + 2 * max_flags + nflag, np.int64)
        self.xs = st[:6]
        self.pend = st[6:6 + 2 * max_flags].reshape(max_flags, 2)
        self.flags = st[6 + 2 * max_flags:].view(np.uint8)[:max_flags]
        self.tmp = np.empty(tmp_elems, dtype)
        self.tmp8 = self.tmp.view(np.uint8)  # the compiled run's view of it

    def zeroed(self):
        self.state.fill(0)
        return self.xs, self.flags, self.pend


class Execution:
    """One run of a plan. ``bufs`` maps "in"/"out"/"tmp" to flat arrays."""

    def __init__(self, engine, plan: Plan, bufs: dict, comm_id: int, seq: int, op: str,
                 reduce_op: str = "sum", agreement=None, tracer=None, scratch=None):
        """``scratch``: the call shape's ``Scratch`` for the compiled run's state arrays,
        which a blocking call reuses (zeroed here) instead of allocating them each call;
        None allocates fresh ones (async calls, several of which may be in flight)."""
        self.engine = engine
        self.plan = plan
        self.bufs = bufs
        self.comm_id = comm_id
        self.seq = seq
        self.op = op
        self.reduce_op = reduce_op
        self.dtype = bufs[IN].dtype
        self._itemsize = self.dtype.itemsize
        self._rcode = None  # the reduction code of the Python path (_code)
        self.algorithm = None
        self.step = 0
        self._posted = False
        self._missing: list[int] = []
        self._pending: list = []
        self.agreement = agreement  # control.BoardAgreement run before the first step
        # control.RoutedAgreement (an async call without a board): advanced first,
        # no step runs before it is over (then None)
        self.pre = None
        self._nargs = None  # the compiled data plane's arguments (native plans)
        self._xs = self._flags = None
        self._adopted = None  # the status of a lone run this execution took over
        self._scratch = scratch
        self._part = 0  # the part of plan.parts under way, and the run of a compiled
        self._child = None  # part (an Execution of its sub-plan), when one is
        self.done = False
        self.error: BaseException | None = None
        self.t_start = time.perf_counter()
        self.t_end = None
        self._tr = tracer  # neuron_mpi.tracing.Recorder, or None (tracing off)
        # called once when it ends (done or failed), on the thread that ends it,
        # with the engine's lock held: it must only signal (threading.Event.set)
        self.on_done = None

    def waiting_for(self):
        """(step index, [(peer, xid)]) this execution still waits on: for diagnosis."""
        child = self._child
        if child is not None and not self.done:
            step, out = child.waiting_for()
            return self.plan.parts[self._part][0] + step, out
        steps = self.plan.steps
        native = self.plan.native is not None
        if native and self._xs is not None:
            self.step = int(self._xs[0])
        if self.done or self.step >= len(steps):
            return self.step, []
        kind, st = steps[self.step]
        if kind != "round":
            return self.step, []
        if native:
            ns = len(st.sends)
            started = self._xs is not None and self._xs[1]
            missing = [i for i in range(len(st.recvs))
                       if not started or self._flags[ns + i] != 1]
        else:
            missing = self._missing if self._posted else range(len(st.recvs))
        seen, out = set(), []
        for i in missing:
            r = st.recvs[i]
            if (r.src, r.xid) not in seen:
                seen.add((r.src, r.xid))
                out.append((r.src, r.xid))
        return self.step, out

    def unread(self):
        """[(peer, xid)]: sends of the current round still waiting for their
        receiver to read them from this rank's buffer (native plans)."""
        if self._child is not None and not self.done:
            return self._child.unread()
        if self.done or self._xs is None or not self._xs[1]:
            return []
        k = int(self._xs[0])
        if k >= len(self.plan.steps) or self.plan.steps[k][0] != "round":
            return []
        out = []
        for i, s in enumerate(self.plan.steps[k][1].sends):
            if self._flags[i] == 2 and (s.dst, s.xid) not in out:
                out.append((s.dst, s.xid))
        return out

    def fail(self, err: BaseException) -> None:
        self.error = err
        if self.pre is not None:
            self.pre.fail(err)
        if self._child is not None:  # (the compiled part under way gives its pieces back)
            self._child.fail(err)
        if self._nargs is not None:  # pieces its receivers were to read from its buffers
            np_ = self.plan.native
            native.take_back(self.engine.shm.seg8, self.engine.shm.g, np_.steps, np_.rounds,
                             self._xs, self._flags, self._pend)
        self._finish()

    def _finish(self) -> None:
        if not self.done:
            self.done = True
            self.t_end = time.perf_counter()
            cb, self.on_done = self.on_done, None
            if cb is not None:
                cb()

    def advance(self) -> bool:
        """Run as far as arrived data allows; True once finished. Call with the
        engine's lock held."""
        if self.pre is not None:
            if not self.pre.advance():
                return False
            self.pre = None
        if self.plan.native is not None:
            return self._native_advance()
        parts = self.plan.parts
        if parts is None:
            if not self._python_advance(len(self.plan.steps)):
                return False
            self._finish()
            return True
        while self._part < len(parts):
            lo, hi, sub = parts[self._part]
            if sub is None:
                if not self._python_advance(hi):
                    return False
            else:
                child = self._child
                if child is None:
                    child = self._child = Execution(
                        self.engine, sub, self.bufs, self.comm_id, self.seq, self.op,
                        self.reduce_op)
                done = child._native_advance()
                self.step = lo + child.step
                if not done:
                    return False
                self._child = None
            self._part += 1
        self._finish()
        return True

    @property
    def in_compiled_part(self) -> bool:
        """A plan in parts, under way in one of its compiled parts."""
        return self._child is not None and not self.done

    def part_run(self, deadline, claim=None) -> int | None:
        """Run the compiled part under way on this thread until it ends, blocks on
        something only Python can give, or ``deadline`` passes (exec_run; ``claim``:
        as for run()); None when no compiled part is under way. The caller polls MPI
        after a TIMEOUT."""
        if not self.in_compiled_part:
            return None
        child = self._child
        status = child.run(deadline, claim)
        self.step = self.plan.parts[self._part][0] + child.step
        return status

    def _python_advance(self, end: int) -> bool:
        """The Python path's run of steps up to ``end``; True once there."""
        steps = self.plan.steps
        eng = self.engine
        cid, seq = self.comm_id, self.seq
        tr = self._tr
        while self.step < end:
            kind, st = steps[self.step]
            if kind == "locals":
                if tr is not None:
                    tr.step_begin(cid, seq, self.step, "locals")
                for lo in st:
                    self._local(lo)
                if tr is not None:
                    tr.step_end(cid, seq, self.step)
                self.step += 1
                continue
            if not self._posted:
                if tr is not None:
                    tr.step_begin(cid, seq, self.step, "round", len({s.xid for s in st.sends}),
                                  len({r.xid for r in st.recvs}))
                bufs = self.bufs
                for s in st.sends:
                    if tr is not None and s.piece == 0:
                        tr.sent(cid, seq, s.xid, s.dst, s.total)
                    payload = bufs[s.buf][s.off:s.off + s.count].view(np.uint8)
                    p = eng.send((cid, seq, s.xid, s.piece), s.dst, payload, s.total)
                    if p is not None:
                        self._pending.append(p)
                if st.hazard:
                    for p in self._pending:
                        p.detach()
                self._missing = list(range(len(st.recvs)))
                self._posted = True
            if self._missing:
                take = eng.take  # the inbox, else a landing slot of this rank's domain
                recvs = st.recvs
                still = []
                for i in self._missing:
                    if still and st.ordered:
                        still.append(i)
                        continue
                    r = recvs[i]
                    a = take((cid, seq, r.xid, r.piece))
                    if a is None:
                        still.append(i)
                    else:
                        self._deliver(a, r)
                        if tr is not None:
                            tr.received(cid, seq, r.xid, r.src, r.count * self._itemsize)
                self._missing = still
                if still:
                    return False
            for p in self._pending:
                p.detach()  # the buffers change from here on
            self._pending = []
            if tr is not None:
                tr.step_end(cid, seq, self.step)
            self.step += 1
            self._posted = False
        return True

    # --- the compiled data plane -------------------------------------------------------
    def _native_args(self):
        if self._nargs is None:
            shm = self.engine.shm
            np_ = self.plan.native
            bufs, by = self.bufs, self._bytes
            b0, b1 = by(bufs[IN]), by(bufs[OUT])
            sc = self._scratch
            if sc is None or bufs[TMP] is not sc.tmp:
                b2 = by(bufs[TMP])
            else:
                b2 = sc.tmp8
            if sc is None:
                self._xs = np.zeros(6, np.int64)
                self._flags = np.zeros(np_.max_flags, np.uint8)
                self._pend = np.zeros((np_.max_flags, 2), np.int64)
            else:
                self._xs, self._flags, self._pend = sc.zeroed()
            ag = self.agreement
            if ag is None:
                board = NO_BOARD
            else:
                board = ag.args
                self._xs[3] = 1
            self._nargs = native_args(shm, np_, self._xs, self._flags, b0, b1, b2, self.comm_id,
                                      self.seq, CODES.get((self.reduce_op, np_.dtype_name), 0),
                                      board, self._pend)
        return self._nargs

    def adopt(self, nargs, status) -> None:
        """Take over the state of a compiled run made before this object existed
        (``native_args``' tuple: a blocking call's lone run, which the general path
        must finish) and the status it ended with: the next run or pass acts on
        that status first (a failed read, say, cannot be seen twice), then goes on
        from where the run stopped."""
        self._nargs = nargs
        self._xs, self._flags, self._pend = nargs[4], nargs[5], nargs[-1]
        self._adopted = status
        self.step = int(self._xs[0])

    def _take_adopted(self):
        """The adopted run's status, once (None: none left to act on)."""
        status, self._adopted = self._adopted, None
        return status

    @property
    def agreeing(self) -> bool:
        """Still in the argument agreement (no data has moved)."""
        return self.pre is not None or self.agreement is not None and (
            self._xs is None or self._xs[3] != 0)

    def _native_status(self, status) -> bool:
        """Act on what the compiled pass returned; True once the execution is done."""
        ag = self.agreement
        if ag is not None and not ag.finished and (self._xs[3] == 0 or
                                                   status == native.MISMATCH):
            ag.finish()
        if status == native.MISMATCH:
            ag.raise_mismatch()
        if status == native.DONE:
            self.step = len(self.plan.steps)
            self._finish()
            return True
        if status == native.FAULT:
            row = self.plan.native.recvs[int(self._xs[2])]
            src = self._recv_of_row(int(self._xs[2])).src
            raise RuntimeError(f"{self.op}: " + native.read_failed(
                int(row[2]), src, int(self._xs[4]), int(row[3]), int(row[4])))
        if status == native.SIZE:
            row = self.plan.native.recvs[int(self._xs[2])]
            raise RuntimeError(
                f"{self.op}: a piece of {int(row[2])} bytes was expected (transfer "
                f"{int(row[3])}, piece {int(row[4])}); one of another size came")
        self.step = int(self._xs[0])
        return False

    def _recv_of_row(self, row: int) -> Recv:
        """The Recv behind row ``row`` of the native plan's recvs table."""
        for kind, st in self.plan.steps:
            if kind == "round":
                if row < len(st.recvs):
                    return st.recvs[row]
                row -= len(st.recvs)
        raise IndexError(row)

    def _behind(self) -> bool:
        """Its agreement is queued behind the previous call's, still open (an async
        call, control.BoardAgreement.ready): it may not publish yet."""
        ag = self.agreement
        return ag is not None and ag.waiting_for is not None and not ag.ready()

    def _native_advance(self) -> bool:
        if self._behind():
            return False
        args = self._native_args()
        while True:
            status = self._take_adopted()
            if status is None:
                status, _ = native.exec_pass(*args)
            if status == native.PYTHON:  # an adopted run that stopped for a channel
                continue  # to copy aside (exec_run): exec_pass goes on from there
            if self._native_status(status):
                return True
            if status == native.SIZE:
                # a receive of another size, given up (SendRecvExecution; the others
                # raise): pass again at once, to post the sends and drop the pieces
                # that the pass stopped short of. Left to the next ring, both ends of
                # a pair that each got the wrong size slept on rings already spent
                continue
            if status == native.BLOCKED and self.engine.inbox and not self.agreeing:
                if self._take_from_inbox():
                    continue  # the round may finish now, and the next one's be there too
            return False

    def _take_from_inbox(self) -> bool:
        """Pieces of the current round that reached the engine's inbox instead of a
        slot (copied aside under backpressure, or come over MPI)."""
        xs, flags, np_ = self._xs, self._flags, self.plan.native
        if xs[1] == 0 or xs[0] >= len(np_.steps):
            return False
        kind, lo, _ = np_.steps[xs[0]]
        if kind != 0:
            return False
        s_lo, s_hi, r_lo, r_hi = np_.rounds[lo]
        ns = s_hi - s_lo
        inbox = self.engine.inbox
        st = self.plan.steps[int(xs[0])][1]
        took = False
        for i, r in enumerate(st.recvs):
            if flags[ns + i] == 0:
                key = (self.comm_id, self.seq, r.xid, r.piece)
                a = inbox.get(key)
                if a is None:
                    continue
                if a.error is not None:
                    del inbox[key]
                    raise RuntimeError(f"{self.op}: {a.error}")
                if a.total != r.total:  # as the pass checks a slot's header
                    xs[2], xs[4] = r_lo + i, a.total
                    self._native_status(native.SIZE)
                    return True
                del inbox[key]
                self._deliver(a, r)
                flags[ns + i] = 1
                took = True
        return took

    def run(self, deadline, claim=None) -> int:
        """Run to the end on this thread (compiled, sleeping on the doorbell while it
        waits); returns transport.native's DONE, TIMEOUT, PYTHON or (``claim``: the
        engine's claim word, for the agent's runs) YIELDED."""
        status = self._take_adopted()
        if status is None:
            if self._behind():  # (the one ahead is in flight too: passes advance both)
                return native.BLOCKED
            if self.pre is not None:  # (a routed agreement first: Python's)
                if not self.pre.advance():
                    return native.BLOCKED
                self.pre = None
            status = native.exec_run(*self._native_args(), NO_CLAIM if claim is None else claim,
                                     deadline_ns(deadline))
        if status in (native.DONE, native.SIZE, native.MISMATCH, native.FAULT):
            self._native_status(status)
        else:
            self.step = int(self._xs[0])
            ag = self.agreement
            if ag is not None and not ag.finished and self._xs[3] == 0:
                ag.finish()
        return status

    @staticmethod
    def _bytes(a: np.ndarray) -> np.ndarray:
        if not a.flags.writeable:
            a = a.copy()
        return (a if a.ndim == 1 else a.reshape(-1)).view(np.uint8)

    def _deliver(self, a, r: Recv) -> None:
        data = a.data
        if data.nbytes != r.count * self._itemsize:
            a.release()
            raise RuntimeError(
                f"{self.op}: rank {a.origin} sent {data.nbytes} bytes where "
                f"{r.count * self._itemsize} were expected (transfer {r.xid}, piece {r.piece})")
        if r.count:
            dst = self.bufs[r.buf][r.off:r.off + r.count]
            src = data.view(self.dtype)
            if r.reduce:
                if r.base is not None:  # the leading copy this delivery stands in for
                    dst[...] = self._region(r.base[0], r.base[1], r.count)
                native.reduce_bytes(self._code(), dst.view(np.uint8), self._bytes(src))
            else:
                dst[...] = src
        a.release()

    def _code(self) -> int:
        """The reduction's code for kernels.bytes (the compiled plane's kernels,
        which the Python path runs too)."""
        if self._rcode is None:
            self._rcode = CODES[(self.reduce_op, dtype_name(self.dtype))]
        return self._rcode

    def _region(self, buf, off, count):
        return self.bufs[buf][off:off + count]

    def _local(self, lo) -> None:
        dst = self._region(lo.dst_buf, lo.dst_off, lo.count)
        if lo.kind == "copy":
            dst[...] = self._region(lo.src_buf, lo.src_off, lo.count)
        elif lo.kind == "reduce":
            src = self._region(lo.src_buf, lo.src_off, lo.count)  # (a flat buffer's slice)
            native.reduce_bytes(self._code(), dst.view(np.uint8), self._bytes(src))
        elif lo.kind == "divide":
            native.divide_bytes(self._code(), dst.view(np.uint8), lo.divisor)
        elif lo.kind == "zero":
            dst[...] = np.zeros(1, dst.dtype)[0]
        else:
            raise AssertionError(lo.kind)


class SendRecvExecution(Execution):
    """A compiled sendrecv or recv (sendrecv_plan). When the message from its
    source has another size than OUT (SIZE, from the compiled pass or the inbox,
    before any of it is copied), the
    receive is given up: the pieces of that message are taken and dropped as they
    come, the send still completes, and ``mismatch`` holds the size sent (the
    caller raises then, as recv does)."""

    def __init__(self, engine, plan, bufs, comm_id: int, op: str = "sendrecv"):
        super().__init__(engine, plan, bufs, comm_id, 0, op)
        self.mismatch = None
        self._drain: list = []

    def _give_up(self, sent: int) -> None:
        """The message from the source has ``sent`` bytes, not OUT's: drop it."""
        self.mismatch = sent
        st = self.plan.steps[0][1]
        rxid = st.recvs[0].xid
        per = self.engine.piece_for(st.recvs[0].src, self.engine.rank)
        self._drain = [(self.comm_id, 0, rxid, p) for p in range(len(pieces(sent, per)))]
        self._flags[len(st.sends):len(st.sends) + len(st.recvs)] = 1  # given up

    def _native_status(self, status) -> bool:
        if status == native.SIZE and self.mismatch is None:
            self._give_up(int(self._xs[4]))
            status = native.BLOCKED
        if self._drain:  # (the engine's lock is held: run() and advance() need it)
            still = []
            for k in self._drain:
                a = self.engine.take(k)
                if a is None:
                    still.append(k)
                else:
                    a.release()
            self._drain = still
            if self._drain and status == native.DONE:
                status = native.BLOCKED  # the sends are done; pieces still to drop
        return super()._native_status(status)

    def _native_args(self):
        if self._nargs is None:
            super()._native_args()
            self._xs[5] = 1  # sleep until any ring: the peer may send another size
        return self._nargs

    def run(self, deadline, claim=None) -> int:
        if self.mismatch is None:
            return super().run(deadline, claim)
        # dropping pieces is Python's work: never sleep in a compiled run meanwhile
        # (a peer may wait for this rank to read exactly those pieces)
        self.advance()
        return native.DONE if self.done else native.BLOCKED


NO_CLAIM = np.zeros(1, np.int32)  # a caller's own run: nobody takes the engine from it
NO_BOARD = (np.zeros(2, np.int32), np.zeros((1, 16), np.int64), 0, 0, np.zeros(1, np.int64), 0,
             np.zeros(0, np.int64))


# time.monotonic() reads CLOCK_MONOTONIC itself on Linux: its seconds convert directly
_MONOTONIC = time.get_clock_info("monotonic").implementation == "clock_gettime(CLOCK_MONOTONIC)"


def deadline_ns(deadline) -> int:
    """exec_run's deadline: CLOCK_MONOTONIC nanoseconds for a time.monotonic()
    ``deadline``; -1 for none."""
    if deadline is None:
        return -1
    if _MONOTONIC:
        return int(deadline * 1e9)
    return int((deadline - time.monotonic()) * 1e9 + time.clock_gettime_ns(time.CLOCK_MONOTONIC))


def native_head(shm, np_, xs, flags) -> tuple:
    """The leading arguments of native_args, which do not change between runs of
    one plan on one state (a call shape keeps them: comm._Shape.run_args)."""
    return (shm.seg8, shm.g, shm.gen, np_.tab, xs, flags)


def native_args(shm, np_, xs, flags, b0, b1, b2, comm_id: int, seq: int, code: int, board,
                pend, head=None) -> tuple:
    """The arguments of transport.native's exec_pass / exec_run (without exec_run's
    claim word and deadline) for one run of the native plan ``np_``: the segment,
    the plan's tables, the run's state, the three byte buffers, the call's key, the
    reduction kernel's code, the board agreement (NO_BOARD: none) and ``pend``.
    ``head``: native_head's tuple for these, when kept."""
    if head is None:
        head = native_head(shm, np_, xs, flags)
    return head + (b0, b1, b2, comm_id, seq, code) + board + (pend,)


def make_buffers(x_flat, out_flat, tmp_elems, dtype, tmp=None):
    """``tmp``: a kept scratch buffer of ``tmp_elems`` (a blocking call's); None
    allocates one."""
    return {IN: x_flat, OUT: out_flat, TMP: np.empty(tmp_elems, dtype) if tmp is None else tmp}
